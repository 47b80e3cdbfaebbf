"""Careless flags: every public builder answers a wrong-typed, non-finite, negative, huge
or surplus value with a ConfigError that names the parameter -- never a traceback from
inside torch or NumPy, never a silent acceptance, never a run that cannot end.

The battery is driven by the registries (``fs.algorithms.REGISTRY``,
``fs.data.GENERATORS``, ``fs.problems.REGISTRY``) and by each builder's signature: a
parameter annotated ``int`` gets the bad integers, one annotated ``bool`` the bad flags,
and so on, so a builder added to a registry is covered without editing this file (it
only needs its required arguments in ``REQUIRED`` below, which a test checks).
"""

from __future__ import annotations

import inspect
import math
import re
import warnings

import numpy as np
import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.algorithms import REGISTRY as ALGORITHMS
from fedsparse.channels import BernoulliChannel, GroupChannel, ScheduledChannel, safari_channel
from fedsparse.data import GENERATORS
from fedsparse.problems import REGISTRY as PROBLEMS

#: The smallest valid required arguments of every registered builder. Optional arguments
#: that make a call cheap are here too (the battery changes one argument at a time).
REQUIRED = {
    "fed_ht": dict(sparsity=2),
    "fed_iter_ht": dict(sparsity=2),
    "distributed_iht": dict(sparsity=2),
    "fed_grad_mp": dict(sparsity=2),
    "fed_mid": dict(sparsity=2),
    "fed_dual_avg": dict(sparsity=2),
    "fed_avg": dict(),
    "fed_prox": dict(mu=0.1),
    "safari": dict(density=0.5),
    "fedmac": dict(lam=0.1, step_size=0.1, personal_step_size=0.1),
    "pfedme": dict(lam=0.1, step_size=0.1, personal_step_size=0.1),
    "per_fedavg": dict(step_size=0.1, inner_step_size=0.1),
    "heur_fedamp": dict(lam=1.0, alpha_k=0.5, sigma=1.0, step_size=0.1),
    "fedht_simulation": dict(num_clients=2, samples_per_client=4, dim=5, support_size=2),
    "fedprox_synthetic": dict(num_clients=2, dim=4, num_classes=2),
    "shifted_gaussian": dict(num_clients=2, samples_per_client=4, dim=5, sparsity=2),
    "federated_real": dict(dataset="digits", partition="iid", num_clients=2,
                           max_examples=40),
    "libsvm_file": None,  # needs a file: built by the fixture below
    "ondisk": None,  # needs a folder: written by the fixture below
    "least_squares": dict(),
    "logistic": dict(),
    "softmax": dict(),
    "neural": dict(model={"kind": "mlp", "in_features": 4, "hidden": [3], "num_classes": 2}),
}

#: Float parameters for which a negative number is a valid value.
SIGNED = {"mean", "exponent"}
#: Parameters whose values are not plain flags or numbers; they have cases of their own.
SPECIAL = {"dictionary", "path", "partition_kwargs", "model", "dataset", "partition",
           "checkpoint", "device", "client_state_dir"}

BAD_INTS = [True, 2.5, "3", float("nan"), -1, 10**30, 2**63]
BAD_FLOATS = [True, "0.1", float("nan"), math.inf, -math.inf]
BAD_BOOLS = ["no", "false", "true", 1, 0, 2.5]
BAD_CHOICES = [3, True, "no-such-choice"]
BAD_DTYPES = ["float32", torch.int64, 3]


def bad_values(param: inspect.Parameter) -> list:
    """The careless values a parameter of this annotation must refuse."""
    kind = str(param.annotation).replace("typing.", "")
    optional = "None" in kind or param.default is None
    if param.name in SPECIAL:
        return []
    if kind.startswith("bool"):
        return BAD_BOOLS + ([] if optional else [None])
    if kind.startswith("int"):
        return BAD_INTS + ([] if optional else [None])
    if kind.startswith("float"):
        values = BAD_FLOATS + ([] if optional else [None])
        if param.name not in SIGNED:
            values.append(-1.0)
        if "str" in kind:  # a number or "auto"
            values.append("fast")
        return values
    if "dtype" in kind:
        return BAD_DTYPES
    if kind.startswith("str"):
        return BAD_CHOICES + ([] if optional else [None])
    return []


@pytest.fixture(scope="module")
def libsvm_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("libsvm") / "tiny.svm"
    rows = [f"{i % 2} 1:{i + 1} 3:{0.5 * i}" for i in range(12)]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def ondisk_path(tmp_path_factory):
    from fedsparse.data.ondisk import write_federated

    data = fs.data.shifted_gaussian(num_clients=3, samples_per_client=4, dim=5, sparsity=2,
                                    seed=0)
    return write_federated(data, tmp_path_factory.mktemp("ondisk") / "set")


def _registry_cases():
    for registry, label in ((ALGORITHMS, "algorithm"), (GENERATORS, "data"),
                            (PROBLEMS, "problem")):
        for kind, builder in sorted(registry.items()):
            for name, param in inspect.signature(builder).parameters.items():
                for value in bad_values(param):
                    yield pytest.param(label, kind, name, value,
                                       id=f"{label}-{kind}-{name}={value!r}"[:90])


def _base_kwargs(kind, libsvm_path, ondisk_path):
    if kind == "libsvm_file":
        return dict(path=str(libsvm_path), partition="iid", num_clients=2)
    if kind == "ondisk":
        return dict(path=str(ondisk_path))
    return dict(REQUIRED[kind])


def test_every_registered_builder_has_its_required_arguments_here():
    for registry in (ALGORITHMS, GENERATORS, PROBLEMS):
        for kind, builder in registry.items():
            assert kind in REQUIRED, f"add {kind!r} to REQUIRED so the battery covers it"
            required = [n for n, p in inspect.signature(builder).parameters.items()
                        if p.default is inspect.Parameter.empty
                        and p.kind is not inspect.Parameter.VAR_KEYWORD]
            if REQUIRED[kind] is not None:
                assert set(required) <= set(REQUIRED[kind]), kind


@pytest.mark.parametrize("registry,kind", [("algorithm", k) for k in sorted(ALGORITHMS)]
                         + [("data", k) for k in sorted(GENERATORS)]
                         + [("problem", k) for k in sorted(PROBLEMS)])
def test_the_base_arguments_are_valid(registry, kind, libsvm_path, ondisk_path):
    builder = {"algorithm": ALGORITHMS, "data": GENERATORS, "problem": PROBLEMS}[registry]
    builder[kind](**_base_kwargs(kind, libsvm_path, ondisk_path))  # the battery changes one thing


@pytest.mark.parametrize("registry,kind,name,value", list(_registry_cases()))
def test_a_careless_value_is_a_clear_error_naming_the_parameter(registry, kind, name, value,
                                                                libsvm_path, ondisk_path):
    builder = {"algorithm": ALGORITHMS, "data": GENERATORS, "problem": PROBLEMS}[registry]
    kwargs = {**_base_kwargs(kind, libsvm_path, ondisk_path), name: value}
    with pytest.raises(ConfigError, match=rf"(^|\W){re.escape(name)}\W"):
        builder[kind](**kwargs)


# -- simulate --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny():
    return fs.data.shifted_gaussian(num_clients=3, samples_per_client=6, dim=5, sparsity=2,
                                    seed=0, dtype=torch.float64)


def _must_not_start(record, state):
    raise AssertionError("the run started: the argument should have been refused first")


SIMULATE_CASES = [(name, value)
                  for name, param in inspect.signature(fs.simulate).parameters.items()
                  if name not in ("algorithm", "problem", "data")
                  for value in bad_values(param)] + [
    ("channel", 3), ("channel", "perfect"), ("callback", 3), ("callback", "print"),
    ("checkpoint", 3), ("device", "gpu-please"), ("device", 3), ("client_state_dir", 3),
    ("client_state_dir", True),
]


@pytest.mark.parametrize("name,value", SIMULATE_CASES,
                         ids=[f"{n}={v!r}"[:60] for n, v in SIMULATE_CASES])
def test_simulate_refuses_a_careless_argument_before_the_first_round(tiny, name, value):
    kwargs = {"rounds": 2, "callback": _must_not_start, name: value}
    with pytest.raises(ConfigError, match=rf"(^|\W){re.escape(name)}\W"):
        fs.simulate(fs.algorithms.fed_avg(step_size=0.01, local_steps=1),
                    fs.problems.least_squares(), tiny, **kwargs)


# -- channels --------------------------------------------------------------------------

CHANNEL_BUILDERS = {
    "BernoulliChannel": (BernoulliChannel, dict(probability=0.5)),
    "ScheduledChannel": (ScheduledChannel, dict(delivered=[[True, False, True]])),
    "GroupChannel": (GroupChannel, dict(channel=BernoulliChannel(0.5), groups=[0, 0, 1])),
    "safari_channel": (safari_channel, dict(probability=0.5, groups=[0, 0, 1])),
}


def _channel_cases():
    for kind, (builder, _base) in CHANNEL_BUILDERS.items():
        for name, param in inspect.signature(builder).parameters.items():
            for value in bad_values(param):
                yield pytest.param(kind, name, value, id=f"{kind}-{name}={value!r}")
    for kind in ("BernoulliChannel", "safari_channel"):
        for value in (float("nan"), -0.1, 1.5, "often", True, [0.5, "x"], [[0.5]], None):
            yield pytest.param(kind, "probability", value, id=f"{kind}-probability={value!r}")
    for kind in ("GroupChannel", "safari_channel"):
        for value in ([], [0.5, 1.5], [[0, 1]], "ab", None, [True, False], 3):
            yield pytest.param(kind, "groups", value, id=f"{kind}-groups={value!r}")
    for value in ([], [[]], [[0.5, 1]], [[2, 0]], "yes", None, [[True], [True, False]]):
        yield pytest.param("ScheduledChannel", "delivered", value, id=f"delivered={value!r}")
    yield pytest.param("GroupChannel", "channel", 0.5, id="GroupChannel-channel=0.5")


@pytest.mark.parametrize("kind,name,value", list(_channel_cases()))
def test_a_careless_channel_argument_is_a_clear_error(kind, name, value):
    builder, base = CHANNEL_BUILDERS[kind]
    with pytest.raises(ConfigError, match=rf"(^|\W){re.escape(name)}\W"):
        builder(**{**base, name: value})


def test_safari_channel_asymmetric_with_no_groups_names_groups():
    with pytest.raises(ConfigError, match="groups"):
        safari_channel("asymmetric", [])


def test_safari_channel_needs_a_probability_per_group_id():
    with pytest.raises(ConfigError, match=r"probability=.*4 per-client values.*clients in "
                                          r"groups \(3\)"):
        safari_channel([0.5, 0.5, 0.5, 0.1], [0, 0, 1])


@pytest.mark.parametrize("channel,name", [
    (BernoulliChannel([0.5, 0.5, 0.5, 0.9]), "probability"),
    (ScheduledChannel(torch.ones(2, 4, dtype=torch.bool)), "delivered"),
    (GroupChannel(BernoulliChannel(0.5), [0, 0, 1, 1]), "groups"),
    (safari_channel(0.5, [0, 0, 1, 1]), "groups"),
    (BernoulliChannel([0.5, 0.5]), "probability"),
    (ScheduledChannel(torch.ones(2, 2, dtype=torch.bool)), "delivered"),
], ids=["bernoulli-4", "scheduled-4", "group-4", "safari-4", "bernoulli-2", "scheduled-2"])
def test_per_client_channel_entries_must_match_the_clients(tiny, channel, name):
    # three clients: a fourth entry would be ignored silently, a missing one found late
    with pytest.raises(ConfigError, match=rf"{name}\W.*3"):
        fs.simulate(fs.algorithms.fed_avg(step_size=0.01, local_steps=1),
                    fs.problems.least_squares(), tiny, rounds=2, channel=channel,
                    callback=_must_not_start)


class _Custom:
    def __init__(self, out):
        self.out = out

    def delivered(self, seed, round, clients):
        return self.out(clients)

    def __repr__(self):
        return "MyLossyLink()"


@pytest.mark.parametrize("out", [
    lambda c: torch.ones(c.shape[0] + 1, dtype=torch.bool),     # one too many
    lambda c: torch.ones(1, dtype=torch.bool),                   # too few
    lambda c: torch.full((c.shape[0],), 0.5),                    # probabilities, not fates
    lambda c: torch.full((c.shape[0],), 2),                      # not 0/1
    lambda c: None,
    lambda c: "all",
    lambda c: torch.ones(c.shape[0], 1, dtype=torch.bool),       # (S, 1)
], ids=["long", "short", "floats", "twos", "none", "string", "column"])
def test_a_custom_channel_that_answers_nonsense_is_named(tiny, out):
    with pytest.raises(ConfigError, match="MyLossyLink"):
        fs.simulate(fs.algorithms.fed_avg(step_size=0.01, local_steps=1),
                    fs.problems.least_squares(), tiny, rounds=2, channel=_Custom(out))


def test_a_custom_channel_with_0_1_integers_or_a_list_works(tiny):
    ints = _Custom(lambda c: torch.tensor([1, 0, 1])[: c.shape[0]])
    listed = _Custom(lambda c: [True, False, True][: c.shape[0]])
    a = fs.simulate(fs.algorithms.fed_avg(step_size=0.01, local_steps=1),
                    fs.problems.least_squares(), tiny, rounds=2, channel=ints)
    b = fs.simulate(fs.algorithms.fed_avg(step_size=0.01, local_steps=1),
                    fs.problems.least_squares(), tiny, rounds=2, channel=listed)
    assert a.column("delivered") == b.column("delivered") == [2, 2]


def test_string_flags_are_not_truthy():
    schedule = [[True, False, True]]
    with pytest.raises(ConfigError, match="cycle='no'"):
        ScheduledChannel(schedule, cycle="no")
    with pytest.raises(ConfigError, match="at_least_one_per_group='false'"):
        safari_channel(0.5, [0, 0, 1], at_least_one_per_group="false")
    with pytest.raises(ConfigError, match="iid='no'"):
        fs.data.fedprox_synthetic(num_clients=2, iid="no")


def test_numpy_bools_and_integers_are_accepted():
    ScheduledChannel([[True, False, True]], cycle=np.bool_(True))
    fs.algorithms.fed_avg(local_steps=np.int64(3), batch_size=np.int32(4))
    fs.data.shifted_gaussian(num_clients=np.int64(2), samples_per_client=4, dim=5,
                             sparsity=2, seed=np.uint32(3))


def test_distributed_iht_refuses_a_bool_for_local_steps():
    with pytest.raises(ConfigError, match="local_steps=True"):
        fs.algorithms.distributed_iht(sparsity=2, local_steps=True)


@pytest.mark.parametrize("seed", [2**63, 2**64 + 5, -1, 1.5, True, "7"])
def test_seeds_outside_the_generator_range_name_seed(tiny, seed):
    with pytest.raises(ConfigError, match="seed=.*0 and 2\\*\\*63 - 1|seed=.*integer"):
        fs.simulate(fs.algorithms.fed_avg(step_size=0.01, local_steps=1),
                    fs.problems.least_squares(), tiny, rounds=1, seed=seed)
    with pytest.raises(ConfigError, match="seed="):
        fs.data.shifted_gaussian(num_clients=2, samples_per_client=4, dim=5, sparsity=2,
                                 seed=seed)


def test_an_integer_beyond_64_bits_is_told_the_range_it_may_take():
    from fedsparse._validation import check_int

    with pytest.raises(ConfigError, match=r"rounds=10{20} is invalid: must be an integer from "
                                          r"1 to 2\*\*63 - 1"):
        check_int("rounds", 10**20, minimum=1)
    with pytest.raises(ConfigError, match=r"must be an integer from -2\*\*63 to 2\*\*63 - 1"):
        check_int("offset", -(10**20))
    with pytest.raises(ConfigError, match="must be at least 0"):  # the bound it broke
        check_int("seed", -(10**20), minimum=0)


def test_the_largest_seed_runs(tiny):
    h = fs.simulate(fs.algorithms.fed_avg(step_size=0.01, local_steps=1),
                    fs.problems.least_squares(), tiny, rounds=1, seed=2**63 - 1,
                    clients_per_round=2)
    assert h.records[0]["clients_sampled"] == 2


# -- resource limits ---------------------------------------------------------------------

@pytest.mark.parametrize("build,name", [
    (lambda: fs.data.shifted_gaussian(num_clients=10**9), "num_clients"),
    (lambda: fs.data.fedht_simulation(num_clients=10**9), "num_clients"),
    (lambda: fs.data.fedprox_synthetic(num_clients=10**9), "num_clients"),
    (lambda: fs.data.fedprox_synthetic(size_scale=10**12), "size_scale"),
    (lambda: fs.data.shifted_gaussian(dim=10**12, sparsity=2), "dim"),
    (lambda: fs.data.fedht_simulation(dim=10**12), "dim"),
    (lambda: fs.data.shifted_gaussian(samples_per_client=10**12), "samples_per_client"),
    (lambda: fs.data.fedprox_synthetic(dim=10**12), "dim"),
    (lambda: fs.data.fedprox_synthetic(num_classes=10**12), "num_classes"),
    (lambda: fs.algorithms.fed_iter_ht(sparsity=2, dictionary={
        "kind": "gaussian", "atoms": 10**12}).bind(
            fs.problems.least_squares(), fs.data.shifted_gaussian(num_clients=2, dim=100)),
     "atoms"),
], ids=["sg-clients", "ht-clients", "prox-clients", "prox-scale", "sg-dim", "ht-dim",
        "sg-samples", "prox-dim", "prox-classes", "dictionary-atoms"])
def test_a_data_set_that_cannot_fit_is_refused_before_it_is_drawn(build, name):
    with pytest.raises(ConfigError, match=rf"{name}=\d+.* needs about .*"
                                          r"(this machine has|this process may use)"):
        build()


def test_the_refusal_names_every_size_and_the_estimate():
    with pytest.raises(ConfigError) as err:
        fs.data.shifted_gaussian(num_clients=10**9, samples_per_client=100, dim=1000)
    text = str(err.value)
    assert "num_clients=1000000000" in text
    assert "samples_per_client=100" in text and "dim=1000" in text
    assert "TiB" in text or "PiB" in text


def test_the_memory_limit_is_what_the_check_compares_with(monkeypatch):
    from fedsparse import _resources

    monkeypatch.setattr(_resources, "memory_limit", lambda: 1 << 20)  # 1 MiB
    with pytest.raises(ConfigError, match="(this machine has|this process may use) 1 MiB"):
        fs.data.shifted_gaussian(num_clients=20, samples_per_client=100, dim=100)
    monkeypatch.setattr(_resources, "memory_limit", lambda: 1 << 40)
    fs.data.shifted_gaussian(num_clients=20, samples_per_client=100, dim=100)


@pytest.mark.parametrize("kwargs,name", [
    (dict(rounds=10**12), "rounds"),
    (dict(rounds=2**62), "rounds"),
    (dict(rounds=10**30), "rounds"),
    (dict(clients_per_round=10**30), "clients_per_round"),
    (dict(client_batch=10**30), "client_batch"),
    (dict(eval_every=10**30), "eval_every"),
], ids=["rounds-1e12", "rounds-2^62", "rounds-1e30", "cpr", "client_batch", "eval_every"])
def test_simulate_refuses_a_run_that_cannot_end_or_fit(tiny, kwargs, name):
    with pytest.raises(ConfigError, match=rf"{name}="):
        fs.simulate(fs.algorithms.fed_avg(step_size=0.01, local_steps=1),
                    fs.problems.least_squares(), tiny, callback=_must_not_start,
                    **{"rounds": 2, **kwargs})


@pytest.mark.parametrize("build,name", [
    (lambda: fs.algorithms.fed_avg(local_steps=10**30), "local_steps"),
    (lambda: fs.algorithms.fed_ht(sparsity=2, local_steps=10**18), "local_steps"),
    (lambda: fs.algorithms.fed_grad_mp(sparsity=2, inner_solver="sgd", inner_steps=10**18),
     "inner_steps"),
    (lambda: fs.algorithms.safari(density=0.5, pruner="synflow",
                                  synflow_iterations=10**18), "synflow_iterations"),
    (lambda: fs.algorithms.fed_avg(local_steps=10**15), "local_steps"),
    (lambda: fs.algorithms.fedmac(lam=1, step_size=1, personal_step_size=1,
                                  local_steps=10**10, inner_steps=10**10), "inner_steps"),
    (lambda: fs.algorithms.heur_fedamp(lam=1, alpha_k=1, sigma=1, step_size=1,
                                       local_steps=10**16), "local_steps"),
], ids=["fedavg-1e30", "fedht-1e18", "gradmp-inner", "synflow", "fedavg-1e15",
        "fedmac-product", "heur_fedamp"])
def test_local_work_that_cannot_end_in_a_year_is_refused(build, name):
    # refused when built where the builder can see that one round alone cannot end, else
    # when the run starts (before its first round)
    data = fs.data.fedprox_synthetic(num_clients=3, dim=4, num_classes=2, seed=0)
    with pytest.raises(ConfigError, match=rf"{name}=\d+.*(years|64-bit)"):
        algo = build()
        fs.simulate(algo, fs.problems.softmax(2), data, rounds=1, callback=_must_not_start)


def test_a_long_but_possible_run_is_not_refused(tiny):
    # a million rounds and a million local steps a round are hours or days, not years:
    # the run starts (and the callback stops it)
    algo = fs.algorithms.fed_avg(step_size=0.01, local_steps=10**6)
    fs.algorithms.fed_ht(sparsity=2, local_steps=10**9)
    with pytest.raises(AssertionError, match="the run started"):
        fs.simulate(fs.algorithms.fed_avg(step_size=0.01, local_steps=1),
                    fs.problems.least_squares(), tiny, rounds=10**6,
                    callback=_must_not_start, eval_every=10**6)
    assert algo.local.local_steps == 10**6


def test_a_run_of_more_than_a_day_of_steps_at_1_us_starts_with_a_warning(tiny):
    # 10^12 local steps: 11.6 days at 1 µs a step, months at a real step's speed
    algo = fs.algorithms.fed_avg(step_size=0.01, local_steps=10**12)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # raised: the round never starts
        with pytest.raises(RuntimeWarning, match=r"local_steps=1000000000000.*11\.6 days"):
            fs.simulate(algo, fs.problems.least_squares(), tiny, rounds=1)


def test_simulate_counts_the_local_models_and_the_algorithms_state(monkeypatch):
    from fedsparse import _resources

    data = fs.data.shifted_gaussian(num_clients=12, samples_per_client=4, dim=50, sparsity=2,
                                    seed=0, dtype=torch.float64)
    # 12 clients x 50 x 8 bytes x 2 (local models and uploads) = 9.4 KiB; 1 round's
    # record < 1 KiB
    monkeypatch.setattr(_resources, "memory_limit", lambda: 9 * 1024)
    algo = fs.algorithms.fed_avg(step_size=0.01, local_steps=1)
    with pytest.raises(ConfigError, match=r"num_clients=12 .* for the local models; "
                                          r"this process may use 9 KiB\. client_batch"):
        fs.simulate(algo, fs.problems.least_squares(), data, rounds=1,
                    callback=_must_not_start)
    with pytest.raises(AssertionError, match="the run started"):  # 4 at a time: it fits
        fs.simulate(algo, fs.problems.least_squares(), data, rounds=1, client_batch=4,
                    callback=_must_not_start)
    monkeypatch.setattr(_resources, "memory_limit", lambda: 3584)
    # 4 clients' models (3.1 KiB) fit; similarity compensation's sparse record starts
    # empty (it no longer costs 8 N^2 bytes up front) ...
    with pytest.raises(AssertionError, match="the run started"):
        fs.simulate(fs.algorithms.similarity_compensation(algo), fs.problems.least_squares(),
                    data, rounds=1, client_batch=4, callback=_must_not_start)


def test_heur_fedamp_counts_the_servers_client_models(monkeypatch):
    from fedsparse import _resources

    # the server keeps one model per client: 40 clients x 40 parameters x 8 bytes =
    # 12.5 KiB; one client's local model and upload (2 x 40 x 8 bytes) alone would fit
    data = fs.data.fedprox_synthetic(num_clients=40, seed=0, dim=10, num_classes=4,
                                     dtype=torch.float64)
    monkeypatch.setattr(_resources, "memory_limit", lambda: 12 * 1024)
    algo = fs.algorithms.heur_fedamp(lam=0.1, alpha_k=0.1, sigma=1.0, step_size=0.1,
                                     local_steps=1)
    with pytest.raises(ConfigError, match="for the local models and the server's client "
                                          "models; this process may use 12 KiB"):
        fs.simulate(algo, fs.problems.softmax(4), data, rounds=1, client_batch=1,
                    callback=_must_not_start)
