"""Pooled client data: PooledRows against the padded layout, layouts chosen by from_arrays,
and memory proportional to the examples for power-law client sizes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.data.pooled import PooledRows
from fedsparse.data.sparse_rows import SparseRows

F64 = torch.float64


def client_arrays(sizes, feature_shape=(5,), seed=0, classes=3):
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((n, *feature_shape)) for n in sizes]
    ys = [rng.integers(0, classes, n).astype(float) for n in sizes]
    return xs, ys


SIZES = [3, 9, 1, 6, 2]


def pair(sizes=SIZES, feature_shape=(5,), test=True, dtype=F64):
    """The same data set pooled and padded."""
    xs, ys = client_arrays(sizes, feature_shape)
    txs, tys = client_arrays([max(1, n // 2) for n in sizes], feature_shape, seed=1)
    kw = {"dtype": dtype, **({"test_xs": txs, "test_ys": tys} if test else {})}
    pooled = fs.data.from_arrays(xs, ys, layout="pooled", **kw)
    padded = fs.data.from_arrays(xs, ys, layout="padded", **kw)
    return pooled, padded, xs


def test_pooled_rows_stand_in_for_the_padded_tensor():
    pooled, padded, xs = pair(feature_shape=(2, 3))
    X, D = pooled.train.X, padded.train.X
    assert isinstance(X, PooledRows) and isinstance(D, torch.Tensor)
    assert X.shape == D.shape == (5, 9, 2, 3) and X.ndim == 4 and X.dtype == F64
    assert X.pool.shape == (sum(SIZES), 2, 3)  # every example once, no padding
    assert torch.equal(X.dense(), D)
    for i, x in enumerate(xs):
        assert torch.equal(X.client(i), torch.as_tensor(x))
        assert torch.equal(X[i, :1], torch.as_tensor(x)[:1])
        Xi, yi = pooled.train.client(i)
        assert torch.equal(Xi, torch.as_tensor(x)) and torch.equal(yi, padded.train.y[i, :len(x)])
    assert np.array_equal(np.asarray(X), D.numpy())
    assert torch.equal(pooled.train.mask, padded.train.mask)
    assert torch.equal(pooled.train.mean_weights(), padded.train.mean_weights())
    assert torch.equal(pooled.labels(), padded.labels())
    assert X[1, :5].shape == (5, 2, 3)
    with pytest.raises(ConfigError, match="index"):
        X[2, :5]  # client 2 has a single example


def test_gather_rows_equals_indexing_the_padded_tensor():
    pooled, padded, _ = pair(feature_shape=(2, 3))
    g = torch.Generator().manual_seed(0)
    # Positions anywhere in 0..n_max-1, including padding past each client's count.
    index = torch.randint(0, 9, (5, 7), generator=g)
    expected = torch.stack([padded.train.X[s, index[s]] for s in range(5)])
    got = pooled.train.X.gather_rows(index)
    assert got.shape == (5, 7, 2, 3)
    assert torch.equal(got, expected)  # padding positions read as zeros, as in the padded tensor
    assert (got[2, index[2] >= 1] == 0).all() and (index[2] >= 1).any()
    # ClientSplit.gather: the same batch from every layout.
    assert torch.equal(pooled.train.gather(index), expected)
    assert torch.equal(padded.train.gather(index), expected)


def test_gather_on_sparse_data_stays_sparse_and_matches_dense():
    rng = np.random.default_rng(0)
    mats = [sp.random(n, 6, density=0.4, format="csr", random_state=i)
            for i, n in enumerate(SIZES)]
    ys = [rng.integers(0, 2, n) for n in SIZES]
    s = fs.data.from_arrays(mats, ys, dtype=F64)
    d = fs.data.from_arrays([m.toarray() for m in mats], ys, dtype=F64, layout="padded")
    index = torch.randint(0, 9, (5, 4), generator=torch.Generator().manual_seed(1))
    got = s.train.gather(index)
    assert isinstance(got, SparseRows)
    assert torch.equal(got.to_dense(), d.train.gather(index))
    assert torch.equal(s.train.dense_X(), d.train.X)
    chunks = [c for _, c, _ in s.train.iter_chunks(4)]
    assert torch.equal(torch.cat(chunks), d.train.X[d.train.mask])


def test_select_shares_the_pool_and_matches_the_padded_selection():
    pooled, padded, _ = pair()
    clients = torch.tensor([3, 0, 4])
    sub = pooled.train.select(clients)
    assert sub.X.pool is pooled.train.X.pool  # no copy of the examples
    assert sub.X.pool.untyped_storage().data_ptr() == \
        pooled.train.X.pool.untyped_storage().data_ptr()
    ref = padded.train.select(clients)
    assert sub.X.shape == ref.X.shape == (3, 9, 5)  # n_max kept, aligned with the labels
    assert torch.equal(sub.X.dense(), ref.X)
    assert torch.equal(sub.mask, ref.mask) and torch.equal(sub.y, ref.y)
    index = torch.randint(0, 9, (3, 6), generator=torch.Generator().manual_seed(2))
    assert torch.equal(sub.gather(index), ref.gather(index))
    mask = torch.tensor([True, False, True, False, False])
    assert torch.equal(pooled.train.X.select(mask).dense(), padded.train.X[mask])
    assert torch.equal(pooled.train.X[1:3].dense(), padded.train.X[1:3])
    with pytest.raises(ConfigError, match="clients"):
        pooled.train.X.select(torch.tensor([0, 5]))


@pytest.mark.parametrize("clients", [None, [4, 1, 2], [2, 3]])
@pytest.mark.parametrize("max_examples", [1, 4, 1000])
def test_iter_chunks_walks_the_real_examples_in_client_order(clients, max_examples):
    pooled, padded, _ = pair(feature_shape=(1, 2, 2))
    clients = None if clients is None else torch.tensor(clients)
    P, D = pooled.train.select(clients), padded.train.select(clients)
    ids, Xs = zip(*P.X.iter_chunks(max_examples), strict=True)
    assert all(x.shape[0] <= max_examples for x in Xs)
    mask = D.mask
    assert torch.equal(torch.cat(Xs), D.X[mask])
    owner = torch.arange(D.num_clients)[:, None].expand_as(mask)[mask]
    assert torch.equal(torch.cat(ids), owner)
    for split in (P, D):  # ClientSplit.iter_chunks, any layout, with the labels
        got = list(split.iter_chunks(max_examples))
        assert torch.equal(torch.cat([c[1] for c in got]), D.X[mask])
        assert torch.equal(torch.cat([c[2] for c in got]), D.y[mask])
        assert torch.equal(torch.cat([c[0] for c in got]), owner)


def test_a_contiguous_pool_is_read_as_views():
    pooled, _, _ = pair()
    X = pooled.train.X
    _, first = next(X.iter_chunks(4))
    assert first.data_ptr() == X.pool.data_ptr()
    with pytest.raises(ConfigError, match="max_examples=0"):
        next(X.iter_chunks(0))


def test_from_arrays_pools_power_law_images_with_memory_of_the_examples():
    sizes = [400] + [5] * 59  # power-law-like: one large client, many small ones
    xs, ys = client_arrays(sizes, (1, 8, 8))
    data = fs.data.from_arrays(xs, ys, dtype=torch.float32)
    assert data.layout == "pooled" and isinstance(data.train.X, PooledRows)
    assert data.feature_shape == (1, 8, 8) and data.dim == 64
    assert data.train.X.shape == (60, 400, 1, 8, 8)
    n_total = sum(sizes)
    row = 64 * 4
    assert n_total * row <= data.train.X.numel_bytes() < n_total * row + 60 * 16 + 64
    assert data.train.X.numel_bytes() < 0.03 * 60 * 400 * row  # padded: 36x more
    assert "layout=pooled" in repr(data) and "feature_shape=(1, 8, 8)" in repr(data)
    padded = data.padded()
    assert padded.layout == "padded" and padded.train.X.shape == (60, 400, 1, 8, 8)
    assert torch.equal(padded.train.X, data.train.X.dense())
    flat = data.padded(flatten=True)
    assert flat.train.X.shape == (60, 400, 64) and flat.dim == 64
    assert torch.equal(flat.train.X, padded.train.X.reshape(60, 400, 64))
    assert padded.padded() is padded


def test_auto_layout_rule():
    # Images are pooled whatever the sizes.
    xs, ys = client_arrays([4, 4], (3, 2, 2))
    assert fs.data.from_arrays(xs, ys).layout == "pooled"
    # Vectors with equal sizes keep today's padded layout (and its repr).
    xs, ys = client_arrays([4, 4, 4])
    data = fs.data.from_arrays(xs, ys)
    assert data.layout == "padded" and isinstance(data.train.X, torch.Tensor)
    assert "layout" not in repr(data) and data.feature_shape == (5,) and data.dim == 5
    # Padding of at most twice the examples stays padded; more than that pools.
    xs, ys = client_arrays([6, 2, 1])  # 3 x 6 = 18 = 2 x 9
    assert fs.data.from_arrays(xs, ys).layout == "padded"
    xs, ys = client_arrays([7, 1, 1])  # 3 x 7 = 21 > 18
    assert fs.data.from_arrays(xs, ys).layout == "pooled"
    forced = fs.data.from_arrays(xs, ys, layout="padded")
    assert forced.layout == "padded" and forced.train.X.shape == (3, 7, 5)
    assert fs.data.from_arrays(*client_arrays([4, 4]), layout="pooled").layout == "pooled"


def test_a_linear_problem_reads_pooled_data_after_padded():
    pooled, padded, _ = pair()
    ls = fs.problems.least_squares()
    x = torch.linspace(-1, 1, 5, dtype=F64)
    w = padded.train.mean_weights()
    ref = ls.loss(x, padded.train.X, padded.train.y, w)
    got = pooled.padded()
    assert torch.equal(ls.loss(x, got.train.X, got.train.y, w), ref)
    with pytest.raises(ConfigError, match="padded"):
        ls.loss(x, pooled.train.X, pooled.train.y, w)


def test_dtype_and_device_moves():
    pooled, _, _ = pair()
    f32 = pooled.to(torch.float32)
    assert f32.dtype == torch.float32 and f32.train.X.pool.dtype == torch.float32
    assert f32.test.X.dtype == torch.float32 and f32.train.y.dtype == torch.float32
    assert torch.equal(f32.train.X.starts, pooled.train.X.starts)
    cpu = pooled.to_device("cpu")
    assert cpu.device == torch.device("cpu") and torch.equal(cpu.train.X.dense(),
                                                             pooled.train.X.dense())
    mats = [sp.random(3, 4, density=0.5, format="csr", random_state=0)] * 2
    sparse = fs.data.from_arrays(mats, [np.zeros(3), np.ones(3)])
    assert sparse.to_device("cpu").train.X is sparse.train.X
    with pytest.raises(ConfigError, match="device='meta'.*CPU only"):
        sparse.to_device("meta")
    meta = pooled.to_device("meta")  # a device without data: every tensor moves
    assert meta.train.X.pool.device.type == "meta" and meta.weights.device.type == "meta"
    assert meta.train.counts.device.type == "meta"


def test_from_arrays_errors():
    xs, ys = client_arrays([3, 2, 4], (1, 4, 4))
    bad = list(xs)
    bad[2] = np.zeros((4, 1, 4, 5))
    with pytest.raises(ConfigError, match=r"train_xs\[2\]\.shape\[1:\]=\(1, 4, 5\).*"
                                          r"feature shape \(1, 4, 4\) of train_xs\[0\]"):
        fs.data.from_arrays(bad, ys)
    bad[2] = np.zeros((4, 16))
    with pytest.raises(ConfigError, match=r"train_xs\[2\]\.shape\[1:\]=\(16,\)"):
        fs.data.from_arrays(bad, ys)
    with pytest.raises(ConfigError, match=r"test_xs\[0\]\.shape\[1:\]"):
        fs.data.from_arrays(xs, ys, test_xs=[np.zeros((1, 1, 4, 3))] * 3,
                            test_ys=[np.zeros(1)] * 3)
    with pytest.raises(ConfigError, match=r"train_xs\[0\]\.shape=\(3,\).*at least 2 axes"):
        fs.data.from_arrays([np.zeros(3)], [np.zeros(3)])
    for dtype in (torch.int64, torch.bool, "float32", np.float32):
        with pytest.raises(ConfigError, match=r"dtype=.*must be torch.float32 or torch.float64"):
            fs.data.from_arrays(xs, ys, dtype=dtype)
    with pytest.raises(ConfigError, match="layout='flat'"):
        fs.data.from_arrays(xs, ys, layout="flat")
    mats = [sp.random(3, 4, density=0.5, format="csr", random_state=0)] * 2
    with pytest.raises(ConfigError, match="layout='pooled'.*SparseRows"):
        fs.data.from_arrays(mats, [np.zeros(3)] * 2, layout="pooled")
    with pytest.raises(ConfigError, match="NaN/inf"):
        nan = [x.copy() for x in xs]
        nan[1][0, 0, 0, 0] = np.nan
        fs.data.from_arrays(nan, ys)


def test_pooled_rows_constructor_errors():
    pool = torch.zeros(5, 2)
    with pytest.raises(ConfigError, match="inside the pool"):
        PooledRows(pool, torch.tensor([0, 3]), torch.tensor([3, 3]))
    with pytest.raises(ConfigError, match="n_max=2"):
        PooledRows(pool, torch.tensor([0, 3]), torch.tensor([3, 2]), n_max=2)
    with pytest.raises(ConfigError, match="pool"):
        PooledRows(torch.zeros(5), torch.tensor([0]), torch.tensor([5]))
    X = PooledRows(pool, torch.tensor([0, 3]), torch.tensor([3, 2]))
    with pytest.raises(ConfigError, match=r"index.shape=\(3, 2\)"):
        X.gather_rows(torch.zeros(3, 2, dtype=torch.int64))
    assert "examples=5" in repr(X)


_MEMORY_SCRIPT = textwrap.dedent("""
    import json
    import numpy as np, torch
    import fedsparse as fs
    from fedsparse._resources import peak_memory as peak

    # 200 clients, power-law sizes: one of 4,000 images of 1 x 32 x 32, the rest 2..40.
    rng = np.random.default_rng(0)
    sizes = [4000] + rng.integers(2, 40, 199).tolist()
    xs = [np.ones((n, 1, 32, 32), dtype=np.float32) for n in sizes]
    ys = [np.zeros(n, dtype=np.float32) for n in sizes]
    base = peak()
    data = fs.data.from_arrays(xs, ys)
    X = data.train.X
    index = torch.randint(0, X.shape[1], (X.shape[0], 20))
    batch = data.train.gather(index)
    seen = sum(c.shape[0] for _, c, _ in data.train.iter_chunks(512))
    print(json.dumps({"layout": data.layout, "stored": X.numel_bytes(),
                      "padded": X.shape.numel() * 4, "grew": peak() - base,
                      "seen": seen, "n_total": sum(sizes), "batch": list(batch.shape)}))
""")


def test_power_law_images_stay_proportional_to_the_examples():
    out = subprocess.run([sys.executable, "-c", _MEMORY_SCRIPT], capture_output=True, text=True,
                         timeout=600, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["layout"] == "pooled" and r["seen"] == r["n_total"]
    assert r["batch"] == [200, 20, 1, 32, 32]
    assert r["padded"] > 3e9  # 200 x 4,000 padded images would need 3.3 GB
    assert r["stored"] < 1.1 * r["n_total"] * 4096 + 1e4
    # The inputs are ~32 MB; building, one batch and one pass of evaluation chunks stay
    # within a few copies of them, two orders of magnitude below the padded tensor.
    assert r["grew"] < 200e6
