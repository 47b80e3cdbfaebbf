"""Checkpoints: written atomically with a checksum, checked entry by entry on resume.

A checkpoint (written by :func:`fedsparse.simulate` every ``checkpoint_every`` rounds) is
a dict::

    {"format": str, "round": int, "state": {"model": (P,) tensor, ...},
     "client_state": dict of (N, ...) tensors or None,
     "records": str, one JSON line per completed round ("round" = 1, 2, ...),
     "initial": the round-0 record, "fingerprint": dict}

plus, where the run logs to trackers that can reopen a run, ``"trackers"``: a list of
``{"kind": "mlflow", "run_id": ...}`` / ``{"kind": "tensorboard", "folder": ...}`` that a
resumed run continues (:mod:`fedsparse.loggers`; only dicts of strings are used, and a
checkpoint without the entry resumes with new tracker runs). It is saved with
:func:`torch.save` and followed by one line, ``#fedsparse-checkpoint sha256=<hex>``, the
SHA-256 of the archive before it. The archive stays a plain PyTorch
file (``torch.load`` reads it and ignores the line).

The records are one string of JSON lines (:mod:`fedsparse.checkpoint_records`, which says
why); files of format 3 and earlier, whose records are a list of dicts, resume as before.

A file that was truncated, edited, damaged on disk or written by another run must not be
continued as if it were sound. :func:`resume_checkpoint` reads it (refusing a file whose
bytes do not match their checksum, and running no code from it: ``weights_only``), then
checks every entry against the fresh state of the run that resumes: the same keys, and
for each tensor the same shape, dtype and layout with no NaN (and no infinity where a
fresh state has none); for each number the same type, finite, and non-negative where
the fresh value is. Every refusal is a :class:`~fedsparse.ConfigError` naming the file and
the entry.

The file layer (the atomic save, the checksum, the verified and restricted read) is
:mod:`fedsparse.checkpoint_file`; its functions are importable from here too.
"""

from __future__ import annotations

import hashlib
import math
from numbers import Integral
from pathlib import Path

import torch

from ._validation import ConfigError
from .channels import probability_digest

# the file layer (fedsparse.checkpoint_file): its names stay importable from here
from .checkpoint_file import _trailer, read_checkpoint, save_checkpoint  # noqa: F401
from .checkpoint_records import RecordLines as RecordLines
from .checkpoint_records import Unlike as _Unlike
from .checkpoint_records import checked_records
from .checkpoint_records import kind as _kind
from .checkpoint_records import shown as _shown
from .client_store import COPY_BYTES
from .data.digest import data_digest, tensors_digest

CHECKPOINT_FORMAT = "fedsparse-checkpoint-4"
#: Formats this version reads. Format 3 files hold their records as a list of dicts.
#: Format 2 files also lay out some algorithms' saved state differently (FedMac's server
#: state, the state of a wrapped algorithm such as similarity compensation): those are
#: refused with a message saying so, every other algorithm's resumes.
READABLE_FORMATS = ("fedsparse-checkpoint-2", "fedsparse-checkpoint-3", CHECKPOINT_FORMAT)
#: Formats whose algorithm state may be laid out differently from this version's.
_OTHER_STATE_LAYOUT = ("fedsparse-checkpoint-2",)

#: Fingerprint entries added after checkpoints were first written: a checkpoint without
#: one resumes as before (it cannot be compared), one with it must match.
ADDED_KEYS = frozenset({"problem_config", "data_digest", "channel_probabilities",
                        "module_constants", "dictionary_atoms", "round_rules"})
#: Every key a checkpoint holds.
CHECKPOINT_KEYS = ("format", "round", "state", "client_state", "records", "initial",
                   "fingerprint")


def round_rules(eval_every: int, max_update_norm, max_update_ratio) -> str:
    """The round loop's settings that shape a history but not the run's record: the
    evaluation period and the screening of uploads. A resume with others would write a
    history that no uninterrupted run gives (two evaluation periods, or uploads accepted
    under two rules), so a checkpoint holds them (:data:`ADDED_KEYS`)."""
    return (f"eval_every={eval_every}, max_update_norm={max_update_norm!r}, "
            f"max_update_ratio={max_update_ratio!r}")


def contents_fingerprint(problem, data, channel=None, algorithm=None) -> dict:
    """The fingerprint entries a checkpoint adds to the run's (:data:`ADDED_KEYS`): the
    problem's settings (a network's layers, not only its name), a digest of the data
    (:func:`fedsparse.data.digest.data_digest`) and of a Bernoulli channel's exact
    probabilities (:func:`fedsparse.channels.probability_digest`), so that a resume on
    another data set, seed, loss or delivery probability is refused. Where they exist,
    also a digest of the values a network holds but does not train (frozen parameters
    and buffers, which the model vector leaves out) and of the atoms of the bound
    ``algorithm``'s dictionary (whose record shows only its shape or file name)."""
    config = repr(problem)
    if type(problem).__repr__ is object.__repr__:  # an address, new with every object
        config = f"{type(problem).__qualname__}({problem.name})"
    module = getattr(problem, "module", None)
    constants = []
    if isinstance(module, torch.nn.Module):
        layers = hashlib.blake2b(str(module).encode(), digest_size=8).hexdigest()
        config = f"{config} layers={layers}"
        constants = [(n, p) for n, p in module.named_parameters() if not p.requires_grad]
        constants += list(module.named_buffers())
    out = {"problem_config": config, "data_digest": data_digest(data)}
    if constants:
        out["module_constants"] = tensors_digest(constants)
    dictionary = getattr(getattr(algorithm, "geometry", None), "dictionary", None)
    if dictionary is not None:
        out["dictionary_atoms"] = tensors_digest([("atoms", dictionary.matrix)])
    probabilities = probability_digest(channel)
    if probabilities is not None:
        out["channel_probabilities"] = probabilities
    return out


def load_checkpoint(path: Path, fingerprint: dict, *, map_location="cpu") -> dict:
    """Read a checkpoint (:func:`read_checkpoint`) and refuse one of another format or
    written by another run (``fingerprint`` differs); :func:`validate_checkpoint` then
    checks its content."""
    ckpt = read_checkpoint(path, map_location=map_location)
    where = f"checkpoint {str(path)!r}"
    if not isinstance(ckpt, dict) or ckpt.get("format") not in READABLE_FORMATS:
        got = ckpt.get("format") if isinstance(ckpt, dict) else None
        raise ConfigError(f"{where} is not a fedsparse checkpoint of this version (format "
                          f"{_shown(got)}, expected {CHECKPOINT_FORMAT!r})")
    saved = ckpt.get("fingerprint")
    if not isinstance(saved, dict):
        raise ConfigError(f"{where} is damaged: it has no run fingerprint")
    differs = [k for k in {**saved, **fingerprint}
               if saved.get(k) != fingerprint.get(k) and not (k in ADDED_KEYS and k not in saved)]
    if differs:
        diff = ", ".join(f"{k}: ({_shown(saved.get(k))}, {_shown(fingerprint.get(k))})"
                         for k in differs)
        raise ConfigError(f"{where} belongs to another run; differences "
                          f"(saved, now): {{{diff}}}")
    return ckpt


def resume_checkpoint(path: Path, *, fingerprint: dict, rounds: int, state: dict,
                      client_state: dict | None, map_location="cpu",
                      client_state_in_place: bool = False) -> dict:
    """Read, verify and check a checkpoint for the run that resumes from it.

    Parameters
    ----------
    path : the checkpoint file.
    fingerprint : the resuming run's fingerprint; the saved one must be equal.
    rounds : the total number of rounds the resumed run asks for.
    state, client_state : the resuming run's fresh ``algorithm.init`` and
        ``algorithm.init_clients`` (for all N clients): what every saved entry must look
        like, and where its tensors go.
    map_location : where :func:`torch.load` puts the tensors first (default the CPU).
    client_state_in_place : copy the client state into the tensors of ``client_state``
        themselves (memory-mapped files of :mod:`fedsparse.client_store`), a chunk of
        rows at a time, instead of into fresh buffers.

    Returns
    -------
    dict
        The checkpoint, its tensors copied into fresh buffers on the devices of ``state``
        and ``client_state`` (or into ``client_state``'s own) and its records rebuilt as
        plain lists and dicts.
    """
    ckpt = load_checkpoint(path, fingerprint, map_location=map_location)
    return validate_checkpoint(ckpt, path=path, rounds=rounds, state=state,
                               client_state=client_state, file_size=Path(path).stat().st_size,
                               client_state_in_place=client_state_in_place)


# ---------------------------------------------------------------------- content checks


def validate_checkpoint(ckpt, *, path: str | Path, rounds: int, state: dict,
                        client_state: dict | None, file_size: int | None = None,
                        client_state_in_place: bool = False) -> dict:
    """Refuse a checkpoint that cannot be resumed to ``rounds`` rounds by this run.

    Parameters
    ----------
    ckpt : the loaded checkpoint (see the module docstring).
    path : the checkpoint file, named in every message.
    rounds : the total number of rounds the resumed run asks for.
    state, client_state : the run's fresh server state (``algorithm.init``) and client
        state (``algorithm.init_clients`` for all N clients, or None).
    file_size : the file's size in bytes: the records may not expand to more entries
        than that (a pickle can make one list appear a million times for a few bytes).
    client_state_in_place : the client state is copied into ``client_state``'s own
        tensors (see :func:`resume_checkpoint`).

    Returns
    -------
    dict
        A copy of ``ckpt``: tensors in fresh contiguous buffers on the devices of
        ``state`` / ``client_state``, records as plain lists and dicts.

    Raises
    ------
    ConfigError
        naming the file and the entry: not a dict, a missing key, a round that is not
        a non-negative integer, ``rounds`` smaller than the rounds it already holds,
        state entries missing, extra or unlike the fresh ones (type, shape, dtype,
        layout, NaN or infinite values, a negative count), client state missing where
        the run keeps some, records that are not one plain dict per completed round.
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
        raise ConfigError(f"{where} is damaged: round={_shown(done)} is not a non-negative "
                          "integer")
    done = int(done)
    if isinstance(rounds, bool) or not isinstance(rounds, Integral):
        raise ConfigError(f"rounds={rounds!r} is invalid: must be an integer")
    records = ckpt["records"]
    held = len(records) if isinstance(records, list) else \
        records.count("\n") if isinstance(records, str) else None  # JSON lines
    if held is not None and held != done:
        raise ConfigError(f"{where} is damaged: it is at round {_shown(done)} but holds "
                          f"{held} round records")
    if rounds < done:
        raise ConfigError(f"{where} already holds {done} rounds, but the resumed run asks for "
                          f"{rounds}: ask for at least {done} rounds (e.g. --rounds {done}), or "
                          "start over without --resume")
    if not isinstance(ckpt["fingerprint"], dict):
        raise ConfigError(f"{where} is damaged: fingerprint is a "
                          f"{type(ckpt['fingerprint']).__name__}, not a dict")
    try:
        if client_state is not None and ckpt["client_state"] is None:
            raise _Unlike(f"client_state is None, but this run keeps per-client state "
                          f"({', '.join(map(repr, client_state))}): resuming from it would "
                          "lose that state")
        out = dict(ckpt, round=done,
                   state=_like("state", ckpt["state"], state),
                   client_state=_like("client_state", ckpt["client_state"], client_state,
                                      in_place=client_state_in_place))
        budget = [math.inf if file_size is None else int(file_size)]
        out["records"], out["initial"] = checked_records(ckpt["records"], ckpt["initial"],
                                                         done, budget)
    except _Unlike as exc:
        if ckpt.get("format") in _OTHER_STATE_LAYOUT:
            raise ConfigError(
                f"{where} was written by an earlier version of fedsparse (format "
                f"{_shown(ckpt.get('format'))}) that saved this algorithm's state in another "
                f"layout ({exc}); it cannot be resumed by this version: start the run "
                "afresh, or finish it with the version that wrote it") from None
        raise ConfigError(f"{where} is damaged: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{where} is damaged: its records are nested too deeply") from None
    return out


def _like(name: str, value, fresh, in_place: bool = False):
    """``value`` checked against ``fresh`` and rebuilt like it (see the module docstring);
    ``in_place``: tensors are copied into ``fresh``'s own."""
    if isinstance(fresh, dict):
        if not isinstance(value, dict):
            raise _Unlike(f"{name} is {_kind(value)}, but this run's is a dict")
        for key in fresh:
            if key not in value:
                raise _Unlike(f"{name} has no entry {key!r}")
        for key in value:
            if key not in fresh:
                raise _Unlike(f"{name} has an entry {key!r} that this run does not have")
        return {key: _like(f"{name}[{key!r}]", value[key], fresh[key], in_place)
                for key in fresh}
    if isinstance(fresh, torch.Tensor):
        return _tensor_like(name, value, fresh, in_place)
    if fresh is None:
        if value is not None:
            what = f"holds {', '.join(map(repr, value))}" if isinstance(value, dict) else \
                f"is {_kind(value)}"
            raise _Unlike(f"{name} {what}, but this run keeps none (None)")
        return None
    if isinstance(fresh, bool) or not isinstance(fresh, (int, float)):
        if type(value) is not type(fresh):
            raise _Unlike(f"{name} is {_kind(value)}, but this run's is {_kind(fresh)}")
        return value
    # a number: an int stays an int; a float may have been saved as an int
    allowed = (int,) if isinstance(fresh, int) else (int, float)
    if isinstance(value, bool) or not isinstance(value, allowed):
        raise _Unlike(f"{name} is {_kind(value)}, but this run's is {_kind(fresh)}")
    if not math.isfinite(value):
        raise _Unlike(f"{name} is {value}; expected a finite number")
    if fresh >= 0 and value < 0:
        raise _Unlike(f"{name} is {value}; expected a non-negative number")
    return type(fresh)(value)


def _tensor_like(name: str, value, fresh: torch.Tensor, in_place: bool = False
                 ) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise _Unlike(f"{name} is {_kind(value)}, but this run's is a tensor")
    if value.layout != fresh.layout:
        raise _Unlike(f"{name} is a {value.layout} tensor (sparse or other), but this run's "
                      f"is {fresh.layout}")
    if value.dtype != fresh.dtype:
        raise _Unlike(f"{name} has dtype {value.dtype}, but this run's has dtype "
                      f"{fresh.dtype}")
    # an empty 1-D fresh tensor is a record that grows (a sparse distance record's
    # pairs): any length is allowed, not another number of dimensions
    grows = not in_place and fresh.ndim == 1 and fresh.numel() == 0
    if (value.ndim != 1) if grows else (value.shape != fresh.shape):
        raise _Unlike(f"{name} has shape {tuple(value.shape)}, but this run's " +
                      ("is 1-D (of any length)" if grows else f"has shape {tuple(fresh.shape)}"))
    fresh_inf = None
    if in_place:  # into the run's own (file-backed) rows, a chunk at a time
        if fresh.is_floating_point():  # what the fresh state allows, before it is overwritten
            fresh_inf = bool(torch.isposinf(fresh).any()), bool(torch.isneginf(fresh).any())
        step = max(1, COPY_BYTES // max(1, fresh[:1].numel() * fresh.element_size()))
        for a in range(0, fresh.shape[0], step):
            fresh[a:a + step].copy_(value[a:a + step])
        value = fresh
    else:
        # a fresh buffer: contiguous, on the run's device, sharing memory with nothing
        # else (copied first: the file's pages are then read once)
        value = torch.empty(value.shape, dtype=fresh.dtype, device=fresh.device).copy_(value)
    # a finite sum means every entry is finite (one fast pass; a sum that overflows
    # only sends the check to the entry-wise test)
    if (value.is_floating_point() or value.is_complex()) and \
            not bool(torch.isfinite(value.sum())):
        # an infinity is allowed only where a fresh state uses one (a distance record's
        # "never measured"); NaN never
        bad = torch.isnan(value)
        if not value.is_complex():
            if fresh_inf is None:
                fresh_inf = bool(torch.isposinf(fresh).any()), bool(torch.isneginf(fresh).any())
            if not fresh_inf[0]:
                bad |= torch.isposinf(value)
            if not fresh_inf[1]:
                bad |= torch.isneginf(value)
        else:
            bad |= torch.isinf(value)
        if bool(bad.any()):
            raise _Unlike(f"{name} holds {int(bad.sum())} NaN or infinite entries")
    return value
