"""Sparse (CSR) client data: SparseRows against the dense padded path, and memory at scale."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.algorithms.base import ClientContext
from fedsparse.data.sparse_rows import SparseRows
from fedsparse.problems.base import (
    class_scores,
    class_weighted_transpose,
    scores,
    weighted_transpose,
)

F64 = torch.float64


def client_mats(num_clients=7, d=40, density=0.15, seed=0, classes=3):
    """Per-client CSR matrices of uneven sizes (so there is padding) and integer labels."""
    rng = np.random.default_rng(seed)
    mats, ys = [], []
    for i in range(num_clients):
        n = int(rng.integers(4, 15))
        mats.append(sp.random(n, d, density=density, format="csr", random_state=seed * 100 + i,
                              data_rvs=rng.standard_normal))
        ys.append(rng.integers(0, classes, n))
    return mats, ys


def pair(num_clients=7, d=40, seed=0, classes=3, test=True, dtype=F64):
    """The same federated data set twice: CSR clients and dense clients."""
    mats, ys = client_mats(num_clients, d, seed=seed, classes=classes)
    tmats, tys = client_mats(num_clients, d, seed=seed + 1, classes=classes)
    kw = {"dtype": dtype}
    sparse = fs.data.from_arrays(mats, ys, **kw, **({"test_xs": tmats, "test_ys": tys}
                                                     if test else {}))
    dense = fs.data.from_arrays([m.toarray() for m in mats], ys, **kw,
                                **({"test_xs": [m.toarray() for m in tmats], "test_ys": tys}
                                   if test else {}))
    return sparse, dense


def test_from_arrays_keeps_csr_sparse_and_matches_dense():
    s, d = pair()
    assert isinstance(s.train.X, SparseRows) and isinstance(s.test.X, SparseRows)
    assert s.train.X.shape == d.train.X.shape and s.dim == d.dim == 40
    assert s.dtype == F64
    torch.testing.assert_close(s.train.X.to_dense(), d.train.X)
    torch.testing.assert_close(s.test.X.to_dense(), d.test.X)
    torch.testing.assert_close(s.train.y, d.train.y)
    torch.testing.assert_close(s.train.mean_weights(), d.train.mean_weights())
    torch.testing.assert_close(s.weights, d.weights)
    assert torch.equal(s.train.mask, d.train.mask)
    # non-zeros only: nnz entries, not S * n_max * d
    assert s.train.X.nnz == sum(m.nnz for m in client_mats()[0])
    xi, yi = s.train.client(3)
    torch.testing.assert_close(xi.to_dense(), d.train.client(3)[0])
    torch.testing.assert_close(yi, d.train.client(3)[1])
    sel = torch.tensor([5, 0, 2])
    torch.testing.assert_close(s.train.select(sel).X.to_dense(), d.train.select(sel).X)
    assert s.to(torch.float32).train.X.dtype == torch.float32
    assert "SparseRows" in repr(s.train.X) and "nnz=" in repr(s.train.X)


def test_from_arrays_sparse_errors():
    mats, ys = client_mats(3)
    with pytest.raises(ConfigError, match=r"train_xs\[1\].*all SciPy sparse matrices or all"):
        fs.data.from_arrays([mats[0], mats[1].toarray(), mats[2]], ys)
    with pytest.raises(ConfigError, match=r"train_xs\[1\].*dense like train_xs\[0\]"):
        fs.data.from_arrays([mats[0].toarray(), mats[1], mats[2]], ys)
    with pytest.raises(ConfigError, match=r"train_xs\[2\].shape\[1\]"):
        fs.data.from_arrays([mats[0], mats[1], sp.csr_matrix((4, 7))], [ys[0], ys[1], ys[2][:4]])
    with pytest.raises(ConfigError, match=r"train_ys\[1\].shape"):
        fs.data.from_arrays(mats, [ys[0], ys[1][:-1], ys[2]])
    with pytest.raises(ConfigError, match="at least one example"):
        fs.data.from_arrays([mats[0], sp.csr_matrix((0, 40))], [ys[0], np.zeros(0)])
    bad = mats[2].copy()
    bad.data[0] = np.nan
    with pytest.raises(ConfigError, match=r"train_xs\[2\].*finite"):
        fs.data.from_arrays([mats[0], mats[1], bad], ys)


def test_products_match_dense():
    s, d = pair()
    Xs, Xd = s.train.X, d.train.X
    S, b, dim = Xd.shape
    g = torch.Generator().manual_seed(0)
    params = torch.randn(S, dim, generator=g, dtype=F64)
    torch.testing.assert_close(scores(params, Xs), scores(params, Xd))
    torch.testing.assert_close(scores(params[0], Xs), scores(params[0], Xd))
    coef = torch.randn(S, b, generator=g, dtype=F64)
    torch.testing.assert_close(weighted_transpose(Xs, coef), weighted_transpose(Xd, coef))
    W = torch.randn(S, 4, dim, generator=g, dtype=F64)
    torch.testing.assert_close(class_scores(W, Xs), class_scores(W, Xd))
    C = torch.randn(S, b, 4, generator=g, dtype=F64)
    torch.testing.assert_close(class_weighted_transpose(Xs, C), class_weighted_transpose(Xd, C))
    index = torch.randint(0, b, (S, 5), generator=g)
    dense_rows = torch.gather(Xd, 1, index.unsqueeze(-1).expand(-1, -1, dim))
    torch.testing.assert_close(Xs.gather_rows(index).to_dense(), dense_rows)


@settings(max_examples=25, deadline=None)
@given(S=st.integers(1, 5), b=st.integers(1, 6), d=st.integers(1, 9),
       density=st.floats(0.0, 1.0), seed=st.integers(0, 2**16))
def test_products_property(S, b, d, density, seed):
    rng = np.random.default_rng(seed)
    mats = [sp.random(b, d, density=density, format="csr", random_state=seed + i)
            for i in range(S)]
    Xs = SparseRows.from_scipy(mats, dtype=F64)
    Xd = torch.as_tensor(np.stack([m.toarray() for m in mats]))
    p = torch.as_tensor(rng.normal(size=(S, d)))
    c = torch.as_tensor(rng.normal(size=(S, b)))
    torch.testing.assert_close(Xs.scores(p), torch.bmm(Xd, p[..., None])[..., 0])
    torch.testing.assert_close(Xs.weighted_transpose(c), torch.bmm(c[:, None], Xd)[:, 0])


@pytest.mark.parametrize("name", ["least_squares", "logistic", "softmax"])
def test_loss_grad_accuracy_lipschitz_match_dense(name):
    problem = {"least_squares": fs.problems.least_squares(), "logistic": fs.problems.logistic(
        l2=0.01), "softmax": fs.problems.softmax(num_classes=3, l2=0.01)}[name]
    s, d = pair(classes=2 if name == "logistic" else 3)
    P = problem.param_dim(d.dim)
    params = torch.randn(d.num_clients, P, generator=torch.Generator().manual_seed(1), dtype=F64)
    w = d.train.mean_weights()
    for x in (params, params[0]):
        torch.testing.assert_close(problem.loss(x, s.train.X, s.train.y, w),
                                   problem.loss(x, d.train.X, d.train.y, w))
        torch.testing.assert_close(problem.grad(x, s.train.X, s.train.y, w),
                                   problem.grad(x, d.train.X, d.train.y, w))
    acc_s = problem.accuracy(params, s.train.X, s.train.y, w)
    if acc_s is not None:
        torch.testing.assert_close(acc_s, problem.accuracy(params, d.train.X, d.train.y, w))
    torch.testing.assert_close(problem.lipschitz(s.train.X, w), problem.lipschitz(d.train.X, w))


def test_minibatches_match_dense_with_the_same_seed():
    s, d = pair()
    clients = torch.arange(s.num_clients)
    cs = ClientContext(fs.problems.least_squares(), s.train, clients, round=3, seed=7)
    cd = ClientContext(fs.problems.least_squares(), d.train, clients, round=3, seed=7)
    for step in range(3):
        (Xs, ys, ws), (Xd, yd, wd) = cs.batch(step, 5), cd.batch(step, 5)
        assert isinstance(Xs, SparseRows)
        torch.testing.assert_close(Xs.to_dense(), Xd)
        torch.testing.assert_close(ys, yd)
        torch.testing.assert_close(ws, wd)


@pytest.mark.parametrize("name", ["least_squares", "logistic", "softmax"])
@pytest.mark.parametrize("algo", ["fed_ht", "fed_iter_ht", "distributed_iht"])
def test_simulate_matches_dense(name, algo):
    problem = {"least_squares": fs.problems.least_squares(), "logistic": fs.problems.logistic(),
               "softmax": fs.problems.softmax(num_classes=3)}[name]
    s, d = pair(classes=2 if name == "logistic" else 3)
    kw = {"sparsity": 6, "step_size": 0.1, "batch_size": 4}
    if algo != "distributed_iht":
        kw["local_steps"] = 3
    build = getattr(fs.algorithms, algo)
    hs = fs.simulate(build(**kw), problem, s, rounds=4, seed=3, clients_per_round=5)
    hd = fs.simulate(build(**kw), problem, d, rounds=4, seed=3, clients_per_round=5)
    torch.testing.assert_close(hs.model, hd.model)
    for key in ("objective", "test_objective", "accuracy", "test_accuracy"):
        a, b = hs.column(key), hd.column(key)
        assert (a[0] is None) == (b[0] is None)
        if a[0] is not None:
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_auto_step_size_on_sparse_data():
    s, d = pair()
    algo = fs.algorithms.fed_iter_ht(sparsity=5, step_size="auto", local_steps=2)
    hs = fs.simulate(algo, fs.problems.least_squares(), s, rounds=2)
    hd = fs.simulate(fs.algorithms.fed_iter_ht(sparsity=5, step_size="auto", local_steps=2),
                     fs.problems.least_squares(), d, rounds=2)
    torch.testing.assert_close(hs.model, hd.model)


def test_float32_sparse_close_to_float64_dense():
    s, _ = pair(dtype=torch.float32)
    _, d = pair()
    algo = fs.algorithms.fed_ht(sparsity=6, step_size=0.1, local_steps=2)
    hs = fs.simulate(algo, fs.problems.least_squares(), s, rounds=3)
    hd = fs.simulate(fs.algorithms.fed_ht(sparsity=6, step_size=0.1, local_steps=2),
                     fs.problems.least_squares(), d, rounds=3)
    np.testing.assert_allclose(hs.column("objective"), hd.column("objective"), rtol=1e-4)


def test_index_errors():
    s, _ = pair()
    X = s.train.X
    with pytest.raises(ConfigError, match="index"):
        X[0, 1]
    with pytest.raises(ConfigError, match="clients"):
        X[torch.tensor([[0, 1]])]
    with pytest.raises(ConfigError, match="must index"):
        X[torch.tensor([0, 99])]
    with pytest.raises(ConfigError, match="index.shape"):
        X.gather_rows(torch.zeros(2, 3, dtype=torch.int64))


# E2006-tfidf's size: 16,087 rows, d = 150,360, ~1.6M non-zeros, over 100 clients. Run in
# a fresh interpreter so that its peak resident memory measures this run alone.
_E2006_SCRIPT = textwrap.dedent("""
    import json
    import numpy as np, scipy.sparse as sp, torch
    import fedsparse as fs
    from fedsparse._resources import peak_memory
    rng = np.random.default_rng(0)
    n, d, per = 16087, 150360, 100
    X = sp.csr_matrix((rng.random(n * per).astype(np.float32), rng.integers(0, d, n * per),
                       np.arange(n + 1) * per), shape=(n, d))
    y = rng.normal(size=n)
    data = fs.data.from_partitions(X, y, fs.data.partition_iid(n, 100, seed=0),
                                   test_fraction=0.0)
    del X
    algo = fs.algorithms.fed_iter_ht(sparsity=200, step_size=0.01, local_steps=2,
                                     batch_size=32)
    h = fs.simulate(algo, fs.problems.least_squares(), data, rounds=1)
    S, b, dim = data.train.X.shape
    print(json.dumps({"peak_bytes": peak_memory(),
                      "dense_bytes": S * b * dim * 4, "nnz": data.train.X.nnz,
                      "stored_bytes": data.train.X.nbytes(), "dim": dim,
                      "objective": [h.initial["objective"], h.records[-1]["objective"]],
                      "nnz_model": h.records[-1]["nnz"]}))
""")


def test_e2006_sized_csr_round_stays_proportional_to_nonzeros():
    out = subprocess.run([sys.executable, "-c", _E2006_SCRIPT], capture_output=True, text=True,
                         timeout=600, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["dim"] == 150360 and r["nnz"] == 16087 * 100
    assert r["dense_bytes"] > 9e9  # the padded dense tensor would need ~9.7 GB
    assert r["stored_bytes"] < 25e6  # indices + values: ~12 bytes per non-zero
    # The whole process (torch, scipy, the data, 100 client models of 150,360 floats)
    # peaks below 1.5 GB: far below the dense tensor, which could not even be allocated.
    assert r["peak_bytes"] < 1.5e9
    assert r["nnz_model"] == 200
    assert r["objective"][1] < r["objective"][0]


def test_to_takes_dtype_and_device_like_a_tensor():
    X = SparseRows.from_scipy([sp.random(3, 5, density=0.4, format="csr", random_state=1)])
    assert X.to(device="cpu", dtype=torch.float64).dtype == torch.float64
    assert X.to(torch.float64).dtype == torch.float64
    assert X.to("cpu") is X and X.to(device=torch.device("cpu")) is X
    assert torch.equal(X.to(device="cpu", dtype=torch.float64).to_dense(),
                       X.to_dense().double())
    with pytest.raises(ConfigError, match="device='cuda'.*CPU only"):
        X.to(device="cuda")
    with pytest.raises(ConfigError, match="dtype=torch.int64"):
        X.to(dtype=torch.int64)
