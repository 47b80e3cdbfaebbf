"""Seeded synthetic federated data sets, exactly as docs/decisions.md, section 2 pins them.

Each generator estimates the memory of its features before it draws them and refuses,
naming the sizes and the estimate, a data set that cannot fit
(:func:`fedsparse._resources.check_memory`).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from .._resources import check_memory
from .._validation import (
    check_bool,
    check_choice,
    check_dtype,
    check_float,
    check_int,
    check_seed,
    fail,
)
from .federated import FederatedDataset, from_arrays
from .lazy import ClientSource, LazyFederatedDataset, auto_pooled

# Streams of the per-client (keyed) draws: client i's examples come from
# (seed, _CLIENT, i), the sizes of all clients from (seed, _SIZES), what the clients
# share (a ground truth, FedProx's IID model) from (seed, _SHARED).
_CLIENT, _SIZES, _SHARED = 1, 2, 3


def _check_features_fit(examples: int, dim: int, dtype: torch.dtype, sizes: dict) -> None:
    """Refuse a data set whose features cannot fit: every example is drawn in float64 and
    stacked in ``dtype`` while the draws are still alive."""
    per_value = 8 + torch.finfo(dtype).bits // 8
    check_memory({"the features": examples * dim * per_value}, sizes,
                 hint="Fewer clients, examples or features make it fit")


def _test_fraction(value) -> float:
    """``test_fraction`` in [0, 1): the share of each client's examples held out."""
    value = check_float("test_fraction", value, nonnegative=True)
    if value >= 1:
        raise fail("test_fraction", value, "must be in [0, 1): every client keeps at least "
                   "one training example")
    return value


def _split(rng: np.random.Generator, x: np.ndarray, y: np.ndarray, test_fraction: float):
    """Shuffle one client's examples and cut off a test part.

    ``round(test_fraction * n)`` test examples, clipped to ``1 .. n-1`` as in
    :func:`~fedsparse.data.partition.from_partitions`, so that every client keeps at
    least one training and one test example.
    """
    if test_fraction <= 0:
        return x, y, None, None
    n = x.shape[0]
    if n < 2:
        raise fail("test_fraction", test_fraction, f"needs at least 2 examples per client (one "
                   f"train, one test), but a client has {n}; use test_fraction=0 or more "
                   "examples per client")
    order = rng.permutation(n)
    n_test = min(max(int(round(test_fraction * n)), 1), n - 1)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def _seeding(per_client_seed, lazy) -> tuple[bool, bool]:
    """``(keyed, lazy)``: whether clients are drawn from (seed, i), and lazily."""
    lazy = check_bool("lazy", lazy)
    keyed = check_bool("per_client_seed", per_client_seed, allow_none=True)
    if lazy and keyed is False:
        raise fail("per_client_seed", False, "must be True or None with lazy=True: a lazy "
                   "data set draws client i from (seed, i) alone")
    return lazy or bool(keyed), lazy


def _client_rng(seed: int, i: int) -> np.random.Generator:
    return np.random.default_rng([seed, _CLIENT, i])


def _keyed_client(client, seed: int, i: int):
    return client(_client_rng(seed, i))


def _keyed_sized_client(client, seed: int, sizes: np.ndarray, i: int):
    return client(_client_rng(seed, i), sizes[i])


def _keyed_numbered_client(client, seed: int, i: int):
    return client(_client_rng(seed, i), i + 1)  # the generator counts clients from 1


def _keyed(read, sizes: np.ndarray, test_fraction: float, feature_shape: tuple[int, ...],
           dtype: torch.dtype, name: str, truth: np.ndarray | None,
           lazy: bool) -> FederatedDataset:
    """The data set of clients ``read(i)`` (each drawn from (seed, i)): lazy, or drawn
    now; the counts follow from the sizes as :func:`_split` cuts them."""
    if not lazy:
        return _collect([read(i) for i in range(sizes.shape[0])], dtype=dtype,
                        ground_truth=truth, name=name)
    sizes = torch.as_tensor(sizes, dtype=torch.int64)
    test = None
    if test_fraction > 0:
        test = torch.clamp(torch.round(test_fraction * sizes.to(torch.float64)), min=1)
        test = torch.minimum(test.to(torch.int64), sizes - 1)
    train = sizes if test is None else sizes - test
    source = ClientSource(read, (train, test), feature_shape, dtype,
                          auto_pooled(feature_shape, train, test), describe=name)
    gt = None if truth is None else torch.as_tensor(np.asarray(truth)).to(dtype).reshape(-1)
    return LazyFederatedDataset.from_source(source, dtype=dtype, name=name, ground_truth=gt)


def _collect(parts, **kwargs) -> FederatedDataset:
    xs, ys, txs, tys = zip(*parts, strict=True)
    if txs[0] is None:
        return from_arrays(list(xs), list(ys), **kwargs)
    return from_arrays(list(xs), list(ys), test_xs=list(txs), test_ys=list(tys), **kwargs)


def fedht_simulation(task: str = "regression", alpha: float = 0.5, beta: float = 0.5, *,
                     num_clients: int = 100, samples_per_client: int = 100, dim: int = 1000,
                     support_size: int = 100, mean: float = 0.1, positive_fraction: float = 0.1,
                     test_fraction: float = 0.0, seed: int = 0,
                     dtype: torch.dtype = torch.float32, per_client_seed: bool | None = None,
                     lazy: bool = False) -> FederatedDataset:
    """Tong et al. 2022 section 5.1, Simulation I (regression) and II (classification).

    For client i: ``u_i ~ N(mean, alpha)``, ``B_i ~ N(0, beta)`` (alpha, beta standard
    deviations); the local model ``x_i`` has its first ``support_size`` entries
    ``~ N(u_i, 1)`` and zeros elsewhere; ``v_i[j] ~ N(B_i, 1)``; features
    ``z_ij ~ N(v_i, Sigma)`` with ``Sigma_jj = j^-1.2``; noise ``b_ij ~ N(u_i, 1)``;
    ``y_ij = z_ij . x_i + b_ij``. For classification the label is 1 for the
    ``positive_fraction`` of the client's examples with the largest
    ``sigmoid(z_ij . x_i + b_ij)`` and 0 otherwise (docs/decisions.md: the paper's "top 100 of
    j in [1000]" with 100 examples per client becomes the top 10 %).

    The local models differ, so there is no common ground truth.

    ``per_client_seed=True`` draws client i from its own stream keyed by ``(seed, i)``
    instead of every client in turn from one stream (the default, whose data sets are
    pinned): a different data set of the same law. ``lazy=True`` returns a
    :class:`~fedsparse.data.lazy.LazyFederatedDataset` of those same clients, each drawn
    only when it is used, so that 10^6 clients cost their counts until sampled; it gives
    the same :func:`fedsparse.simulate` history as ``per_client_seed=True``.
    """
    task = check_choice("task", task, ("regression", "classification"))
    alpha = check_float("alpha", alpha, nonnegative=True)
    beta = check_float("beta", beta, nonnegative=True)
    num_clients = check_int("num_clients", num_clients, minimum=1)
    n = check_int("samples_per_client", samples_per_client, minimum=1)
    dim = check_int("dim", dim, minimum=1)
    support_size = check_int("support_size", support_size, minimum=1, maximum=dim)
    check_float("positive_fraction", positive_fraction, positive=True, maximum=1.0)
    check_float("mean", mean)
    test_fraction = _test_fraction(test_fraction)
    seed = check_seed("seed", seed)
    keyed, lazy = _seeding(per_client_seed, lazy)
    check_dtype("dtype", dtype)
    if not lazy:
        _check_features_fit(num_clients * n, dim, dtype,
                            {"num_clients": num_clients, "samples_per_client": n, "dim": dim})
    name = f"fedht_simulation({task}, alpha={alpha}, beta={beta})"
    client = partial(_fedht_client, task=task, alpha=alpha, beta=beta, n=n, dim=dim,
                     support_size=support_size, mean=mean,
                     positive_fraction=positive_fraction, test_fraction=test_fraction,
                     sigma_sqrt=np.arange(1, dim + 1, dtype=np.float64) ** -0.6)
    if keyed:
        if test_fraction > 0 and n < 2:
            _split(None, np.zeros((n, 1)), np.zeros(n), test_fraction)  # its clear error
        sizes = np.full(num_clients, n, dtype=np.int64)
        return _keyed(partial(_keyed_client, client, seed), sizes, test_fraction, (dim,),
                      dtype, name, None, lazy)
    rng = np.random.default_rng(seed)
    parts = [client(rng) for _ in range(num_clients)]
    return _collect(parts, dtype=dtype, name=name)


def _fedht_client(rng, *, task, alpha, beta, n, dim, support_size, mean, positive_fraction,
                  test_fraction, sigma_sqrt):
    """One client of :func:`fedht_simulation`, drawn from ``rng``."""
    u = rng.normal(mean, alpha)
    b_mean = rng.normal(0.0, beta)
    x_local = np.zeros(dim)
    x_local[:support_size] = rng.normal(u, 1.0, support_size)
    v = rng.normal(b_mean, 1.0, dim)
    z = v + rng.standard_normal((n, dim)) * sigma_sqrt
    noise = rng.normal(u, 1.0, n)
    y = z @ x_local + noise
    if task == "classification":
        # sigmoid is monotone, so the top scores are the top linear responses.
        n_pos = max(1, int(round(positive_fraction * n)))
        labels = np.zeros(n)
        labels[np.argsort(-y, kind="stable")[:n_pos]] = 1.0
        y = labels
    return _split(rng, z, y, test_fraction)


def fedprox_synthetic(alpha: float = 0.5, beta: float = 0.5, *, num_clients: int = 30,
                      dim: int = 60, num_classes: int = 10, size_scale: int = 1,
                      test_fraction: float = 0.1, iid: bool = False, seed: int = 0,
                      dtype: torch.dtype = torch.float32, per_client_seed: bool | None = None,
                      lazy: bool = False) -> FederatedDataset:
    """FedProx's Synthetic(alpha, beta) (Li et al. 2020), as docs/decisions.md, section 2 pins it.

    ``u_k ~ N(0, alpha)`` is the mean of the entries of both ``W_k`` (d x C) and ``b_k``;
    ``B_k ~ N(0, beta)``; ``v_k[j] ~ N(B_k, 1)``; ``x ~ N(v_k, Sigma)``,
    ``Sigma_jj = j^-1.2``; ``y = argmax(x W_k + b_k)``. Client sizes
    ``n_k = int(lognormal(4, 2)) + 50`` times ``size_scale`` (pFedMe uses 5).
    alpha and beta are standard deviations. ``iid=True`` gives every client the same
    W, b and v (FedProx's Synthetic-IID).

    ``per_client_seed=True`` draws client i from its own stream keyed by ``(seed, i)``
    instead of every client in turn from one stream (the default, whose data sets are
    pinned): a different data set of the same law. ``lazy=True`` returns a
    :class:`~fedsparse.data.lazy.LazyFederatedDataset` of those same clients, each drawn
    only when it is used, so that 10^6 clients cost their counts until sampled; it gives
    the same :func:`fedsparse.simulate` history as ``per_client_seed=True``.
    """
    num_clients = check_int("num_clients", num_clients, minimum=1)
    dim = check_int("dim", dim, minimum=1)
    num_classes = check_int("num_classes", num_classes, minimum=2)
    size_scale = check_int("size_scale", size_scale, minimum=1)
    alpha = check_float("alpha", alpha, nonnegative=True)
    beta = check_float("beta", beta, nonnegative=True)
    test_fraction = _test_fraction(test_fraction)
    iid = check_bool("iid", iid)
    seed = check_seed("seed", seed)
    keyed, lazy = _seeding(per_client_seed, lazy)
    check_dtype("dtype", dtype)
    shape = {"num_clients": num_clients, "size_scale": size_scale, "dim": dim}
    # every client has at least 50 * size_scale examples, drawn in float64 and stacked in
    # dtype; one client's W is a (d, C) float64 draw
    per_value = 8 + torch.finfo(dtype).bits // 8
    features = 0 if lazy else num_clients * 50 * size_scale * dim * per_value
    check_memory({"the features": features, "the class weights": dim * num_classes * 8},
                 {**shape, "num_classes": num_classes})
    name = f"fedprox_synthetic({alpha}, {beta})"
    # Keyed: the sizes and the shared (IID) model come from their own streams, so that
    # the sizes of all N clients cost one vectorised draw and client i needs only i.
    rng = np.random.default_rng([seed, _SIZES] if keyed else seed)
    drawn = rng.lognormal(4, 2, num_clients)
    if drawn.max() * size_scale > 2**62:  # a size beyond what int64 can count
        _check_features_fit(2**62, dim, dtype, shape)
    sizes = (drawn.astype(np.int64) + 50) * size_scale
    if not lazy:
        _check_features_fit(int(sizes.sum(dtype=object)), dim, dtype, shape)
    sigma_sqrt = np.arange(1, dim + 1, dtype=np.float64) ** -0.6
    shared = None
    if iid or not keyed:  # the stream draws it even when unused: the pinned data sets
        srng = np.random.default_rng([seed, _SHARED]) if keyed else rng
        shared = (srng.standard_normal((dim, num_classes)),
                  srng.standard_normal(num_classes), np.zeros(dim))
    client = partial(_fedprox_client, iid=iid, shared=shared, alpha=alpha, beta=beta,
                     dim=dim, num_classes=num_classes, test_fraction=test_fraction,
                     sigma_sqrt=sigma_sqrt)
    if keyed:
        return _keyed(partial(_keyed_sized_client, client, seed, sizes), sizes,
                      test_fraction, (dim,), dtype, name, None, lazy)
    parts = [client(rng, n) for n in sizes]
    return _collect(parts, dtype=dtype, name=name)


def _fedprox_client(rng, n, *, iid, shared, alpha, beta, dim, num_classes, test_fraction,
                    sigma_sqrt):
    """One client of :func:`fedprox_synthetic` with ``n`` examples, drawn from ``rng``."""
    if iid:
        w, b, v = shared
    else:
        u = rng.normal(0.0, alpha)
        w = rng.normal(u, 1.0, (dim, num_classes))
        b = rng.normal(u, 1.0, num_classes)
        v = rng.normal(rng.normal(0.0, beta), 1.0, dim)
    x = v + rng.standard_normal((int(n), dim)) * sigma_sqrt
    y = np.argmax(x @ w + b, axis=1).astype(np.float64)
    return _split(rng, x, y, test_fraction)


def shifted_gaussian(num_clients: int = 50, samples_per_client: int = 100, dim: int = 1000,
                     sparsity: int = 10, alpha: float = 1.0, exponent: float = 1.1,
                     noise_std: float = 0.0, *, test_fraction: float = 0.0, seed: int = 0,
                     dtype: torch.dtype = torch.float32, per_client_seed: bool | None = None,
                     lazy: bool = False) -> FederatedDataset:
    """Jeong et al. 2024 shifted-mean Gaussian sparse regression.

    Client i (counted from 1) has ``A_i`` (n_i x d) with i.i.d. entries
    ``N(mu_i, 1 / i^exponent)`` (a variance), ``mu_i ~ N(0, alpha)`` (alpha a variance:
    std ``sqrt(alpha)``). A common ground truth ``x#`` is ``sparsity``-sparse on a random
    support with its non-zeros uniform on the unit sphere of R^s; ``y_i = A_i x# + e_i``,
    ``e_i ~ N(0, noise_std^2)``. The data set carries ``x#`` as ``ground_truth``.

    ``per_client_seed=True`` draws client i from its own stream keyed by ``(seed, i)``
    instead of every client in turn from one stream (the default, whose data sets are
    pinned): a different data set of the same law. ``lazy=True`` returns a
    :class:`~fedsparse.data.lazy.LazyFederatedDataset` of those same clients, each drawn
    only when it is used, so that 10^6 clients cost their counts until sampled; it gives
    the same :func:`fedsparse.simulate` history as ``per_client_seed=True``.
    """
    num_clients = check_int("num_clients", num_clients, minimum=1)
    n = check_int("samples_per_client", samples_per_client, minimum=1)
    dim = check_int("dim", dim, minimum=1)
    sparsity = check_int("sparsity", sparsity, minimum=1, maximum=dim)
    alpha = check_float("alpha", alpha, nonnegative=True)
    exponent = check_float("exponent", exponent)
    noise_std = check_float("noise_std", noise_std, nonnegative=True)
    test_fraction = _test_fraction(test_fraction)
    seed = check_seed("seed", seed)
    keyed, lazy = _seeding(per_client_seed, lazy)
    check_dtype("dtype", dtype)
    if not lazy:
        _check_features_fit(num_clients * n, dim, dtype,
                            {"num_clients": num_clients, "samples_per_client": n, "dim": dim})
    rng = np.random.default_rng([seed, _SHARED] if keyed else seed)
    truth = np.zeros(dim)
    values = rng.standard_normal(sparsity)
    truth[rng.choice(dim, sparsity, replace=False)] = values / np.linalg.norm(values)
    name = f"shifted_gaussian(alpha={alpha}, exponent={exponent})"
    client = partial(_shifted_client, truth=truth, n=n, dim=dim, alpha=alpha,
                     exponent=exponent, noise_std=noise_std, test_fraction=test_fraction)
    if keyed:
        if test_fraction > 0 and n < 2:
            _split(None, np.zeros((n, 1)), np.zeros(n), test_fraction)  # its clear error
        sizes = np.full(num_clients, n, dtype=np.int64)
        return _keyed(partial(_keyed_numbered_client, client, seed), sizes, test_fraction,
                      (dim,), dtype, name, truth, lazy)
    parts = [client(rng, i) for i in range(1, num_clients + 1)]
    return _collect(parts, dtype=dtype, ground_truth=truth, name=name)


def _shifted_client(rng, i, *, truth, n, dim, alpha, exponent, noise_std, test_fraction):
    """Client ``i`` (counted from 1) of :func:`shifted_gaussian`, drawn from ``rng``."""
    mu = rng.normal(0.0, np.sqrt(alpha))
    a = mu + rng.standard_normal((n, dim)) * i ** (-exponent / 2)
    y = a @ truth + noise_std * rng.standard_normal(n)
    return _split(rng, a, y, test_fraction)
