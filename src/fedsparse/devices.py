"""Where a run computes: a device from what a user wrote, checked where it enters."""

from __future__ import annotations

import torch

from ._validation import ConfigError, fail

#: What a device may be written as.
DEVICE_CHOICES = ('"cpu"', '"cuda"', '"cuda:N"', '"auto"')


def resolve_device(spec: str | torch.device | None) -> torch.device:
    """The torch device ``spec`` names.

    Parameters
    ----------
    spec : "cpu", "cuda", "cuda:N", "auto" (a GPU where one exists, else the CPU), a
        :class:`torch.device`, or None (the CPU).

    Returns
    -------
    torch.device

    Raises
    ------
    ConfigError
        naming ``device`` and the value, for anything else, and for a CUDA device on a
        machine without one (or an index past the last GPU).
    """
    if spec is None:
        return torch.device("cpu")
    if isinstance(spec, str) and spec.strip().lower() == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not isinstance(spec, str | torch.device):
        raise fail("device", f"<{type(spec).__name__}>", f"must be one of "
                   f"{', '.join(DEVICE_CHOICES)}")
    try:
        device = torch.device(spec.strip().lower() if isinstance(spec, str) else spec)
    except (RuntimeError, TypeError):
        raise fail("device", spec, f"must be one of {', '.join(DEVICE_CHOICES)}") from None
    if device.type not in ("cpu", "cuda"):
        raise fail("device", spec, f"must be one of {', '.join(DEVICE_CHOICES)}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise fail("device", spec, 'needs a CUDA GPU, and none is available; use "cpu" '
                       'or "auto"')
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device={str(spec)!r}: this machine has "
                              f"{torch.cuda.device_count()} GPU(s), cuda:0.."
                              f"cuda:{torch.cuda.device_count() - 1}")
    return device


def device_info(device: torch.device) -> dict:
    """``{"device": str(device), "gpu": the GPU's model name, or None on the CPU}``."""
    device = torch.device(device)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {"device": str(device), "gpu": gpu}
