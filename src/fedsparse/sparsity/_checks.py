"""The argument check the public sparsity operators share: a torch tensor of the wanted
rank, or a ConfigError naming the argument, what it got and what it must be.

Type and rank only: these operators run at every local step, so the values are not
inspected (a NaN is the caller's to see, and H_tau keeps it visible).
"""

from __future__ import annotations

import torch

from .._validation import fail


def check_tensor(name: str, x, shape: str = "(..., d)", *, min_ndim: int = 1,
                 floating: bool = False) -> torch.Tensor:
    """``x`` when it is a torch tensor with at least ``min_ndim`` axes (of a floating
    dtype when ``floating``); otherwise a ConfigError naming ``name``.

    Parameters
    ----------
    name : the argument, as the message names it.
    x : the value given.
    shape : the wanted shape, as the message says it, e.g. ``"(..., d)"``.
    min_ndim : fewest axes allowed.
    floating : require a floating-point dtype (for a product with a float dictionary,
        a norm).
    """
    if not isinstance(x, torch.Tensor):
        raise fail(name, type(x).__name__, f"must be a torch tensor of shape {shape} "
                   "(convert arrays and lists with torch.as_tensor)")
    if x.ndim < min_ndim:
        raise fail(name, f"tensor of shape {tuple(x.shape)}", f"must have shape {shape}")
    if floating and not x.is_floating_point():
        raise fail(name, f"tensor of dtype {x.dtype}", "must be a floating-point tensor "
                   "(float32 or float64)")
    return x
