"""K-SVD dictionary learning with OMP sparse coding (Aharon, Elad, Bruckstein 2006).

Jeong et al. 2024 (Sec. V-A.2, Fig. 2) learns a 50-atom dictionary from the first 80 frames of
a video with K-SVD and recovers a later frame with FedGradMP in that dictionary.
"""

from __future__ import annotations

import numpy as np
import torch

from .._linalg import solve_or_lstsq
from .._validation import check_int, check_seed, fail


def omp(dictionary: torch.Tensor, signals: torch.Tensor, sparsity: int) -> torch.Tensor:
    """Orthogonal matching pursuit, all signals at once.

    Each step adds, per signal, the atom most correlated with the residual (atoms
    already chosen are excluded) and refits the coefficients on the chosen atoms by
    least squares (normal equations on the atoms' Gram matrix: k <= sparsity is small).

    Parameters
    ----------
    dictionary : (d, m) atoms as columns (normalised to unit norm for the selection).
    signals : (N, d) one signal per row.
    sparsity : non-zeros per code (at most m).

    Returns
    -------
    (N, m) codes with at most ``sparsity`` non-zeros per row.
    """
    for name, value in (("dictionary", dictionary), ("signals", signals)):
        if not isinstance(value, torch.Tensor) or value.ndim != 2 \
                or value.dtype not in (torch.float32, torch.float64):
            raise fail(f"{name}", f"<{getattr(value, 'dtype', type(value).__name__)} "
                       f"{tuple(getattr(value, 'shape', ()))}>", "must be a 2-D float32 or "
                       "float64 tensor")
    if signals.shape[1] != dictionary.shape[0] or signals.dtype != dictionary.dtype:
        raise fail("signals", f"<{signals.dtype} {tuple(signals.shape)}>", "must be (N, d) of "
                   f"the dictionary's dtype {dictionary.dtype}, d = {dictionary.shape[0]} "
                   "(its atoms' length)")
    D = dictionary
    N, m = signals.shape[0], D.shape[1]
    sparsity = min(check_int("sparsity", sparsity, minimum=1), m)
    norms = torch.linalg.vector_norm(D, dim=0).clamp(min=1e-300)
    gram = D.T @ D                                 # (m, m)
    corr0 = signals @ D                            # (N, m) = D^T y per signal
    chosen = torch.zeros(N, 0, dtype=torch.int64)
    used = torch.zeros(N, m, dtype=torch.bool)
    codes = torch.zeros(N, m, dtype=signals.dtype)
    rows = torch.arange(N)
    for _ in range(sparsity):
        # Correlation of the residual with each atom: D^T (y - D x) = D^T y - G x.
        corr = (corr0 - codes @ gram) / norms
        corr = corr.abs().masked_fill(used, -1.0)
        new = corr.argmax(-1)
        used[rows, new] = True
        chosen = torch.cat([chosen, new[:, None]], 1)
        G = gram[chosen[:, :, None], chosen[:, None, :]]                 # (N, k, k)
        rhs = torch.gather(corr0, 1, chosen)                                # (N, k)
        # A tiny ridge guards against (near-)duplicate atoms; it is far below the data scale.
        eps = 1e-12 * G.diagonal(dim1=-2, dim2=-1).amax(-1).clamp(min=1e-300)
        G = G + eps[:, None, None] * torch.eye(G.shape[-1], dtype=G.dtype)
        x = solve_or_lstsq(G, rhs)
        codes = torch.zeros_like(codes).scatter_(1, chosen, x)
    return codes


def _errors(signals, D, codes):
    return torch.linalg.vector_norm(signals - codes @ D.T, dim=-1)


def ksvd(signals, *, atoms: int, sparsity: int, iterations: int = 20, seed: int = 0,
         return_info: bool = False):
    """Learn a dictionary by K-SVD: OMP coding, then one exact rank-1 SVD per atom.

    Each iteration (Aharon et al. 2006):

    1. sparse coding: every signal gets an OMP code with ``sparsity`` atoms; the new
       code is kept only if it represents the signal at least as well as the previous
       code (which stays valid for the updated dictionary), so this step never
       increases the error;
    2. atom update, for each atom j: among the signals whose code uses j, the residual
       without atom j, ``E_j = Y_w - sum_{l != j} d_l x_l``, is replaced by its best
       rank-1 approximation ``s u v^T`` (exact SVD): ``d_j = u``, codes ``s v``. This
       minimises the error over (d_j, its non-zero codes), so it never increases it;
    3. an atom used by no signal is replaced by the (normalised) worst-represented signal.

    Hence the representation error ``||Y - D X||_F`` is non-increasing over iterations.

    Parameters
    ----------
    signals : (N, d) training signals, one per row (tensor or array).
    atoms : m, number of atoms.
    sparsity : non-zeros per code.
    iterations : K-SVD iterations.
    seed : initial atoms are ``atoms`` distinct signals drawn with this seed (Gaussian
        atoms fill up when there are fewer signals than atoms).
    return_info : also return ``{"errors": [||Y - DX||_F after init and each iteration],
        "codes": (N, m)}``.

    Returns
    -------
    (d, atoms) dictionary with unit-norm columns (and the info dict if asked).
    """
    try:
        Y = torch.as_tensor(np.asarray(signals) if not isinstance(signals, torch.Tensor)
                            else signals)
    except (TypeError, ValueError, RuntimeError):  # ragged rows, text, a generator
        raise fail("signals", type(signals).__name__, "must be a (num_signals, dim) tensor "
                   "or array of real numbers") from None
    if not Y.is_floating_point():
        Y = Y.to(torch.float64)
    if Y.ndim != 2:
        raise fail("signals shape", tuple(Y.shape), "must be (num_signals, dim)")
    if not torch.isfinite(Y).all():
        raise fail("signals", f"{int((~torch.isfinite(Y)).sum())} non-finite entries",
                   "must be finite")
    atoms = check_int("atoms", atoms, minimum=1)
    sparsity = check_int("sparsity", sparsity, minimum=1, maximum=atoms)
    iterations = check_int("iterations", iterations, minimum=0)
    seed = check_seed("seed", seed)
    N, d = Y.shape
    g = torch.Generator().manual_seed(seed)
    take = torch.randperm(N, generator=g)[:min(atoms, N)]
    D = torch.empty(d, atoms, dtype=Y.dtype)
    D[:, :take.numel()] = Y[take].T
    if atoms > N:
        D[:, N:] = torch.randn(d, atoms - N, generator=g, dtype=torch.float64).to(Y.dtype)
    norms = torch.linalg.vector_norm(D, dim=0)
    # Zero signals make zero atoms; give those a random direction instead.
    zero = norms == 0
    if zero.any():
        D[:, zero] = torch.randn(d, int(zero.sum()), generator=g, dtype=torch.float64).to(Y.dtype)
        norms = torch.linalg.vector_norm(D, dim=0)
    D = D / norms
    codes = omp(D, Y, sparsity)
    errors = [float(torch.linalg.vector_norm(Y - codes @ D.T))]
    for _ in range(iterations):
        new = omp(D, Y, sparsity)
        better = _errors(Y, D, new) <= _errors(Y, D, codes)
        codes = torch.where(better[:, None], new, codes)
        for j in range(atoms):
            users = torch.nonzero(codes[:, j] != 0).squeeze(-1)
            if users.numel() == 0:
                worst = int(_errors(Y, D, codes).argmax())
                atom = Y[worst]
                nrm = torch.linalg.vector_norm(atom)
                if nrm > 0:
                    D[:, j] = atom / nrm
                continue
            Xw = codes[users]                                  # (u, m)
            E = Y[users] - Xw @ D.T + Xw[:, j:j + 1] * D[:, j][None, :]   # (u, d)
            # Best rank-1 approximation of E^T (d x u): d_j = u1, codes = s1 v1.
            U, s, Vh = torch.linalg.svd(E.T, full_matrices=False)
            D[:, j] = U[:, 0]
            codes[users, j] = s[0] * Vh[0]
        errors.append(float(torch.linalg.vector_norm(Y - codes @ D.T)))
    if return_info:
        return D, {"errors": errors, "codes": codes}
    return D
