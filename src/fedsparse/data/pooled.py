"""Pooled client data: every client's examples in one tensor, with per-client offsets.

The padded layout stores client features as one (N, n_max, *feature_shape) tensor, so
every client's work is one batched product. With power-law client sizes (LEAF-style
partitions, Dirichlet label skew) n_max is many times the mean size and the padding
dominates: 80,000 CIFAR-10 images (3 x 32 x 32, float32) over 1,000 clients, the largest
holding 2,000, take 1 GB as they are and 24.6 GB padded. :class:`PooledRows` keeps the
examples once, client after client, in a pool (n_total, *feature_shape) and remembers
where each client starts and how many examples it has. Mini-batches are copied out with one
``index_select`` (:meth:`PooledRows.gather_rows`), so a local step of a neural problem
costs the same as on padded data; evaluation walks the pool in chunks
(:meth:`PooledRows.iter_chunks`) and never builds the padded tensor.

Linear problems work on the padded (N, n_max, d) tensor; they get it from
:meth:`fedsparse.data.FederatedDataset.padded`. A torch operation applied to a
:class:`PooledRows` directly raises a clear error that says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from .._validation import ConfigError, check_int, fail

__all__ = ["PooledRows", "ranges"]


def ranges(starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Concatenation of ``arange(starts[k], starts[k] + lengths[k])`` over k, vectorised.

    Parameters
    ----------
    starts, lengths : (K,) int64 on the same device.

    Returns
    -------
    (sum(lengths),) int64 on that device.
    """
    device = starts.device
    total = int(lengths.sum()) if lengths.numel() else 0
    if total == 0:
        return torch.zeros(0, dtype=torch.int64, device=device)
    offsets = torch.cumsum(lengths, 0) - lengths  # where each range begins in the output
    owner = torch.repeat_interleave(torch.arange(lengths.numel(), device=device), lengths)
    return starts[owner] + (torch.arange(total, device=device) - offsets[owner])


def _client_index(key, num_clients: int, device: torch.device) -> torch.Tensor:
    """A 1-D index of clients (tensor, list, array, slice or bool mask) as int64 ids."""
    if isinstance(key, slice):
        return torch.arange(num_clients, device=device)[key]
    try:
        clients = torch.as_tensor(np.asarray(key) if not isinstance(key, torch.Tensor) else key)
    except (TypeError, ValueError):
        raise fail("clients", key, "must be a 1-D index of clients") from None
    if clients.dtype == torch.bool:
        if clients.shape != (num_clients,):
            raise fail("clients", tuple(clients.shape), f"a mask must have {num_clients} entries")
        clients = torch.nonzero(clients).reshape(-1)
    if clients.ndim != 1 or clients.is_floating_point() or clients.is_complex():
        raise fail("clients", tuple(clients.shape), "must be a 1-D integer index of clients")
    clients = clients.to(device=device, dtype=torch.int64)
    if clients.numel() and (int(clients.min()) < -num_clients
                            or int(clients.max()) >= num_clients):
        raise fail("clients", clients.tolist()[:5], f"must index 0..{num_clients - 1}")
    return clients % num_clients


class PooledRows:
    """N clients' examples stored once, client after client, in a pool.

    Stands in for a padded (N, n_max, *feature_shape) tensor: :attr:`shape` reports
    that shape, and rows past a client's count read as zeros (:meth:`gather_rows`,
    :meth:`dense`), exactly like the padding of the dense layout.

    Parameters
    ----------
    pool : (n_total, *feature_shape) floating tensor
        The examples. Client i's are ``pool[starts[i] : starts[i] + counts[i]]``.
    starts : (N,) int64
        First pool row of every client.
    counts : (N,) int64
        Number of examples of every client.
    n_max : int, optional
        Padded length reported in :attr:`shape` (default ``counts.max()``). A selection
        of clients keeps the n_max of the whole data set, as ``X[clients]`` does for a
        padded tensor, so it stays aligned with the padded labels.

    Notes
    -----
    The pool may hold rows that belong to no client (after :meth:`select`): clients
    share the pool, nothing is copied.
    """

    #: Reported by ``layout`` so code can tell this apart from a strided torch tensor.
    layout = "pooled"
    is_sparse = False

    def __init__(self, pool: torch.Tensor, starts: torch.Tensor, counts: torch.Tensor,
                 n_max: int | None = None):
        if not isinstance(pool, torch.Tensor) or pool.ndim < 2 or not pool.is_floating_point():
            raise fail("pool", getattr(pool, "shape", type(pool).__name__),
                       "must be a floating tensor (n_total, *feature_shape) with at least "
                       "one feature axis")
        starts = torch.as_tensor(starts, device=pool.device)
        counts = torch.as_tensor(counts, device=pool.device)
        if starts.ndim != 1 or counts.shape != starts.shape:
            raise ConfigError(f"starts {tuple(starts.shape)} and counts {tuple(counts.shape)} "
                              "must both be (N,)")
        if starts.is_floating_point() or counts.is_floating_point():
            raise fail("starts/counts dtype", str(starts.dtype), "must be integers")
        starts, counts = starts.to(torch.int64), counts.to(torch.int64)
        if counts.numel() and (int(counts.min()) < 0 or int(starts.min()) < 0
                               or int((starts + counts).max()) > pool.shape[0]):
            raise ConfigError("every client's rows starts[i] .. starts[i] + counts[i] must lie "
                              f"inside the pool of {pool.shape[0]} rows, with counts >= 0")
        largest = int(counts.max()) if counts.numel() else 0
        n_max = largest if n_max is None else check_int("n_max", n_max, minimum=largest)
        self.pool = pool
        self.starts = starts
        self.counts = counts
        self.n_max = n_max

    @classmethod
    def _unchecked(cls, pool: torch.Tensor, starts: torch.Tensor, counts: torch.Tensor,
                   n_max: int) -> PooledRows:
        # For rows derived from valid ones (select, casts, moves): the checks read values
        # back from the device, which would synchronise a GPU on every cohort selection.
        out = object.__new__(cls)
        out.pool, out.starts, out.counts, out.n_max = pool, starts, counts, n_max
        return out

    # ------------------------------------------------------------ construction

    @classmethod
    def from_list(cls, xs: Sequence[torch.Tensor]) -> PooledRows:
        """Pool per-client tensors ``xs[i]`` (n_i, *feature_shape) of one dtype and device.

        Memory: the pool is one copy of the examples (n_total rows); nothing is padded.
        """
        if len(xs) == 0:
            raise fail("xs", "[]", "need at least one client")
        counts = torch.tensor([x.shape[0] for x in xs], dtype=torch.int64)
        starts = torch.cumsum(counts, 0) - counts
        pool = torch.cat(list(xs), 0)
        return cls(pool, starts.to(pool.device), counts.to(pool.device))

    # ------------------------------------------------------------ tensor-like

    @property
    def shape(self) -> torch.Size:
        """(N, n_max, *feature_shape), the shape of the padded tensor this stands for."""
        return torch.Size((self.starts.shape[0], self.n_max, *self.feature_shape))

    @property
    def feature_shape(self) -> tuple[int, ...]:
        return tuple(self.pool.shape[1:])

    @property
    def ndim(self) -> int:
        return 2 + len(self.feature_shape)

    @property
    def dtype(self) -> torch.dtype:
        return self.pool.dtype

    @property
    def device(self) -> torch.device:
        return self.pool.device

    @property
    def num_examples(self) -> int:
        """Number of real examples, ``counts.sum()``."""
        return int(self.counts.sum())

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def to(self, dtype: torch.dtype) -> PooledRows:
        """The same rows cast to ``dtype`` (offsets shared, the pool copied once)."""
        if dtype == self.dtype:
            return self
        return PooledRows._unchecked(self.pool.to(dtype), self.starts, self.counts, self.n_max)

    def to_device(self, device) -> PooledRows:
        """The same rows on ``device`` (pool and offsets moved)."""
        device = torch.device(device)
        if device == self.device:
            return self
        return PooledRows._unchecked(self.pool.to(device), self.starts.to(device),
                                     self.counts.to(device), self.n_max)

    def numel_bytes(self) -> int:
        """Bytes held: the whole pool (shared with selections) and the offsets."""
        return sum(t.numel() * t.element_size() for t in (self.pool, self.starts, self.counts))

    # ------------------------------------------------------------ clients

    def select(self, clients) -> PooledRows:
        """The clients ``clients`` (1-D index, slice or bool mask) as S clients.

        The pool is shared, not copied: only ``starts``/``counts`` are subset.
        """
        idx = _client_index(clients, self.shape[0], self.device)
        return PooledRows._unchecked(self.pool, self.starts[idx], self.counts[idx], self.n_max)

    def client(self, i: int) -> torch.Tensor:
        """Client ``i``'s real examples (n_i, *feature_shape): a view of the pool."""
        N = self.shape[0]
        i = check_int("client", i, minimum=-N, maximum=N - 1) % N
        start = int(self.starts[i])
        return self.pool[start:start + int(self.counts[i])]

    def __getitem__(self, key):
        """``X[clients]`` (:meth:`select`), ``X[i]`` or ``X[i, :n]`` (client i's first n
        real examples, a view; n at most the client's count)."""
        if isinstance(key, tuple):
            if len(key) != 2 or not isinstance(key[1], slice) or isinstance(key[0], slice):
                raise fail("index", key, "PooledRows supports X[clients], X[i] and X[i, :n]")
            rows = self.client(int(key[0]))
            rng = range(self.n_max)[key[1]]
            if rng.step != 1 or (rng.start < rng.stop and rng.stop > rows.shape[0]):
                raise fail("index", key, "rows must be a step-1 slice inside the client's "
                           f"{rows.shape[0]} examples")
            return rows[rng.start:rng.stop]
        if isinstance(key, int | np.integer) or (isinstance(key, torch.Tensor) and key.ndim == 0
                                                 and not key.is_floating_point()):
            return self.client(int(key))
        return self.select(key)

    # ------------------------------------------------------------ dense copies

    def _positions(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Pool rows of ``index[s, j]`` (clamped to a real row) and the padding mask."""
        counts = self.counts[:, None]
        padding = index >= counts
        local = torch.minimum(index, (counts - 1).clamp(min=0))
        pos = (self.starts[:, None] + local).clamp(max=max(self.pool.shape[0] - 1, 0))
        if self.device.type == "cpu" and not bool(padding.any()):
            return pos, None  # full batches skip the masking pass (a GPU would synchronise)
        return pos, padding

    def gather_rows(self, index: torch.Tensor) -> torch.Tensor:
        """Rows ``index[s, j]`` of client s as a dense batch, with one ``index_select``.

        The pooled version of ``torch.gather(X, 1, index[..., None, ...].expand(...))``
        on the padded tensor, and equal to it: positions at or past a client's count
        (padding of clients with fewer than b examples) read as zeros.

        Parameters
        ----------
        index : (S, b) int64 row positions within each client, in ``0 .. n_max - 1``.

        Returns
        -------
        (S, b, *feature_shape) tensor (a copy).
        """
        S = self.shape[0]
        if not isinstance(index, torch.Tensor) or index.ndim != 2 or index.shape[0] != S \
                or index.is_floating_point():
            raise fail("index.shape", tuple(getattr(index, "shape", ())),
                       f"must be an integer tensor ({S}, b)")
        index = index.to(device=self.device, dtype=torch.int64)
        pos, padding = self._positions(index)
        out = torch.index_select(self.pool, 0, pos.reshape(-1))
        if padding is not None:
            # The clamped positions read a real row; the dense layout holds zeros there,
            # and a batch statistic (BatchNorm) would see the difference.
            out.masked_fill_(padding.reshape(-1, *([1] * (out.ndim - 1))), 0)
        return out.reshape(S, index.shape[1], *self.feature_shape)

    def dense(self) -> torch.Tensor:
        """The padded (N, n_max, *feature_shape) tensor (zeros past each count).

        Memory N x n_max rows: for linear problems and small data.
        """
        N = self.shape[0]
        F = math.prod(self.feature_shape)
        out = torch.zeros(N * self.n_max, F, dtype=self.dtype, device=self.device)
        src = ranges(self.starts, self.counts)
        dst = ranges(torch.arange(N, device=self.device) * self.n_max, self.counts)
        out[dst] = self.pool.reshape(self.pool.shape[0], F)[src]
        return out.reshape(self.shape)

    def _contiguous(self) -> bool:
        """True if the clients' rows form one block of the pool, in client order."""
        if self.starts.numel() <= 1:
            return True
        return bool((self.starts[1:] == self.starts[:-1] + self.counts[:-1]).all())

    def iter_chunks(self, max_examples: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The real examples in chunks of at most ``max_examples`` rows, for evaluation.

        Examples come client after client, each client's in row order (the order of
        ``y[mask]`` for the padded labels ``y``; the pool order when the pool was built
        by :meth:`from_list`). When the clients' rows are one block of the pool the
        chunks are views, otherwise each is one ``index_select``.

        Yields
        ------
        clients : (m,) int64 client (position on the client axis) of every example.
        X : (m, *feature_shape) the examples.
        """
        max_examples = check_int("max_examples", max_examples, minimum=1)
        N = self.shape[0]
        owner = torch.repeat_interleave(torch.arange(N, device=self.device), self.counts)
        total = owner.numel()
        if self._contiguous():
            first = int(self.starts[0]) if N else 0
            for a in range(0, total, max_examples):
                b = min(a + max_examples, total)
                yield owner[a:b], self.pool[first + a:first + b]
            return
        rows = ranges(self.starts, self.counts)
        for a in range(0, total, max_examples):
            b = min(a + max_examples, total)
            yield owner[a:b], torch.index_select(self.pool, 0, rows[a:b])

    # ------------------------------------------------------------ guards

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # Without this a linear problem handed pooled data fails deep inside torch with a
        # message about argument types; say what to do instead.
        name = getattr(func, "__name__", str(func))
        raise ConfigError(f"torch.{name} cannot read pooled client features (PooledRows) "
                          "directly: linear problems need the padded layout, "
                          "data.padded(flatten=True), or from_arrays(..., layout='padded')")

    def __array__(self, dtype=None, copy=None):
        a = self.dense().cpu().numpy()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self) -> str:
        N = self.shape[0]
        return (f"PooledRows(clients={N}, rows={self.n_max}, feature_shape={self.feature_shape}, "
                f"examples={self.num_examples}, dtype={self.dtype})")
