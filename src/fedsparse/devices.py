"""Where a run computes: a device from what a user wrote, checked where it enters."""

from __future__ import annotations

import torch

from ._validation import ConfigError, fail

#: What a device may be written as.
DEVICE_CHOICES = ('"cpu"', '"cuda"', '"cuda:N"', '"auto"')
#: The device of a run that names none. The CPU, not "auto": the numbers pinned in the
#: results pages and tests are CPU float results, and a GPU gives different rounding, so a
#: run must not switch device because the machine it lands on has a GPU. "auto" is the
#: opt-in (docs/decisions.md, "Device").
DEFAULT_DEVICE = "cpu"


def resolve_device(spec: str | torch.device | None, name: str = "device") -> torch.device:
    """The torch device ``spec`` names.

    Parameters
    ----------
    spec : "cpu", "cuda", "cuda:N", "auto" (a GPU where one exists, else the CPU), a
        :class:`torch.device`, or None (the CPU).
    name : what the error calls it (``--device``, ``runs[0].device``).

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
        raise fail(name, f"<{type(spec).__name__}>", f"must be one of "
                   f"{', '.join(DEVICE_CHOICES)}")
    try:
        device = torch.device(spec.strip().lower() if isinstance(spec, str) else spec)
    except (RuntimeError, TypeError):
        raise fail(name, spec, f"must be one of {', '.join(DEVICE_CHOICES)}") from None
    if device.type not in ("cpu", "cuda"):
        raise fail(name, spec, f"must be one of {', '.join(DEVICE_CHOICES)}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise fail(name, spec, 'needs a CUDA GPU, and none is available; use "cpu" '
                       'or "auto"')
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"{name}={str(spec)!r}: this machine has "
                              f"{torch.cuda.device_count()} GPU(s), cuda:0.."
                              f"cuda:{torch.cuda.device_count() - 1}")
    return device


def device_info(device: torch.device) -> dict:
    """``{"device": str(device), "gpu": the GPU's model name, or None on the CPU}``, and on
    a GPU ``"tf32"``: whether float32 matrix products and cuDNN convolutions may use TF32
    (``torch.backends``' settings of the process: PyTorch's defaults are False and True),
    which sets how far a float32 GPU run may round from a CPU run."""
    device = torch.device(device)
    if device.type != "cuda":
        return {"device": str(device), "gpu": None}
    return {"device": str(device), "gpu": torch.cuda.get_device_name(device),
            "tf32": {"matmul": bool(torch.backends.cuda.matmul.allow_tf32),
                     "convolutions": bool(torch.backends.cudnn.allow_tf32)}}


def check_device_spec(name: str, spec) -> str:
    """``spec`` as a config holds it (stripped, lower case), once checked by
    :func:`resolve_device` on this machine ("auto" stays "auto": it is resolved where the
    run starts).

    Raises
    ------
    ConfigError
        naming ``name`` and the value: not a string, not a device, or a GPU this machine
        does not have.
    """
    if not isinstance(spec, str):
        raise fail(name, spec, f"must be a string, one of {', '.join(DEVICE_CHOICES)}")
    resolve_device(spec, name)
    return spec.strip().lower()


def devices_info(devices) -> dict:
    """``{"device", "gpu"}`` of the devices several runs used: :func:`device_info` of the
    one device they share, or the distinct values joined by ", " where they differ; and
    ``"tf32"`` where one ran on a GPU (a setting of the process, the same for all)."""
    infos = [device_info(d) for d in devices]
    out = {}
    for key in ("device", "gpu"):
        values = list(dict.fromkeys(i[key] for i in infos if i[key] is not None))
        out[key] = ", ".join(values) if values else (None if key == "gpu" else DEFAULT_DEVICE)
    tf32 = [i["tf32"] for i in infos if "tf32" in i]
    if tf32:
        out["tf32"] = tf32[0]
    return out
