"""A federated data set on disk, read a client at a time.

The format is a directory of NumPy ``.npy`` arrays and a JSON index, chosen over
Arrow/Parquet because it needs no dependency beyond NumPy, its arrays are memory-mapped
(``np.load(mmap_mode="r")``: a client's rows are paged in when it is read, never the
file), and a client is one contiguous slice, located by an offsets array::

    DIR/index.json          format, version, name, N, feature shape, dtype, splits, and
                            every file's size in bytes (and SHA-256 for the small ones)
    DIR/weights.npy         (N,) float64 client weights p_i
    DIR/ground_truth.npy    (P,) the generating model (optional)
    DIR/<split>.X.npy       (n_total, *feature_shape) every client's features, client
                            after client (split = train, test)
    DIR/<split>.y.npy       (n_total,) targets
    DIR/<split>.offsets.npy (N + 1,) int64: client i's rows are offsets[i]:offsets[i+1]
    DIR/<split>.crc32.npy   (N,) uint32 CRC-32 of client i's feature and target bytes

Everything is checked and errors are :class:`~fedsparse.data.DataFormatError` naming
the file and, where one is involved, the client: a missing or unparsable index, a file
that is a symbolic link out of the folder (the folder holds the whole data set; a link
to another of its files is fine), a file whose size differs from the index (truncated),
small files whose SHA-256 differs, offsets that disagree with the arrays, and a client
whose bytes do not match its CRC (checked each time it is read, with the finiteness of
its values, so a corrupted client is caught without reading the whole data set).
:func:`write_federated` writes into a temporary directory next to the target and renames
it into place only when complete, so an interrupted write never leaves a directory that
reads as valid.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
import zlib
from pathlib import Path

import numpy as np
import torch

from .._validation import ConfigError, broken_link, check_bool, check_dtype, fail
from ..manifest_file import sha256 as _sha256
from .federated import FederatedDataset
from .lazy import CHUNK_BYTES, ClientSource, LazyFederatedDataset, auto_pooled
from .loaders import DataFormatError
from .sparse_rows import SparseRows

__all__ = ["FORMAT", "ondisk_data", "open_federated", "read_client", "write_federated"]

FORMAT, VERSION = "fedsparse.federated", 1
_DTYPES = {"float16": torch.float16, "float32": torch.float32, "float64": torch.float64}
_SPLITS = ("train", "test")


def _crc(x: np.ndarray, y: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(y).tobytes(),
                      zlib.crc32(np.ascontiguousarray(x).tobytes()))


def _client_chunks(counts: torch.Tensor, row_bytes: int, budget: int) -> list[range]:
    """Consecutive clients whose rows take about ``budget`` bytes (at least one each)."""
    out, a, used = [], 0, 0
    for i, n in enumerate(counts.tolist()):
        if i > a and used + n * row_bytes > budget:
            out.append(range(a, i))
            a, used = i, 0
        used += n * row_bytes
    out.append(range(a, len(counts)))
    return out


def _write_split(tmp: Path, kind: str, data: FederatedDataset, part: int, np_dtype,
                 budget: int) -> None:
    split = data.train if part == 0 else data.test
    counts = split.counts.cpu().to(torch.int64)
    offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(counts.numpy())
    shape = tuple(data.feature_shape)
    X = np.lib.format.open_memmap(tmp / f"{kind}.X.npy", mode="w+", dtype=np_dtype,
                                  shape=(int(offsets[-1]), *shape))
    Y = np.lib.format.open_memmap(tmp / f"{kind}.y.npy", mode="w+", dtype=np_dtype,
                                  shape=(int(offsets[-1]),))
    crc = np.zeros(counts.shape[0], dtype=np.uint32)
    row = int(np.prod(shape, dtype=np.int64)) * np.dtype(np_dtype).itemsize
    for chunk in _client_chunks(counts, row, budget):
        ids = torch.arange(chunk.start, chunk.stop)
        if isinstance(data, LazyFederatedDataset):
            part_split = data.subset(ids)
            part_split = part_split.train if part == 0 else part_split.test
        else:
            part_split = split.select(ids.to(counts.device))
        for s, i in enumerate(chunk):
            x, y = part_split.client(s)
            x = x.detach().cpu().numpy().astype(np_dtype, copy=False)
            y = y.detach().cpu().numpy().astype(np_dtype, copy=False)
            X[offsets[i]:offsets[i + 1]] = x
            Y[offsets[i]:offsets[i + 1]] = y
            crc[i] = _crc(x, y)
    X.flush()
    Y.flush()
    del X, Y
    np.save(tmp / f"{kind}.offsets.npy", offsets)
    np.save(tmp / f"{kind}.crc32.npy", crc)


def write_federated(data: FederatedDataset, path, *, overwrite: bool = False,
                    chunk_bytes: int = CHUNK_BYTES) -> Path:
    """Write ``data`` (eager or lazy, any dense layout) to the directory ``path``.

    Clients are read ``chunk_bytes`` of features at a time, so a lazy data set larger
    than memory is written with memory that follows the chunk. The directory is built
    under a temporary name next to ``path`` and renamed into place when complete.

    Parameters
    ----------
    data : the federated data; dense features of dtype float16, float32 or float64.
    path : the directory to create.
    overwrite : replace an earlier data set at ``path`` (default: refuse); a path that
        holds anything else is never deleted.
    chunk_bytes : most bytes of features materialised at once.

    Returns
    -------
    Path of the written directory.
    """
    if not isinstance(data, FederatedDataset):
        raise fail("data", type(data).__name__, "must be a fedsparse FederatedDataset")
    overwrite = check_bool("overwrite", overwrite)
    for split in (data.train, data.test):
        if split is not None and isinstance(getattr(split, "X", None), SparseRows):
            raise fail("data", "sparse (CSR) features", "the on-disk format stores dense "
                       "features; densify them first")
    names = {v: k for k, v in _DTYPES.items()}
    if data.dtype not in names:
        raise fail("data.dtype", str(data.dtype), f"must be one of {sorted(_DTYPES)}")
    np_dtype = np.dtype(names[data.dtype])
    path = Path(path)
    check_target(path, overwrite)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.partial-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        splits = ["train"] + (["test"] if data.test is not None else [])
        for part, kind in enumerate(splits):
            _write_split(tmp, kind, data, part, np_dtype, chunk_bytes)
        np.save(tmp / "weights.npy", data.weights.detach().cpu().to(torch.float64).numpy())
        if data.ground_truth is not None:
            np.save(tmp / "ground_truth.npy",
                    data.ground_truth.detach().cpu().numpy().astype(np_dtype))
        files = {}
        for f in sorted(tmp.iterdir()):
            entry = {"bytes": f.stat().st_size}
            if not f.name.endswith((".X.npy", ".y.npy")):  # small: checked in full
                entry["sha256"] = _sha256(f)
            files[f.name] = entry
        index = {"format": FORMAT, "version": VERSION, "name": data.name,
                 "num_clients": data.num_clients, "feature_shape": list(data.feature_shape),
                 "dtype": names[data.dtype], "splits": splits, "files": files}
        (tmp / "index.json").write_text(json.dumps(index, indent=1))
        if path.exists():  # overwrite: the old one moves aside until the new one is in
            old = path.parent / f".{path.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def check_target(path: Path, overwrite: bool, names: tuple[str, str] = ("path", "overwrite")
                 ) -> None:
    """Refuse to write a data set at ``path`` unless it is new, or ``overwrite`` is set and
    ``path`` holds an earlier data set and nothing else: overwriting never deletes a
    folder or file that is not one of this format's (a thesis, the working directory).
    ``names`` are how the caller spells the two parameters (``--out``, ``--force``)."""
    where, flag = names
    if not path.exists() and not path.is_symlink():
        return
    if not overwrite:
        raise fail(where, str(path), f"already exists; {flag} replaces an earlier data set")
    if path.is_symlink() or not path.is_dir():
        raise fail(where, str(path), f"is a file, not an earlier data set; {flag} replaces "
                   "only a data set of this format")
    try:
        index = _read_index(path)
    except DataFormatError as exc:
        raise fail(where, str(path), f"is not a data set of this format ({exc}); {flag} "
                   "replaces only one, so nothing was deleted") from None
    others = sorted(p.name for p in path.iterdir()
                    if p.name != "index.json" and p.name not in index["files"])
    if others:
        raise fail(where, str(path), f"holds files that are not part of its data set "
                   f"({', '.join(others[:5])}); {flag} would delete them, so nothing was "
                   "deleted")


class _Reader:
    """Client i's arrays from the memory-mapped split files, checked against the CRC."""

    def __init__(self, root: Path, splits: list, arrays: dict, crcs: dict, offsets: dict):
        self.root, self.splits = root, splits
        self.arrays, self.crcs, self.offsets = arrays, crcs, offsets
        # what a checkpoint compares (fedsparse.data.digest): the checksums cover every row
        self.identity = ";".join(f"{kind}:{zlib.crc32(crcs[kind].tobytes())}:"
                                 f"{zlib.crc32(offsets[kind].tobytes())}" for kind in splits)

    def missing(self, i: int) -> DataFormatError:
        N = self.offsets["train"].shape[0] - 1
        return DataFormatError(f"{self.root}: client {i} does not exist; the data set holds "
                               f"clients 0..{N - 1}")

    def labels(self) -> list[tuple[str, np.ndarray]]:
        """``[(split, every client's labels)]``, read without the features (what a
        problem's label check reads before a run)."""
        return [(kind, np.array(self.arrays[kind][1])) for kind in self.splits]

    def __call__(self, i: int) -> tuple:
        out = []
        for kind in _SPLITS:
            if kind not in self.splits:
                out += [None, None]
                continue
            X, Y = self.arrays[kind]
            a, b = int(self.offsets[kind][i]), int(self.offsets[kind][i + 1])
            x, y = np.array(X[a:b]), np.array(Y[a:b])
            if _crc(x, y) != int(self.crcs[kind][i]):
                raise DataFormatError(f"{self.root / f'{kind}.X.npy'} (or {kind}.y.npy): client "
                                      f"{i}'s rows {a}..{b} do not match their checksum: the "
                                      "file is corrupted")
            for name, values in (("X", x), ("y", y)):
                # written only from checked arrays: a NaN here was put in by hand, with
                # its checksum, and would otherwise surface as a diverging run
                if not np.isfinite(values).all():
                    raise DataFormatError(f"{self.root / f'{kind}.{name}.npy'}: client {i}'s "
                                          f"rows {a}..{b} hold NaN or infinite values")
            out += [x, y]
        return tuple(out)


def _inside(root: Path, f: Path) -> None:
    """Refuse a file of the data set at ``root`` that is a symbolic link leading out of
    the folder (a link to another file in it is fine).

    Whoever points a run or a node at a folder expects only that folder read; the index's
    sizes and checksums would still pass a file kept elsewhere, which moving or copying the
    folder then loses, and which another user may change.
    """
    link = broken_link(f)  # a loop, which resolve() raises on (to 3.12) or passes (3.13)
    if link:
        raise DataFormatError(f"{f}: {link}; a data set's files are files in its folder")
    where, folder = f.resolve(), root.resolve()
    if not where.is_relative_to(folder):
        raise DataFormatError(f"{f}: a symbolic link to {where}, outside the data set's "
                              f"folder {folder}; a data set reads only the files in its "
                              "folder: copy the file there instead of linking it")


def _check_file(root: Path, name: str, entry: dict) -> Path:
    f = root / name
    _inside(root, f)
    if not f.is_file():
        raise DataFormatError(f"{f}: missing (listed in {root / 'index.json'})")
    size = f.stat().st_size
    if size != entry.get("bytes"):
        raise DataFormatError(f"{f}: {size} bytes, the index says {entry.get('bytes')}: the "
                              "file is truncated or was changed")
    if "sha256" in entry and _sha256(f) != entry["sha256"]:
        raise DataFormatError(f"{f}: its SHA-256 differs from the index: corrupted")
    return f


def _load(f: Path, mmap: bool = False) -> np.ndarray:
    try:
        return np.load(f, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise DataFormatError(f"{f}: not a readable .npy array ({exc})") from None


def _read_index(root: Path) -> dict:
    f = root / "index.json"
    if not root.is_dir():
        raise DataFormatError(f"{root}: not a directory holding a federated data set")
    _inside(root, f)
    if not f.is_file():
        raise DataFormatError(f"{f}: missing; {root} is not a complete federated data set "
                              "(an interrupted write leaves none)")
    try:
        index = json.loads(f.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataFormatError(f"{f}: not valid JSON ({exc})") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise DataFormatError(f"{f}: not a {FORMAT} index")
    if type(index.get("version")) is not int or index["version"] != VERSION:
        raise DataFormatError(f"{f}: version {index.get('version')!r}; this fedsparse reads "
                              f"version {VERSION}")
    for key, kind in (("num_clients", int), ("feature_shape", list), ("splits", list),
                      ("files", dict), ("dtype", str)):
        if not isinstance(index.get(key), kind):
            raise DataFormatError(f"{f}: field {key!r} missing or not a {kind.__name__}")
    if index["dtype"] not in _DTYPES or index["splits"] not in (["train"], ["train", "test"]):
        raise DataFormatError(f"{f}: dtype {index['dtype']!r} or splits {index['splits']} "
                              "not allowed")
    # JSON's true is a Python int and 5.7 would be cut to 5 by int(): a hand-edited index
    # is refused rather than read as something it does not say
    if isinstance(index["num_clients"], bool) or index["num_clients"] < 1:
        raise DataFormatError(f"{f}: field 'num_clients' is {index['num_clients']!r}; "
                              "expected a positive integer")
    if not all(type(s) is int and s >= 1 for s in index["feature_shape"]):
        raise DataFormatError(f"{f}: field 'feature_shape' is {index['feature_shape']!r}; "
                              "expected a list of positive integers")
    return index


def _check_array(f: Path, a: np.ndarray, shape: tuple | None, kinds: str, what: str) -> None:
    """Refuse a small array of the wrong shape, dtype kind (``"f"``, ``"u"``, ...) or,
    for floats, with NaN or infinite entries: written only by :func:`write_federated`,
    such a file was put in by hand (with its checksum), and would otherwise fail far
    from here or give NaN metrics."""
    nonfinite = a.dtype.kind == "f" and not np.isfinite(a).all()
    if a.dtype.kind not in kinds or (shape is not None and a.shape != shape) or nonfinite:
        held = " holding NaN or infinite values" if nonfinite else ""
        raise DataFormatError(f"{f}: {a.dtype} array of shape {a.shape}{held}; expected "
                              f"{what}")


def open_federated(path) -> LazyFederatedDataset:
    """Open a data set written by :func:`write_federated`, reading clients on demand.

    The index, the file sizes, the small files' SHA-256 and the offsets are checked now;
    a client's CRC-32 each time it is read. Memory: the offsets, checksums and weights
    (about 24 bytes a client); the features stay on disk until a client is read.

    Returns
    -------
    LazyFederatedDataset, in the layout :func:`~fedsparse.data.from_arrays` would choose
    for the same arrays, giving the same :func:`fedsparse.simulate` history.

    Raises
    ------
    DataFormatError
        naming the file (and the client) for anything missing, truncated, corrupted or
        inconsistent.
    """
    root = Path(path)
    index = _read_index(root)
    N, shape = index["num_clients"], tuple(int(s) for s in index["feature_shape"])
    np_dtype = np.dtype(index["dtype"])
    files = index["files"]
    for name, entry in files.items():
        if not isinstance(entry, dict) or Path(name).name != name:
            raise DataFormatError(f"{root / 'index.json'}: bad entry for {name!r}")
        _check_file(root, name, entry)
    need = ["weights.npy"] + [f"{k}.{p}.npy" for k in index["splits"]
                              for p in ("X", "y", "offsets", "crc32")]
    for name in need:
        if name not in files:
            raise DataFormatError(f"{root / 'index.json'}: does not list {name}")
    arrays, crcs, offsets, counts = {}, {}, {}, []
    for kind in index["splits"]:
        off = _load(root / f"{kind}.offsets.npy")
        crc = _load(root / f"{kind}.crc32.npy")
        X = _load(root / f"{kind}.X.npy", mmap=True)
        Y = _load(root / f"{kind}.y.npy", mmap=True)
        where = f"{root / f'{kind}.offsets.npy'}"
        if off.shape != (N + 1,) or off.dtype != np.int64:
            raise DataFormatError(f"{where}: shape {off.shape} {off.dtype}, the index says "
                                  f"{N} clients ({N + 1} int64 offsets)")
        n = np.diff(off)
        if off[0] != 0 or (n < 1).any():
            bad = int(np.argmax(n < 1)) if (n < 1).any() else 0
            raise DataFormatError(f"{where}: offsets must start at 0 and give every client "
                                  f"at least one row; client {bad} has {int(n[bad])}")
        if X.shape != (int(off[-1]), *shape) or Y.shape != (int(off[-1]),) \
                or X.dtype != np_dtype or Y.dtype != np_dtype:
            raise DataFormatError(f"{root / f'{kind}.X.npy'}: shape {X.shape} {X.dtype} and "
                                  f"{kind}.y.npy {Y.shape} {Y.dtype} disagree with the index "
                                  f"({int(off[-1])} rows of {shape}, {np_dtype})")
        _check_array(root / f"{kind}.crc32.npy", crc, (N,), "u",
                     f"{N} unsigned CRC-32 checksums, one per client of the index")
        arrays[kind], crcs[kind], offsets[kind] = (X, Y), crc, off
        counts.append(torch.as_tensor(n, dtype=torch.int64))
    weights = _load(root / "weights.npy")
    _check_array(root / "weights.npy", weights, (N,), "f", f"{N} finite float weights")
    if (weights <= 0).any():
        bad = int(np.argmax(weights <= 0))
        raise DataFormatError(f"{root / 'weights.npy'}: client {bad} has weight "
                              f"{float(weights[bad])!r}; clients need positive weights (a "
                              "round in which only zero-weight clients deliver would average "
                              "0/0): write the data set again without that client")
    gt = None
    if "ground_truth.npy" in files:
        gt = _load(root / "ground_truth.npy")
        _check_array(root / "ground_truth.npy", gt, None, "f", "the finite float "
                     "generating model")
        gt = torch.as_tensor(gt).reshape(-1)
    reader = _Reader(root, index["splits"], arrays, crcs, offsets)
    test = counts[1] if len(counts) > 1 else None
    dtype = _DTYPES[index["dtype"]]
    source = ClientSource(reader, (counts[0], test), shape, dtype,
                          auto_pooled(shape, counts[0], test), describe=str(root),
                          missing=reader.missing)
    # float16 is a storage format: a run computes in float32 (fedsparse computes in float32
    # or float64 only), reading the stored values exactly.
    return LazyFederatedDataset.from_source(
        source, dtype=torch.float32 if dtype == torch.float16 else dtype,
        name=str(index.get("name", root.name)), ground_truth=gt,
        weights=torch.as_tensor(weights, dtype=torch.float64))


def ondisk_data(path, *, dtype: torch.dtype = torch.float32) -> LazyFederatedDataset:
    """A data set written by ``fedsparse data write`` (or :func:`write_federated`): the
    ``ondisk`` data kind of experiment configs, ``data = {kind = "ondisk", path = "DIR"}``.

    Opened with :func:`open_federated` (its clients read when sampled) and computed in
    the run's ``dtype``.
    """
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise fail("path", path, "must be the folder written by fedsparse data write")
    dtype = check_dtype("dtype", dtype)
    return open_federated(path).to(dtype)


def read_client(path_or_data, i: int) -> tuple:
    """Client ``i``'s ``(X, y, X_test, y_test)`` arrays of an on-disk data set (a path or
    an opened one); :class:`DataFormatError` names the file and the client."""
    data = open_federated(path_or_data) if not isinstance(
        path_or_data, LazyFederatedDataset) else path_or_data
    source = data.source
    if not isinstance(i, int) or isinstance(i, bool):
        raise ConfigError(f"client must be an int, got {i!r}")
    if not 0 <= i < source.num_clients:
        raise source.missing(i) if source.missing else fail("client", i, "out of range")
    return source.read(i)
