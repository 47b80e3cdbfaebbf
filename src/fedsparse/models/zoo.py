"""The networks of the model track: FedMac's MLPs and VGG, a small CNN and ResNet-20.

Every builder returns a plain :class:`torch.nn.Module` that maps a batch ``(b, *feature_shape)``
to logits ``(b, num_classes)``. Normalisation layers that use batch statistics keep no running
statistics (``track_running_stats=False``, the "static batch normalisation" of Diao et al.
2021, HeteroFL): running statistics are buffers that cannot be averaged through gradient
transforms, and a batch's own statistics are what a client sees anyway. See
:mod:`fedsparse.problems.neural` for what that means at evaluation time.

Parameter counts (all trainable parameters, docs/decisions.md, section 4):

========================================  =========
``mlp(784, (100,), 10)`` (FedMac DNN)        79,510
``mlp(60, (20,), 10)`` (FedMac Synthetic)     1,430
``mlp(784, (), 10)`` (pFedMe's MLR)           7,850
``cnn()`` (small, 28 x 28 x 1)              215,370
``cnn(channels=(32, 64), hidden=512)``    1,663,370  (McMahan et al. 2017)
``vgg_small(10)`` / ``vgg_small(100)``      246,314 / 257,924
``resnet20()`` / ``shortcut="pad"``         272,474 / 269,722
``resnet20(in_channels=1)``                 272,186
========================================  =========
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .._resources import check_memory
from .._validation import check_choice, check_int, fail


def _check_widths(name: str, value, *, allow_empty: bool) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise fail(name, value, "must be a list of layer widths: (100,) in "
                   "Python, [100] in a TOML file")
    widths = tuple(check_int(f"{name}[{i}]", v, minimum=1) for i, v in enumerate(value))
    if not widths and not allow_empty:
        raise fail(name, value, "must hold at least one width")
    return widths


def mlp(in_features: int, hidden: Sequence[int] = (100,), num_classes: int = 10) -> nn.Sequential:
    """A fully connected ReLU network: ``Linear(in, h1)-ReLU-...-Linear(h_k, num_classes)``.

    FedMac (Liu et al. 2023) trains ``mlp(784, (100,), 10)`` (79,510 parameters) on
    MNIST/Fashion-MNIST and ``mlp(60, (20,), 10)`` (1,430) on Synthetic; ``hidden=()`` is
    multinomial logistic regression (pFedMe's MLR, 7,850 parameters for 784 -> 10).

    Parameters
    ----------
    in_features : number of input features; inputs ``(b, *shape)`` with
        ``prod(shape) == in_features`` are flattened first, so images feed it directly.
    hidden : widths of the hidden layers (a tuple, possibly empty).
    num_classes : number of outputs (at least 2).

    Returns
    -------
    nn.Sequential mapping ``(b, *shape)`` to logits ``(b, num_classes)``; PyTorch's default
    initialisation.
    """
    in_features = check_int("in_features", in_features, minimum=1)
    hidden = _check_widths("hidden", hidden, allow_empty=True)
    num_classes = check_int("num_classes", num_classes, minimum=2)
    widths = [in_features, *hidden, num_classes]
    check_memory({"the network's float32 parameters": 4 * sum(
        (a + 1) * b for a, b in zip(widths[:-1], widths[1:], strict=True))},
        {"in_features": in_features, **{f"hidden[{i}]": h for i, h in enumerate(hidden)},
         "num_classes": num_classes})
    layers: list[nn.Module] = [nn.Flatten()]
    width = in_features
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


def cnn(in_channels: int = 1, num_classes: int = 10, image_size: int = 28, *,
        channels: Sequence[int] = (16, 32), hidden: int = 128) -> nn.Sequential:
    """A small MNIST-style CNN: two 5x5 conv + ReLU + 2x2 max-pool stages, then two linears.

    ``conv5x5(in -> c1, pad 2)-ReLU-maxpool2-conv5x5(c1 -> c2, pad 2)-ReLU-maxpool2-
    Linear(c2 * (s//4)^2 -> hidden)-ReLU-Linear(hidden -> num_classes)``, the architecture of
    McMahan et al. 2017's CNN at a CPU-friendly width. The default (28 x 28 x 1 input, 10
    classes) has **215,370** parameters; ``channels=(32, 64), hidden=512`` is McMahan et al.'s
    network (1,663,370 parameters).

    Parameters
    ----------
    in_channels, num_classes : input channels and number of classes.
    image_size : height = width ``s`` of the input images (at least 4).
    channels : output channels of the two convolutions.
    hidden : width of the hidden linear layer.

    Returns
    -------
    nn.Sequential mapping ``(b, in_channels, s, s)`` to logits ``(b, num_classes)``.
    """
    in_channels = check_int("in_channels", in_channels, minimum=1)
    num_classes = check_int("num_classes", num_classes, minimum=2)
    image_size = check_int("image_size", image_size, minimum=4)
    channels = _check_widths("channels", channels, allow_empty=False)
    if len(channels) != 2:
        raise fail("channels", channels, "must hold two widths, one per convolution")
    hidden = check_int("hidden", hidden, minimum=1)
    c1, c2 = channels
    side = image_size // 2 // 2
    return nn.Sequential(
        nn.Conv2d(in_channels, c1, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(c2 * side * side, hidden), nn.ReLU(),
        nn.Linear(hidden, num_classes))


#: FedMac's VGG configuration (docs/decisions.md, section 4): conv3x3 widths, "M" = 2x2 max-pool.
VGG_SMALL_CFG = (16, "M", 32, "M", 64, "M", 128, "M", 128, "M")


def vgg_small(num_classes: int = 100, in_channels: int = 3, image_size: int = 32,
              batch_norm: bool = False) -> nn.Sequential:
    """FedMac's VGG (Liu et al. 2023): cfg [16,M,32,M,64,M,128,M,128,M] and one linear layer.

    Each number is conv3x3 (pad 1) + ReLU, M a 2x2 max-pool; a 32 x 32 input leaves a
    1 x 1 x 128 feature, flattened into ``Linear(128, num_classes)`` (the paper does not give
    the classifier; docs/decisions.md, section 4). **246,314** parameters for 10 classes,
    **257,924** for 100 (``in_channels=3``, no batch norm).

    Parameters
    ----------
    num_classes : number of classes.
    in_channels : input channels (1 for Fashion-MNIST padded to 32 x 32).
    image_size : height = width of the input (at least 32; the five pools floor it).
    batch_norm : add BatchNorm after each convolution (then the convolutions have no bias,
        which the norm would cancel). The norms use batch statistics only
        (``track_running_stats=False``).

    Returns
    -------
    nn.Sequential mapping ``(b, in_channels, s, s)`` to logits ``(b, num_classes)``; PyTorch's
    default initialisation.
    """
    num_classes = check_int("num_classes", num_classes, minimum=2)
    in_channels = check_int("in_channels", in_channels, minimum=1)
    image_size = check_int("image_size", image_size, minimum=32)
    if not isinstance(batch_norm, bool):
        raise fail("batch_norm", batch_norm, "must be True or False")
    layers: list[nn.Module] = []
    width, side = in_channels, image_size
    for v in VGG_SMALL_CFG:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
            side //= 2
            continue
        layers.append(nn.Conv2d(width, v, 3, padding=1, bias=not batch_norm))
        if batch_norm:
            layers.append(nn.BatchNorm2d(v, track_running_stats=False))
        layers.append(nn.ReLU())
        width = v
    layers += [nn.Flatten(), nn.Linear(width * side * side, num_classes)]
    return nn.Sequential(*layers)


# GroupNorm option of ResNet-20: 2 groups per layer, as in Hsieh et al. 2020's federated
# ResNets (batch statistics are skewed by non-IID clients; group statistics are per example).
_GROUPS = 2


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "batch":
        return nn.BatchNorm2d(channels, track_running_stats=False)
    return nn.GroupNorm(_GROUPS, channels)


class _PadShortcut(nn.Module):
    """He et al. 2016's option A: subsample by 2 and zero-pad the new channels."""

    def __init__(self, extra: int):
        super().__init__()
        self.extra = extra

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        half = self.extra // 2
        return F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, half, self.extra - half))


class _BasicBlock(nn.Module):
    def __init__(self, fan_in: int, fan_out: int, shortcut: str, norm: str):
        super().__init__()
        stride = 1 if fan_in == fan_out else 2
        self.conv1 = nn.Conv2d(fan_in, fan_out, 3, stride=stride, padding=1, bias=False)
        self.norm1 = _norm(norm, fan_out)
        self.conv2 = nn.Conv2d(fan_out, fan_out, 3, padding=1, bias=False)
        self.norm2 = _norm(norm, fan_out)
        if fan_in == fan_out:
            self.shortcut: nn.Module = nn.Identity()
        elif shortcut == "conv":
            self.shortcut = nn.Sequential(
                nn.Conv2d(fan_in, fan_out, 1, stride=2, bias=False), _norm(norm, fan_out))
        else:
            self.shortcut = _PadShortcut(fan_out - fan_in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet20(nn.Module):
    """ResNet-20 for 32 x 32 images (He et al. 2016), as built by :func:`resnet20`."""

    def __init__(self, num_classes: int, in_channels: int, shortcut: str, norm: str):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        self.norm = _norm(norm, 16)
        blocks: list[nn.Module] = []
        width = 16
        for stage_width in (16, 32, 64):
            for _ in range(3):
                blocks.append(_BasicBlock(width, stage_width, shortcut, norm))
                width = stage_width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Kaiming-normal conv and linear weights, norm weight 1 and bias 0
        (docs/decisions.md, section 4).

        The linear bias keeps PyTorch's default (as open_lth's ResNet does).
        """
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm(self.conv(x)))
        out = self.blocks(out)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


def resnet20(num_classes: int = 10, in_channels: int = 3, *, shortcut: str = "conv",
             norm: str = "batch") -> ResNet20:
    """ResNet-20 (He et al. 2016), SAFARI's model (Mao et al. 2022).

    conv3x3(in -> 16) + norm + ReLU; three stages of three basic blocks at widths 16, 32,
    64 (stride 2 at the first block of stages 2 and 3); a block is
    conv3x3-norm-ReLU-conv3x3-norm plus the shortcut, then ReLU; global average pool and
    ``Linear(64, num_classes)``. Convolutions have no bias. Kaiming-normal init, norm weight
    1 and bias 0.

    Parameters
    ----------
    num_classes, in_channels : number of classes and input channels.
    shortcut : ``"conv"`` (open_lth's "lottery" form: 1x1 conv, stride 2, + norm, where the
        width changes; **272,474** parameters for 3 channels and 10 classes, 272,186 for one
        channel) or ``"pad"`` (He et al.'s option A: subsample and zero-pad; **269,722**).
    norm : ``"batch"`` (BatchNorm on batch statistics only, no running statistics; Diao et
        al. 2021) or ``"group"`` (GroupNorm with 2 groups, Hsieh et al. 2020; the same
        parameter count).

    Returns
    -------
    ResNet20 mapping ``(b, in_channels, h, w)`` to logits ``(b, num_classes)``.
    """
    num_classes = check_int("num_classes", num_classes, minimum=2)
    in_channels = check_int("in_channels", in_channels, minimum=1)
    check_choice("shortcut", shortcut, ("conv", "pad"))
    check_choice("norm", norm, ("batch", "group"))
    return ResNet20(num_classes, in_channels, shortcut, norm)


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters of ``module`` (the length P of its flat vector)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
