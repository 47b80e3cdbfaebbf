"""tau-sparse models in the standard basis or in a dictionary, per class row or globally.

Shared by FedGradMP and FedIter-HT. A model is held as its coefficient vector
(length ``blocks * m``: m = d for the standard basis, m = atoms for a dictionary).
On a multi-block (softmax) model the budget tau is counted per block (``scope="row"``,
the default, as in the rest of fedsparse) or over the whole model (``scope="global"``,
Jeong et al. 2024's ``||x||_0 <= 90`` on the 784 x 10 model of Sec. V-B.2).
"""

from __future__ import annotations

import numpy as np
import torch

from .._linalg import lstsq_gelsd
from .._validation import ConfigError, check_choice, check_int, fail
from ..problems.base import Problem
from ..problems.dictionary import DictionaryProblem
from ..problems.restricted import mask_to_index
from ..sparsity import top_indices
from ..sparsity.dictionaries import KINDS, Dictionary, as_dictionary
from ..sparsity.thresholding import SCOPES


def check_scope(scope) -> str:
    """The ``sparsity_scope`` argument: "row" or "global" (returned unchanged)."""
    return check_choice("sparsity_scope", scope, SCOPES)


def check_scoped_sparsity(sparsity: int, scope: str, problem: Problem, spec) -> None:
    """tau must fit in one class row ("row") or in the whole model ("global").

    ``spec`` is the bound :class:`~fedsparse.algorithms.base.DataSpec` (its ``dim``)."""
    check_int("sparsity", sparsity, minimum=1)
    P = problem.param_dim(spec.dim)
    if scope == "global" or problem.blocks == 1:
        if sparsity > P:
            raise fail("sparsity", sparsity, f"must be at most the model dimension {P}")
        return
    block = P // problem.blocks
    if sparsity > block:
        raise fail("sparsity", sparsity, f"must be at most the class-row length {block} "
                   '(or use sparsity_scope="global" to count tau over the whole model)')


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

    Same answer as :func:`fedsparse.sparsity.top_indices` (ties to the lower index), but
    a selection does the work (``topk``, or numpy's ``partition`` on the CPU): a row
    whose k-th largest magnitude is not tied with an entry outside the top k is decided
    by the threshold alone; only rows with such a tie (rare for real-valued data) go
    through the stable sort.
    """
    mag = x.abs()
    if k >= mag.shape[-1]:
        return torch.ones_like(mag, dtype=torch.bool)
    if k == 0:
        return torch.zeros_like(mag, dtype=torch.bool)
    mask = mag >= _kth_largest(mag, k)
    tied = mask.sum(-1) != k
    if bool(tied.any()):
        rows = mag[tied]
        fixed = torch.zeros_like(rows, dtype=torch.bool)
        fixed.scatter_(-1, top_indices(rows, k), True)
        mask[tied] = fixed
    return mask


def _kth_largest(mag: torch.Tensor, k: int) -> torch.Tensor:
    """The k-th largest entry of each row of ``mag`` (..., n), kept as (..., 1); NaN in a
    row that holds a NaN (``topk`` ranks NaN above every number, so the least of its top
    k is NaN there).

    On the CPU numpy's ``partition`` (introselect) finds the same element several times
    faster than ``topk`` on the small rows of a client update (30 x 1000 magnitudes:
    about 30 us against 120 us), which matters where it runs twice per local step
    (benchmarks/bench_fedgradmp.py). The value is an element of the row either way, so
    the masks are identical.
    """
    if mag.device.type != "cpu" or mag.dtype not in (torch.float32, torch.float64) \
            or mag.requires_grad:
        return torch.topk(mag, k, dim=-1, sorted=False).values.amin(-1, keepdim=True)
    m = mag.numpy()
    n = m.shape[-1]
    kth = np.partition(m, n - k, axis=-1)[..., n - k:n - k + 1]
    # numpy's partition also ranks NaN last (largest); a row's max is NaN iff it holds one.
    nan = np.isnan(m.max(-1, keepdims=True))
    if nan.any():
        kth = np.where(nan, np.nan, kth).astype(m.dtype, copy=False)
    return torch.from_numpy(np.ascontiguousarray(kth))


class SparseModel:
    """The sparsity geometry of one run: blocks, dictionary, tau and where tau is counted.

    Parameters
    ----------
    sparsity : tau, per block (``scope="row"``) or over the whole model ("global").
    blocks : class rows (1 except softmax).
    dictionary : :class:`Dictionary` or None (standard basis).
    scope : "row" or "global". With a dictionary and "global", the model is sparse in the
        block-diagonal dictionary ``I_blocks (x) A`` whose atoms are the (class row, atom)
        pairs: tau of those ``blocks * m`` atoms in total, however they fall on the rows.
    """

    def __init__(self, sparsity: int, blocks: int, dictionary: Dictionary | None,
                 scope: str = "row"):
        self.sparsity = sparsity
        self.blocks = blocks
        self.dictionary = dictionary
        self.scope = check_scope(scope)

    @property
    def is_global(self) -> bool:
        """tau is counted over the whole model (the same as per row with one block)."""
        return self.scope == "global" and self.blocks > 1

    @classmethod
    def build(cls, sparsity, dictionary_arg, problem: Problem, dim: int, dtype: torch.dtype,
              name: str, scope: str = "row") -> SparseModel:
        if isinstance(problem, DictionaryProblem) and dictionary_arg is not None:
            raise ConfigError(f"{name}: the problem already has a dictionary; do not pass "
                              "dictionary= as well")
        D = as_dictionary(dictionary_arg, dim=dim, dtype=dtype)
        block = D.atoms if D is not None else problem.param_dim(dim) // problem.blocks
        what = "the number of atoms" if D is not None else (
            "the model dimension" if problem.blocks == 1 else "the class-row length")
        if scope == "global" and problem.blocks > 1:
            block *= problem.blocks
            what = ("the number of atoms of all class rows" if D is not None
                    else "the model dimension")
        if sparsity > block:
            raise fail("sparsity", sparsity, f"must be at most {what} {block}")
        return cls(sparsity, problem.blocks, D, scope)

    def wrap(self, problem: Problem) -> Problem:
        """The coefficient-space problem (the problem itself for the standard basis)."""
        if self.dictionary is None:
            return problem
        return DictionaryProblem(problem, self.dictionary)

    def _rows(self, v: torch.Tensor) -> torch.Tensor:
        return v.reshape(*v.shape[:-1], self.blocks, -1)

    def _top(self, scores: torch.Tensor, k: int) -> torch.Tensor:
        """Mask (..., blocks, m) of the k largest scores per row, or over all rows when
        the scope is global (ties to the lower flat index either way)."""
        if not self.is_global:
            return top_mask(scores, min(k, scores.shape[-1]))
        flat = scores.reshape(*scores.shape[:-2], -1)
        return top_mask(flat, min(k, flat.shape[-1])).reshape(scores.shape)

    def select(self, coef_grad: torch.Tensor, k: int) -> torch.Tensor:
        """Support mask (..., P) of approx_k applied to a gradient, from its coefficient
        form ``A^T r`` (..., P): the k atoms with largest ``|A^T r|_j / ||a_j||``, per
        block or (global scope) over the whole model."""
        g = self._rows(coef_grad).abs()
        if self.dictionary is not None:
            g = g / self.dictionary.norms_on(g.device).to(g.dtype)
        return self._top(g, k).reshape(coef_grad.shape)

    def signal(self, coef: torch.Tensor) -> torch.Tensor:
        """The model in feature space, (..., blocks * d)."""
        if self.dictionary is None:
            return coef
        rows = self._rows(coef) @ self.dictionary.matrix_on(coef.device).T.to(coef.dtype)
        return rows.reshape(*coef.shape[:-1], -1)

    def approx(self, coef: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """approx_tau of the model ``A coef``: (tau-sparse coefficients, support mask).

        With a dictionary the support is chosen by the coefficients
        (:meth:`Dictionary.approx_coefficients`: the largest ``|a_j| ||a_j||``), then
        ``A coef`` is projected on it by least squares. With the global scope the tau
        atoms are the largest ``|a_{r,j}| ||a_j||`` over all (row r, atom j) pairs, and
        each row ``A a_r`` is projected on the span of the atoms it received (the
        projection on the block-diagonal dictionary splits into the rows); a row that
        received none becomes 0.
        """
        rows = self._rows(coef)
        if self.dictionary is None:
            mask = self._top(rows, self.sparsity)
            out = torch.where(mask, rows, torch.zeros_like(rows))     # = H_tau(rows)
        elif not self.is_global:
            out, idx = self.dictionary.approx_coefficients(rows, self.sparsity)
            mask = torch.zeros_like(rows, dtype=torch.bool).scatter_(-1, idx, True)
        else:
            D = self.dictionary.to(coef.dtype)
            mask = self._top(rows * D.norms_on(rows.device), self.sparsity)
            out = self._project_rows(D, D.synthesis(rows), mask)
        return out.reshape(coef.shape), mask.reshape(coef.shape)

    @staticmethod
    def _project_rows(D: Dictionary, w: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Least-squares coefficients (..., m) of each row of ``w`` (..., d) on its own
        atoms ``mask`` (..., m), rows holding different numbers of atoms."""
        lead = mask.shape[:-1]
        M = mask.reshape(-1, D.atoms)
        width = max(int(M.sum(-1).max()), 1) if M.numel() else 1
        index, valid = mask_to_index(M, width)
        # Padding columns are zeroed; gelsd's minimum-norm solution gives them 0.
        A = D.matrix_on(w.device)
        cols = A.T[index].transpose(1, 2) * valid.unsqueeze(1).to(w.dtype)  # (B, d, k)
        sol = lstsq_gelsd(cols, w.reshape(-1, D.dim).unsqueeze(-1)).squeeze(-1) * valid
        out = torch.zeros(M.shape, dtype=w.dtype, device=w.device).scatter_(-1, index, sol)
        return out.reshape(*lead, D.atoms)

    def project_ball(self, coef: torch.Tensor, radius: float | None) -> torch.Tensor:
        """Pi_R on the model ``A coef`` (scaling the coefficients scales the model)."""
        if radius is None:
            return coef
        norm = torch.linalg.vector_norm(self.signal(coef), dim=-1, keepdim=True)
        scale = torch.clamp(radius / norm.clamp(min=torch.finfo(coef.dtype).tiny), max=1.0)
        return coef * scale
