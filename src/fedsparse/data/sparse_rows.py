"""Sparse client data: a CSR stand-in for the dense padded feature tensor (S, b, d).

Dense client data is stored as one zero-padded tensor ``X`` of shape (S, b, d) (S
clients, b rows each, d features), so every client's work is one batched matrix
product. Text data such as E2006-tfidf (d = 150,360, ~100 non-zeros a row) cannot be
stored that way: 100 clients x 160 rows x 150,360 float32 features is 9.6 GB, against
~20 MB of non-zeros. :class:`SparseRows` keeps only the non-zeros, as one CSR matrix
over the S*b flattened rows (padding rows are empty), and offers the few operations
the core needs:

* ``shape`` / ``dtype`` / ``to(dtype, device=...)`` / ``ndim`` like a tensor (CPU only);
* ``X[clients]`` (client selection) and :meth:`SparseRows.gather_rows` (mini-batches);
* :meth:`SparseRows.scores` and :meth:`SparseRows.weighted_transpose`, the two products
  of :mod:`fedsparse.problems.base`, and their multi-class versions for softmax.

Every product is one ``index_add_`` (a segment sum) over all non-zeros of all clients:
no Python loop over clients or rows, and memory proportional to the non-zeros (times
the number of classes for softmax).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np
import torch

from .._validation import ConfigError, check_dtype, fail

__all__ = ["SparseRows", "is_sparse_matrix"]


def is_sparse_matrix(a) -> bool:
    """True for a SciPy sparse matrix or array (anything with ``tocsr`` and ``nnz``)."""
    return hasattr(a, "tocsr") and hasattr(a, "nnz")


def _ranges(starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Concatenation of ``arange(starts[k], starts[k] + lengths[k])`` over k, vectorised."""
    total = int(lengths.sum())
    if total == 0:
        return torch.zeros(0, dtype=torch.int64)
    offsets = torch.cumsum(lengths, 0) - lengths  # where each range begins in the output
    owner = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
    return starts[owner] + (torch.arange(total) - offsets[owner])


def _as_int(key) -> int | None:
    """``key`` as a Python int if it is a scalar integer (int, NumPy or 0-d tensor)."""
    if isinstance(key, torch.Tensor):
        return int(key) if key.ndim == 0 and not key.is_floating_point() else None
    try:
        return operator.index(key)
    except TypeError:
        return None


class SparseRows:
    """S clients' rows, b per client (padding rows empty), d features, as CSR.

    Stands in for a dense (S, b, d) tensor wherever the core reads client features.

    Parameters
    ----------
    indptr : (S*b + 1,) int64
        CSR row pointers over the flattened rows (row ``s*b + j`` is row j of client s).
    col : (nnz,) int64
        Column (feature) index of every non-zero, in ``0 .. d-1``.
    val : (nnz,) floating
        Value of every non-zero.
    shape : (S, b, d)

    Notes
    -----
    Repeated (row, column) pairs add up, as in SciPy. Construct from per-client SciPy
    matrices with :meth:`from_scipy`.
    """

    #: Reported by ``layout`` so code can tell this apart from a strided torch tensor.
    layout = "sparse_rows"
    is_sparse = True
    ndim = 3

    def __init__(self, indptr: torch.Tensor, col: torch.Tensor, val: torch.Tensor,
                 shape: Sequence[int]):
        S, b, d = (int(s) for s in shape)
        if indptr.shape != (S * b + 1,):
            raise fail("indptr.shape", tuple(indptr.shape), f"must be ({S * b + 1},) for "
                       f"shape {(S, b, d)}")
        if col.shape != val.shape or col.ndim != 1 or int(indptr[-1]) != col.numel():
            raise ConfigError(f"col {tuple(col.shape)} and val {tuple(val.shape)} must be 1-D "
                              f"with indptr[-1] = {int(indptr[-1])} entries")
        self.indptr = indptr.to(torch.int64)
        self.col = col.to(torch.int64)
        self.val = val
        self.shape = torch.Size((S, b, d))
        self._row: torch.Tensor | None = None

    # ------------------------------------------------------------ construction

    @classmethod
    def from_scipy(cls, mats: Sequence, dtype: torch.dtype = torch.float32,
                   n_max: int | None = None, name: str = "xs") -> SparseRows:
        """Stack per-client SciPy sparse matrices, padding each to ``n_max`` rows.

        Parameters
        ----------
        mats : sequence of S SciPy sparse matrices, client s being (n_s, d).
        dtype : floating dtype of the stored values.
        n_max : padded rows per client (default the largest n_s).
        name : parameter name used in error messages.

        Returns
        -------
        SparseRows of shape (S, n_max, d).
        """
        import scipy.sparse as sp

        if len(mats) == 0:
            raise fail(name, "[]", "need at least one client")
        mats = [m.tocsr() for m in mats]
        d = mats[0].shape[1]
        for i, m in enumerate(mats):
            if m.dtype.kind not in "biuf":
                raise fail(f"{name}[{i}].dtype", str(m.dtype), "must be real numbers")
            if m.shape[1] != d:
                raise fail(f"{name}[{i}].shape[1]", m.shape[1],
                           f"must equal the feature dimension {d} of client 0")
        counts = np.array([m.shape[0] for m in mats], dtype=np.int64)
        n_max = int(counts.max()) if n_max is None else int(n_max)
        if (counts > n_max).any():
            raise fail("n_max", n_max, f"must be at least the largest client {counts.max()}")
        stacked = sp.vstack(mats, format="csr")
        row_nnz = np.diff(stacked.indptr).astype(np.int64)
        # Real row j of client s lands at flat row s*n_max + j; padding rows stay empty.
        flat = np.repeat(np.arange(len(mats), dtype=np.int64) * n_max, counts) + (
            np.arange(counts.sum(), dtype=np.int64)
            - np.repeat(np.cumsum(counts) - counts, counts))
        per_row = np.zeros(len(mats) * n_max, dtype=np.int64)
        per_row[flat] = row_nnz
        indptr = np.concatenate([[0], np.cumsum(per_row)])
        val = torch.as_tensor(np.asarray(stacked.data)).to(dtype)
        if not torch.isfinite(val).all():
            first = int(np.flatnonzero(~np.isfinite(stacked.data))[0])
            client = int(np.searchsorted(np.cumsum(row_nnz.reshape(-1))[np.cumsum(counts) - 1],
                                         first, side="right"))
            raise fail(f"{name}[{client}]", "NaN/inf", "values must be finite")
        return cls(torch.as_tensor(indptr), torch.as_tensor(stacked.indices.astype(np.int64)),
                   val, (len(mats), n_max, d))

    # ------------------------------------------------------------ tensor-like

    @property
    def dtype(self) -> torch.dtype:
        return self.val.dtype

    @property
    def device(self) -> torch.device:
        return self.val.device

    @property
    def nnz(self) -> int:
        return int(self.val.numel())

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def to(self, dtype: torch.dtype | None = None, *, device=None) -> SparseRows:
        """The same rows with values cast to ``dtype`` and every tensor on ``device``
        (``X.to(torch.float64)``, ``X.to(device="cpu", dtype=...)`` as for a tensor;
        what does not change is shared, not copied).

        Raises
        ------
        ConfigError
            for a ``dtype`` that is not a floating torch dtype, or a device other than the
            CPU: the products are CPU segment sums.
        """
        if isinstance(dtype, str | torch.device):  # X.to("cpu"), as for a tensor
            dtype, device = None, dtype
        check_dtype("dtype", dtype, allow_none=True)
        if device is not None:
            try:
                device = torch.device(device)
            except (RuntimeError, TypeError):
                raise fail("device", device, 'must be a torch device such as "cpu"') from None
            if device.type != "cpu":
                raise fail("device", str(device), "sparse (CSR) client features run on the "
                           "CPU only; densify them (from_arrays with dense arrays) to use "
                           "another device")
        if dtype is None or dtype == self.dtype:
            return self
        out = SparseRows(self.indptr, self.col, self.val.to(dtype), self.shape)
        out._row = self._row
        return out

    def nbytes(self) -> int:
        """Bytes held by the index and value tensors."""
        return sum(t.numel() * t.element_size() for t in (self.indptr, self.col, self.val))

    @property
    def row(self) -> torch.Tensor:
        """(nnz,) flat row index of every non-zero (computed once, cached)."""
        if self._row is None:
            S, b, _ = self.shape
            self._row = torch.repeat_interleave(torch.arange(S * b), torch.diff(self.indptr))
        return self._row

    def _take_flat_rows(self, flat: torch.Tensor, shape: Sequence[int]) -> SparseRows:
        """The rows ``flat`` (any shape, flattened in order) as a new SparseRows ``shape``."""
        flat = flat.reshape(-1)
        starts = self.indptr[flat]
        lengths = self.indptr[flat + 1] - starts
        take = _ranges(starts, lengths)
        indptr = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)])
        return SparseRows(indptr, self.col[take], self.val[take], shape)

    def __getitem__(self, key):
        """``X[clients]`` for a 1-D index (tensor, list, array or slice) of clients, or
        ``X[i, :n]`` / ``X[i]``: client i's rows as a torch sparse COO tensor (n, d)."""
        S, b, d = self.shape
        if isinstance(key, tuple):
            i = _as_int(key[0]) if len(key) == 2 else None
            if i is None or not isinstance(key[1], slice):
                raise fail("index", key, "SparseRows supports X[clients], X[i] and X[i, :n]")
            rows = key[1]
            rng = range(b)[rows]
            if rng.step != 1:
                raise fail("index", key, "row slices must have step 1")
            return self._client_csr(i, rng.start, rng.stop)
        if _as_int(key) is not None:
            return self._client_csr(_as_int(key), 0, b)
        if isinstance(key, slice):
            key = torch.arange(S)[key]
        clients = torch.as_tensor(key)
        if clients.dtype == torch.bool:
            clients = torch.nonzero(clients).reshape(-1)
        if clients.ndim != 1:
            raise fail("clients", tuple(clients.shape), "must be a 1-D index of clients")
        clients = clients.to(torch.int64)
        if clients.numel() and (clients.min() < -S or clients.max() >= S):
            raise fail("clients", clients.tolist()[:5], f"must index 0..{S - 1}")
        clients = clients % S
        flat = clients[:, None] * b + torch.arange(b)[None, :]
        return self._take_flat_rows(flat, (clients.numel(), b, d))

    def _client_csr(self, i: int, start: int, stop: int) -> torch.Tensor:
        S, b, d = self.shape
        if not -S <= i < S:
            raise fail("client", i, f"must be in 0..{S - 1}")
        i %= S
        lo, hi = i * b + start, i * b + max(stop, start)
        ptr = self.indptr[lo:hi + 1]
        seg = slice(int(ptr[0]), int(ptr[-1]))
        rows = torch.repeat_interleave(torch.arange(hi - lo), torch.diff(ptr))
        # COO rather than torch's CSR layout, which still warns that it is in beta.
        return torch.sparse_coo_tensor(torch.stack([rows, self.col[seg]]), self.val[seg],
                                       size=(hi - lo, d), check_invariants=False)

    def gather_rows(self, index: torch.Tensor) -> SparseRows:
        """Rows ``index[s, j]`` of client s: the sparse version of
        ``torch.gather(X, 1, index[..., None].expand(-1, -1, d))``.

        Parameters
        ----------
        index : (S, B) int64 row positions within each client, in ``0 .. b-1``.

        Returns
        -------
        SparseRows of shape (S, B, d).
        """
        S, b, d = self.shape
        if index.ndim != 2 or index.shape[0] != S:
            raise fail("index.shape", tuple(index.shape), f"must be ({S}, B)")
        flat = torch.arange(S)[:, None] * b + index
        return self._take_flat_rows(flat, (S, index.shape[1], d))

    def to_dense(self) -> torch.Tensor:
        """The dense (S, b, d) tensor (for tests and small data only)."""
        S, b, d = self.shape
        out = torch.zeros(S * b * d, dtype=self.dtype)
        out.index_put_((self.row * d + self.col,), self.val, accumulate=True)
        return out.reshape(S, b, d)

    def __array__(self, dtype=None, copy=None):
        a = self.to_dense().numpy()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self) -> str:
        S, b, d = self.shape
        return (f"SparseRows(clients={S}, rows={b}, features={d}, nnz={self.nnz}, "
                f"dtype={self.dtype})")

    # ------------------------------------------------------------ products

    def _client_of_nnz(self) -> torch.Tensor:
        return torch.div(self.row, self.shape[1], rounding_mode="floor")

    def scores(self, params: torch.Tensor) -> torch.Tensor:
        """Linear scores: (S, b), row j of client s dotted with ``params[s]`` (S, d) or
        with a shared ``params`` (d,)."""
        S, b, d = self.shape
        if params.ndim == 1:
            coef = params[self.col]
        else:
            coef = params.reshape(-1)[self._client_of_nnz() * d + self.col]
        out = torch.zeros(S * b, dtype=torch.promote_types(self.dtype, params.dtype))
        out.index_add_(0, self.row, self.val * coef)
        return out.reshape(S, b)

    def weighted_transpose(self, coef: torch.Tensor) -> torch.Tensor:
        """``X_s^T coef_s`` per client: (S, d) from coef (S, b)."""
        S, b, d = self.shape
        out = torch.zeros(S * d, dtype=torch.promote_types(self.dtype, coef.dtype))
        out.index_add_(0, self._client_of_nnz() * d + self.col,
                       self.val * coef.reshape(-1)[self.row])
        return out.reshape(S, d)

    def class_scores(self, W: torch.Tensor) -> torch.Tensor:
        """Scores of C classes: (S, b, C) from per-client class rows W (S, C, d)."""
        S, b, d = self.shape
        C = W.shape[1]
        # (S*d, C) rows: feature k of client s -> its C class weights, one gather per nnz.
        Wt = W.transpose(1, 2).reshape(S * d, C)
        src = self.val[:, None] * Wt[self._client_of_nnz() * d + self.col]
        out = torch.zeros(S * b, C, dtype=src.dtype)
        out.index_add_(0, self.row, src)
        return out.reshape(S, b, C)

    def __matmul__(self, A: torch.Tensor) -> torch.Tensor:
        """``X_s A`` for every client: the dense (S, b, m) product with a dense (d, m)
        matrix (a dictionary's atoms), one sparse-dense product over all rows."""
        S, b, d = self.shape
        if not isinstance(A, torch.Tensor) or A.ndim != 2 or A.shape[0] != d:
            raise fail("A.shape", tuple(getattr(A, "shape", ())), f"must be ({d}, m)")
        coo = torch.sparse_coo_tensor(torch.stack([self.row, self.col]), self.val.to(A.dtype),
                                      size=(S * b, d), check_invariants=False)
        return torch.sparse.mm(coo, A.to(self.device)).reshape(S, b, A.shape[1])

    def columns(self, index: torch.Tensor) -> torch.Tensor:
        """Dense features of the columns ``index[s]`` of each client: the sparse version of
        ``torch.gather(X, 2, index[:, None, :].expand(-1, b, -1))``.

        Every non-zero (client s, column c) is matched to the positions j with
        ``index[s, j] == c`` by a binary search over the sorted keys ``s * d + index``
        (a column may appear at several positions), so memory follows the non-zeros and
        the matches, never (S, d).

        Parameters
        ----------
        index : (S, k) int64 columns in ``0 .. d-1`` per client.

        Returns
        -------
        (S, b, k) dense tensor, ``out[s, r, j] = X[s, r, index[s, j]]``.
        """
        S, b, d = self.shape
        if index.ndim != 2 or index.shape[0] != S:
            raise fail("index.shape", tuple(index.shape), f"must be ({S}, k)")
        k = index.shape[1]
        index = index.to(self.device, torch.int64)
        keys, order = torch.sort((torch.arange(S)[:, None] * d + index).reshape(-1), stable=True)
        query = self._client_of_nnz() * d + self.col
        lo = torch.searchsorted(keys, query)
        matches = torch.searchsorted(keys, query, right=True) - lo
        nz = torch.repeat_interleave(torch.arange(query.numel()), matches)
        first = torch.repeat_interleave(torch.cumsum(matches, 0) - matches, matches)
        flat = order[lo[nz] + torch.arange(nz.numel()) - first]   # positions s * k + j
        out = torch.zeros(S * b, k, dtype=self.dtype)
        out[self.row[nz], flat % k] = self.val[nz]
        return out.reshape(S, b, k)

    def class_weighted_transpose(self, coef: torch.Tensor) -> torch.Tensor:
        """``coef_s^T X_s`` per client: (S, C, d) from coef (S, b, C)."""
        S, b, d = self.shape
        C = coef.shape[-1]
        src = self.val[:, None] * coef.reshape(S * b, C)[self.row]
        out = torch.zeros(S * d, C, dtype=src.dtype)
        out.index_add_(0, self._client_of_nnz() * d + self.col, src)
        return out.reshape(S, d, C).transpose(1, 2)
