"""Inputs that used to fail deep inside torch, or pass silently with a wrong result: half
precisions, zero client weights, hand-built data sets, custom uploads of the wrong shape,
SAFARI's update payload under an upload bound, a resume on other data, labels past the
first clients of an on-disk set, boolean partitions, CSR data for FedGradMP and
dictionaries, and a few small builders."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import fedsparse as fs
from fedsparse import ConfigError
from fedsparse.checkpoint_file import read_checkpoint, save_checkpoint
from fedsparse.data import ClientSplit, FederatedDataset
from fedsparse.data.ondisk import open_federated, write_federated
from fedsparse.data.sparse_rows import SparseRows

LS = fs.problems.least_squares()


def _gaussian(seed=0, clients=3, lazy=False):
    return fs.data.shifted_gaussian(num_clients=clients, samples_per_client=5, dim=6,
                                    sparsity=2, seed=seed, lazy=lazy, dtype=torch.float64)


def _classes(clients=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(8, 5, generator=g) for _ in range(clients)]
    ys = [torch.randint(0, 3, (8,), generator=g).float() for _ in range(clients)]
    return fs.data.from_arrays(xs, ys)


# ---------------------------------------------------------------- dtypes and weights

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precisions_are_refused_where_they_enter(dtype):
    xs, ys = [torch.randn(6, 5)] * 2, [torch.zeros(6)] * 2
    with pytest.raises(ConfigError, match=r"dtype=torch\.b?float16 .*float32 or torch\.float64"):
        fs.data.from_arrays(xs, ys, dtype=dtype)
    with pytest.raises(ConfigError, match=r"dtype=.*float32 or torch\.float64"):
        fs.data.fedprox_synthetic(num_clients=3, seed=0, dtype=dtype)
    data = fs.data.from_arrays(xs, ys)
    with pytest.raises(ConfigError, match=r"^dtype=.*float32 or torch\.float64"):
        fs.simulate(fs.algorithms.fed_avg(), LS, data, rounds=1, dtype=dtype)
    # a data set converted by hand is refused by simulate, before any round
    with pytest.raises(ConfigError, match=r"data\.dtype=.*float32 or torch\.float64"):
        fs.simulate(fs.algorithms.fed_avg(), LS, data.to(dtype), rounds=1)
    # ... and runs once it asks for a dtype fedsparse computes in
    fs.simulate(fs.algorithms.fed_avg(), LS, data.to(dtype), rounds=1, dtype=torch.float32)


def test_a_zero_client_weight_is_refused_instead_of_a_nan_model():
    xs, ys = [torch.randn(4, 3) for _ in range(3)], [torch.randn(4) for _ in range(3)]
    with pytest.raises(ConfigError, match=r"weights=\[1, 0, 0\] .*positive"):
        fs.data.from_arrays(xs, ys, weights=[1, 0, 0])
    fs.data.from_arrays(xs, ys, weights=[1, 2, 3])


def _hand_built(counts, weights):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(3, 4, 5, dtype=torch.float64, generator=g)
    Y = torch.randn(3, 4, dtype=torch.float64, generator=g)
    return FederatedDataset(ClientSplit(X, Y, torch.tensor(counts)), weights)


@pytest.mark.parametrize("counts, weights, match", [
    ([4, 4, 4], torch.ones(3, dtype=torch.float64), r"data\.weights=.*summing to 1"),
    ([4, 4, 4], torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64), r"data\.weights=.*positive"),
    ([4, 4, 4], [1 / 3] * 3, r"data\.weights='<list>'.*\(3,\) tensor"),
    ([9, 4, 4], torch.full((3,), 1 / 3, dtype=torch.float64), r"data\.train\.counts=.*n_max = 4"),
    ([0, 4, 4], torch.full((3,), 1 / 3, dtype=torch.float64), r"data\.train\.counts=.*from 1"),
])
def test_a_hand_built_data_set_is_checked_like_from_arrays(counts, weights, match):
    with pytest.raises(ConfigError, match=match):
        fs.simulate(fs.algorithms.fed_avg(), LS, _hand_built(counts, weights), rounds=1)


def test_float32_weights_of_a_hand_built_data_set_are_read_as_float64():
    third = torch.full((3,), 1 / 3, dtype=torch.float64)
    want = fs.simulate(fs.algorithms.fed_avg(), LS, _hand_built([4, 3, 4], third), rounds=2)
    got = fs.simulate(fs.algorithms.fed_avg(), LS, _hand_built([4, 3, 4], third.float()),
                      rounds=2)
    assert torch.allclose(got.model, want.model, rtol=1e-6)


# ---------------------------------------------------------------- uploads

@pytest.mark.parametrize("wrong", [lambda u: u[0], lambda u: u[:2], lambda u: u.float(),
                                   lambda u: u[:, :3]])
def test_a_custom_client_update_of_the_wrong_shape_or_dtype_is_named(wrong, monkeypatch):
    algo = fs.algorithms.fed_avg()
    original = type(algo).client_update

    def client_update(self, payload, ctx):
        up, state, info = original(self, payload, ctx)
        return wrong(up), state, info

    monkeypatch.setattr(type(algo), "client_update", client_update)
    with pytest.raises(ConfigError, match=r"FederatedAveraging\.client_update returned "
                       r"uploads .*must be a \(3, 6\) tensor .*torch\.float64"):
        fs.simulate(algo, LS, _gaussian(), rounds=1)


def _safari_update(**kw):
    return fs.algorithms.safari(density=0.5, payload="update", local_steps=2, batch_size=4,
                                **kw)


@pytest.mark.parametrize("compensation", [False, True])
def test_an_update_payload_is_bounded_by_its_own_norm(compensation):
    data = _classes()
    problem = fs.problems.neural(fs.models.mlp(5, (16,), 3))
    free = fs.simulate(_safari_update(compensation=compensation), problem, data, rounds=2,
                       seed=0)
    # the updates are small: a bound of 1 passes every one of them (it measured the
    # distance of the update to the broadcast model, about ||x||, and rejected them all)
    bounded = fs.simulate(_safari_update(compensation=compensation), problem, data, rounds=2,
                          seed=0, max_update_norm=1.0)
    assert [r["rejected"] for r in bounded.records] == [0, 0]
    assert torch.equal(bounded.model, free.model)
    tight = fs.simulate(_safari_update(compensation=compensation), problem, data, rounds=1,
                        seed=0, max_update_norm=1e-6)
    assert tight.records[-1]["rejected"] == 3


# ---------------------------------------------------------------- checkpoints

def test_a_resume_on_other_data_or_another_loss_is_refused(tmp_path):
    ckpt = tmp_path / "run.pt"
    fs.simulate(fs.algorithms.fed_avg(), LS, _gaussian(seed=0), rounds=2, checkpoint=ckpt)
    with pytest.raises(ConfigError, match=r"another run.*data_digest"):
        fs.simulate(fs.algorithms.fed_avg(), LS, _gaussian(seed=1), rounds=4, checkpoint=ckpt,
                    resume=True)
    resumed = fs.simulate(fs.algorithms.fed_avg(), LS, _gaussian(seed=0), rounds=4,
                          checkpoint=ckpt, resume=True)
    straight = fs.simulate(fs.algorithms.fed_avg(), LS, _gaussian(seed=0), rounds=4)
    assert torch.equal(resumed.model, straight.model)


def test_a_resume_with_another_loss_setting_is_refused(tmp_path):
    ckpt = tmp_path / "run.pt"
    binary = fs.data.from_arrays([np.eye(3)] * 2, [np.array([0.0, 1.0, 1.0])] * 2)
    fs.simulate(fs.algorithms.fed_avg(), fs.problems.logistic(), binary, rounds=2,
                checkpoint=ckpt)
    with pytest.raises(ConfigError, match=r"another run.*problem_config.*l2=0\.1"):
        fs.simulate(fs.algorithms.fed_avg(), fs.problems.logistic(l2=0.1), binary, rounds=4,
                    checkpoint=ckpt, resume=True)


def test_a_resume_on_another_lazy_seed_is_refused(tmp_path):
    ckpt = tmp_path / "run.pt"
    fs.simulate(fs.algorithms.fed_avg(), LS, _gaussian(0, 30, lazy=True), rounds=2,
                checkpoint=ckpt)
    with pytest.raises(ConfigError, match="data_digest"):
        fs.simulate(fs.algorithms.fed_avg(), LS, _gaussian(1, 30, lazy=True), rounds=4,
                    checkpoint=ckpt, resume=True)


def test_a_dictionary_problem_resumes_and_another_dictionary_is_another_run(tmp_path):
    from fedsparse.problems.dictionary import DictionaryProblem

    ckpt = tmp_path / "run.pt"
    g = torch.Generator().manual_seed(0)
    atoms = torch.randn(6, 8, dtype=torch.float64, generator=g)

    def problem(A):
        return DictionaryProblem(fs.problems.least_squares(), A)

    data = fs.data.from_arrays([torch.randn(5, 6, dtype=torch.float64, generator=g)] * 3,
                               [torch.randn(5, dtype=torch.float64, generator=g)] * 3,
                               dtype=torch.float64)
    fs.simulate(fs.algorithms.fed_avg(), problem(atoms), data, rounds=2, checkpoint=ckpt)
    # a new object of the same atoms is the same run (its repr was an address before)
    resumed = fs.simulate(fs.algorithms.fed_avg(), problem(atoms.clone()), data, rounds=4,
                          checkpoint=ckpt, resume=True)
    assert len(resumed.records) == 4
    with pytest.raises(ConfigError, match="problem_config"):
        fs.simulate(fs.algorithms.fed_avg(), problem(atoms + 1), data, rounds=6,
                    checkpoint=ckpt, resume=True)


def test_a_network_with_other_layers_of_the_same_shapes_is_another_run(tmp_path):
    ckpt = tmp_path / "run.pt"
    data = _classes()

    def net(activation):
        return fs.problems.neural(torch.nn.Sequential(torch.nn.Linear(5, 4), activation,
                                                      torch.nn.Linear(4, 3)))

    fs.simulate(fs.algorithms.fed_avg(), net(torch.nn.ReLU()), data, rounds=2,
                checkpoint=ckpt)
    with pytest.raises(ConfigError, match=r"problem_config.*layers="):
        fs.simulate(fs.algorithms.fed_avg(), net(torch.nn.Tanh()), data, rounds=4,
                    checkpoint=ckpt, resume=True)


def test_a_network_holding_other_frozen_values_is_another_run(tmp_path):
    # A frozen layer or a buffer is not in the model vector: its values come from the
    # module, so a resume with other values would continue another network's training
    data = _classes()

    class Centered(torch.nn.Module):
        def __init__(self, mean, seed):
            super().__init__()
            torch.manual_seed(seed)
            self.register_buffer("mean", mean)
            self.frozen = torch.nn.Linear(5, 4).requires_grad_(False)
            self.head = torch.nn.Linear(4, 3)

        def forward(self, x):
            return self.head(torch.tanh(self.frozen(x - self.mean)))

    def run(ckpt, mean, seed, rounds, resume=False):
        return fs.simulate(fs.algorithms.fed_avg(), fs.problems.neural(Centered(mean, seed)),
                           data, rounds=rounds, checkpoint=ckpt, resume=resume)

    for i, (mean, seed) in enumerate([(torch.ones(5), 0), (torch.zeros(5), 1)]):
        ckpt = tmp_path / f"run{i}.pt"
        run(ckpt, torch.zeros(5), 0, 2)
        with pytest.raises(ConfigError, match=r"another run.*module_constants"):
            run(ckpt, mean, seed, 4, resume=True)
        assert len(run(ckpt, torch.zeros(5), 0, 4, resume=True).records) == 4


def test_an_algorithm_with_other_dictionary_atoms_is_another_run(tmp_path):
    # the run's record names a dictionary matrix by its shape only
    g = torch.Generator().manual_seed(0)
    atoms = torch.randn(6, 8, dtype=torch.float64, generator=g)

    def run(ckpt, A, rounds, resume=False):
        return fs.simulate(fs.algorithms.fed_grad_mp(sparsity=2, dictionary=A), LS,
                           _gaussian(), rounds=rounds, checkpoint=ckpt, resume=resume)

    run(tmp_path / "run.pt", atoms, 2)
    with pytest.raises(ConfigError, match=r"another run.*dictionary_atoms"):
        run(tmp_path / "run.pt", atoms.flip(1), 4, resume=True)
    assert len(run(tmp_path / "run.pt", atoms.clone(), 4, resume=True).records) == 4


def test_a_resume_on_data_changed_through_a_numpy_view_is_refused(tmp_path):
    # a write through a NumPy view bumps no torch version counter: a digest kept with
    # the data set object while its counters stood still missed it
    from fedsparse.data import digest

    ckpt = tmp_path / "run.pt"
    data = _gaussian()
    fs.simulate(fs.algorithms.fed_avg(), LS, data, rounds=2, checkpoint=ckpt)
    first = digest.data_digest(data)
    version, view = data.train.X._version, data.train.X.numpy()
    kept = float(view[0, 0, 0])
    view[0, 0, 0] = kept + 1.0
    assert data.train.X._version == version  # torch did not see the write
    assert digest.data_digest(data) != first
    with pytest.raises(ConfigError, match=r"another run.*data_digest"):
        fs.simulate(fs.algorithms.fed_avg(), LS, data, rounds=4, checkpoint=ckpt,
                    resume=True)
    view[0, 0, 0] = kept  # the same values again: the same run
    assert digest.data_digest(data) == first
    assert len(fs.simulate(fs.algorithms.fed_avg(), LS, data, rounds=4, checkpoint=ckpt,
                           resume=True).records) == 4


def test_a_checkpoint_written_before_the_data_digest_still_resumes(tmp_path):
    ckpt = tmp_path / "run.pt"
    fs.simulate(fs.algorithms.fed_avg(), LS, _gaussian(), rounds=2, checkpoint=ckpt)
    saved = read_checkpoint(ckpt)
    for key in ("data_digest", "problem_config"):
        del saved["fingerprint"][key]
    save_checkpoint(ckpt, saved)
    resumed = fs.simulate(fs.algorithms.fed_avg(), LS, _gaussian(), rounds=4, checkpoint=ckpt,
                          resume=True)
    assert len(resumed.records) == 4
    # a key the old file does have is still compared
    saved["fingerprint"]["seed"] = 5
    save_checkpoint(ckpt, saved)
    with pytest.raises(ConfigError, match="seed"):
        fs.simulate(fs.algorithms.fed_avg(), LS, _gaussian(), rounds=4, checkpoint=ckpt,
                    resume=True)


# ---------------------------------------------------------------- data on disk

def test_a_bad_label_past_the_first_clients_on_disk_is_refused_before_training(tmp_path):
    xs = [torch.randn(4, 3) for _ in range(20)]
    ys = [torch.tensor([0.0, 1, 1, 0])] * 19 + [torch.tensor([0.0, 1, 7, 0])]
    write_federated(fs.data.from_arrays(xs, ys), tmp_path / "set")
    data = open_federated(tmp_path / "set")
    for problem, name in ((fs.problems.logistic(), "logistic"),
                          (fs.problems.softmax(2), "softmax"),
                          (fs.problems.neural(fs.models.mlp(3, (4,), 2)), "NeuralProblem")):
        with pytest.raises(ConfigError, match=rf"train labels \[7\.0\] are invalid for {name}"):
            fs.simulate(fs.algorithms.fed_avg(), problem, data, rounds=1)


def test_float16_on_disk_is_stored_in_half_and_computed_in_float32(tmp_path):
    eager = _gaussian().to(torch.float16)
    write_federated(eager, tmp_path / "half")
    data = open_federated(tmp_path / "half")
    assert data.dtype == torch.float32
    got = fs.simulate(fs.algorithms.fed_avg(), LS, data, rounds=2)
    want = fs.simulate(fs.algorithms.fed_avg(), LS, eager.to(torch.float32), rounds=2)
    assert torch.equal(got.model, want.model)


def test_partitions_must_be_integer_indices():
    X, y = np.arange(12.0).reshape(6, 2), np.array([0, 1] * 3)
    mask = np.array([1, 1, 1, 0, 0, 0], bool)
    with pytest.raises(ConfigError, match=r"parts\[0\]='<bool array>'.*flatnonzero"):
        fs.data.from_partitions(X, y, [mask, ~mask], test_fraction=0)
    with pytest.raises(ConfigError, match=r"parts\[0\]='<float64 array>'"):
        fs.data.from_partitions(X, y, [[0.9, 1.7], [2, 3]], test_fraction=0)
    data = fs.data.from_partitions(X, y, [np.flatnonzero(mask), torch.tensor([3, 4])],
                                   test_fraction=0)
    assert data.train.counts.tolist() == [3, 2]


# ---------------------------------------------------------------- CSR features

def _csr_pair():
    mats = [sp.random(5, 8, density=0.4, format="csr", random_state=i) for i in range(3)]
    ys = [np.random.default_rng(i).standard_normal(5) for i in range(3)]
    sparse = fs.data.from_arrays(mats, ys, dtype=torch.float64)
    dense = fs.data.from_arrays([m.toarray() for m in mats], ys, dtype=torch.float64)
    return sparse, dense


def test_columns_of_sparse_rows_equal_a_dense_gather_with_repeated_columns():
    mats = [sp.random(5, 8, density=0.4, format="csr", random_state=i) for i in range(3)]
    X = SparseRows.from_scipy(mats, dtype=torch.float64)
    dense = X.to_dense()
    index = torch.tensor([[0, 3, 3, 7], [1, 1, 2, 5], [7, 6, 0, 0]])
    want = torch.gather(dense, 2, index[:, None, :].expand(-1, dense.shape[1], -1))
    assert torch.equal(X.columns(index), want)
    A = torch.randn(8, 4, dtype=torch.float64)
    assert torch.allclose(X @ A, dense @ A, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("algorithm", [
    lambda: fs.algorithms.fed_grad_mp(sparsity=2),
    lambda: fs.algorithms.fed_iter_ht(sparsity=2, dictionary={"kind": "gaussian", "atoms": 12}),
    lambda: fs.algorithms.fed_grad_mp(sparsity=2, dictionary={"kind": "gaussian", "atoms": 12}),
])
def test_fedgradmp_and_dictionaries_run_on_csr_data_as_on_dense(algorithm):
    sparse, dense = _csr_pair()
    got = fs.simulate(algorithm(), LS, sparse, rounds=3)
    want = fs.simulate(algorithm(), LS, dense, rounds=3)
    assert torch.allclose(got.model, want.model, rtol=1e-10, atol=1e-12)


def test_complex_csr_features_are_refused():
    with pytest.raises(ConfigError, match=r"train_xs\[0\]\.dtype='complex128'.*real"):
        fs.data.from_arrays([sp.csr_matrix([[2 + 5j, 1]])], [np.zeros(1)])


# ---------------------------------------------------------------- small builders

def test_top_indices_refuses_a_k_outside_the_axis():
    x = torch.tensor([0.5, -3.0, 1.0])
    assert fs.sparsity.top_indices(x, 2).tolist() == [1, 2]
    for k in (-1, 4, 1.0, True):
        with pytest.raises(ConfigError, match=rf"k={k!r} is invalid"):
            fs.sparsity.top_indices(x, k)


def test_auto_step_size_on_features_that_are_all_zero_is_refused():
    data = fs.data.from_arrays([np.zeros((4, 3))] * 2, [np.ones(4)] * 2)
    with pytest.raises(ConfigError, match=r"step_size='auto' .*positive curvature"):
        fs.simulate(fs.algorithms.fed_ht(sparsity=1, step_size="auto"), LS, data, rounds=1)


@pytest.mark.parametrize("p", [np.bool_(True), np.array([True, False]), torch.tensor([True]),
                               [True, False]])
def test_booleans_are_no_delivery_probability(p):
    with pytest.raises(ConfigError, match="probability=.*number in \\[0, 1\\]"):
        fs.channels.BernoulliChannel(p)


def test_omp_names_a_signal_of_the_wrong_width_or_dtype():
    D = torch.randn(6, 10, dtype=torch.float64)
    for signals in (torch.randn(3, 5, dtype=torch.float64), torch.randn(3, 6)):
        with pytest.raises(ConfigError, match=r"signals=.*d = 6"):
            fs.sparsity.omp(D, signals, 2)
    with pytest.raises(ConfigError, match=r"signals=.*2-D float32 or float64"):
        fs.sparsity.omp(D, [[1.0] * 6], 2)


@pytest.mark.parametrize("algorithm, name", [
    (lambda: fs.algorithms.fed_avg(step_size=1e39), "step_size"),
    (lambda: fs.algorithms.fed_avg(step_size=1e39, optimizer="adam"), "step_size"),
    (lambda: fs.algorithms.fed_prox(mu=1e39, step_size=0.1), "mu"),
])
def test_a_step_beyond_the_largest_float32_is_named(algorithm, name):
    problem = fs.problems.neural(fs.models.mlp(5, (4,), 3))
    with pytest.raises(ConfigError, match=rf"{name}=1e\+39 .*largest torch\.float32"):
        fs.simulate(algorithm(), problem, _classes(), rounds=1)


def test_meta_tensors_are_refused_where_they_enter():
    with pytest.raises(ConfigError, match=r"xs\[1\]='a tensor on the meta device' is invalid: "
                       "must hold values"):
        fs.data.from_arrays([torch.zeros(5, 4), torch.zeros(5, 4, device="meta")],
                            [torch.zeros(5)] * 2)
    from fedsparse.sparsity.dictionaries import as_dictionary

    with pytest.raises(ConfigError, match="dictionary='a tensor on the meta device'"):
        as_dictionary(torch.zeros(6, 8, device="meta"), dim=6)


@pytest.mark.parametrize("callback,takes", [
    (lambda: None, r"takes \(\)"),
    (lambda record: None, r"takes \(record\)"),
    (lambda record, state, extra: None, r"takes \(record, state, extra\)"),
])
def test_a_callback_that_cannot_be_called_with_record_and_state_is_refused(callback, takes):
    algo = fs.algorithms.fed_iter_ht(sparsity=2, step_size=0.01, local_steps=1)
    with pytest.raises(ConfigError, match=rf"callback='<lambda>' is invalid: {takes}, but is "
                       r"called as callback\(record, state\)"):
        fs.simulate(algo, LS, _gaussian(), rounds=1, callback=callback)
    kept = []
    fs.simulate(algo, LS, _gaussian(), rounds=2, callback=lambda *args, **kw: kept.append(args))
    assert [record["round"] for record, _ in kept] == [1, 2]
