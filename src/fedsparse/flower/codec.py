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
from ..comm import ENCODINGS, index_bytes

#: numpy dtype of the indices for each index width in bytes.
_INDEX_DTYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_VALUE_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16,
                 "float32": torch.float32, "float64": torch.float64}


def _as_rows(x: torch.Tensor) -> torch.Tensor:
    if x.ndim == 0:
        raise ConfigError("a payload must have at least one axis; got a 0-d tensor")
    return x.detach().cpu().reshape(-1, x.shape[-1])


def _sizes(rows: torch.Tensor) -> dict[str, int]:
    """Bytes of each concrete encoding for all rows together."""
    R, P = rows.shape
    vb = rows.element_size()
    nnz = int((rows != 0).sum())
    return {"dense": R * P * vb, "sparse": nnz * (index_bytes(P) + vb),
            "bitmap": R * ((P + 7) // 8) + nnz * vb}


def choose_encoding(x: torch.Tensor, encoding: str = "auto") -> str:
    """The concrete encoding ``encode`` uses: ``encoding`` itself, or for "auto" the
    smallest (ties go to dense, then sparse, as in :func:`fedsparse.comm.payload_bytes`)."""
    check_choice("encoding", encoding, ENCODINGS)
    if encoding != "auto":
        return encoding
    sizes = _sizes(_as_rows(x))
    return min(("dense", "sparse", "bitmap"), key=lambda k: sizes[k])


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
    enc = choose_encoding(x, encoding)
    rows = _as_rows(x)
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
    """The tensor that :func:`encode` encoded (bit for bit)."""
    enc, shape, dtype = meta["encoding"], tuple(meta["shape"]), meta["dtype"]
    check_choice("encoding", enc, ("dense", "sparse", "bitmap"))
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
    """Encode ``x`` into ``content[name]`` (+ ``content[name + ".meta"]``); return its bytes."""
    arrays, meta = encode(x, encoding)
    content[name] = arrays
    content[name + ".meta"] = meta
    return encoded_bytes(arrays)


def get(content: RecordDict, name: str) -> tuple[torch.Tensor, int]:
    """Decode ``content[name]``; return the tensor and its payload bytes."""
    try:
        arrays, meta = content[name], content[name + ".meta"]
    except KeyError:
        raise ConfigError(f"the message has no payload {name!r}; records present: "
                          f"{sorted(content)}") from None
    return decode(arrays, meta), encoded_bytes(arrays)
