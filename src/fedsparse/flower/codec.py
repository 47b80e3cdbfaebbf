"""fedsparse payloads as Flower records: sparse (index, value), bitmap or dense arrays.

A payload tensor of shape (..., P) travels as one :class:`flwr.app.ArrayRecord` plus a
small :class:`flwr.app.ConfigRecord` of metadata (encoding, shape, dtype, non-zeros
per row). The arrays in the ArrayRecord are exactly the bytes that
:func:`fedsparse.comm.payload_bytes` counts:

* ``dense``  -- ``value``: all P entries, ``P * itemsize`` bytes per row;
* ``sparse`` -- ``index``: positions of the non-zeros in the smallest unsigned integer
  type that holds ``0..P-1`` (:func:`fedsparse.comm.index_bytes`) and ``value``:
  the non-zeros, ``nnz * (index_bytes + itemsize)`` bytes per row;
* ``bitmap`` -- ``bitmap``: ``ceil(P / 8)`` bytes of presence bits per row and
  ``value``: the non-zeros, ``ceil(P / 8) + nnz * itemsize`` bytes per row;
* ``auto``   -- the smallest of the three for the whole tensor (for a single vector,
  the same choice as ``payload_bytes(x, "auto")``).

Flower adds its own framing (array headers, protobuf) on top; fedsparse reports the
payload bytes, which are what the papers count.
"""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from .._validation import ConfigError, check_choice
from ..comm import ENCODINGS, index_bytes, payload_bytes

#: numpy dtype of the indices for each index width in bytes.
_INDEX_DTYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_VALUE_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16,
                 "float32": torch.float32, "float64": torch.float64}
_CONCRETE = ("dense", "sparse", "bitmap")


def _as_rows(x: torch.Tensor) -> torch.Tensor:
    if x.ndim == 0:
        raise ConfigError("a payload must have at least one axis; got a 0-d tensor")
    return x.detach().cpu().reshape(-1, x.shape[-1])


def _smallest(rows: torch.Tensor) -> str:
    """The concrete encoding with the fewest bytes for all rows together (ties go to
    dense, then sparse, as in :func:`fedsparse.comm.payload_bytes`)."""
    sizes = {k: int(payload_bytes(rows, k).sum()) for k in _CONCRETE}
    return min(_CONCRETE, key=sizes.__getitem__)


def choose_encoding(x: torch.Tensor, encoding: str = "auto") -> str:
    """The concrete encoding :func:`encode` uses for ``x``.

    Parameters
    ----------
    x : (..., P) payload tensor.
    encoding : "dense", "sparse", "bitmap", or "auto" for the smallest of the three over
        the whole tensor (ties go to dense, then sparse, as in
        :func:`fedsparse.comm.payload_bytes`).

    Returns
    -------
    str
        "dense", "sparse" or "bitmap".
    """
    check_choice("encoding", encoding, ENCODINGS)
    return _smallest(_as_rows(x)) if encoding == "auto" else encoding


def _array(a: np.ndarray) -> Array:
    return Array(np.ascontiguousarray(a))


def encode(x: torch.Tensor, encoding: str = "auto") -> tuple[ArrayRecord, ConfigRecord]:
    """Encode a payload tensor for a Flower message.

    Parameters
    ----------
    x : (..., P) tensor; each vector along the last axis is one payload row.
    encoding : "dense", "sparse", "bitmap" or "auto" (the smallest).

    Returns
    -------
    arrays : ArrayRecord holding only the counted bytes (see the module docstring).
    meta : ConfigRecord with ``encoding``, ``shape``, ``dtype`` and ``nnz`` (per row).
    """
    if not isinstance(x, torch.Tensor):
        raise ConfigError(f"payload must be a torch.Tensor, got {type(x).__name__}")
    dtype = str(x.dtype).removeprefix("torch.")
    if dtype not in _VALUE_DTYPES:
        raise ConfigError(f"payload dtype {dtype!r} cannot be sent; allowed: "
                          f"{sorted(_VALUE_DTYPES)}")
    check_choice("encoding", encoding, ENCODINGS)
    rows = _as_rows(x)
    enc = _smallest(rows) if encoding == "auto" else encoding
    P = rows.shape[-1]
    # bfloat16 has no numpy type; its 2-byte pattern travels as int16 and is viewed back.
    as_numpy = (lambda t: t.view(torch.int16).numpy()) if x.dtype == torch.bfloat16 else \
        (lambda t: t.numpy())
    mask = rows != 0
    arrays: dict[str, Array] = {}
    if enc == "dense":
        arrays["value"] = _array(as_numpy(rows.reshape(-1)))
    else:
        arrays["value"] = _array(as_numpy(rows[mask]))
        if enc == "sparse":
            cols = mask.nonzero()[:, 1].numpy()  # row-major, so rows stay contiguous
            arrays["index"] = _array(cols.astype(_INDEX_DTYPES[index_bytes(P)]))
        else:
            arrays["bitmap"] = _array(np.packbits(mask.numpy(), axis=-1, bitorder="little"))
    meta = ConfigRecord({"encoding": enc, "shape": [int(s) for s in x.shape], "dtype": dtype,
                         "nnz": [int(n) for n in mask.sum(-1).tolist()]})
    return ArrayRecord(arrays), meta


def decode(arrays: ArrayRecord, meta: ConfigRecord) -> torch.Tensor:
    """The tensor that :func:`encode` encoded (bit for bit).

    Parameters
    ----------
    arrays, meta : the two records :func:`encode` returned.

    Returns
    -------
    torch.Tensor
        Of ``meta["shape"]`` and ``meta["dtype"]``.
    """
    enc, shape, dtype = meta["encoding"], tuple(meta["shape"]), meta["dtype"]
    check_choice("encoding", enc, _CONCRETE)
    torch_dtype = _VALUE_DTYPES[dtype]
    value = torch.from_numpy(arrays["value"].numpy().copy())
    if torch_dtype == torch.bfloat16:
        value = value.view(torch.bfloat16)
    P = shape[-1]
    R = int(np.prod(shape[:-1], dtype=np.int64))
    if enc == "dense":
        return value.reshape(shape)
    out = torch.zeros(R, P, dtype=torch_dtype)
    if enc == "sparse":
        nnz = torch.tensor(meta["nnz"], dtype=torch.int64)
        rows = torch.repeat_interleave(torch.arange(R), nnz)
        cols = torch.from_numpy(arrays["index"].numpy().astype(np.int64))
        out[rows, cols] = value
    else:
        bits = np.unpackbits(arrays["bitmap"].numpy(), axis=-1, count=P, bitorder="little")
        out[torch.from_numpy(bits.astype(bool))] = value
    return out.reshape(shape)


def encoded_bytes(arrays: ArrayRecord) -> int:
    """Payload bytes of an encoded record: the raw bytes of its arrays, no framing.

    Equals ``fedsparse.comm.payload_bytes(x, encoding).sum()`` for the encoded tensor.
    """
    return int(sum(int(np.prod(a.shape, dtype=np.int64)) * np.dtype(a.dtype).itemsize
                   for a in arrays.values()))


def put(content: RecordDict, name: str, x: torch.Tensor, encoding: str = "auto") -> int:
    """Encode ``x`` into ``content[name]`` (+ ``content[name + ".meta"]``).

    Parameters
    ----------
    content : the message content to add the records to.
    name : record name of the payload.
    x : (..., P) payload tensor.
    encoding : as in :func:`encode`.

    Returns
    -------
    int
        Payload bytes (:func:`encoded_bytes`).
    """
    arrays, meta = encode(x, encoding)
    content[name] = arrays
    content[name + ".meta"] = meta
    return encoded_bytes(arrays)


def get(content: RecordDict, name: str) -> tuple[torch.Tensor, int]:
    """Decode the payload :func:`put` stored under ``name``.

    Returns
    -------
    x : torch.Tensor
        The decoded payload.
    nbytes : int
        Its payload bytes (:func:`encoded_bytes`).

    Raises
    ------
    ConfigError
        if ``content`` holds no payload ``name``.
    """
    try:
        arrays, meta = content[name], content[name + ".meta"]
    except KeyError:
        raise ConfigError(f"the message has no payload {name!r}; records present: "
                          f"{sorted(content)}") from None
    return decode(arrays, meta), encoded_bytes(arrays)


def tensors_to_record(tensors: dict[str, torch.Tensor]) -> ArrayRecord:
    """Named tensors as an :class:`~flwr.app.ArrayRecord`, dense and as they are (for
    client state and tensor-valued client config, which are not payloads)."""
    return ArrayRecord({k: Array(v.detach().cpu().contiguous().numpy())
                        for k, v in tensors.items()})


def record_to_tensors(record: ArrayRecord) -> dict[str, torch.Tensor]:
    """The named tensors of :func:`tensors_to_record`, as writable copies."""
    return {k: torch.from_numpy(a.numpy().copy()) for k, a in record.items()}
