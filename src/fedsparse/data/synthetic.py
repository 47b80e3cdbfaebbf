"""Seeded synthetic federated data sets, exactly as docs/decisions.md, section 2 pins them.

Each generator estimates the memory of its features before it draws them and refuses,
naming the sizes and the estimate, a data set that cannot fit
(:func:`fedsparse._resources.check_memory`).
"""

from __future__ import annotations

import numpy as np
import torch

from .._resources import check_memory
from .._validation import check_bool, check_choice, check_float, check_int, check_seed, fail
from .federated import FederatedDataset, from_arrays


def _check_dtype(dtype) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise fail("dtype", dtype, "must be a floating torch dtype, e.g. torch.float32 or "
                   "torch.float64")
    return dtype


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


def _collect(parts, **kwargs) -> FederatedDataset:
    xs, ys, txs, tys = zip(*parts, strict=True)
    if txs[0] is None:
        return from_arrays(list(xs), list(ys), **kwargs)
    return from_arrays(list(xs), list(ys), test_xs=list(txs), test_ys=list(tys), **kwargs)


def fedht_simulation(task: str = "regression", alpha: float = 0.5, beta: float = 0.5, *,
                     num_clients: int = 100, samples_per_client: int = 100, dim: int = 1000,
                     support_size: int = 100, mean: float = 0.1, positive_fraction: float = 0.1,
                     test_fraction: float = 0.0, seed: int = 0,
                     dtype: torch.dtype = torch.float32) -> FederatedDataset:
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
    _check_features_fit(num_clients * n, dim, _check_dtype(dtype),
                        {"num_clients": num_clients, "samples_per_client": n, "dim": dim})
    rng = np.random.default_rng(seed)
    sigma_sqrt = np.arange(1, dim + 1, dtype=np.float64) ** -0.6  # sqrt(j^-1.2)
    parts = []
    for _ in range(num_clients):
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
        parts.append(_split(rng, z, y, test_fraction))
    name = f"fedht_simulation({task}, alpha={alpha}, beta={beta})"
    return _collect(parts, dtype=dtype, name=name)


def fedprox_synthetic(alpha: float = 0.5, beta: float = 0.5, *, num_clients: int = 30,
                      dim: int = 60, num_classes: int = 10, size_scale: int = 1,
                      test_fraction: float = 0.1, iid: bool = False, seed: int = 0,
                      dtype: torch.dtype = torch.float32) -> FederatedDataset:
    """FedProx's Synthetic(alpha, beta) (Li et al. 2020), as docs/decisions.md, section 2 pins it.

    ``u_k ~ N(0, alpha)`` is the mean of the entries of both ``W_k`` (d x C) and ``b_k``;
    ``B_k ~ N(0, beta)``; ``v_k[j] ~ N(B_k, 1)``; ``x ~ N(v_k, Sigma)``,
    ``Sigma_jj = j^-1.2``; ``y = argmax(x W_k + b_k)``. Client sizes
    ``n_k = int(lognormal(4, 2)) + 50`` times ``size_scale`` (pFedMe uses 5).
    alpha and beta are standard deviations. ``iid=True`` gives every client the same
    W, b and v (FedProx's Synthetic-IID).
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
    _check_dtype(dtype)
    shape = {"num_clients": num_clients, "size_scale": size_scale, "dim": dim}
    # every client has at least 50 * size_scale examples, drawn in float64 and stacked in
    # dtype; one client's W is a (d, C) float64 draw
    per_value = 8 + torch.finfo(dtype).bits // 8
    check_memory({"the features": num_clients * 50 * size_scale * dim * per_value,
                  "the class weights": dim * num_classes * 8},
                 {**shape, "num_classes": num_classes})
    rng = np.random.default_rng(seed)
    drawn = rng.lognormal(4, 2, num_clients)
    if drawn.max() * size_scale > 2**62:  # a size beyond what int64 can count
        _check_features_fit(2**62, dim, dtype, shape)
    sizes = (drawn.astype(np.int64) + 50) * size_scale
    _check_features_fit(int(sizes.sum(dtype=object)), dim, dtype, shape)
    sigma_sqrt = np.arange(1, dim + 1, dtype=np.float64) ** -0.6
    shared = (rng.standard_normal((dim, num_classes)), rng.standard_normal(num_classes),
              np.zeros(dim))
    parts = []
    for n in sizes:
        if iid:
            w, b, v = shared
        else:
            u = rng.normal(0.0, alpha)
            w = rng.normal(u, 1.0, (dim, num_classes))
            b = rng.normal(u, 1.0, num_classes)
            v = rng.normal(rng.normal(0.0, beta), 1.0, dim)
        x = v + rng.standard_normal((int(n), dim)) * sigma_sqrt
        y = np.argmax(x @ w + b, axis=1).astype(np.float64)
        parts.append(_split(rng, x, y, test_fraction))
    return _collect(parts, dtype=dtype, name=f"fedprox_synthetic({alpha}, {beta})")


def shifted_gaussian(num_clients: int = 50, samples_per_client: int = 100, dim: int = 1000,
                     sparsity: int = 10, alpha: float = 1.0, exponent: float = 1.1,
                     noise_std: float = 0.0, *, test_fraction: float = 0.0, seed: int = 0,
                     dtype: torch.dtype = torch.float32) -> FederatedDataset:
    """Jeong et al. 2024 shifted-mean Gaussian sparse regression.

    Client i (counted from 1) has ``A_i`` (n_i x d) with i.i.d. entries
    ``N(mu_i, 1 / i^exponent)`` (a variance), ``mu_i ~ N(0, alpha)`` (alpha a variance:
    std ``sqrt(alpha)``). A common ground truth ``x#`` is ``sparsity``-sparse on a random
    support with its non-zeros uniform on the unit sphere of R^s; ``y_i = A_i x# + e_i``,
    ``e_i ~ N(0, noise_std^2)``. The data set carries ``x#`` as ``ground_truth``.
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
    _check_features_fit(num_clients * n, dim, _check_dtype(dtype),
                        {"num_clients": num_clients, "samples_per_client": n, "dim": dim})
    rng = np.random.default_rng(seed)
    truth = np.zeros(dim)
    values = rng.standard_normal(sparsity)
    truth[rng.choice(dim, sparsity, replace=False)] = values / np.linalg.norm(values)
    parts = []
    for i in range(1, num_clients + 1):
        mu = rng.normal(0.0, np.sqrt(alpha))
        a = mu + rng.standard_normal((n, dim)) * i ** (-exponent / 2)
        y = a @ truth + noise_std * rng.standard_normal(n)
        parts.append(_split(rng, a, y, test_fraction))
    return _collect(parts, dtype=dtype, ground_truth=truth,
                    name=f"shifted_gaussian(alpha={alpha}, exponent={exponent})")
