"""The round loop shared by the embedded simulator and the Flower server.

One round, whatever runs the clients::

    clients  = sample_clients(seed, t, N, S)                 seeded, the same everywhere
    payload  = algorithm.broadcast(state, clients)           (P,) or (S, P)
    replies  = execute(t, clients, payload, config)          simulator: local; Flower: messages
    valid    = received & upload_problems(...) is empty      wrong shape, NaN/inf, too far
    delivered = valid & channel.delivered(seed, t, clients)
    state    = algorithm.aggregate(state, uploads with undelivered rows zeroed, cohort)
    record   = bytes, deliveries, rejections, evaluation every ``eval_every`` rounds

so records, byte totals, upload validation and the divergence stop exist once. The
runtimes differ only in ``execute`` (how uploads are produced) and ``evaluate`` (where
the data is).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

from . import rng
from .algorithms.base import Algorithm, Cohort
from .comm import payload_bytes
from .history import History

log = logging.getLogger("fedsparse")
#: Why an upload with NaN or inf values is rejected.
NONFINITE = "non-finite values (NaN or inf)"


class DivergenceError(RuntimeError):
    """The model became non-finite. ``history`` holds every finite round, and
    ``history.model`` the last finite model."""

    def __init__(self, message: str, history: History, round: int):
        super().__init__(message)
        self.history = history
        self.round = round


@dataclass
class Replies:
    """What came back from the sampled clients of a round.

    Attributes
    ----------
    uploads : (S, P) uploads; rows of clients that did not reply may hold anything.
    received : (S,) bool, True where a reply with an upload came back.
    bytes_up : bytes the clients sent.
    info : mean of the clients' scalar diagnostics.
    client_state : new per-client state rows (dict of (S, ...) tensors) or None.
    problems : {row: reason} for replies already known to be malformed (not received).
    bytes_down : bytes actually sent down, where not every sampled client was sent its
        payload (Flower: clients without a live node); None = all were.
    """

    uploads: torch.Tensor
    received: torch.Tensor
    bytes_up: int
    info: dict = field(default_factory=dict)
    client_state: dict | None = None
    problems: dict[int, str] = field(default_factory=dict)
    bytes_down: int | None = None


def sample_clients(seed: int, round: int, num_clients: int, per_round: int | None
                   ) -> torch.Tensor:
    """Client ids of a round, uniformly without replacement, in ascending order."""
    if per_round is None or per_round >= num_clients:
        return torch.arange(num_clients)
    keys = rng.uniform(seed, rng.CLIENT_SAMPLE, round, torch.arange(num_clients))
    chosen = torch.topk(keys, per_round, largest=False).indices
    return torch.sort(chosen).values


def upload_problems(uploads: torch.Tensor, received: torch.Tensor, payload: torch.Tensor,
                    max_update_norm: float | None) -> dict[int, str]:
    """{row: reason} for received uploads that must not reach the model.

    A non-finite upload, or one farther than ``max_update_norm`` (l2) from what its client
    was sent, is rejected.

    Parameters
    ----------
    uploads : (S, P); received : (S,) bool; payload : (P,) or (S, P) the broadcast.
    """
    out: dict[int, str] = {}
    rows = torch.nonzero(received).flatten()
    if rows.numel() == 0:
        return out
    got = uploads[rows]
    finite = torch.isfinite(got).all(-1)
    for r in rows[~finite.cpu()].tolist():
        out[int(r)] = NONFINITE
    if max_update_norm is not None:
        sent = payload[rows] if payload.ndim == 2 else payload
        dist = torch.linalg.vector_norm((got - sent).to(torch.float64), dim=-1).cpu()
        for r, d, ok in zip(rows.tolist(), dist.tolist(), finite.tolist(), strict=True):
            if ok and d > max_update_norm:
                out[int(r)] = f"distance {d:.4g} to the broadcast exceeds max_update_norm=" \
                              f"{max_update_norm:g}"
    return out


def broadcast_bytes(payload: torch.Tensor, encoding: str, clients: int) -> int:
    """Bytes sent down: one payload per client (a shared (P,) payload is sent S times)."""
    if payload.ndim == 1:
        return int(payload_bytes(payload, encoding)) * clients
    return int(payload_bytes(payload, encoding).sum())


class ClientStore:
    """Per-client state of all N clients, updated in place for the sampled ones.

    Parameters
    ----------
    state : dict of (N, ...) tensors, or None for stateless algorithms.
    """

    def __init__(self, state: dict | None):
        self.state = state

    def gather(self, clients: torch.Tensor) -> dict | None:
        """The (S, ...) rows of ``clients``."""
        if self.state is None:
            return None
        return {k: v[clients.to(v.device)] for k, v in self.state.items()}

    def scatter_(self, clients: torch.Tensor, rows: dict | None) -> None:
        """Write the (S, ...) rows back in place (no copy of the other N - S rows)."""
        if self.state is None or rows is None:
            return
        for k, v in rows.items():
            self.state[k][clients.to(v.device)] = v


@dataclass
class RoundLoop:
    """Runs rounds of a bound algorithm; see the module docstring.

    Parameters
    ----------
    algorithm : a bound :class:`~fedsparse.algorithms.Algorithm`.
    weights : (N,) float64 client weights p_i.
    seed, per_round : client sampling (``per_round`` None = every client).
    channel : ``delivered(seed, round, clients) -> (S,) bool``.
    execute : ``(round, clients, payload, config, state_rows) -> Replies``.
    evaluate : ``(model, state, store) -> dict`` of metrics of the global model.
    store : per-client state (simulator) or an empty store (state lives on the nodes).
    eval_every : evaluate every k rounds and at the last (1 = every round).
    max_update_norm : reject uploads farther than this from the broadcast (None = off).
    stop_on_nonfinite_upload : True (simulator): a delivered NaN/inf upload means the
        run diverged and stops it; False (Flower): it is the failed upload of one client.
    """

    algorithm: Algorithm
    weights: torch.Tensor
    seed: int
    per_round: int | None
    channel: object
    execute: Callable[..., Replies]
    evaluate: Callable[..., dict]
    store: ClientStore
    eval_every: int = 1
    max_update_norm: float | None = None
    stop_on_nonfinite_upload: bool = True

    def run(self, state: dict, history: History, start: int, rounds: int, *,
            save: Callable[[int, dict], None] | None = None, checkpoint_every: int = 10,
            callback: Callable | None = None, progress: bool | None = None) -> dict:
        """Rounds ``start .. rounds - 1``; appends records to ``history``; returns the state.

        ``save(done_rounds, state)`` is called every ``checkpoint_every`` rounds, at the
        end and when the run diverges (with the last finite state).
        """
        algorithm = self.algorithm
        last = history.records[-1] if history.records else history.initial
        up_total, down_total = last.get("bytes_up_total", 0), last.get("bytes_down_total", 0)
        elapsed = last.get("elapsed", 0.0)
        N = int(self.weights.shape[0])
        bar = tqdm(total=rounds, initial=start, disable=False if progress else
                   (True if progress is False else None), desc=algorithm.name, leave=False)
        try:
            for t in range(start, rounds):
                tic = time.perf_counter()
                clients = sample_clients(self.seed, t, N, self.per_round)
                S = int(clients.shape[0])
                payload = algorithm.broadcast(state, clients)
                config = {**algorithm.client_config(state), "total_rounds": rounds}  # T
                replies = self.execute(t, clients, payload, config, self.store.gather(clients))
                delivered, problems = self._screen(t, clients, payload, replies)
                if problems is None:  # a client's local training diverged (simulator)
                    self._diverged(history, state, algorithm, t, save, bar,
                                   "the model became non-finite (NaN or inf) in the local "
                                   f"training of clients {delivered[:10]}")
                # Undelivered rows are zeroed so nothing in them can reach the model.
                uploads = torch.where(delivered.to(replies.uploads.device)[:, None],
                                      replies.uploads, torch.zeros((), dtype=replies.uploads.dtype,
                                                                   device=replies.uploads.device))
                if delivered.any():
                    cohort = Cohort(t, clients, self.weights[clients], delivered)
                    new_state = algorithm.aggregate(state, uploads, cohort)
                else:
                    message = f"round {t + 1}: no upload was delivered; the model is kept " \
                              f"({S} sampled, {len(problems)} rejected)"
                    warnings.warn(message, RuntimeWarning, stacklevel=3)
                    log.warning("%s", message)
                    new_state = state
                seconds = time.perf_counter() - tic
                model = algorithm.model(new_state)
                if not torch.isfinite(model).all():
                    self._diverged(history, state, algorithm, t, save, bar,
                                   "the model became non-finite (NaN or inf)")
                state = new_state
                self.store.scatter_(clients, replies.client_state)
                bytes_down = replies.bytes_down if replies.bytes_down is not None else \
                    broadcast_bytes(payload, algorithm.broadcast_encoding, S)
                up_total, down_total = up_total + replies.bytes_up, down_total + bytes_down
                elapsed += seconds
                record = {"round": t + 1}
                if (t + 1) % self.eval_every == 0 or t + 1 == rounds:
                    record.update(self.evaluate(model, state, self.store))
                record.update({
                    "bytes_up": int(replies.bytes_up), "bytes_down": bytes_down,
                    "bytes_up_total": int(up_total), "bytes_down_total": int(down_total),
                    "bytes_total": int(up_total + down_total), "clients_sampled": S,
                    "delivered": int(delivered.sum()), "rejected": len(problems),
                    "delivered_clients": clients[delivered].tolist(), "seconds": seconds,
                    "elapsed": elapsed, **replies.info})
                if delivered.any():
                    record.update(algorithm.round_metrics(state))
                history.records.append(record)
                if callback is not None:
                    callback(record, state)
                bar.update(1)
                if save is not None and ((t + 1) % checkpoint_every == 0 or t + 1 == rounds):
                    save(t + 1, state)
        finally:
            bar.close()
        return state

    def _screen(self, t: int, clients: torch.Tensor, payload: torch.Tensor, replies: Replies):
        """``(delivered (S,) bool, {row: why rejected})``: received, well-formed, finite,
        within ``max_update_norm``, and passed by the channel. With
        ``stop_on_nonfinite_upload``, a non-finite upload instead returns
        ``(ids of those clients, None)``: the run has diverged."""
        received = replies.received.clone()
        problems = dict(replies.problems)
        found = upload_problems(replies.uploads, received, payload, self.max_update_norm)
        nonfinite = [int(clients[r]) for r, why in found.items() if why == NONFINITE]
        if nonfinite and self.stop_on_nonfinite_upload:
            return nonfinite, None
        problems.update(found)
        for r, why in problems.items():
            received[r] = False
            log.warning("round %d: upload of client %d rejected: %s", t + 1, int(clients[r]),
                        why)
        return received & self.channel.delivered(self.seed, t, clients), problems

    def _diverged(self, history, state, algorithm, t, save, bar, what):
        bar.close()
        history.model = algorithm.model(state)
        if save is not None:
            save(t, state)
        raise DivergenceError(
            f"round {t + 1}: {what}; stopped, keeping the last finite model (round {t}) in "
            "error.history.model. A smaller step size usually helps.", history, t + 1)

