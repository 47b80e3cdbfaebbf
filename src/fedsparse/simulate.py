"""The embedded simulator: every sampled client of a round runs at once, stacked."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import torch
from tqdm.auto import tqdm

from . import rng
from ._threads import single_threaded_blas
from ._validation import ConfigError, check_int, fail
from .algorithms.base import Algorithm, ClientContext
from .channels import PerfectChannel
from .comm import payload_bytes
from .data.federated import FederatedDataset
from .history import History
from .metrics import evaluate
from .problems.base import Problem

CHECKPOINT_FORMAT = "fedsparse-checkpoint-1"


class DivergenceError(RuntimeError):
    """The model became non-finite. ``history`` holds every finite round, and
    ``history.model`` the last finite model."""

    def __init__(self, message: str, history: History, round: int):
        super().__init__(message)
        self.history = history
        self.round = round


def sample_clients(seed: int, round: int, num_clients: int, per_round: int | None
                   ) -> torch.Tensor:
    """Client ids of a round, uniformly without replacement, in ascending order."""
    if per_round is None or per_round >= num_clients:
        return torch.arange(num_clients)
    keys = rng.uniform(seed, rng.CLIENT_SAMPLE, round, torch.arange(num_clients))
    chosen = torch.topk(keys, per_round, largest=False).indices
    return torch.sort(chosen).values


def _fingerprint(algorithm, problem, data, seed, clients_per_round, channel) -> dict:
    return {"algorithm": repr(algorithm), "problem": problem.name, "data": repr(data),
            "seed": seed, "clients_per_round": clients_per_round, "channel": repr(channel)}


def _save_checkpoint(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)  # atomic: a crash mid-write never corrupts the last checkpoint


def _load_checkpoint(path: Path, fingerprint: dict) -> dict:
    try:
        ckpt = torch.load(path, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets the same clear message
        raise ConfigError(f"checkpoint {str(path)!r} could not be read: {exc}") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(f"checkpoint {str(path)!r} is not a fedsparse checkpoint")
    if ckpt["fingerprint"] != fingerprint:
        diff = {k: (ckpt["fingerprint"].get(k), v) for k, v in fingerprint.items()
                if ckpt["fingerprint"].get(k) != v}
        raise ConfigError(f"checkpoint {str(path)!r} belongs to another run; differences "
                          f"(saved, now): {diff}")
    return ckpt


def _run_clients(algorithm: Algorithm, problem: Problem, data: FederatedDataset,
                 payload: torch.Tensor, clients: torch.Tensor, t: int, seed: int, config: dict,
                 client_state: dict | None, client_batch: int | None):
    """Client halves of all sampled clients, ``client_batch`` at a time (same result)."""
    full = clients.shape[0] == data.num_clients
    chunks = [clients] if client_batch is None else list(torch.split(clients, client_batch))
    uploads, states, info = [], [], {}
    for chunk in chunks:
        split = data.train if (full and len(chunks) == 1) else data.train.select(chunk)
        state = None if client_state is None else {k: v[chunk] for k, v in client_state.items()}
        ctx = ClientContext(problem, split, chunk, t, seed, state=state, config=config)
        up, new_state, chunk_info = algorithm.client_update(payload, ctx)
        uploads.append(up)
        states.append(new_state)
        for k, v in chunk_info.items():
            info[k] = info.get(k, 0.0) + float(v) * chunk.shape[0] / clients.shape[0]
    if client_state is not None:
        client_state = {k: v.clone() for k, v in client_state.items()}
        for chunk, new_state in zip(chunks, states, strict=True):
            for k, v in new_state.items():
                client_state[k][chunk] = v
    return torch.cat(uploads), client_state, info


def simulate(algorithm: Algorithm, problem: Problem, data: FederatedDataset, *, rounds: int,
             seed: int = 0, clients_per_round: int | None = None, channel=None,
             dtype: torch.dtype | None = None, checkpoint: str | Path | None = None,
             checkpoint_every: int = 10, resume: bool = False, progress: bool | None = None,
             client_batch: int | None = None, callback=None) -> History:
    """Run ``algorithm`` for ``rounds`` rounds on ``data`` and record every round.

    Parameters
    ----------
    algorithm, problem, data : what to run, on what.
    rounds : number of communication rounds T (>= 1).
    seed : every random draw is a function of (seed, round, client, ...).
    clients_per_round : clients sampled uniformly without replacement each round
        (default all); aggregation weights are renormalised among them.
    channel : decides which uploads arrive (default :class:`PerfectChannel`).
    dtype : cast the data (and so the model) to this dtype, e.g. ``torch.float64``.
    checkpoint : file to save the run's state to every ``checkpoint_every`` rounds and
        at the end; with ``resume=True`` an existing checkpoint is continued, giving the
        same history as an uninterrupted run.
    progress : progress bar; default: shown on a terminal only.
    client_batch : process at most this many clients at once (bounds memory; the
        result is the same).
    callback : called as ``callback(record, state)`` after every round.

    Returns
    -------
    History

    Raises
    ------
    DivergenceError
        when the model becomes NaN/inf; it names the round and carries the history with
        the last finite model (also saved to ``checkpoint`` if one was given).
    """
    if clients_per_round is None:
        clients_per_round = getattr(algorithm, "clients_per_round", None)
    rounds = check_int("rounds", rounds, minimum=1)
    seed = check_int("seed", seed, minimum=0)
    check_int("clients_per_round", clients_per_round, minimum=1, allow_none=True)
    if clients_per_round is not None and clients_per_round > data.num_clients:
        raise fail("clients_per_round", clients_per_round,
                   f"must be at most the number of clients {data.num_clients}")
    check_int("checkpoint_every", checkpoint_every, minimum=1)
    check_int("client_batch", client_batch, minimum=1, allow_none=True)
    if not isinstance(data, FederatedDataset):
        raise fail("data", type(data).__name__, "must be a fedsparse.data.FederatedDataset")
    if dtype is not None and dtype != data.dtype:
        data = data.to(dtype)
    channel = channel or PerfectChannel()
    problem.check_data(data)
    algorithm.check(problem, data)
    if data.ground_truth is not None and data.ground_truth.numel() != problem.param_dim(data.dim):
        raise fail("ground_truth length", data.ground_truth.numel(),
                   f"must equal the model size {problem.param_dim(data.dim)}")

    state = algorithm.init(problem, data)
    client_state = algorithm.init_clients(problem, data)
    fingerprint = _fingerprint(algorithm, problem, data, seed, clients_per_round, channel)
    history = History(config={**fingerprint, "rounds": rounds})
    history.initial = {"round": 0, **evaluate(problem, data, algorithm.model(state)),
                       "bytes_up": 0, "bytes_down": 0, "bytes_up_total": 0,
                       "bytes_down_total": 0, "bytes_total": 0, "clients_sampled": 0,
                       "delivered": 0, "seconds": 0.0, "elapsed": 0.0}
    start = 0
    ckpt_path = Path(checkpoint) if checkpoint is not None else None
    if resume:
        if ckpt_path is None:
            raise fail("resume", resume, "needs a checkpoint path")
        if ckpt_path.exists():
            ckpt = _load_checkpoint(ckpt_path, fingerprint)
            state, client_state = ckpt["state"], ckpt["client_state"]
            history.records, history.initial = ckpt["records"], ckpt["initial"]
            start = ckpt["round"]

    def save(done_rounds: int) -> None:
        if ckpt_path is not None:
            _save_checkpoint(ckpt_path, {
                "format": CHECKPOINT_FORMAT, "round": done_rounds, "state": state,
                "client_state": client_state, "records": history.records,
                "initial": history.initial, "fingerprint": fingerprint})

    last = history.records[-1] if history.records else history.initial
    up_total, down_total = last["bytes_up_total"], last["bytes_down_total"]
    elapsed = last["elapsed"]
    bar = tqdm(total=rounds, initial=start, disable=False if progress else
               (True if progress is False else None), desc=algorithm.name, leave=False)
    with single_threaded_blas():
        for t in range(start, rounds):
            tic = time.perf_counter()
            clients = sample_clients(seed, t, data.num_clients, clients_per_round)
            payload = algorithm.broadcast(state)
            uploads, new_client_state, info = _run_clients(
                algorithm, problem, data, payload, clients, t, seed,
                algorithm.client_config(state), client_state, client_batch)
            delivered = channel.delivered(seed, t, clients)
            if delivered.any():
                new_state = algorithm.aggregate(state, uploads, data.weights[clients], delivered)
            else:
                warnings.warn(f"round {t + 1}: no upload was delivered; the model is kept",
                              RuntimeWarning, stacklevel=2)
                new_state = state
            seconds = time.perf_counter() - tic
            model = algorithm.model(new_state)
            if not torch.isfinite(model).all():
                bar.close()
                history.model = algorithm.model(state)
                save(t)
                raise DivergenceError(
                    f"round {t + 1}: the model became non-finite (NaN or inf); stopped, keeping "
                    f"the last finite model (round {t}) in error.history.model. A smaller "
                    "step size usually helps.", history, t + 1)
            state, client_state = new_state, new_client_state
            bytes_up = int(payload_bytes(uploads, algorithm.upload_encoding).sum())
            per_client_down = int(payload_bytes(payload, algorithm.broadcast_encoding))
            bytes_down = per_client_down * clients.shape[0]
            up_total, down_total = up_total + bytes_up, down_total + bytes_down
            elapsed += seconds
            record = {"round": t + 1, **evaluate(problem, data, model), "bytes_up": bytes_up,
                      "bytes_down": bytes_down, "bytes_up_total": up_total,
                      "bytes_down_total": down_total, "bytes_total": up_total + down_total,
                      "clients_sampled": int(clients.shape[0]), "delivered": int(delivered.sum()),
                      "seconds": seconds, "elapsed": elapsed, **info}
            history.records.append(record)
            if callback is not None:
                callback(record, state)
            bar.update(1)
            if (t + 1) % checkpoint_every == 0 or t + 1 == rounds:
                save(t + 1)
    bar.close()
    history.model = algorithm.model(state)
    return history
