"""The same run on two devices gives the same result.

Every registered algorithm, on every problem kind it accepts (linear least squares,
logistic and softmax, a Gaussian dictionary, an MLP, the small CNN, ResNet-20 with batch
and with group norm; tiny sizes, float64), over every channel kind (perfect, Bernoulli,
scheduled, SAFARI's asymmetric one) and with similarity compensation, runs a few rounds
on each device of a pair: the models and every float in the round records agree to
1e-10 relative, and the byte counts, delivered counts and delivered clients are
identical. A checkpoint written on one device resumes on the other.

The pair (CPU, CUDA) is the point; it is marked ``gpu`` and skips without a GPU
(``python -m pytest -m gpu tests/gpu``). The pair (CPU, CPU) runs a small subset of the
same code in the default suite, so the harness itself is tested on every machine.
"""

from __future__ import annotations

import inspect
import math

import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.algorithms import REGISTRY
from fedsparse.channels import BernoulliChannel, ScheduledChannel, safari_channel

#: float64 results on two devices agree to this relative tolerance.
RTOL = 1e-10
#: Record fields that are wall-clock times (never compared).
VOLATILE = {"seconds", "elapsed"}
#: Record fields that must be identical, not merely close.
EXACT = {"round", "bytes_up", "bytes_down", "bytes_up_total", "bytes_down_total",
         "bytes_total", "clients_sampled", "delivered", "rejected", "delivered_clients",
         "compensated", "dropped"}
N = 5
ROUNDS = 3
HAS_CUDA = torch.cuda.is_available()

PROBLEMS = ("least_squares", "logistic", "softmax", "dictionary", "mlp", "cnn",
            "resnet20_batch", "resnet20_group")
CHANNELS = ("perfect", "bernoulli", "scheduled", "safari")
#: The personalised algorithms' arguments (they need classes).
PERSONAL = {
    "fedmac": dict(lam=0.5, step_size=0.05, personal_step_size=0.05, gamma=1e-3,
                   gamma_w=1e-3, local_steps=2, batch_size=4),
    "pfedme": dict(lam=0.5, step_size=0.05, personal_step_size=0.05, local_steps=2,
                   batch_size=4),
    "per_fedavg": dict(step_size=0.05, inner_step_size=0.05, local_steps=2, batch_size=4),
    "heur_fedamp": dict(lam=1.0, alpha_k=0.5, sigma=5.0, step_size=0.05, local_steps=2,
                        batch_size=4),
}


# ------------------------------------------------------------------------- the cases


def _examples(shape: tuple[int, ...], per_client: int = 6, classes: int = 3):
    """N clients with ``per_client`` (+1 for every other client) random examples of
    ``shape`` and labels in 0..classes-1."""
    g = torch.Generator().manual_seed(7)
    xs = [torch.randn(per_client + i % 2, *shape, generator=g, dtype=torch.float64)
          for i in range(N)]
    ys = [torch.randint(0, classes, (x.shape[0],), generator=g) for x in xs]
    return fs.data.from_arrays(xs, ys, dtype=torch.float64, name=f"tiny{shape}")


def make_problem(kind: str):
    """(problem, data) of a problem kind, tiny and in float64."""
    if kind in ("least_squares", "dictionary"):
        data = fs.data.shifted_gaussian(num_clients=N, samples_per_client=12, dim=16,
                                        sparsity=3, seed=3, dtype=torch.float64)
        return fs.problems.least_squares(), data
    if kind == "logistic":
        data = fs.data.fedht_simulation("classification", num_clients=N,
                                        samples_per_client=12, dim=16, support_size=3,
                                        seed=3, dtype=torch.float64)
        return fs.problems.logistic(), data
    if kind == "softmax":
        return fs.problems.softmax(num_classes=3), _examples((8,), per_client=10)
    if kind == "mlp":
        return fs.problems.neural(fs.models.mlp(16, (8,), 3)), _examples((1, 4, 4))
    if kind == "cnn":
        return fs.problems.neural(fs.models.cnn(1, 3, 8, channels=(2, 4), hidden=8)), \
            _examples((1, 8, 8))
    norm = kind.removeprefix("resnet20_")  # 4 x 4 images: 1 x 1 after the two strides
    return fs.problems.neural(fs.models.resnet20(3, 1, norm=norm)), \
        _examples((1, 4, 4), per_client=4)


def make_algorithm(kind: str, problem_kind: str, compensated: bool):
    kind, _, pruner = kind.partition(":")  # "safari:fedspa": SAFARI with another pruner
    if kind in PERSONAL:
        algo = REGISTRY[kind](**PERSONAL[kind])
    else:
        accepted = inspect.signature(REGISTRY[kind]).parameters
        wanted = {"sparsity": 3, "local_steps": 2, "batch_size": 4, "mu": 0.01,
                  "step_size": 0.01, "density": 0.5, "client_lr": 0.01, "inner_max_iter": 20}
        if problem_kind == "dictionary":
            if "dictionary" not in accepted:
                pytest.skip(f"{kind} takes no dictionary")
            wanted["dictionary"] = {"kind": "gaussian", "atoms": 24, "seed": 0}
        # an argument whose default is 1 is fixed at 1 (Distributed-IHT's one local step)
        kwargs = {k: v for k, v in wanted.items() if k in accepted
                  and accepted[k].default not in (1,)}
        if "compensation" in accepted:
            kwargs["compensation"] = False  # the battery adds it where a case asks
        if pruner:
            kwargs.update(pruner=pruner, synflow_iterations=2)
        algo = REGISTRY[kind](**kwargs)
    return fs.algorithms.similarity_compensation(algo) if compensated else algo


def make_channel(kind: str):
    if kind == "perfect":
        return None
    if kind == "bernoulli":
        return BernoulliChannel(0.6)
    if kind == "scheduled":
        return ScheduledChannel(torch.tensor([[1, 0, 1, 1, 0], [0, 1, 1, 0, 1],
                                              [1, 1, 0, 1, 1]], dtype=torch.bool), cycle=True)
    return safari_channel("asymmetric", [0, 0, 1, 1, 1])


#: (algorithm, problem, channel, compensated): every algorithm on every problem over a
#: perfect channel, and on its first problem over every channel, with and without
#: compensation.
CASES = [(a, p, "perfect", False) for a in sorted(REGISTRY) for p in PROBLEMS] + \
    [(a, "softmax" if a in PERSONAL else "least_squares", c, comp) for a in sorted(REGISTRY)
     for c in CHANNELS for comp in (False, True) if (c, comp) != ("perfect", False)] + \
    [(f"safari:{pruner}", p, c, comp) for pruner in ("synflow", "fedspa")  # SAFARI's pruners
     for p, c, comp in (("mlp", "perfect", False), ("cnn", "perfect", False),
                        ("resnet20_batch", "perfect", False), ("mlp", "bernoulli", True))]
#: What the (CPU, CPU) pair runs in the default suite: a few seconds.
SMOKE = [("fed_iter_ht", "least_squares", "bernoulli", True), ("fedmac", "softmax",
                                                               "safari", False),
         ("safari:fedspa", "mlp", "bernoulli", True),
         ("fed_grad_mp", "dictionary", "scheduled", False)]


def _id(case) -> str:
    a, p, c, comp = case
    return f"{a}-{p}-{c}" + ("-compensated" if comp else "")


def run_case(case, device: str, **extra):
    """The case's history on ``device`` (skips a problem the algorithm does not accept)."""
    kind, problem_kind, channel, compensated = case
    problem, data = make_problem(problem_kind)
    algorithm = make_algorithm(kind, problem_kind, compensated)
    try:
        algorithm.bind(problem, data)
    except ConfigError as exc:
        pytest.skip(f"{kind} does not run on {problem_kind}: {exc}")
    # ResNet-20 is two rounds: its vectorised float64 steps are the slow part on a CPU
    rounds = 2 if problem_kind.startswith("resnet") else ROUNDS
    kw = dict(rounds=rounds, seed=1, clients_per_round=4, channel=make_channel(channel),
              device=device)
    return fs.simulate(algorithm, problem, data, **{**kw, **extra})


# ------------------------------------------------------------------- the comparison


def _close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    a, b = a.detach().cpu().to(torch.float64), b.detach().cpu().to(torch.float64)
    assert a.shape == b.shape, f"{what}: shapes {tuple(a.shape)} and {tuple(b.shape)}"
    assert bool(torch.isfinite(a).all() == torch.isfinite(b).all()), f"{what}: finiteness"
    scale = max(float(torch.linalg.vector_norm(a)), float(torch.linalg.vector_norm(b)),
                1e-300)
    gap = float(torch.linalg.vector_norm(a - b))
    assert gap <= RTOL * scale, f"{what}: relative difference {gap / scale:.3g} > {RTOL:g}"


def _same_value(a, b, what: str) -> None:
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, int | float) and isinstance(b, int | float), what
        if math.isnan(a) or math.isnan(b):
            assert math.isnan(a) and math.isnan(b), f"{what}: {a} vs {b}"
            return
        assert abs(a - b) <= RTOL * max(abs(a), abs(b), 1e-300), f"{what}: {a!r} vs {b!r}"
    else:
        assert a == b, f"{what}: {a!r} vs {b!r}"


def assert_same_run(a, b) -> None:
    """Two histories of one run agree: models and floats to :data:`RTOL` relative;
    counts, bytes and delivered clients identical; the same record fields."""
    _close(a.model, b.model, "final model")
    assert (a.personal_models is None) == (b.personal_models is None), "personal models"
    if a.personal_models is not None:
        _close(a.personal_models, b.personal_models, "personal models")
    assert len(a.records) == len(b.records), "number of rounds"
    for ra, rb in zip([a.initial, *a.records], [b.initial, *b.records], strict=True):
        where = f"round {ra.get('round')}"
        assert set(ra) - VOLATILE == set(rb) - VOLATILE, f"{where}: record fields"
        for key in sorted(set(ra) - VOLATILE):
            if key in EXACT:
                assert ra[key] == rb[key], f"{where}, {key}: {ra[key]!r} vs {rb[key]!r}"
            else:
                _same_value(ra[key], rb[key], f"{where}, {key}")


# ------------------------------------------------------------------------ the tests

CPU_PAIR = pytest.param(("cpu", "cpu"), id="cpu-cpu")
GPU_PAIR = pytest.param(("cpu", "cuda"), id="cpu-cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")])


@pytest.mark.parametrize("case", SMOKE, ids=_id)
@pytest.mark.parametrize("devices", [CPU_PAIR])
def test_a_run_gives_the_same_result_on_both_devices(devices, case):
    assert_same_run(run_case(case, devices[0]), run_case(case, devices[1]))


@pytest.mark.parametrize("case", CASES, ids=_id)
@pytest.mark.parametrize("devices", [GPU_PAIR])
def test_every_case_gives_the_same_result_on_the_gpu(devices, case):
    assert_same_run(run_case(case, devices[0]), run_case(case, devices[1]))


CHECKPOINTED = [("safari", "mlp", "bernoulli", True), ("fedmac", "softmax", "perfect", False),
                ("fed_iter_ht", "least_squares", "scheduled", False)]


@pytest.mark.filterwarnings("ignore:round .* no upload was delivered")
@pytest.mark.parametrize("case", CHECKPOINTED, ids=_id)
@pytest.mark.parametrize("devices", [CPU_PAIR, GPU_PAIR, pytest.param(
    ("cuda", "cpu"), id="cuda-cpu", marks=GPU_PAIR.marks)])
def test_a_checkpoint_written_on_one_device_resumes_on_the_other(devices, case, tmp_path):
    first, second = devices
    whole = run_case(case, first)
    ckpt = tmp_path / "run.pt"
    run_case(case, first, rounds=2, checkpoint=ckpt, checkpoint_every=1)
    resumed = run_case(case, second, checkpoint=ckpt, resume=True)
    assert resumed.model.device.type == torch.device(second).type
    assert_same_run(whole, resumed)


def test_the_comparison_notices_a_different_run():
    """The harness is not vacuous: another seed, or a changed byte count, fails it."""
    case = ("fed_iter_ht", "least_squares", "bernoulli", False)
    one = run_case(case, "cpu")
    with pytest.raises(AssertionError, match="final model|delivered|bytes"):
        assert_same_run(one, run_case(case, "cpu", seed=2))
    other = run_case(case, "cpu")
    other.records[-1]["bytes_up"] += 1
    with pytest.raises(AssertionError, match="bytes_up"):
        assert_same_run(one, other)
    other = run_case(case, "cpu")
    other.model = other.model * (1 + 1e-8)
    with pytest.raises(AssertionError, match="final model"):
        assert_same_run(one, other)


def test_the_battery_covers_every_algorithm_problem_and_channel():
    assert {c[0].partition(":")[0] for c in CASES} == set(REGISTRY)
    assert {c[1] for c in CASES} == set(PROBLEMS)
    assert {c[2] for c in CASES} == set(CHANNELS)
    assert {c[3] for c in CASES} == {False, True}


STORED = [("fedmac", "softmax", "bernoulli", False), ("heur_fedamp", "mlp", "perfect", False),
          ("per_fedavg", "cnn", "perfect", False), ("safari:fedspa", "mlp", "bernoulli", True)]


@pytest.mark.parametrize("case", STORED, ids=_id)
@pytest.mark.parametrize("devices", [CPU_PAIR, GPU_PAIR])
def test_client_state_on_disk_gives_the_same_run_on_the_device(devices, case):
    # the files live on the host; the sampled rows move to the device and back
    device = devices[1]
    in_memory = run_case(case, device)
    on_disk = run_case(case, device, client_state_memory=0)
    assert_same_run(in_memory, on_disk)
    assert on_disk.model.device.type == torch.device(device).type
