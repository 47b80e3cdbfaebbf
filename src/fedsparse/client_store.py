"""Per-client state of a simulation: in memory up to a budget, otherwise on disk.

Some algorithms keep state on every client between rounds: the personalised models of
FedMac (Liu et al. 2023), pFedMe, Per-FedAvg and HeurFedAMP (``{"personal": (N, P),
"trained": (N,)}``), FedSpa's masks in SAFARI's experiments (Mao et al. 2022, ``{"mask":
(N, P)}``). The simulator holds it for all N clients and touches only the S sampled
rows of a round (:meth:`ClientStore.gather`, :meth:`ClientStore.scatter_`). At cross-
device scale it outgrows memory: FedMac's 79,510-parameter DNN at N = 10^6 clients
would keep 318 GB of personal models.

:func:`open_client_store` therefore keeps the state in memory while it fits a budget
(``client_state_memory``; by default half of the memory available when the run starts)
and otherwise in memory-mapped files, one ``.npy`` file per entry (NumPy's own format:
``numpy.load(path, mmap_mode="r")`` reads it). Only the rows a round samples are paged
in, and the pages are handed back to the system after each read and write (they stay
in the file, and in the page cache while the system has memory to spare), so the
process's memory follows the sampled clients, not N. Results do not depend on where the
state lives: rows are copied in and out unchanged.

The files are written in place (a working copy, not a record): what survives an
interruption is the run's checkpoint, which holds the client state as before; resuming
copies it back into the files a chunk of rows at a time
(:func:`fedsparse.checkpoints.resume_checkpoint` with ``client_state_in_place``).
Without ``client_state_dir`` the files live in a temporary directory that is removed
when the run ends; with it they are kept, and the directory must be new or empty (a run
never writes over files it did not make), unless the run resumes from a checkpoint.
"""

from __future__ import annotations

import mmap
import re
import shutil
import tempfile
import weakref
from pathlib import Path

import numpy as np
import torch

from . import _memory, _resources
from ._validation import check_int, fail

__all__ = ["ClientStore", "PersonalModels", "default_state_memory", "has_personal_models",
           "open_client_store"]

#: Share of the memory available at the start of a run that client state may take
#: before it goes to disk (the rest is left to the data, the chunks and the evaluation).
STATE_MEMORY_FRACTION = 0.5
#: Bytes of rows copied at a time when a store is filled, read whole or written back.
COPY_BYTES = 64 << 20

_SAFE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_NUMPY_DTYPES = {torch.float16: np.float16, torch.float32: np.float32,
                 torch.float64: np.float64, torch.bool: np.bool_, torch.uint8: np.uint8,
                 torch.int8: np.int8, torch.int16: np.int16, torch.int32: np.int32,
                 torch.int64: np.int64}


def default_state_memory() -> int:
    """Bytes of client state kept in memory by default: :data:`STATE_MEMORY_FRACTION` of
    the memory available now (:func:`fedsparse._memory.available_memory`)."""
    return int(_memory.available_memory() * STATE_MEMORY_FRACTION)


class ClientStore:
    """Per-client state of all N clients, updated in place for the sampled ones.

    Parameters
    ----------
    state : dict of (N, ...) tensors, or None for stateless algorithms.
    directory : where the tensors' memory-mapped files live (None: in memory).
    device : where :meth:`gather` puts the rows (None: where the tensors are).
    """

    def __init__(self, state: dict | None, directory: Path | None = None,
                 device: torch.device | None = None):
        self.state = state
        self.directory = directory
        self.device = device
        self._maps: list[mmap.mmap] = []

    @property
    def on_disk(self) -> bool:
        return self.directory is not None

    @property
    def num_clients(self) -> int | None:
        return None if not self.state else int(next(iter(self.state.values())).shape[0])

    def gather(self, clients: torch.Tensor, *, move: bool = True) -> dict | None:
        """A copy of the (S, ...) rows of ``clients``, on ``device``; with ``move=False``
        where the tensors are (rows read from files stay in host memory): a copy to put
        back with :meth:`scatter_`, which needs no transfer to the round's device."""
        if self.state is None:
            return None
        rows = {k: v[clients.to(v.device)] for k, v in self.state.items()}
        if self.on_disk:
            self.release()
            if move:
                rows = {k: v.to(self.device) for k, v in rows.items()}
        return rows

    def scatter_(self, clients: torch.Tensor, rows: dict | None) -> None:
        """Write the (S, ...) rows back in place (no copy of the other N - S rows)."""
        if self.state is None or rows is None:
            return
        for k, v in rows.items():
            # the store stays where it was made (in memory: often the CPU, to spare a
            # GPU's memory for N clients; or in files); the rows come back from the
            # device the round ran on
            held = self.state[k]
            held[clients.to(held.device)] = v.to(held.device)
        self.release()

    def release(self) -> None:
        """Hand the pages of the files back to the system (a no-op in memory): the data
        stay in the files, and the next read pages in only what it touches."""
        _release(self._maps)

    def chunks(self) -> list[tuple[int, int]]:
        """Row ranges ``[a, b)`` of about :data:`COPY_BYTES` each (one range in memory)."""
        N = self.num_clients or 0
        if not self.on_disk or N == 0:
            return [(0, N)]
        row = sum(v[0].numel() * v.element_size() for v in self.state.values())
        step = _memory.items_per_chunk(row, COPY_BYTES, at_most=N)
        return [(a, min(a + step, N)) for a in range(0, N, step)]


def has_personal_models(algorithm, problem, state: dict, seed: int) -> bool:
    """Whether the clients of the bound ``algorithm`` hold personalised models (a store of
    FedSpa's masks holds none): asked of one client's initial state."""
    if not algorithm.stateful_clients:
        return False
    one = torch.tensor([0])
    return algorithm.personalized(state, algorithm.init_clients(problem, one, seed),
                                  clients=one) is not None


class PersonalModels:
    """The (N, P) personalised models of a run, read on demand from its client store (in
    memory or on disk).

    What :func:`fedsparse.metrics.evaluate_personal` and the sampled evaluation index:
    ``view[a:b]`` or ``view[ids]`` is ``algorithm.personalized`` of those clients' rows
    only, so an evaluation over N clients holds one group of rows at a time, and a sampled
    evaluation only its sample's.

    Parameters
    ----------
    algorithm : the bound algorithm; ``state`` : its server state; ``store`` : the
        client store; ``num_clients``, ``dim`` : N and P.
    """

    def __init__(self, algorithm, state: dict, store: ClientStore, num_clients: int,
                 dim: int):
        self.algorithm, self.server_state, self.store = algorithm, state, store
        self.shape = torch.Size((num_clients, dim))
        self.ndim = 2
        self.device = torch.device("cpu")

    def __getitem__(self, index) -> torch.Tensor:
        N = self.shape[0]
        if isinstance(index, slice):
            clients = torch.arange(*index.indices(N))
        elif isinstance(index, torch.Tensor) and index.ndim == 1 and \
                not index.is_floating_point():
            clients = index.cpu()
        else:
            raise fail("index", type(index).__name__, "must be a slice or a 1-D tensor of "
                       "client ids")
        return self.algorithm.personalized(self.server_state, self.store.gather(clients),
                                           clients=clients)

    def materialize(self, path: Path | None = None) -> torch.Tensor:
        """All N models as one tensor: in memory, or in the ``.npy`` file ``path``
        (memory-mapped) for a store on disk."""
        if path is None:
            if not self.store.on_disk:  # the held rows themselves: no gathered copy
                return self.algorithm.personalized(self.server_state, self.store.state)
            return self[:]
        out, mapping = _new_array(path, self[0:1].dtype, tuple(self.shape))
        for a, b in self.store.chunks():
            out[a:b] = self[a:b].cpu()
            _release([mapping])
        return out


def _release(maps: list[mmap.mmap]) -> None:
    """Drop the pages of shared file mappings from this process (their data stay in the
    files and the page cache; the next access reads them back)."""
    if hasattr(mmap, "MADV_DONTNEED"):  # not on Windows: its pages stay mapped
        for m in maps:
            m.madvise(mmap.MADV_DONTNEED)


def _new_array(path: Path, dtype: torch.dtype, shape: tuple[int, ...]
               ) -> tuple[torch.Tensor, mmap.mmap]:
    """A zero-filled (sparse, where the file system allows) ``.npy`` file of ``shape``,
    memory-mapped: the tensor of ``dtype`` over it, and its mapping."""
    np_dtype = _NUMPY_DTYPES.get(dtype)
    if np_dtype is not None:
        array = np.lib.format.open_memmap(path, mode="w+", dtype=np_dtype, shape=shape)
        return torch.from_numpy(array), array._mmap
    # no NumPy twin (bfloat16, ...): the rows' raw bytes, viewed as the dtype
    itemsize = torch.empty((), dtype=dtype).element_size()
    array = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8,
                                      shape=(*shape[:-1], shape[-1] * itemsize))
    return torch.from_numpy(array).view(dtype), array._mmap


def _check_directory(directory, resume: bool) -> Path:
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise fail("client_state_dir", str(directory), "must be a directory (it is a file)")
    if path.is_dir() and any(path.iterdir()):
        foreign = [p.name for p in path.iterdir() if p.suffix != ".npy" or not p.is_file()]
        if not resume or foreign:
            raise fail("client_state_dir", str(directory), "must be a new or empty "
                       "directory (or, resuming, hold only the .npy files of the run "
                       "that resumes): it holds files, and a run never writes over files "
                       "it did not make (give another directory, or empty this one)")
    path.mkdir(parents=True, exist_ok=True)
    return path


def open_client_store(algorithm, problem, num_clients: int, seed: int, *,
                      memory: int | None = None, directory=None, resume: bool = False
                      ) -> ClientStore:
    """The client store of a run: ``algorithm.init_clients`` for all N clients, in memory
    when it fits ``memory`` bytes (and no ``directory`` is given), else in files.

    Parameters
    ----------
    algorithm : the bound algorithm; problem : the run's problem; seed : the run's seed.
    num_clients : N.
    memory : bytes of client state kept in memory (None: :func:`default_state_memory`;
        0: always on disk).
    directory : where the files go (kept after the run); None: a temporary directory
        removed when the store is garbage-collected (files in use stay readable until
        then).
    resume : the run resumes (``directory`` may hold the ``.npy`` files of its
        interrupted run: they are rewritten, from the checkpoint where there is one).

    Returns
    -------
    ClientStore

    Raises
    ------
    ConfigError
        for a negative ``memory``, a ``directory`` that is a file or holds files, state
        entries whose names are not identifiers, or files that would not fit on the
        disk.
    """
    memory = check_int("client_state_memory", memory, minimum=0, allow_none=True)
    N = int(num_clients)
    probe = algorithm.init_clients(problem, torch.arange(min(N, 1)), seed)
    if probe is None:
        return ClientStore(None)
    budget = default_state_memory() if memory is None else memory
    row_bytes = sum(v[0].numel() * v.element_size() for v in probe.values()) if N else 0
    if directory is None and N * row_bytes <= budget:
        return ClientStore(algorithm.init_clients(problem, torch.arange(N), seed))
    for key in probe:
        if not _SAFE_KEY.match(str(key)):
            raise fail("client state entry", key, "must be an identifier (it names a file)")
    if directory is None:
        path = Path(tempfile.mkdtemp(prefix="fedsparse-clients-"))
    else:
        path = _check_directory(directory, resume)
    free = shutil.disk_usage(path).free
    if N * row_bytes > free:
        if directory is None:
            shutil.rmtree(path, ignore_errors=True)
        raise fail("client_state_dir", str(directory or path),
                   f"has {_resources.format_bytes(free)} free, but the client state of "
                   f"{N} clients needs {_resources.format_bytes(N * row_bytes)}")
    arrays = {k: _new_array(path / f"{k}.npy", v.dtype, (N, *v.shape[1:]))
              for k, v in probe.items()}
    state = {k: tensor for k, (tensor, _) in arrays.items()}
    store = ClientStore(state, path, device=next(iter(probe.values())).device)
    store._maps = [m for _, m in arrays.values()]
    if directory is None:  # removed with the store; mapped files stay readable till then
        weakref.finalize(store, shutil.rmtree, path, ignore_errors=True)
    for a, b in store.chunks():
        rows = algorithm.init_clients(problem, torch.arange(a, b), seed)
        for k, v in rows.items():
            if bool(v.any()):  # the files start as zeros: zero rows need no write
                state[k][a:b] = v.cpu()
        store.release()
    return store
