"""Loaders for real data in its official file formats, returning plain arrays.

Every loader returns NumPy arrays (or a SciPy CSR matrix for LibSVM text) and
never a torch tensor: turn them into a federated data set with the partitioners in
:mod:`fedsparse.data.partition` and :func:`~fedsparse.data.partition.from_partitions`.

Formats, one module each
------------------------
* IDX (MNIST, Fashion-MNIST, EMNIST): :func:`read_idx`, :func:`load_idx` (``idx``).
* LibSVM / svmlight text (E2006-tfidf, RCV1, MNIST, ...): :func:`load_libsvm`
  (``libsvm``).
* CIFAR-10/100 python pickles, read with a restricted unpickler: :func:`load_cifar`
  (``cifar``; the unpickler in ``safe_pickle``).
* LEAF JSON (FEMNIST, Shakespeare, ...), natural per-writer clients: :func:`load_leaf`
  (``leaf``).

What they share (the error, decompression, bounded reading) is in ``_common``; every
name is importable from this package.

Compressed files (gzip, bzip2, xz) are recognised by their first bytes, never by
their suffix. A missing file raises :class:`FileNotFoundError`; a malformed one raises
:class:`DataFormatError` (a :class:`ValueError`); both name the path and say what was
expected. "Malformed" includes an empty file, NaN or infinite features or targets,
labels that are not integers (or out of range, for CIFAR) and, for LibSVM, feature
indices that are not integers or that would make an absurdly wide matrix. A bad
argument (``which="cifar1000"``, ``n_features=0``) raises
:class:`~fedsparse._validation.ConfigError` naming the parameter.

A hostile file cannot make a reader allocate much more than the file could honestly
hold: IDX headers are checked before the data are read, and decompression stops at the
size the header declares; text files (LibSVM, LEAF JSON) are refused at their first NUL
byte, so a decompression bomb of zeros stops at its first chunk; the CIFAR unpickler
runs no code and refuses structures that would take exponential time or memory to hash
or expand (memo-shared nested lists and tuples) before they are used.
"""

from ._common import DataFormatError
from .cifar import load_cifar
from .idx import load_idx, read_idx
from .leaf import load_leaf
from .libsvm import MAX_LIBSVM_FEATURES, load_libsvm

__all__ = [
    "DataFormatError",
    "MAX_LIBSVM_FEATURES",
    "load_cifar",
    "load_idx",
    "load_leaf",
    "load_libsvm",
    "read_idx",
]
