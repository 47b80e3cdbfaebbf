"""Checks on a saved checkpoint before a run resumes from it.

A checkpoint (written by :func:`fedsparse.simulate` every ``checkpoint_every`` rounds) is
a dict::

    {"format": str, "round": int, "state": {"model": (P,) tensor, ...},
     "client_state": dict of (N, ...) tensors or None,
     "records": [one dict per completed round, "round" = 1, 2, ...],
     "initial": the round-0 record, "fingerprint": dict}

A file that was truncated, edited or written by another run must not be continued as if
it were sound: :func:`validate_checkpoint` refuses it with a message naming the file.
"""

from __future__ import annotations

import os
from numbers import Integral
from pathlib import Path

import torch

from ._validation import ConfigError

CHECKPOINT_FORMAT = "fedsparse-checkpoint-1"

#: Every key a checkpoint holds.
CHECKPOINT_KEYS = ("format", "round", "state", "client_state", "records", "initial",
                   "fingerprint")


def validate_checkpoint(ckpt: dict, *, path: str | Path, model_size: int, rounds: int) -> None:
    """Refuse a checkpoint that cannot be resumed to ``rounds`` rounds.

    Parameters
    ----------
    ckpt : the loaded checkpoint (see the module docstring).
    path : the checkpoint file, named in every message.
    model_size : the length the server model ``ckpt["state"]["model"]`` must have (the
        length of the model a fresh ``algorithm.init`` produces for this run: P, or the
        number of dictionary coefficients for a model stored in a dictionary).
    rounds : the total number of rounds the resumed run asks for.

    Raises
    ------
    ConfigError
        naming the file and what is wrong: not a dict, a missing key, a round that is not
        a non-negative integer, a model that is not a 1-D floating tensor of
        ``model_size`` finite entries, records that are not one dict per completed round
        numbered 1..round (with a round-0 ``initial`` record), or ``rounds`` smaller than
        the rounds the checkpoint already holds.
    """
    where = f"checkpoint {str(path)!r}"
    if not isinstance(ckpt, dict):
        raise ConfigError(f"{where} is not a fedsparse checkpoint (it holds a "
                          f"{type(ckpt).__name__}, not a dict)")
    missing = [k for k in CHECKPOINT_KEYS if k not in ckpt]
    if missing:
        raise ConfigError(f"{where} is incomplete: it has no {', '.join(missing)} (a "
                          "checkpoint holds " + ", ".join(CHECKPOINT_KEYS) + ")")
    done = ckpt["round"]
    if isinstance(done, bool) or not isinstance(done, Integral) or done < 0:
        raise ConfigError(f"{where} is damaged: round={done!r} is not a non-negative integer")
    done = int(done)
    if isinstance(rounds, bool) or not isinstance(rounds, Integral):
        raise ConfigError(f"rounds={rounds!r} is invalid: must be an integer")
    if rounds < done:
        raise ConfigError(f"{where} already holds {done} rounds, but the resumed run asks for "
                          f"{rounds}: ask for at least {done} rounds (e.g. --rounds {done}), or "
                          "start over without --resume")
    _check_model(where, ckpt["state"], model_size)
    _check_records(where, ckpt["records"], ckpt["initial"], done)
    if ckpt["client_state"] is not None and not isinstance(ckpt["client_state"], dict):
        raise ConfigError(f"{where} is damaged: client_state is a "
                          f"{type(ckpt['client_state']).__name__}, not a dict or None")
    if not isinstance(ckpt["fingerprint"], dict):
        raise ConfigError(f"{where} is damaged: fingerprint is a "
                          f"{type(ckpt['fingerprint']).__name__}, not a dict")


def _check_model(where: str, state, model_size: int) -> None:
    if not isinstance(state, dict) or "model" not in state:
        raise ConfigError(f"{where} is damaged: its server state has no model")
    model = state["model"]
    if not isinstance(model, torch.Tensor) or not model.is_floating_point():
        what = f"a tensor of {model.dtype}" if isinstance(model, torch.Tensor) else \
            f"a {type(model).__name__}"
        raise ConfigError(f"{where} is damaged: the model is {what}, not a floating-point "
                          "tensor")
    if model.dim() != 1 or model.shape[0] != model_size:
        raise ConfigError(f"{where} holds a model of shape {tuple(model.shape)}, but this run's "
                          f"model has shape ({model_size},): it belongs to another model")
    if not bool(torch.isfinite(model).all()):
        bad = int((~torch.isfinite(model)).sum())
        raise ConfigError(f"{where} is damaged: its model has {bad} NaN or infinite entries")


def _check_records(where: str, records, initial, done: int) -> None:
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ConfigError(f"{where} is damaged: records is not a list of per-round dicts")
    if len(records) != done:
        raise ConfigError(f"{where} is damaged: it is at round {done} but holds "
                          f"{len(records)} round records")
    for i, rec in enumerate(records, start=1):
        if rec.get("round") != i:
            raise ConfigError(f"{where} is damaged: record {i} says round "
                              f"{rec.get('round')!r}, expected {i}")
    if not isinstance(initial, dict) or initial.get("round") != 0:
        raise ConfigError(f"{where} is damaged: its initial record is not the round-0 record")


def save_checkpoint(path: Path, payload: dict) -> None:
    """Write a checkpoint atomically (a crash mid-write keeps the previous one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:  # Python's open, so fedsparse.manifest records the file
        torch.save(payload, fh)
    os.replace(tmp, path)


def load_checkpoint(path: Path, fingerprint: dict) -> dict:
    """Read a checkpoint and refuse one written by another run (``fingerprint`` differs);
    :func:`validate_checkpoint` then checks its content."""
    try:
        ckpt = torch.load(path, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets the same clear message
        raise ConfigError(f"checkpoint {str(path)!r} could not be read: {exc}") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(f"checkpoint {str(path)!r} is not a fedsparse checkpoint")
    saved = ckpt.get("fingerprint")
    if not isinstance(saved, dict):
        raise ConfigError(f"checkpoint {str(path)!r} is damaged: it has no run fingerprint")
    if saved != fingerprint:
        diff = {k: (saved.get(k), v) for k, v in fingerprint.items() if saved.get(k) != v}
        raise ConfigError(f"checkpoint {str(path)!r} belongs to another run; differences "
                          f"(saved, now): {diff}")
    return ckpt
