"""Payload encodings and their exact sizes in bytes (docs/decisions.md, "Conventions").

A dense vector of P values costs ``P * itemsize``. A sparse one is sent as
(index, value) pairs, each index the smallest unsigned integer that holds every
position ``0..P-1``; a bitmap encoding sends ``ceil(P / 8)`` bytes of presence bits
plus the values. ``auto`` takes the smallest of the three.
"""

from __future__ import annotations

import torch

from ._validation import check_choice

ENCODINGS = ("dense", "sparse", "bitmap", "auto")


def index_bytes(length: int) -> int:
    """Bytes of the smallest unsigned integer that holds the indices 0..length-1."""
    for size in (1, 2, 4):
        if length <= 1 << (8 * size):
            return size
    return 8


def payload_bytes(x: torch.Tensor, encoding: str, *,
                  value_bytes: int | None = None) -> torch.Tensor:
    """Size in bytes of each vector along the last axis under ``encoding``.

    Parameters
    ----------
    x : (..., P) tensor of payloads.
    encoding : "dense", "sparse", "bitmap" or "auto" (the smallest).
    value_bytes : bytes per value; default the tensor's item size (4 for float32).

    Returns
    -------
    (...,) int64 tensor of byte counts.
    """
    check_choice("encoding", encoding, ENCODINGS)
    length = x.shape[-1]
    vb = x.element_size() if value_bytes is None else value_bytes
    dense = torch.full(x.shape[:-1], length * vb, dtype=torch.int64, device=x.device)
    if encoding == "dense":
        return dense
    nnz = (x != 0).sum(-1).to(torch.int64)
    sparse = nnz * (index_bytes(length) + vb)
    if encoding == "sparse":
        return sparse
    bitmap = (length + 7) // 8 + nnz * vb
    if encoding == "bitmap":
        return bitmap
    return torch.minimum(torch.minimum(dense, sparse), bitmap)
