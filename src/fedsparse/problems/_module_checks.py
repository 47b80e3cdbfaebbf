"""What a user's network may not do: checks of its tensors when a neural problem is
built, and the words for what ``torch.func.vmap`` refused in its forward (the message
says to take the one-client-at-a-time path instead)."""

from __future__ import annotations

from torch import nn

from .._validation import ConfigError, fail

__all__ = ["VMAP_REFUSALS", "check_module_tensors", "vmap_refusal", "vmap_refused"]


def check_module_tensors(module: nn.Module) -> None:
    """Refuse a network whose tensors have no values (the meta device) or whose parameters
    are not floating point, which fedsparse could neither copy nor train."""
    name = type(module).__name__
    for key, t in [*module.named_parameters(), *module.named_buffers()]:
        if t.is_meta:
            raise fail("module", name, f"has tensors with no values ({key!r} is on the meta "
                       "device): make them real first, e.g. module.to_empty(device=\"cpu\") "
                       "and initialise them")
    for key, t in module.named_parameters():
        if not t.is_floating_point():
            raise fail("module", name, f"has the parameter {key!r} of dtype "
                       f"{str(t.dtype).removeprefix('torch.')}: fedsparse trains floating-point "
                       "parameters; keep a constant as a buffer (module.register_buffer)")


#: What ``torch.func.vmap`` refuses in a forward, by a phrase of its message, said as what
#: the network does.
VMAP_REFUSALS = (
    ("vmap: It looks like you're", "reads a tensor's value in its forward (.item(), or a "
     "tensor in an if or a loop)"),
    ("vmap: called random operation", "draws random numbers in its forward"),
    ("mutate a captured Tensor", "changes a tensor it holds in its forward (an in-place "
     "update of a buffer or an attribute)"),
)


def vmap_refusal(exc: RuntimeError) -> str | None:
    """What the network does that made ``torch.func.vmap`` refuse it, or None."""
    return next((what for phrase, what in VMAP_REFUSALS if phrase in str(exc)), None)


def vmap_refused(what: str, exc: RuntimeError, module: nn.Module) -> ConfigError:
    """The error for a network that does ``what`` (:func:`vmap_refusal`) in its forward."""
    return ConfigError(
        f"the network {type(module).__name__} {what}, which torch.func.vmap cannot do for "
        "all clients at once: give fs.problems.neural(module, path=\"loop\") (one client "
        f"at a time), or write the forward without it. torch said: {str(exc)[:100]}...")
