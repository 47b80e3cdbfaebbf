"""What an :class:`~fedsparse.algorithms.Algorithm`'s methods must return, checked where
a round receives it.

A user-written algorithm that returns another form than the base class documents (a
bare tensor from ``client_update``, a state without its (P,) model, a broadcast of more
rows than sampled clients, a diagnostic that is not a number, a server state a
checkpoint cannot hold) gets a :class:`~fedsparse.ConfigError` naming the method and
what it returned, not a traceback from inside torch or pickle, nor a silently wrong
run. Only types and shapes are read, never a tensor's values: the round loop checks
every state and broadcast without a host-device synchronisation. A user's callback is
checked too (:func:`checked_callback`): it must leave the model readable, of its shape and
dtype, and finite, which reads the model once a round, for a run given a callback only.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from numbers import Real

import torch

from ._validation import ConfigError, _is_bool
from .algorithms.base import Algorithm
from .screening import cut, shown


def returned(value) -> str:
    """What a method returned, for an error message: a tensor's shape and dtype, else the
    type (never the value: a state or a tensor can be large)."""
    if isinstance(value, torch.Tensor):
        return f"a {tuple(value.shape)} {value.dtype} tensor"
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def check_state(algorithm: Algorithm, state, method: str, size: int, dtype: torch.dtype
                ) -> torch.Tensor:
    """The global model of the server state that ``algorithm.<method>`` (``init`` or
    ``aggregate``) returned, once the state is known to be a dict whose model is one
    (``size``,) tensor of ``dtype``.

    Only types and shapes are read (no pass over the model's entries), so the round loop
    checks every state it is given.

    Raises
    ------
    ConfigError
        naming the method and what it returned: not a dict, a dict ``algorithm.model``
        cannot read, or a model of another shape or dtype (which would fail deep inside
        the problem, or, as an (S, P) model, be evaluated as if it were one).
    """
    where = f"{type(algorithm).__name__}.{method}"
    form = "it must return the server state: a dict holding the (P,) global model under " \
           "'model'"
    if not isinstance(state, dict):
        raise ConfigError(f"{where} returned {returned(state)}; {form}")
    try:
        model = algorithm.model(state)
    except (KeyError, IndexError, TypeError) as exc:
        keys = shown(list(state)[:10], 120)
        raise ConfigError(f"{where} returned a dict that {type(algorithm).__name__}.model cannot "
                          f"read ({type(exc).__name__}: {cut(exc, 80)}; its keys: {keys}); "
                          f"{form} (or where {type(algorithm).__name__}.model reads it)"
                          ) from exc
    if not isinstance(model, torch.Tensor) or model.shape != (size,) or model.dtype != dtype:
        raise ConfigError(f"{where} returned the global model as {returned(model)}; it must "
                          f"be a ({size},) {dtype} tensor: one model of the problem's size "
                          f"P = {size}, in the data's dtype")
    return model


def check_payload(algorithm: Algorithm, payload, clients: int, size: int,
                  dtype: torch.dtype) -> None:
    """Refuse a broadcast unless it is one payload for all ``clients`` sampled clients, a
    1-D tensor, or one row per client, (``clients``, Q), of ``dtype``: more rows would be
    cut silently, fewer would fail deep in a client's update. Its width Q is the
    algorithm's (the model's ``size`` unless it sends another form, e.g. a dictionary's
    coefficients); the uploads are then checked against it."""
    if not isinstance(payload, torch.Tensor) or payload.dtype != dtype \
            or not (payload.ndim == 1 or (payload.ndim == 2 and payload.shape[0] == clients)):
        raise ConfigError(
            f"{type(algorithm).__name__}.broadcast returned {returned(payload)} for {clients} "
            f"sampled clients; it must return one payload for all, a (P,) tensor, or one row "
            f"per client, a ({clients}, P) tensor, of dtype {dtype} (P: the payload's width, "
            f"the model's {size} unless the algorithm sends another form, such as a "
            "dictionary's coefficients)")


def checked_reply(algorithm: Algorithm, reply, rows: int, payload: torch.Tensor) -> tuple:
    """``(uploads, client_state, info)`` of what a (custom) ``client_update`` returned for
    a chunk of ``rows`` clients sent ``payload``, refused unless it has that form: the
    uploads (rows, P) of the payload's width and dtype, ``client_state`` None or a dict of
    (rows, ...) tensors, ``info`` a dict of real numbers (a Python or NumPy number, or a
    one-element tensor). What would be read as a diagnostic is checked
    before it is averaged over the chunks; only the names the algorithm declares, with
    finite values, are recorded then (the others are dropped with a warning by the round
    loop, as for Flower's clients). Only types and shapes are read: no tensor entry."""
    where = f"{type(algorithm).__name__}.client_update"
    if not isinstance(reply, tuple | list) or len(reply) != 3:
        got = f"a {type(reply).__name__} of {len(reply)}" if isinstance(reply, tuple | list) \
            else returned(reply)
        raise ConfigError(
            f"{where} returned {got}; it must return a 3-tuple (uploads, client_state, info): "
            f"the ({rows}, P) uploads, the clients' new state (a dict of ({rows}, ...) "
            "tensors) or None, and a dict of diagnostics {name: number} (may be empty)")
    uploads, state, info = reply
    _check_uploads(algorithm, uploads, rows, payload)
    state_form = f"client_state must be a dict of ({rows}, ...) tensors or None (one row per " \
                 "client of the chunk)"
    if state is not None:
        if not isinstance(state, dict):
            raise ConfigError(f"{where} returned client_state as {returned(state)}; "
                              f"{state_form}")
        for key, value in state.items():
            if not isinstance(value, torch.Tensor) or value.ndim == 0 \
                    or value.shape[0] != rows:
                raise ConfigError(f"{where} returned client_state[{shown(key)}] as "
                                  f"{returned(value)}; {state_form}")
    if not isinstance(info, dict):
        raise ConfigError(f"{where} returned info as {returned(info)}; info must be a dict "
                          "{name: real number} (may be empty)")
    for key, value in info.items():
        if _is_bool(value) or not (isinstance(value, Real) or (
                isinstance(value, torch.Tensor) and value.numel() == 1
                and not value.is_complex() and value.dtype != torch.bool)):
            got = f"<{returned(value)}>" if isinstance(value, torch.Tensor) else shown(value)
            raise ConfigError(
                f"{where} returned info[{shown(key)}]={got}; info values must be real numbers "
                "(an int, a float, a NumPy number or a one-element tensor; not a bool): the "
                "round records their mean over the clients")
    return uploads, state, info


def _check_uploads(algorithm: Algorithm, uploads, rows: int, payload: torch.Tensor) -> None:
    """Refuse uploads unless they are (rows, P) of the broadcast's width and dtype: a wrong
    shape would otherwise fail deep in torch, or be broadcast silently into every client's
    row."""
    want = (rows, payload.shape[-1])
    if not isinstance(uploads, torch.Tensor) or tuple(uploads.shape) != want \
            or uploads.dtype != payload.dtype:
        raise ConfigError(
            f"{type(algorithm).__name__}.client_update returned uploads as "
            f"{returned(uploads)}; they must be "
            f"a {want} tensor (one row per client of the chunk) of the broadcast's dtype "
            f"{payload.dtype}")


#: What a checkpointed server state may hold: what ``torch.load(weights_only=True)`` reads
#: back (the exact types: a NumPy float is saved, but refused when it is read).
_SCALARS = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)
_CONTAINERS = (list, tuple, dict, OrderedDict, set, torch.Size)


def checked_callback(callback, algorithm: Algorithm, checkpoint=None):
    """``callback(record, state)`` followed by a check that it left the global model
    readable, of the shape and dtype it had, and finite: a NaN it wrote into the state
    would otherwise surface as the next round's divergence, blamed on the clients' local
    training, and a model it removed or reshaped as an error of the algorithm's. One pass
    over the (P,) model a round, only for a run given a callback. With a ``checkpoint``,
    also that the state is still one a checkpoint holds (:func:`check_checkpointable`),
    so that an object the callback put there is named with it, not with ``aggregate``."""
    name = getattr(callback, "__qualname__", type(callback).__name__)

    def checked(record: dict, state: dict) -> None:
        before = algorithm.model(state)  # its shape and dtype only: no value is read
        callback(record, state)
        # a model the callback removed or reshaped would fail in the next round's
        # broadcast or client update, blamed on the algorithm
        where = f"round {record.get('round')}: callback {name}"
        try:
            model = algorithm.model(state)
        except (KeyError, IndexError, TypeError) as exc:
            raise ConfigError(f"{where} left a state that {type(algorithm).__name__}.model "
                              f"cannot read ({type(exc).__name__}: {cut(exc, 80)}); a "
                              "callback may change the model's values, not remove it"
                              ) from exc
        if not isinstance(model, torch.Tensor) or model.shape != before.shape \
                or model.dtype != before.dtype:
            raise ConfigError(f"{where} left the global model as {returned(model)}; it must "
                              f"stay a {tuple(before.shape)} {before.dtype} tensor (a "
                              "callback may change the model's values, not its shape or "
                              "dtype)")
        if not bool(torch.isfinite(model).all()):
            raise ConfigError(f"{where} left a non-finite model (NaN or inf) in the state; "
                              "a callback may change the state only to finite values")
        if checkpoint is not None:
            check_checkpointable(state, where, checkpoint, verb="left")

    return checked


def check_checkpointable(state: dict, owner: str, checkpoint, verb: str = "returned"
                         ) -> None:
    """Refuse a server state that a checkpoint could not hold.

    A checkpoint is written with :func:`torch.save` and read with ``weights_only``
    (:func:`~fedsparse.checkpoint_file.read_checkpoint`): a function, a generator or an
    object of the user's own class in the state would fail the first save, after the
    rounds before it, or be saved and then refused on resume. Only the types of the
    entries are read (no tensor's values), so the check is cheap enough before every save.

    Parameters
    ----------
    state : the server state.
    owner : the method that returned it, named in the message (``"MyAlgorithm.init"``).
    checkpoint : the checkpoint path, named in the message.
    verb : what ``owner`` did with the state, as the message says it ("returned", or
        "left" for a callback).

    Raises
    ------
    ConfigError
        naming the entry (``state['key']...``) and its type.
    """
    pending = deque([("state", state)])  # breadth first: a top-level entry is named first
    seen: set[int] = set()
    while pending:
        name, value = pending.popleft()
        if isinstance(value, torch.Tensor) or type(value) in _SCALARS:
            continue
        if type(value) not in _CONTAINERS:
            raise _not_checkpointable(f"{owner} {verb}", f"{name} is", value, checkpoint)
        if id(value) in seen:  # a list held twice (or in itself) is looked at once
            continue
        seen.add(id(value))
        if isinstance(value, dict | set):
            # a container as a key (or set member) is refused when a checkpoint is read
            # (fedsparse.checkpoint_file._hashed_kinds): keys are numbers or strings
            for key in value:
                if type(key) not in _SCALARS:
                    member = "a key" if isinstance(value, dict) else "a member"
                    raise _not_checkpointable(f"{owner} {verb}", f"{name} has {member} that "
                                              "is", key, checkpoint)
            if isinstance(value, set):
                continue
            items = value.items()
        else:
            items = enumerate(value)
        pending.extend((f"{name}[{k!r}]", v) for k, v in items)


def _not_checkpointable(owner: str, what: str, value, checkpoint) -> ConfigError:
    return ConfigError(
        f"{owner} a server state whose {what} {returned(value)}; a checkpointed "
        "state holds only tensors, numbers, strings, None and lists or dicts of them, "
        f"with number or string keys (checkpoint={str(checkpoint)!r} saves it with "
        "torch.save and reads it back with weights_only): keep other objects on the "
        "algorithm, or run without a checkpoint")
