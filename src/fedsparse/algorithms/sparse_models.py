"""tau-sparse models in the standard basis or in a dictionary, per class row.

Shared by FedGradMP and FedIter-HT. A model is held as its coefficient vector
(length ``blocks * m``: m = d for the standard basis, m = atoms for a dictionary);
sparsity is counted per block (softmax class row), as in the rest of fedsparse.
"""

from __future__ import annotations

import torch

from .._validation import ConfigError, check_choice, fail
from ..problems.base import Problem
from ..problems.dictionary import DictionaryProblem
from ..sparsity import top_indices
from ..sparsity.dictionaries import KINDS, Dictionary, as_dictionary


def check_dictionary_arg(dictionary) -> None:
    """Validate a dictionary argument at build time (before the data size is known)."""
    if dictionary is None or isinstance(dictionary, (torch.Tensor, Dictionary)):
        return
    if isinstance(dictionary, str):
        if dictionary != "identity":
            raise fail("dictionary", dictionary, 'must be None, "identity", a (dim, atoms) '
                       "tensor or a spec dict such as {kind='gaussian', atoms=200, seed=0}")
        return
    if isinstance(dictionary, dict):
        check_choice("dictionary.kind", dictionary.get("kind"), KINDS)
        return
    try:
        import numpy as np
        if isinstance(dictionary, np.ndarray):
            return
    except ImportError:  # pragma: no cover
        pass
    raise fail("dictionary", type(dictionary).__name__,
               "must be None, a (dim, atoms) tensor/array or a spec dict")


def dictionary_spec(dictionary):
    """What the run record shows for a dictionary argument (never the whole matrix)."""
    if dictionary is None or isinstance(dictionary, (str, dict)):
        return dictionary
    if isinstance(dictionary, Dictionary):
        return dictionary.spec
    return f"matrix{tuple(dictionary.shape)}"


def top_mask(x: torch.Tensor, k: int) -> torch.Tensor:
    """Mask of the ``k`` largest ``|x|`` along the last axis, ties to the lower index.

    Same answer as :func:`fedsparse.sparsity.top_indices` (SPEC.md's tie rule), but
    ``topk`` does the work: a row whose k-th largest magnitude is not tied with an
    entry outside the top k is decided by the threshold alone; only rows with such a
    tie (rare for real-valued data) go through the stable sort.
    """
    mag = x.abs()
    if k >= mag.shape[-1]:
        return torch.ones_like(mag, dtype=torch.bool)
    if k == 0:
        return torch.zeros_like(mag, dtype=torch.bool)
    kth = torch.topk(mag, k, dim=-1, sorted=False).values.amin(-1, keepdim=True)
    mask = mag >= kth
    tied = mask.sum(-1) != k
    if bool(tied.any()):
        rows = mag[tied]
        fixed = torch.zeros_like(rows, dtype=torch.bool)
        fixed.scatter_(-1, top_indices(rows, k), True)
        mask[tied] = fixed
    return mask


class SparseModel:
    """The sparsity geometry of one run: blocks, dictionary, tau.

    Parameters
    ----------
    sparsity : tau per block.
    blocks : class rows (1 except softmax).
    dictionary : :class:`Dictionary` or None (standard basis).
    """

    def __init__(self, sparsity: int, blocks: int, dictionary: Dictionary | None):
        self.sparsity = sparsity
        self.blocks = blocks
        self.dictionary = dictionary

    @classmethod
    def build(cls, sparsity, dictionary_arg, problem: Problem, dim: int, dtype: torch.dtype,
              name: str) -> SparseModel:
        if isinstance(problem, DictionaryProblem) and dictionary_arg is not None:
            raise ConfigError(f"{name}: the problem already has a dictionary; do not pass "
                              "dictionary= as well")
        D = as_dictionary(dictionary_arg, dim=dim, dtype=dtype)
        block = D.atoms if D is not None else problem.param_dim(dim) // problem.blocks
        what = "the number of atoms" if D is not None else (
            "the model dimension" if problem.blocks == 1 else "the class-row length")
        if sparsity > block:
            raise fail("sparsity", sparsity, f"must be at most {what} {block}")
        return cls(sparsity, problem.blocks, D)

    def wrap(self, problem: Problem) -> Problem:
        """The coefficient-space problem (the problem itself for the standard basis)."""
        if self.dictionary is None:
            return problem
        return DictionaryProblem(problem, self.dictionary)

    def _rows(self, v: torch.Tensor) -> torch.Tensor:
        return v.reshape(*v.shape[:-1], self.blocks, -1)

    def select(self, coef_grad: torch.Tensor, k: int) -> torch.Tensor:
        """Support mask (..., P) of approx_k applied to a gradient, from its coefficient
        form ``A^T r`` (..., P): the k atoms per block with largest |A^T r|_j / ||a_j||."""
        g = self._rows(coef_grad).abs()
        if self.dictionary is not None:
            g = g / self.dictionary.norms.to(g.dtype)
        return top_mask(g, min(k, g.shape[-1])).reshape(coef_grad.shape)

    def signal(self, coef: torch.Tensor) -> torch.Tensor:
        """The model in feature space, (..., blocks * d)."""
        if self.dictionary is None:
            return coef
        rows = self._rows(coef) @ self.dictionary.matrix.T.to(coef.dtype)
        return rows.reshape(*coef.shape[:-1], -1)

    def approx(self, coef: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """approx_tau of the model ``A coef``: (tau-sparse coefficients, support mask).

        With a dictionary the support is chosen by the coefficients
        (:meth:`Dictionary.approx_coefficients`), then ``A coef`` is projected on it.
        """
        rows = self._rows(coef)
        if self.dictionary is None:
            mask = top_mask(rows, min(self.sparsity, rows.shape[-1]))
            out = torch.where(mask, rows, torch.zeros_like(rows))     # = H_tau(rows)
        else:
            out, idx = self.dictionary.approx_coefficients(rows, self.sparsity)
            mask = torch.zeros_like(rows, dtype=torch.bool).scatter_(-1, idx, True)
        return out.reshape(coef.shape), mask.reshape(coef.shape)

    def project_ball(self, coef: torch.Tensor, radius: float | None) -> torch.Tensor:
        """Pi_R on the model ``A coef`` (scaling the coefficients scales the model)."""
        if radius is None:
            return coef
        norm = torch.linalg.vector_norm(self.signal(coef), dim=-1, keepdim=True)
        scale = torch.clamp(radius / norm.clamp(min=torch.finfo(coef.dtype).tiny), max=1.0)
        return coef * scale
