"""S clients' ResNet-20s (:func:`fedsparse.models.resnet20`) run as ONE network.

The same construction as :mod:`._stacked` for sequential networks: the clients' feature maps
are stacked along the channel axis, ``(b, S x C, H, W)`` channels-last, every convolution is
a grouped convolution with ``groups = S`` and every norm acts per client and channel (batch
norm) or on S x 2 groups (group norm). A residual block adds its shortcut channel by channel,
so it stacks too: the identity and the 1 x 1 convolution shortcut are stacked layers, and
option A's zero padding pads each client's channels on their own. After global average
pooling the features are ``(S, b, 64)`` and the classifier is a batched matrix product.

Only the exact classes :func:`~fedsparse.models.resnet20` builds are recognised (a subclass
may change ``forward``); anything else returns None and runs on ``vmap`` or a loop.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from ..models.zoo import ResNet20, _BasicBlock, _PadShortcut
from ._stacked import StackedNet, channel_layer, linear, to_channels

_NORMS = (nn.BatchNorm2d, nn.GroupNorm)


def resnet_stack(module: nn.Module) -> StackedNet | None:
    """``module``'s S-client form if it is an unmodified ResNet-20, else None."""
    if type(module) is not ResNet20 or not _is_conv(module.conv) or \
            type(module.norm) not in _NORMS or type(module.fc) is not nn.Linear or \
            type(module.blocks) is not nn.Sequential:
        return None
    for block in module.blocks:
        if type(block) is not _BasicBlock or not all(
                _is_conv(c) for c in (block.conv1, block.conv2)) or \
                not all(type(n) in _NORMS for n in (block.norm1, block.norm2)):
            return None
        sc = block.shortcut
        conv_shortcut = type(sc) is nn.Sequential and len(sc) == 2 and _is_conv(sc[0]) \
            and type(sc[1]) in _NORMS
        if not (type(sc) in (nn.Identity, _PadShortcut) or conv_shortcut):
            return None
    return functools.partial(_resnet_logits, module)


def _is_conv(m: nn.Module) -> bool:
    return type(m) is nn.Conv2d and m.padding_mode == "zeros"


def _resnet_logits(model: ResNet20, tensors: dict[str, torch.Tensor], X: torch.Tensor
                   ) -> torch.Tensor:
    """Logits (S, b, C) of S clients' ResNet-20s: ``tensors`` name -> (S, *shape), ``X``
    (S, b, C_in, H, W); :class:`~fedsparse.models.zoo.ResNet20`'s ``forward``, stacked."""
    S, b = X.shape[:2]

    def layer(name, h):
        return channel_layer(model.get_submodule(name), name, tensors, S, h)

    h = F.relu(layer("norm", layer("conv", to_channels(X))))
    for i, block in enumerate(model.blocks):
        name = f"blocks.{i}"
        out = F.relu(layer(f"{name}.norm1", layer(f"{name}.conv1", h)))
        out = layer(f"{name}.norm2", layer(f"{name}.conv2", out))
        h = F.relu(out + _shortcut(block.shortcut, f"{name}.shortcut", layer, S, h))
    features = F.adaptive_avg_pool2d(h, 1).reshape(b, S, -1).transpose(0, 1)
    return linear("fc", tensors, features, model.fc.bias is not None)


def _shortcut(sc: nn.Module, name: str, layer, S: int, h: torch.Tensor) -> torch.Tensor:
    if isinstance(sc, nn.Identity):
        return h
    if isinstance(sc, _PadShortcut):  # each client's channels padded on their own
        x = h[:, :, ::2, ::2]
        b, _, height, width = x.shape
        x = x.reshape(b, S, -1, height, width)
        half = sc.extra // 2
        x = F.pad(x, (0, 0, 0, 0, half, sc.extra - half))
        return x.reshape(b, -1, height, width).contiguous(memory_format=torch.channels_last)
    return layer(f"{name}.1", layer(f"{name}.0", h))
