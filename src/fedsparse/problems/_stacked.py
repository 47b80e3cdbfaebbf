"""S clients' copies of one network, run as ONE network with grouped layers.

A convolutional client network applied to S clients at once is, exactly, one wider network:
the S clients' feature maps are stacked along the channel axis, ``(b, S x C, H, W)``, each
convolution becomes a grouped convolution with ``groups = S`` over the stacked weights
``(S x O, C, k, k)``, and pooling, activations and per-channel normalisations act on each
stacked channel as they did on the client's own. After ``Flatten`` the features are
reordered to ``(S, b, F)`` and every ``Linear`` layer is a batched matrix product with the
clients' weights ``(S, out, in)``. The input is laid out channels-last, the layout in which
the CPU's (oneDNN) grouped convolutions run at the speed of one convolution of the merged
batch; torch's ``vmap`` also makes a grouped convolution, but in the channels-first layout
(about 2-4 times slower on CPU for the small CNN, measured by ``benchmarks/bench_models.py``).

Every client's output depends on its own weights and rows only, so its loss and gradient
are those of its own network, up to float rounding (the tests compare them with
per-client autograd). Supported: an ``nn.Sequential`` of ``Conv2d`` (zero padding),
``Linear``, ``Flatten`` (from dimension 1), ``BatchNorm2d`` (batch statistics, as the
problem runs every batch norm), ``GroupNorm``, pooling, dropout (off: the module runs in
eval mode) and element-wise activations; and :func:`fedsparse.models.resnet20`'s network
(:mod:`._stacked_resnet`: its residual blocks are not sequential, but each of their layers
stacks the same way). Other networks use ``vmap`` or a loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..models.layout import ParamLayout

# Layers without parameters that act on each channel (or element) on their own.
_CHANNELWISE = (nn.ReLU, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid,
                nn.MaxPool2d, nn.AvgPool2d, nn.Dropout, nn.Dropout2d, nn.Identity)
# Of those, the element-wise ones (also valid after Flatten).
_ELEMENTWISE = (nn.ReLU, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid,
                nn.Dropout, nn.Identity)


#: S clients' logits from their parameters: ``(tensors, X) -> (S, b, C)``, ``tensors`` name
#: -> (S, *shape), ``X`` (S, b, C_in, H, W).
StackedNet = Callable[[dict[str, torch.Tensor], torch.Tensor], torch.Tensor]


def sequential_stack(module: nn.Module) -> StackedNet | None:
    """``module``'s S-client form if it is a sequential network that can run stacked (see
    the module docstring), with at least one convolution; None otherwise (ResNet-20:
    :func:`._stacked_resnet.resnet_stack`)."""
    if type(module) is not nn.Sequential:
        return None
    layers = list(module.named_children())
    flat, convs = False, 0
    for _, m in layers:
        if isinstance(m, nn.Conv2d) and not flat and m.padding_mode == "zeros":
            convs += 1
        elif isinstance(m, nn.BatchNorm2d | nn.GroupNorm) and not flat:
            pass
        elif isinstance(m, nn.Flatten) and not flat and m.start_dim == 1 and m.end_dim == -1:
            flat = True
        elif isinstance(m, nn.Linear) and flat:
            pass
        elif isinstance(m, _ELEMENTWISE if flat else _CHANNELWISE):
            pass
        else:
            return None
        if any(p.ndim == 0 for p in m.parameters(recurse=False)):
            return None
    return functools.partial(_sequential_logits, layers) if convs and flat else None


def to_channels(X: torch.Tensor) -> torch.Tensor:
    """(S, b, C, H, W) rows -> (b, S x C, H, W) stacked feature maps, channels-last."""
    S, b = X.shape[:2]
    h = X.transpose(0, 1).reshape(b, S * X.shape[2], *X.shape[3:])
    return h.contiguous(memory_format=torch.channels_last)


def channel_layer(m: nn.Module, name: str, tensors: dict[str, torch.Tensor], S: int,
                  h: torch.Tensor) -> torch.Tensor:
    """One layer before ``Flatten`` applied to stacked maps ``h`` (b, S x C, H, W)."""
    if isinstance(m, nn.Conv2d):
        w = tensors[f"{name}.weight"]
        w = w.reshape(S * w.shape[1], *w.shape[2:])
        bias = tensors[f"{name}.bias"].reshape(-1) if m.bias is not None else None
        return F.conv2d(h, w, bias, m.stride, m.padding, m.dilation, S * m.groups)
    if isinstance(m, nn.BatchNorm2d):  # statistics per client and channel
        weight, bias = _affine(m, tensors, name)
        return F.batch_norm(h, None, None, weight, bias, True, 0.0, m.eps)
    if isinstance(m, nn.GroupNorm):  # a client's channels are consecutive: S x G groups
        weight, bias = _affine(m, tensors, name)
        return F.group_norm(h, S * m.num_groups, weight, bias, m.eps)
    return m(h)


def linear(name: str, tensors: dict[str, torch.Tensor], h: torch.Tensor,
           bias: bool) -> torch.Tensor:
    """Each client's ``Linear`` layer on its features ``h`` (S, b, in): (S, b, out)."""
    w = tensors[f"{name}.weight"].transpose(1, 2)
    if bias:
        return torch.baddbmm(tensors[f"{name}.bias"].unsqueeze(1), h, w)
    return torch.bmm(h, w)


def _sequential_logits(layers, tensors: dict[str, torch.Tensor], X: torch.Tensor
                       ) -> torch.Tensor:
    S, b = X.shape[:2]
    h = to_channels(X)
    flat = False
    for name, m in layers:
        if isinstance(m, nn.Flatten):
            h = h.reshape(b, S, -1).transpose(0, 1)  # (S, b, C x H x W), C-major per client
            flat = True
        elif isinstance(m, nn.Linear):
            h = linear(name, tensors, h, m.bias is not None)
        elif flat:
            h = m(h)
        else:
            h = channel_layer(m, name, tensors, S, h)
    return h


def _affine(m, tensors, name):
    if not m.affine:
        return None, None
    return tensors[f"{name}.weight"].reshape(-1), tensors[f"{name}.bias"].reshape(-1)


def stacked_grad(net: StackedNet, layout: ParamLayout, loss_fn, p: torch.Tensor, X: torch.Tensor,
                 y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """(s, P) gradients of each client's ``loss_fn(logits, y, w)`` (one autograd pass: the
    clients' losses are independent, so the gradient of their sum is each one's own)."""
    s = X.shape[0]
    if p.ndim == 1:
        p = p.expand(s, -1)
    leaves = {n: t.detach().requires_grad_(True) for n, t in layout.unflatten(p).items()}
    with torch.enable_grad():
        total = loss_fn(net(leaves, X), y, w).sum()
    names = list(leaves)
    grads = torch.autograd.grad(total, [leaves[n] for n in names], allow_unused=True)
    out = torch.empty(s, layout.size, dtype=p.dtype, device=p.device)
    for n, g in zip(names, grads, strict=True):
        sl = layout.slice(n)
        if g is None:
            out[:, sl] = 0
        else:
            out[:, sl] = g.reshape(s, -1)
    return out
