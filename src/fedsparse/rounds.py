"""The round loop shared by the embedded simulator and the Flower server.

One round, whatever runs the clients::

    clients  = sample_clients(seed, t, N, S)                 seeded, the same everywhere
    payload  = algorithm.broadcast(state, clients)           (P,) or (S, P), else refused
    replies  = execute(t, clients, payload, config)          simulator: local; Flower: messages
    valid    = received & upload_problems(...) is empty      wrong shape, NaN/inf, too far
    delivered = valid & channel.delivered(seed, t, clients)
    state    = algorithm.aggregate(state, uploads with undelivered rows zeroed, cohort)
               a dict with a (P,) model of the run's dtype, else refused (check_state)
    record   = evaluation every ``eval_every`` rounds, bytes, deliveries, rejections,
               then the clients' declared diagnostics under names no server field has

and, before the first round, the initial record (:meth:`RoundLoop.initial_record`),
so records, byte totals, upload validation and the divergence stop exist once. The
runtimes differ only in ``execute`` (how uploads are produced) and ``evaluate`` (where
the data is).

What the server measured always wins. The clients' diagnostics (``info`` of
:meth:`~fedsparse.algorithms.Algorithm.client_update`) reach the record only under the
names the algorithm declares in ``client_metrics``, as finite numbers (see
:func:`~fedsparse.screening.screen_client_metrics`), and an algorithm may not declare a
name the server records itself (:data:`SERVER_FIELDS`). A Flower client that sends
``rejected: 0`` therefore cannot hide its own rejection.

A non-finite upload is divergence only when it is delivered: an upload the channel
lost never reached the server and changes nothing (simulator). On Flower a non-finite
upload is the failed upload of one client.

A finite model whose evaluated loss is not (:data:`~fedsparse.metric_names.LOSS_FIELDS`:
a loss overflows long before the model does, in float32 soonest) has diverged too: the
run stops at that round, keeping the round before's model and client state, and its
record (which would hold the inf) is not kept. Only the server's own evaluation counts
(the simulator's); on Flower the losses are the nodes' reports, each screened (a
non-finite one is left out), so one node cannot stop a run.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

from . import rng
from ._validation import ConfigError, check_int
from .algorithms.base import Algorithm, Cohort
from .client_store import ClientStore
from .comm import payload_bytes
from .contract import check_payload, check_state
from .history import History
from .metric_names import LOSS_FIELDS
from .metrics import MODEL_FIELDS
from .screening import (  # noqa: F401  (also importable from here, as before)
    MAX_CLIENT_METRICS,
    MAX_METRIC_NAME,
    NONFINITE,
    cut,
    screen_client_metrics,
    shown,
    upload_problems,
)

log = logging.getLogger("fedsparse")


def _warn(message: str, *, stacklevel: int) -> None:
    """A RuntimeWarning ``stacklevel`` frames above the caller, also logged where the
    process has set up logging (an operator's handlers, e.g. to a file); without a
    handler, logging's last resort would print the warning's line a second time."""
    warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)
    if log.hasHandlers():
        log.warning("%s", message)


#: The fields of a round record that the server measures (the loop, the evaluation of
#: the global and personalised models); a client diagnostic may not take these names.
SERVER_FIELDS = frozenset({
    "round", "bytes_up", "bytes_down", "bytes_up_total", "bytes_down_total", "bytes_total",
    "clients_sampled", "delivered", "rejected", "delivered_clients", "seconds", "elapsed",
    "nnz", "density", "evaluations_dropped", "eval_clients", *MODEL_FIELDS,
    *(f"{m}_se" for m in ("objective", "accuracy", "test_objective", "test_accuracy")),
    *(f"personal_{m}" for m in ("objective", "accuracy", "test_objective", "test_accuracy"))})


class DivergenceError(RuntimeError):
    """The model, a delivered upload or an evaluated loss (:data:`LOSS_FIELDS`) became
    non-finite. ``history`` holds every round before, and ``history.model`` the model of
    the round before the one that diverged (the last finite model)."""

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
    info : mean of the clients' scalar diagnostics (simulator), screened by the loop.
    client_state : new per-client state rows (dict of (S, ...) tensors) or None.
    problems : {row: reason} for replies already known to be malformed (not received).
    bytes_down : bytes actually sent down, where not every sampled client was sent its
        payload (Flower: clients without a live node); None = all were.
    info_rows : {row: diagnostics as that client sent them} (Flower); when given, the
        record holds their mean over the accepted uploads instead of ``info``.
    """

    uploads: torch.Tensor
    received: torch.Tensor
    bytes_up: int
    info: dict = field(default_factory=dict)
    client_state: dict | None = None
    problems: dict[int, str] = field(default_factory=dict)
    bytes_down: int | None = None
    info_rows: dict[int, dict] | None = None


def sample_clients(seed: int, round: int, num_clients: int, per_round: int | None
                   ) -> torch.Tensor:
    """Client ids of a round, uniformly without replacement, in ascending order."""
    if per_round is None or per_round >= num_clients:
        return torch.arange(num_clients)
    keys = rng.uniform(seed, rng.CLIENT_SAMPLE, round, torch.arange(num_clients))
    chosen = torch.topk(keys, per_round, largest=False).indices
    return torch.sort(chosen).values


def broadcast_bytes(payload: torch.Tensor, encoding: str, clients: int) -> int:
    """Bytes sent down: one payload per client (a shared (P,) payload is sent S times)."""
    if payload.ndim == 1:
        return int(payload_bytes(payload, encoding)) * clients
    return int(payload_bytes(payload, encoding).sum())


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
    evaluate : ``(model, state, store, round) -> dict`` of metrics of the global model
        after ``round`` rounds (0: before training); called only where
        :meth:`evaluates` says so.
    store : per-client state (simulator) or an empty store (state lives on the nodes).
    eval_every : when ``evaluate`` runs: k >= 1 every k rounds and at the last (1 =
        every round); 0 at the last round only; -1 never. Before training (the initial
        record) unless -1.
    every_round : ``model -> dict`` of fields recorded in every record, the initial one
        included, whether or not the model is evaluated (Flower: the server's own
        ``nnz`` and ``density``, which need no node); None = none.
    max_update_norm : reject uploads farther than this from the broadcast (None = off).
    max_update_ratio : reject uploads farther than this many times the round's median
        distance to the broadcast (None = off); see
        :func:`~fedsparse.screening.upload_problems`.
    stop_on_nonfinite_upload : True (simulator): a delivered NaN/inf upload means the
        run diverged and stops it (a lost one changes nothing); False (Flower): it is
        the failed upload of one client.
    stop_on_nonfinite_loss : True (simulator): a NaN/inf loss (:data:`LOSS_FIELDS`) in
        what ``evaluate`` returns means the run diverged and stops it at that round,
        keeping the round before's state and client state; False (Flower): the losses
        are the nodes' reports, already screened, and never stop the run.

    Raises
    ------
    ConfigError
        when ``algorithm.client_metrics`` names a field the server records.
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
    max_update_ratio: float | None = None
    stop_on_nonfinite_upload: bool = True
    stop_on_nonfinite_loss: bool = True
    every_round: Callable[[torch.Tensor], dict] | None = None

    def __post_init__(self):
        check_int("eval_every", self.eval_every, minimum=-1)
        declared = tuple(getattr(self.algorithm, "client_metrics", ()))
        taken = sorted(set(declared) & SERVER_FIELDS)
        if taken:
            raise ConfigError(f"{self.algorithm.name}.client_metrics names {taken}, which the "
                              "server records itself; give the diagnostics other names")
        self.declared = declared
        self._warned: set[str] = set()

    def evaluates(self, round: int, rounds: int) -> bool:
        """Whether the model after ``round`` of ``rounds`` rounds is evaluated (round 0:
        the initial record); see ``eval_every``."""
        if self.eval_every < 0:
            return False
        return round == 0 or round == rounds or \
            (self.eval_every > 0 and round % self.eval_every == 0)

    def initial_record(self, state: dict, rounds: int) -> dict:
        """The record of round 0, before any training: the evaluation of the initial
        model (unless ``eval_every`` is -1), the ``every_round`` fields and zero
        traffic. Both runtimes store it as ``history.initial``."""
        model = self.algorithm.model(state)
        record: dict = {"round": 0}
        if self.evaluates(0, rounds):
            record.update(self.evaluate(model, state, self.store, 0))
        if self.every_round is not None:
            record.update(self.every_round(model))
        record.update({"bytes_up": 0, "bytes_down": 0, "bytes_up_total": 0,
                       "bytes_down_total": 0, "bytes_total": 0, "clients_sampled": 0,
                       "delivered": 0, "seconds": 0.0, "elapsed": 0.0})
        return record

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
        # what every broadcast and every aggregated model must look like: the model the
        # run starts from (the runtimes check their initial state, :func:`check_state`)
        first = algorithm.model(state)
        size, dtype = int(first.shape[-1]), first.dtype
        bar = tqdm(total=rounds, initial=start, disable=False if progress else
                   (True if progress is False else None), desc=algorithm.name, leave=False)
        try:
            for t in range(start, rounds):
                tic = time.perf_counter()
                clients = sample_clients(self.seed, t, N, self.per_round)
                S = int(clients.shape[0])
                payload = algorithm.broadcast(state, clients)
                check_payload(algorithm, payload, S, size, dtype)
                config = {**algorithm.client_config(state), "total_rounds": rounds}  # T
                replies = self.execute(t, clients, payload, config, self.store.gather(clients))
                delivered, problems = self._screen(t, clients, payload, replies)
                if problems is None:  # a client's delivered upload diverged (simulator)
                    self._diverged(history, state, algorithm, t, save, bar,
                                   "the model became non-finite (NaN or inf) in the local "
                                   f"training of clients {delivered[:10]}")
                # Undelivered rows are zeroed so nothing in them can reach the model.
                uploads = torch.where(delivered.to(replies.uploads.device)[:, None],
                                      replies.uploads, torch.zeros((), dtype=replies.uploads.dtype,
                                                                   device=replies.uploads.device))
                if delivered.any():
                    cohort = Cohort(t, clients, self.weights[clients], delivered, self.seed)
                    new_state = algorithm.aggregate(state, uploads, cohort)
                    check_state(algorithm, new_state, "aggregate", size, dtype)
                else:
                    message = f"round {t + 1}: no upload was delivered; the model is kept " \
                              f"({S} sampled, {len(problems)} rejected)"
                    _warn(message, stacklevel=3)
                    new_state = state
                seconds = time.perf_counter() - tic
                model = algorithm.model(new_state)
                if not torch.isfinite(model).all():
                    self._diverged(history, state, algorithm, t, save, bar,
                                   "the model became non-finite (NaN or inf)")
                evaluated = self.evaluates(t + 1, rounds)
                # The sampled clients' rows as they were, to put back if this round's
                # evaluation diverges: the checkpoint then holds the round before's
                # server state *and* client state (evaluated rounds only: a copy of S rows).
                kept_rows = self.store.gather(clients, move=False) if evaluated and \
                    self.stop_on_nonfinite_loss and replies.client_state is not None else None
                before, state = state, new_state
                self.store.scatter_(clients, replies.client_state)
                bytes_down = replies.bytes_down if replies.bytes_down is not None else \
                    broadcast_bytes(payload, algorithm.broadcast_encoding, S)
                up_total, down_total = up_total + replies.bytes_up, down_total + bytes_down
                elapsed += seconds
                record = {"round": t + 1}
                if evaluated:
                    measured = self.evaluate(model, state, self.store, t + 1)
                    bad = nonfinite_losses(measured) if self.stop_on_nonfinite_loss else []
                    if bad:
                        self.store.scatter_(clients, kept_rows)
                        self._diverged(
                            history, before, algorithm, t, save, bar,
                            f"the model's evaluated loss is not finite ({', '.join(bad)}), "
                            "though the model is (the loss overflows)",
                            kept="the model before it")
                    record.update(measured)
                if self.every_round is not None:
                    record.update(self.every_round(model))
                record.update({
                    "bytes_up": int(replies.bytes_up), "bytes_down": bytes_down,
                    "bytes_up_total": int(up_total), "bytes_down_total": int(down_total),
                    "bytes_total": int(up_total + down_total), "clients_sampled": S,
                    "delivered": int(delivered.sum()), "rejected": len(problems),
                    "delivered_clients": clients[delivered].tolist(), "seconds": seconds,
                    "elapsed": elapsed})
                # Declared names only (never a server field: checked at the start), and
                # never over what the server measured.
                for k, v in self._client_metrics(t, clients, replies, problems).items():
                    record.setdefault(k, v)
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
        within ``max_update_norm`` and ``max_update_ratio``, and passed by the channel.
        With ``stop_on_nonfinite_upload``, a non-finite upload that the channel delivers
        instead returns ``(ids of those clients, None)``: the run has diverged; one the
        channel lost never reached the server and is ignored."""
        received = replies.received.clone()
        problems = dict(replies.problems)
        updates = self.algorithm.uploads_are_updates
        found = upload_problems(replies.uploads, received, payload, self.max_update_norm,
                                self.max_update_ratio, updates)
        passed = self.channel.delivered(self.seed, t, clients)
        if self.stop_on_nonfinite_upload:
            nonfinite = [r for r, why in found.items() if why == NONFINITE]
            diverged = [int(clients[r]) for r in nonfinite if bool(passed[r])]
            if diverged:
                return diverged, None
            for r in nonfinite:  # lost on the way: the server never saw it
                received[r] = False
                del found[r]
            if nonfinite:
                # the relative bound's median must not count what never arrived
                found = upload_problems(replies.uploads, received, payload,
                                        self.max_update_norm, self.max_update_ratio, updates)
        problems.update(found)
        for r, why in problems.items():
            received[r] = False
            log.warning("round %d: upload of client %d rejected: %s", t + 1, int(clients[r]),
                        why)
        return received & passed, problems

    def _client_metrics(self, t: int, clients: torch.Tensor, replies: Replies,
                        problems: dict[int, str]) -> dict[str, float]:
        """The clients' declared, finite diagnostics: the mean over the accepted uploads
        of what each client sent (``info_rows``), else the runtime's mean (``info``)."""
        if replies.info_rows is None:
            accepted, refused = screen_client_metrics(replies.info, self.declared)
            for line in refused:
                name = line.split(":", 1)[0].split("=", 1)[0]
                if name not in self._warned:  # once per name and run
                    self._warned.add(name)
                    message = f"round {t + 1}: client diagnostic {line}; not recorded " \
                              f"(algorithm {self.algorithm.name})"
                    _warn(message, stacklevel=4)
            return accepted
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        for row, metrics in replies.info_rows.items():
            if row in problems:  # a rejected upload's diagnostics are not recorded either
                continue
            accepted, refused = screen_client_metrics(metrics, self.declared)
            if refused:
                log.warning("round %d: client %d sent diagnostics that are not recorded: %s",
                            t + 1, int(clients[row]), "; ".join(refused[:5]))
            for k, v in accepted.items():
                sums[k] = sums.get(k, 0.0) + v
                counts[k] = counts.get(k, 0) + 1
        return {k: sums[k] / counts[k] for k in sorted(sums)}

    def _diverged(self, history, state, algorithm, t, save, bar, what,
                  kept="the last finite model"):
        """Stop at round ``t + 1``: ``history.model`` is ``state``'s model (round ``t``),
        saved with ``save``; raises :class:`DivergenceError` naming ``what`` happened."""
        bar.close()
        history.model = algorithm.model(state)
        if save is not None:
            save(t, state)
        raise DivergenceError(
            f"round {t + 1}: {what}; stopped, keeping {kept} (round {t}: the error's "
            "history.model, a run folder's model.npy). A smaller step size usually helps.",
            history, t + 1)


def nonfinite_losses(metrics: dict) -> list[str]:
    """``name=value`` of every loss (:data:`LOSS_FIELDS`) in ``metrics`` that is a NaN or
    an infinity; [] when there is none (a missing or None loss is not one)."""
    return [f"{name}={value}" for name in LOSS_FIELDS
            if isinstance(value := metrics.get(name), float) and not math.isfinite(value)]
