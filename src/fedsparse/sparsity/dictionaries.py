"""Dictionaries (atom sets) and the approximate projection approx_tau (SPEC.md section 1).

A model ``x`` in R^d is tau-sparse in a dictionary ``A`` (d x m, atoms as columns) when
``x = A a`` with ``||a||_0 <= tau`` (paper 002, Sec. II). Such a model is stored and
sent as its coefficients ``a`` (m entries, tau non-zero).

``approx_tau(w)`` (paper 002, Sec. II) returns a support ``Gamma`` of tau atoms and the
projection ``P_Gamma w`` of ``w`` on ``span(A_Gamma)``. Here, as SPEC.md pins it, Gamma
holds the tau atoms with the largest ``|A^T w|`` after dividing by the column norms
(the correlation of ``w`` with each unit atom), and ``P_Gamma w`` is the least-squares
projection. For the identity (standard basis) this is exactly hard thresholding H_tau.
When the vector is a model known by its coefficients (every local iterate and server
average in FedGradMP / FedIter-HT), the support is chosen by the coefficients instead
(:meth:`Dictionary.approx_coefficients`): the correlation rule does not keep a
tau-sparse model fixed when atoms are coherent, so the ground truth would not even be a
fixed point of the algorithm.
The approximation constant eta of the paper is not assumed: the residual
``||P_Gamma w - w||`` is returned so it can be reported.

Dictionaries are data independent unless learned: the Gaussian dictionary is drawn
from its own seed (shared by server and clients, never derived from client data).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from .._validation import ConfigError, check_choice, check_int, fail
from .thresholding import hard_threshold, top_indices

#: The ``kind`` values of a dictionary spec dict (see :func:`as_dictionary`).
KINDS = ("gaussian", "identity", "file")


def identity_dictionary(dim: int, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The standard basis as a (dim, dim) dictionary (approx_tau = H_tau)."""
    dim = check_int("dim", dim, minimum=1)
    return torch.eye(dim, dtype=dtype)


def gaussian_dictionary(*, dim: int, atoms: int, seed: int = 0,
                        dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Random Gaussian dictionary (paper 002, Sec. IV-D), columns are atoms.

    Entries are i.i.d. ``N(0, 1/dim)``, so every atom has norm close to 1. The draw
    depends on ``seed`` only (a private ``torch.Generator``), so server and clients
    rebuild the same matrix from (dim, atoms, seed) without seeing any data.

    Returns
    -------
    (dim, atoms) tensor.
    """
    dim = check_int("dim", dim, minimum=1)
    atoms = check_int("atoms", atoms, minimum=1)
    seed = check_int("seed", seed, minimum=0)
    g = torch.Generator().manual_seed(seed)
    return torch.randn(dim, atoms, generator=g, dtype=torch.float64).div_(dim ** 0.5).to(dtype)


class Dictionary:
    """A dictionary matrix with what approx_tau needs precomputed.

    Parameters
    ----------
    matrix : (d, m) atoms as columns. Zero columns are not allowed.
    spec : a short JSON-able description (used in run records instead of the matrix).
    """

    def __init__(self, matrix: torch.Tensor, spec=None):
        if matrix.ndim != 2:
            raise fail("dictionary shape", tuple(matrix.shape), "must be (dim, atoms)")
        self.matrix = matrix
        self.norms = torch.linalg.vector_norm(matrix, dim=0)
        if bool((self.norms == 0).any()):
            raise ConfigError("dictionary has a zero atom (column); remove it")
        self.spec = spec if spec is not None else f"matrix{tuple(matrix.shape)}"

    @property
    def dim(self) -> int:
        return self.matrix.shape[0]

    @property
    def atoms(self) -> int:
        return self.matrix.shape[1]

    def to(self, dtype: torch.dtype) -> Dictionary:
        return self if self.matrix.dtype == dtype else Dictionary(self.matrix.to(dtype), self.spec)

    def synthesis(self, a: torch.Tensor) -> torch.Tensor:
        """``A a``: (..., m) coefficients to (..., d) signals."""
        return a @ self.matrix.T

    def analysis(self, w: torch.Tensor) -> torch.Tensor:
        """``A^T w``: (..., d) signals to (..., m) correlations."""
        return w @ self.matrix

    def select(self, correlations: torch.Tensor, k: int) -> torch.Tensor:
        """The ``k`` atoms with largest ``|A^T w|_j / ||a_j||`` from ``A^T w`` (..., m)."""
        return top_indices(correlations / self.norms, min(k, self.atoms))

    def project(self, w: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Coefficients (..., m) of the least-squares projection of ``w`` (..., d) on the
        atoms ``index`` (..., k), zero elsewhere."""
        lead = w.shape[:-1]
        W = w.reshape(-1, self.dim)
        idx = index.reshape(-1, index.shape[-1])
        cols = self.matrix.T[idx].transpose(1, 2)                    # (B, d, k)
        sol = torch.linalg.lstsq(cols, W.unsqueeze(-1), driver="gelsd").solution.squeeze(-1)
        out = torch.zeros(W.shape[0], self.atoms, dtype=w.dtype)
        out.scatter_(-1, idx, sol)
        return out.reshape(*lead, self.atoms)

    def approx(self, w: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """approx_k(w): (coefficients (..., m) of ``P_Gamma w``, support Gamma (..., k))."""
        index = self.select(self.analysis(w), k)
        return self.project(w, index), index

    def approx_coefficients(self, a: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """approx_k of the model ``A a`` known by its coefficients a (..., m).

        Gamma = the k largest ``|a_j| ||a_j||`` (each atom's contribution to the model),
        then the least-squares projection of ``A a`` on ``span(A_Gamma)``. Used for every
        model vector (local iterates, the server average): unlike the correlation rule,
        it maps every k-sparse model to itself (eta = 1 there), so the ground truth is a
        fixed point even for coherent dictionaries, where ``|A^T A a|`` can rank a wrong
        atom first.
        """
        index = top_indices(a * self.norms.to(a.dtype), min(k, self.atoms))
        return self.project(self.synthesis(a), index), index

    def __repr__(self) -> str:
        return f"Dictionary({self.spec})"


def as_dictionary(spec, *, dim: int, dtype: torch.dtype = torch.float64) -> Dictionary | None:
    """Turn a dictionary argument into a :class:`Dictionary` (None stays None).

    Accepted: None or "identity" (standard basis: no dictionary), a (dim, m) tensor or
    array, or a spec dict (usable in TOML): ``{kind="gaussian", atoms=200, seed=0}``,
    ``{kind="identity"}``, ``{kind="file", path="D.npy"}`` (a saved (dim, m) array).
    """
    if spec is None or (isinstance(spec, str) and spec == "identity"):
        return None
    if isinstance(spec, Dictionary):
        return spec.to(dtype)
    if isinstance(spec, Mapping):
        kind = check_choice("dictionary.kind", spec.get("kind"), KINDS)
        extra = set(spec) - {"kind", "atoms", "seed", "path"}
        if extra:
            raise fail("dictionary", dict(spec), f"has unknown keys {sorted(extra)}")
        if kind == "identity":
            return None
        if kind == "gaussian":
            if "atoms" not in spec:
                raise fail("dictionary", dict(spec), "a gaussian dictionary needs atoms=")
            m = gaussian_dictionary(dim=dim, atoms=spec["atoms"], seed=spec.get("seed", 0),
                                    dtype=dtype)
            return Dictionary(m, dict(spec))
        m = torch.as_tensor(np.load(spec["path"]), dtype=dtype)
        matrix = m
    elif isinstance(spec, (torch.Tensor, np.ndarray)):
        matrix = torch.as_tensor(spec).to(dtype)
    else:
        raise fail("dictionary", type(spec).__name__,
                   "must be None, a (dim, atoms) tensor/array or a spec dict like "
                   "{'kind': 'gaussian', 'atoms': 200, 'seed': 0}")
    if matrix.ndim != 2 or matrix.shape[0] != dim:
        raise fail("dictionary shape", tuple(matrix.shape),
                   f"must be (dim, atoms) with dim = the model's feature dimension {dim}")
    return Dictionary(matrix, spec if isinstance(spec, Mapping) else None)


def approx_projection(w: torch.Tensor | None, sparsity: int, dictionary=None, *,
                      coefficients: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """approx_tau(w) with respect to a dictionary (SPEC.md section 1; paper 002, Sec. II).

    Parameters
    ----------
    w : (..., d) signals (may be None when ``coefficients`` is given).
    sparsity : tau.
    dictionary : None (standard basis), a (d, m) tensor or a :class:`Dictionary`.
    coefficients : (..., m) optional coefficients with ``w = A a``: the support is then
        chosen by ``|a_j| ||a_j||`` (:meth:`Dictionary.approx_coefficients`) instead of
        the correlations ``|A^T w|_j / ||a_j||``.

    Returns
    -------
    coefficients : (..., m) tau-sparse coefficients ``a`` with ``P_Gamma w = A a``
        (for the standard basis: ``H_tau(w)`` itself).
    support : (..., tau) atom indices Gamma.
    residual : (...,) ``||P_Gamma w - w||``, to report the approximation quality eta.
    """
    sparsity = check_int("sparsity", sparsity, minimum=1)
    if dictionary is None:
        w = coefficients if w is None else w
        coef = hard_threshold(w, sparsity)
        index = top_indices(w, min(sparsity, w.shape[-1]))
        return coef, index, torch.linalg.vector_norm(w - coef, dim=-1)
    D = dictionary if isinstance(dictionary, Dictionary) else Dictionary(
        torch.as_tensor(dictionary))
    if coefficients is not None:
        D = D.to(coefficients.dtype)
        w = D.synthesis(coefficients) if w is None else w
        coef, index = D.approx_coefficients(coefficients, sparsity)
    else:
        D = D.to(w.dtype)
        coef, index = D.approx(w, sparsity)
    return coef, index, torch.linalg.vector_norm(D.synthesis(coef) - w, dim=-1)
