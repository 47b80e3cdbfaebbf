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

import math

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
#: The arrays of each encoding's payload, and no others.
_ARRAYS = {"dense": ("value",), "sparse": ("value", "index"), "bitmap": ("value", "bitmap")}


#: The most entries a decoded payload may have (2^31, 8 GB of float32): what a remote
#: peer claims in the metadata is bounded before anything is allocated.
MAX_ELEMENTS = 2**31

# The names in fedsparse's Flower messages, for the ServerApp and the ClientApp alike.
#: train: the broadcast payload (server -> node), put with :func:`put`.
PAYLOAD = "payload"
#: train reply: the client's upload (node -> server), put with :func:`put`.
UPLOAD = "upload"
#: evaluate: the global model (server -> node), put with :func:`put`.
MODEL = "model"
#: train and evaluate replies: a MetricRecord of numbers about the work done.
METRICS = "metrics"
#: query reply: the node's handshake (a ConfigRecord).
NODE = "node"
#: train: round, partition id and upload encoding (a ConfigRecord).
TASK = "fedsparse"
#: In :data:`TASK`: the round (0-based), the fedsparse client id the work is for, and the
#: encoding the upload is to be sent in.
ROUND = "round"
PARTITION_ID = "partition_id"
UPLOAD_ENCODING = "upload_encoding"
#: In :data:`TASK` of ``train`` and ``evaluate``: the round the run started from (0, or
#: its checkpoint's), and of ``train`` the server's last checkpoint round (the round
#: itself when it keeps none): what a node that keeps its clients' state on disk
#: (:mod:`fedsparse.flower.node_state`) reads and deletes by.
START_ROUND = "start_round"
SAVED_ROUND = "saved_round"
#: In :data:`NODE` (the handshake): the node's partition id (:data:`PARTITION_ID`), the
#: number of partitions it was told of, its training examples, the feature shape of
#: one example (a list of ints), the dtype of its data and where its data came from.
NUM_PARTITIONS = "num_partitions"
COUNT = "count"
FEATURE_SHAPE = "feature_shape"
DTYPE = "dtype"
SOURCE = "source"
#: In :data:`NODE`: whether the node keeps its clients' state on disk (node config
#: ``state-dir``), which a resumed run of an algorithm with client state needs.
KEEPS_STATE = "keeps_state"
#: train: the algorithm's client config, scalars (ConfigRecord) and tensors (ArrayRecord).
CONFIG = "config"
CONFIG_ARRAYS = "config.arrays"
#: In :data:`METRICS` and :data:`NODE`: the node's training examples, its test examples,
#: its aggregation weight p_i, and the prefix of a per-client statistic (``stat.<name>``).
NUM_EXAMPLES = "num-examples"
TEST_EXAMPLES = "test-examples"
WEIGHT = "weight"
STAT_PREFIX = "stat."


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


class MalformedPayload(ConfigError):
    """A received payload does not decode to what its metadata claims (or to what was
    expected); the message says what is wrong."""


def _meta_field(meta: ConfigRecord, key: str):
    try:
        return meta[key]
    except KeyError:
        raise MalformedPayload(f"payload metadata has no {key!r}") from None


def _int_list(value, what: str) -> list[int]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0
            for v in value):
        raise MalformedPayload(f"payload {what} {value!r} is not a list of non-negative "
                               "integers")
    return [int(v) for v in value]


def _array_of(arrays: ArrayRecord, key: str) -> np.ndarray:
    try:
        return arrays[key].numpy()
    except KeyError:
        raise MalformedPayload(f"payload has no {key!r} array") from None
    except Exception as exc:  # noqa: BLE001 - a corrupt array gets the same clear message
        raise MalformedPayload(f"payload array {key!r} cannot be read: {exc}") from None


def decode(arrays: ArrayRecord, meta: ConfigRecord,
           expected_shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """The tensor that :func:`encode` encoded (bit for bit), after checking that every
    array agrees with the metadata.

    Parameters
    ----------
    arrays, meta : the two records :func:`encode` returned.
    expected_shape : the shape the receiver expects (None = whatever ``meta`` says).

    Returns
    -------
    torch.Tensor
        Of ``meta["shape"]`` and ``meta["dtype"]``.

    Raises
    ------
    MalformedPayload
        for a payload that is inconsistent (lengths, indices out of range or repeated,
        unknown encoding or dtype) or not of ``expected_shape``; what a remote peer sends
        never reaches torch unchecked. Non-finite values are structurally valid and
        decoded as sent: the round loop screens them (a failed upload of that client).
    """
    enc, dtype = _meta_field(meta, "encoding"), _meta_field(meta, "dtype")
    shape = tuple(_int_list(_meta_field(meta, "shape"), "shape"))
    if not isinstance(enc, str) or enc not in _CONCRETE:
        raise MalformedPayload(f"payload encoding {enc!r} is not one of {list(_CONCRETE)}")
    names = sorted(arrays.keys())
    if names != sorted(_ARRAYS[enc]):  # an extra array would be counted, or read, unchecked
        raise MalformedPayload(f"payload arrays {names}; a {enc} payload has exactly "
                               f"{sorted(_ARRAYS[enc])}")
    if not isinstance(dtype, str) or dtype not in _VALUE_DTYPES:
        raise MalformedPayload(f"payload dtype {dtype!r} is not one of "
                               f"{sorted(_VALUE_DTYPES)}")
    if not shape:
        raise MalformedPayload("payload shape is empty; a payload has at least one axis")
    if expected_shape is not None and shape != tuple(expected_shape):
        raise MalformedPayload(f"payload shape {list(shape)} differs from the expected "
                               f"{list(expected_shape)}")
    if any(n < 0 for n in shape) or math.prod(shape) > MAX_ELEMENTS:
        raise MalformedPayload(f"payload shape {list(shape)} is negative or larger than "
                               f"{MAX_ELEMENTS} entries; refused before allocating it")
    torch_dtype = _VALUE_DTYPES[dtype]
    P = shape[-1]
    R = math.prod(shape[:-1])
    raw = _array_of(arrays, "value").reshape(-1)
    value_np = np.dtype(np.int16 if torch_dtype == torch.bfloat16 else
                        str(torch.empty(0, dtype=torch_dtype).numpy().dtype))
    if raw.dtype != value_np:
        raise MalformedPayload(f"payload values are {raw.dtype}, but the metadata says {dtype}")
    value = torch.from_numpy(raw.copy())
    if torch_dtype == torch.bfloat16:
        value = value.view(torch.bfloat16)
    if enc == "dense":
        if value.numel() != R * P:
            raise MalformedPayload(f"dense payload has {value.numel()} values for shape "
                                   f"{list(shape)} ({R * P} expected)")
        return value.reshape(shape)
    nnz = _int_list(_meta_field(meta, "nnz"), "nnz")
    if len(nnz) != R or any(n > P for n in nnz) or sum(nnz) != value.numel():
        raise MalformedPayload(f"payload nnz {nnz[:8]} does not fit {R} row(s) of length {P} "
                               f"and {value.numel()} values")
    out = torch.zeros(R, P, dtype=torch_dtype)
    if enc == "sparse":
        index = _array_of(arrays, "index").reshape(-1)
        if index.dtype.kind not in "ui" or index.shape[0] != value.numel():
            raise MalformedPayload(f"sparse payload has {index.shape[0]} {index.dtype} "
                                   f"indices for {value.numel()} values")
        cols = torch.from_numpy(index.astype(np.int64))
        if cols.numel() and (int(cols.min()) < 0 or int(cols.max()) >= P):
            raise MalformedPayload(f"sparse payload index out of range [0, {P}): "
                                   f"{int(cols.min())}..{int(cols.max())}")
        rows = torch.repeat_interleave(torch.arange(R), torch.tensor(nnz, dtype=torch.int64))
        flat = rows * P + cols
        if torch.unique(flat).numel() != flat.numel():
            raise MalformedPayload("sparse payload repeats an index within a row")
        out.view(-1)[flat] = value
    else:
        bitmap = _array_of(arrays, "bitmap")
        if bitmap.dtype != np.uint8 or bitmap.size != R * ((P + 7) // 8):
            raise MalformedPayload(f"bitmap payload has a {bitmap.dtype} bitmap of shape "
                                   f"{bitmap.shape}; expected uint8 {(R, (P + 7) // 8)}")
        bits = np.unpackbits(bitmap.reshape(R, -1), axis=-1, count=P, bitorder="little")
        if bits.sum(-1).tolist() != nnz:
            raise MalformedPayload("bitmap payload's set bits do not match its nnz")
        out[torch.from_numpy(bits.astype(bool))] = value
    return out.reshape(shape)


def encoded_bytes(arrays: ArrayRecord) -> int:
    """Payload bytes of an encoded record: the raw bytes of its arrays, no framing, as
    read from the arrays themselves (never from the shape and dtype a sender declares).

    Equals ``fedsparse.comm.payload_bytes(x, encoding).sum()`` for the encoded tensor.
    """
    return int(sum(_array_of(arrays, key).nbytes for key in arrays.keys()))


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


def get(content: RecordDict, name: str, expected_shape: tuple[int, ...] | None = None
        ) -> tuple[torch.Tensor, int]:
    """Decode the payload :func:`put` stored under ``name`` (checked as :func:`decode`).

    Returns
    -------
    x : torch.Tensor
        The decoded payload.
    nbytes : int
        Its payload bytes (:func:`encoded_bytes`).

    Raises
    ------
    MalformedPayload
        if ``content`` holds no payload ``name`` or it is malformed.
    """
    try:
        arrays, meta = content[name], content[name + ".meta"]
    except (KeyError, TypeError):
        raise MalformedPayload(f"the message has no payload {name!r}; records present: "
                               f"{sorted(content)}") from None
    if not isinstance(arrays, ArrayRecord) or not isinstance(meta, ConfigRecord):
        raise MalformedPayload(f"payload {name!r} is not an ArrayRecord with a ConfigRecord")
    return decode(arrays, meta, expected_shape), encoded_bytes(arrays)


def tensors_to_record(tensors: dict[str, torch.Tensor]) -> ArrayRecord:
    """Named tensors as an :class:`~flwr.app.ArrayRecord`, dense and as they are (for
    client state and tensor-valued client config, which are not payloads)."""
    return ArrayRecord({k: Array(v.detach().cpu().contiguous().numpy())
                        for k, v in tensors.items()})


def record_to_tensors(record: ArrayRecord) -> dict[str, torch.Tensor]:
    """The named tensors of :func:`tensors_to_record`, as writable copies."""
    return {k: torch.from_numpy(a.numpy().copy()) for k, a in record.items()}
