"""Dictionaries (atom sets) and the approximate projection approx_tau (docs/decisions.md,
section 1).

A model ``x`` in R^d is tau-sparse in a dictionary ``A`` (d x m, atoms as columns) when
``x = A a`` with ``||a||_0 <= tau`` (Jeong et al. 2024, Sec. II). Such a model is stored and
sent as its coefficients ``a`` (m entries, tau non-zero).

``approx_tau(w)`` (Jeong et al. 2024, Sec. II) returns a support ``Gamma`` of tau atoms and the
projection ``P_Gamma w`` of ``w`` on ``span(A_Gamma)``. Here, as docs/decisions.md pins it, Gamma
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

import os
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from .._linalg import lstsq_gelsd
from .._resources import check_memory
from .._validation import ConfigError, check_choice, check_dtype, check_int, check_seed, fail
from ._checks import check_tensor
from .thresholding import hard_threshold, top_indices

#: The ``kind`` values of a dictionary spec dict (see :func:`as_dictionary`).
KINDS = ("gaussian", "identity", "file")


def identity_dictionary(dim: int, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The standard basis as a (dim, dim) dictionary (approx_tau = H_tau)."""
    dim = check_int("dim", dim, minimum=1)
    return torch.eye(dim, dtype=check_dtype("dtype", dtype))


def gaussian_dictionary(*, dim: int, atoms: int, seed: int = 0,
                        dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Random Gaussian dictionary (Jeong et al. 2024, Sec. IV-D), columns are atoms.

    Entries are i.i.d. ``N(0, 1/dim)``, so every atom has norm close to 1. The draw
    depends on ``seed`` only (a private ``torch.Generator``), so server and clients
    rebuild the same matrix from (dim, atoms, seed) without seeing any data.

    Returns
    -------
    (dim, atoms) tensor.
    """
    dim = check_int("dim", dim, minimum=1)
    atoms = check_int("atoms", atoms, minimum=1)
    seed = check_seed("seed", seed)
    check_dtype("dtype", dtype)
    check_memory({"the dictionary": dim * atoms * 8}, {"atoms": atoms, "dim": dim})
    g = torch.Generator().manual_seed(seed)
    return torch.randn(dim, atoms, generator=g, dtype=torch.float64).div_(dim ** 0.5).to(dtype)


class Dictionary:
    """A dictionary matrix with what approx_tau needs precomputed.

    Parameters
    ----------
    matrix : (d, m) tensor or array of real numbers, atoms as columns. It must be
        finite, and zero columns are not allowed; integers are cast to float64.
    spec : a short JSON-able description (used in run records instead of the matrix).

    Raises
    ------
    ConfigError
        A matrix that is not 2-D, empty, not real numbers, holds NaN or infinite
        entries, or has a zero column; the message names the dictionary (its file, for
        a ``{kind="file"}`` spec).
    """

    def __init__(self, matrix, spec=None):
        label = _label(spec)
        if not isinstance(matrix, torch.Tensor):
            try:
                arr = np.asarray(matrix)
                if arr.dtype.byteorder not in "=|":  # e.g. a big-endian .npy file
                    arr = arr.astype(arr.dtype.newbyteorder("="))
                matrix = torch.as_tensor(arr)
            except (TypeError, ValueError, RuntimeError):
                raise ConfigError(f"{label} is invalid: a {type(matrix).__name__} of "
                                  f"{getattr(matrix, 'dtype', 'objects')}; it must be a "
                                  "(dim, atoms) tensor or array of real numbers") from None
        if matrix.ndim != 2 or 0 in matrix.shape:
            raise ConfigError(f"{label}: dictionary shape {tuple(matrix.shape)} is invalid: "
                              "must be (dim, atoms) with dim >= 1 and atoms >= 1")
        if matrix.is_complex() or matrix.dtype == torch.bool:
            raise ConfigError(f"{label} has dtype {matrix.dtype}; it must hold real numbers "
                              "(float or integer)")
        if not matrix.is_floating_point():
            matrix = matrix.to(torch.float64)
        matrix = matrix.detach()  # the atoms only, never the caller's autograd graph
        finite = torch.isfinite(matrix)
        if not bool(finite.all()):
            i, j = (int(k) for k in torch.nonzero(~finite)[0])
            raise ConfigError(f"{label} holds NaN or infinite entries (the first at row {i}, "
                              f"atom {j}: {matrix[i, j].item()}); every entry must be finite")
        self.matrix = matrix
        self.norms = torch.linalg.vector_norm(matrix, dim=0)
        if bool((self.norms == 0).any()):
            j = int(torch.nonzero(self.norms == 0)[0])
            raise ConfigError(f"{label} has a zero atom (column {j}); remove it")
        self.spec = spec if spec is not None else f"matrix{tuple(matrix.shape)}"
        self._placed: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def _on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(matrix, norms) on ``device``: the dictionary is built on the CPU and follows
        the tensors it meets, copied once per device (never once per call)."""
        if device == self.matrix.device:
            return self.matrix, self.norms
        if device not in self._placed:
            self._placed[device] = (self.matrix.to(device), self.norms.to(device))
        return self._placed[device]

    def matrix_on(self, device: torch.device) -> torch.Tensor:
        """The (dim, atoms) matrix on ``device``."""
        return self._on(device)[0]

    def norms_on(self, device: torch.device) -> torch.Tensor:
        """The (atoms,) atom norms on ``device``."""
        return self._on(device)[1]

    @property
    def dim(self) -> int:
        return self.matrix.shape[0]

    @property
    def atoms(self) -> int:
        return self.matrix.shape[1]

    def to(self, dtype: torch.dtype) -> Dictionary:
        return self if self.matrix.dtype == dtype else Dictionary(self.matrix.to(dtype), self.spec)

    def _rows(self, name: str, x, letter: str) -> torch.Tensor:
        """``x`` when it is a floating (..., d) signal (``letter`` "d") or (..., m)
        coefficient tensor ("m"); else a ConfigError naming ``name`` (type and shape only:
        these methods run at every local step)."""
        size = self.dim if letter == "d" else self.atoms
        check_tensor(name, x, f"(..., {letter})", floating=True)
        if x.shape[-1] != size:
            raise fail(name, f"tensor of shape {tuple(x.shape)}", f"must have shape "
                       f"(..., {size}): {letter} = {size} for {self!r} ({self.dim} x "
                       f"{self.atoms})")
        return x

    def synthesis(self, a: torch.Tensor) -> torch.Tensor:
        """``A a``: (..., m) coefficients to (..., d) signals."""
        a = self._rows("a", a, "m")
        return a @ self.matrix_on(a.device).T

    def analysis(self, w: torch.Tensor) -> torch.Tensor:
        """``A^T w``: (..., d) signals to (..., m) correlations."""
        w = self._rows("w", w, "d")
        return w @ self.matrix_on(w.device)

    def select(self, correlations: torch.Tensor, k: int) -> torch.Tensor:
        """The ``k`` atoms with largest ``|A^T w|_j / ||a_j||`` from ``A^T w`` (..., m)."""
        correlations = self._rows("correlations", correlations, "m")
        return top_indices(correlations / self.norms_on(correlations.device),
                           min(check_int("k", k, minimum=1), self.atoms))

    def project(self, w: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Coefficients (..., m) of the least-squares projection of ``w`` (..., d) on the
        atoms ``index`` (..., k), zero elsewhere."""
        w = self._rows("w", w, "d")
        index = check_tensor("index", index, "(..., k)")
        if index.dtype != torch.int64 or index.shape[:-1] != w.shape[:-1]:
            raise fail("index", f"tensor of shape {tuple(index.shape)} and dtype {index.dtype}",
                       f"must be an int64 tensor of shape (..., k) with w's leading shape "
                       f"{tuple(w.shape[:-1])}")
        lead = w.shape[:-1]
        W = w.reshape(-1, self.dim)
        idx = index.reshape(-1, index.shape[-1])
        cols = self.matrix_on(w.device).T[idx].transpose(1, 2)      # (B, d, k)
        sol = lstsq_gelsd(cols, W.unsqueeze(-1)).squeeze(-1)
        out = torch.zeros(W.shape[0], self.atoms, dtype=w.dtype, device=w.device)
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
        a = self._rows("a", a, "m")
        index = top_indices(a * self.norms_on(a.device).to(a.dtype),
                            min(check_int("k", k, minimum=1), self.atoms))
        return self.project(self.synthesis(a), index), index

    def __repr__(self) -> str:
        return f"Dictionary({self.spec})"


def as_dictionary(spec, *, dim: int, dtype: torch.dtype = torch.float64) -> Dictionary | None:
    """Turn a dictionary argument into a :class:`Dictionary` (None stays None).

    Accepted: None or "identity" (standard basis: no dictionary), a (dim, m) tensor or
    array, or a spec dict (usable in TOML): ``{kind="gaussian", atoms=200, seed=0}``,
    ``{kind="identity"}``, ``{kind="file", path="D.npy"}`` (a (dim, m) array saved by
    :func:`numpy.save`).

    Raises
    ------
    ConfigError
        An unknown spec, a file that does not exist or is not a readable ``.npy``
        array, or a matrix that :class:`Dictionary` refuses (NaN, zero atom, ...) or
        whose dim is not ``dim``; the message names the dictionary (and its file).
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
        if "path" not in spec:
            raise fail("dictionary", dict(spec), "a file dictionary needs path= (a .npy file "
                       "holding a (dim, atoms) array, as written by numpy.save)")
        matrix = _load_file(spec["path"])
    elif isinstance(spec, torch.Tensor) and spec.is_meta:
        raise fail("dictionary", "a tensor on the meta device", "must hold values (a meta "
                   "tensor has a shape only)")
    elif isinstance(spec, (torch.Tensor, np.ndarray)):
        matrix = spec
    else:
        raise fail("dictionary", spec if isinstance(spec, str) else type(spec).__name__,
                   "must be None, 'identity', a (dim, atoms) tensor/array or a spec dict like "
                   "{'kind': 'gaussian', 'atoms': 200, 'seed': 0}")
    spec = spec if isinstance(spec, Mapping) else None
    D = Dictionary(matrix, spec)
    if D.dim != dim:
        raise ConfigError(f"{_label(spec)}: dictionary shape {tuple(D.matrix.shape)} is "
                          "invalid: must be (dim, atoms) with dim = the model's feature "
                          f"dimension {dim}")
    return D.to(dtype)


def _label(spec) -> str:
    """How errors name a dictionary: its file when it came from one."""
    if isinstance(spec, Mapping) and spec.get("kind") == "file" and "path" in spec:
        return f"dictionary file {str(spec['path'])!r}"
    return "dictionary"


def _load_file(path) -> np.ndarray:
    """The (dim, atoms) array of a ``.npy`` dictionary file, with clear errors.

    Memory-mapped first, so a header that claims more data than the file holds is
    refused by the mapping instead of allocating what it claims.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise fail("dictionary path", path, "must be a file path (str)")
    p = Path(os.fspath(path)).expanduser()
    where = f"dictionary file {str(p)!r}"
    if not p.is_file():
        raise ConfigError(f"{where} does not exist" if not p.exists() else
                          f"{where} is not a regular file")
    if zipfile.is_zipfile(p):
        raise ConfigError(f"{where} is a zip archive (.npz?); expected a .npy file holding one "
                          "(dim, atoms) array, as written by numpy.save")
    with open(p, "rb") as fh:  # (NumPy reads any other file as a refused pickle)
        if fh.read(6) != b"\x93NUMPY":
            raise ConfigError(f"{where} is not a .npy file (it does not start with NumPy's "
                              "magic bytes); expected one (dim, atoms) array, as written by "
                              "numpy.save")
    try:
        mapped = np.load(p, mmap_mode="r", allow_pickle=False)
        return np.array(mapped)
    except Exception as exc:
        # Nothing in the file can run (pickles are refused), so any failure of the
        # reader (a bad header, a truncated file, an object array) means a bad file.
        raise ConfigError(f"{where} could not be read as a .npy array: "
                          f"{type(exc).__name__}: {exc}") from None


def approx_projection(w: torch.Tensor | None, sparsity: int, dictionary=None, *,
                      coefficients: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """approx_tau(w) with respect to a dictionary (Jeong et al. 2024, Sec. II; our reading:
    docs/decisions.md, section 1).

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
    if w is None and coefficients is None:
        raise fail("w", None, "must be a (..., d) tensor when no coefficients are given")
    if dictionary is None:
        w = check_tensor("coefficients" if w is None else "w", coefficients if w is None else w)
        coef = hard_threshold(w, sparsity)
        index = top_indices(w, min(sparsity, w.shape[-1]))
        return coef, index, torch.linalg.vector_norm(w - coef, dim=-1)
    D = dictionary if isinstance(dictionary, Dictionary) else Dictionary(dictionary)
    if w is not None:
        check_tensor("w", w, f"(..., {D.dim}), the length of the dictionary's atoms",
                     floating=True)
        if w.shape[-1] != D.dim:
            raise fail("w", f"tensor of shape {tuple(w.shape)}", f"must have shape (..., "
                       f"{D.dim}): the dictionary {tuple(D.matrix.shape)} has atoms of "
                       f"length {D.dim}")
    if coefficients is not None:
        check_tensor("coefficients", coefficients, f"(..., {D.atoms}), one per atom",
                     floating=True)
        lead = coefficients.shape[:-1] if w is None else w.shape[:-1]
        if coefficients.shape[-1] != D.atoms or coefficients.shape[:-1] != lead:
            raise fail("coefficients", f"tensor of shape {tuple(coefficients.shape)}",
                       f"must have shape {(*lead, D.atoms)}: one per atom of the dictionary "
                       f"{tuple(D.matrix.shape)}")
        D = D.to(coefficients.dtype)
        w = D.synthesis(coefficients) if w is None else w
        coef, index = D.approx_coefficients(coefficients, sparsity)
    else:
        D = D.to(w.dtype)
        coef, index = D.approx(w, sparsity)
    return coef, index, torch.linalg.vector_norm(D.synthesis(coef) - w, dim=-1)
