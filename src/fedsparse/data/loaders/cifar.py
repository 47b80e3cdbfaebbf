"""CIFAR-10 and CIFAR-100 from their official python-pickle batches: :func:`load_cifar`.

The batches are read with the restricted unpickler of
:mod:`fedsparse.data.loaders.safe_pickle` (it runs no code); pixels and labels are then
checked before NumPy expands them.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..._validation import check_bool, check_choice
from ._common import DataFormatError, _check_finite
from .safe_pickle import unpickle_batch

__all__ = ["load_cifar"]


_CIFAR = {
    "cifar10": ("cifar-10-batches-py",
                {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}),
    "cifar100": ("cifar-100-python", {"train": ["train"], "test": ["test"]}),
}


def load_cifar(path, *, which: str = "cifar10", split: str = "train", label_mode: str = "fine",
               flatten: bool = True, scale: bool = True):
    """Read CIFAR-10 or CIFAR-100 from the official python-pickle batches.

    Parameters
    ----------
    path : str or path-like
        The extracted directory (``cifar-10-batches-py`` with ``data_batch_1`` ..
        ``data_batch_5`` and ``test_batch``; ``cifar-100-python`` with ``train`` and
        ``test``) or its parent directory.
    which : {"cifar10", "cifar100"}
    split : {"train", "test"}
    label_mode : {"fine", "coarse"}, default "fine"
        CIFAR-100 only: the 100 fine labels or the 20 coarse super-classes.
    flatten : bool, default True
        X of shape (n, 3072) in the file's channel-major order (1024 red, 1024 green,
        1024 blue values); otherwise (n, 3, 32, 32).
    scale : bool, default True
        float32 pixels in [0, 1]; otherwise the stored uint8 values.

    Returns
    -------
    X : ndarray, (n, 3072) or (n, 3, 32, 32)
    y : ndarray of int64, shape (n,)

    Raises
    ------
    FileNotFoundError
        A batch file is missing.
    DataFormatError
        A batch is empty, corrupt, lacks its keys, references any Python global other
        than NumPy's array reconstruction (the file is refused and nothing in it runs),
        asks for an array larger than the file, holds pixels that are not integers in
        0..255 (float, NaN, ...), or labels that are not integers in 0..9 (CIFAR-10),
        0..99 (fine) or 0..19 (coarse).
    ConfigError
        A bad ``which``, ``split`` or ``label_mode``.
    """
    check_choice("which", which, _CIFAR)
    check_choice("split", split, ("train", "test"))
    flatten, scale = check_bool("flatten", flatten), check_bool("scale", scale)
    check_choice("label_mode", label_mode, ("fine", "coarse"))
    dirname, files = _CIFAR[which]
    root = Path(os.fspath(path)).expanduser()
    if (root / dirname).is_dir():
        root = root / dirname
    if not root.is_dir():
        raise FileNotFoundError(f"CIFAR directory {str(root)!r} does not exist; expected the "
                                f"extracted {dirname!r} directory (or its parent)")
    if not (root / files[split][0]).exists():
        raise FileNotFoundError(f"CIFAR directory {str(root)!r} holds neither {dirname!r} nor its "
                                f"batch file {files[split][0]!r}; expected the extracted "
                                f"{dirname!r} directory (or its parent)")
    label_key = "labels" if which == "cifar10" else f"{label_mode}_labels"
    num_classes = 10 if which == "cifar10" else (100 if label_mode == "fine" else 20)
    xs, ys = [], []
    for name in files[split]:
        batch = unpickle_batch(root / name)
        where = f"CIFAR batch {str(root / name)!r}"
        if "data" not in batch or label_key not in batch:
            keys = sorted(k[:40] if isinstance(k, str) else _shown(k) for k in batch)
            raise DataFormatError(f"{where} has keys {keys}; expected "
                                  f"'data' and {label_key!r}")
        data = _cifar_pixels(batch["data"], where)
        labels = _cifar_labels(batch[label_key], label_key, num_classes, where)
        if labels.shape[0] != data.shape[0]:
            raise DataFormatError(f"{where} holds {data.shape[0]} images but {labels.shape[0]} "
                                  "labels; expected one label per image")
        xs.append(data)
        ys.append(labels)
    X = np.concatenate(xs)
    y = np.concatenate(ys)
    if not flatten:
        X = X.reshape(-1, 3, 32, 32)
    if scale:
        X = X.astype(np.float32) / np.float32(255.0)
    return X, y


def _shown(value) -> str:
    """A short text for a value from a hostile file: an integer of a million digits
    cannot even be converted (Python refuses beyond 4300), a string is cut."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"<an int of {value.bit_length()} bits>"
    if isinstance(value, (str, bytes)):
        value = value[:40]
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _cifar_pixels(data, where: str) -> np.ndarray:
    """A batch's ``data`` as (n, 3072) uint8, refusing any other shape, dtype or range."""
    if not isinstance(data, np.ndarray) or data.ndim != 2 or data.shape[1] != 3072 \
            or data.shape[0] == 0:
        shape = getattr(data, "shape", type(data).__name__)
        raise DataFormatError(f"{where}: 'data' has shape {shape}; expected (n, 3072) uint8 "
                              "with n >= 1")
    if data.dtype.kind == "f":
        _check_finite(data, f"{where}: 'data'", "pixel")
    if data.dtype.kind not in "iu":
        raise DataFormatError(f"{where}: 'data' has dtype {data.dtype}; expected uint8 pixel "
                              "values 0..255")
    if data.dtype != np.uint8 and (data.min() < 0 or data.max() > 255):
        raise DataFormatError(f"{where}: 'data' holds pixel values {data.min()}..{data.max()}; "
                              "expected 0..255")
    return data.astype(np.uint8, copy=False)


def _cifar_labels(labels, key: str, num_classes: int, where: str) -> np.ndarray:
    """A batch's label list as int64, refusing non-integers and values out of range.

    A list is checked entry by entry before NumPy sees it: ``numpy.asarray`` would
    expand a memo-shared nested list (a few KB of pickle) to gigabytes.
    """
    expected = f"expected integer labels 0..{num_classes - 1}"
    if isinstance(labels, np.ndarray):
        if labels.ndim != 1 or labels.dtype.kind not in "iu":
            raise DataFormatError(f"{where}: {key!r} is an array of shape {labels.shape} and "
                                  f"dtype {labels.dtype}; {expected}")
        arr = labels
    elif isinstance(labels, (list, tuple)):
        for i, v in enumerate(labels):
            if type(v) is not int:  # bool, float, bytes, a nested list, ...
                shown = f"{type(v).__name__} {_shown(v)}" if isinstance(
                    v, (bool, float, complex, str, bytes)) or v is None \
                    else f"a {type(v).__name__}"
                raise DataFormatError(f"{where}: {key!r} holds {shown} at index {i}; "
                                      f"{expected}")
            if not 0 <= v < num_classes:
                raise DataFormatError(f"{where}: {key!r} holds label {_shown(v)} at index {i}; "
                                      f"expected 0..{num_classes - 1}")
        return np.array(labels, dtype=np.int64)
    else:
        raise DataFormatError(f"{where}: {key!r} is a {type(labels).__name__}; expected a "
                              f"list of integer labels 0..{num_classes - 1}")
    bad = (arr < 0) | (arr >= num_classes)
    if bad.any():
        first = int(np.argmax(bad))
        raise DataFormatError(f"{where}: {key!r} holds label {arr[first]} at index {first}; "
                              f"expected 0..{num_classes - 1}")
    return arr.astype(np.int64)

