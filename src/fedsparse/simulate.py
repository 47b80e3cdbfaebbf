"""The embedded simulator: every sampled client of a round runs at once, stacked.

The round itself is :class:`fedsparse.rounds.RoundLoop`, shared with the Flower server;
this module supplies what is local: the client halves run in-process, in chunks of
``client_batch`` clients, and the evaluation on the whole data set.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import torch

from . import _memory, _resources
from ._threads import single_threaded_blas
from ._validation import (
    check_bool,
    check_dtype,
    check_float,
    check_int,
    check_seed,
    fail,
)
from .algorithms.base import Algorithm, ClientContext, DataSpec
from .channels import PerfectChannel, checked_channel
from .checkpoints import (
    CHECKPOINT_FORMAT,
    RecordLines,
    contents_fingerprint,
    resume_checkpoint,
    round_rules,
    save_checkpoint,
)
from .client_store import PersonalModels, has_personal_models, open_client_store
from .comm import payload_bytes
from .contract import check_checkpointable, check_state, checked_callback, checked_reply
from .data.dataset import checked as checked_dataset
from .data.federated import FederatedDataset
from .data.lazy import LazyFederatedDataset
from .devices import resolve_device
from .history import History
from .metrics import evaluate, evaluate_personal
from .problems.base import Problem
from .rounds import DivergenceError, Replies, RoundLoop, sample_clients
from .sampled_eval import make_evaluator

__all__ = ["DivergenceError", "sample_clients", "simulate"]


def _fingerprint(algorithm, problem, data, seed, clients_per_round, channel,
                 eval_clients=None) -> dict:
    out = {"algorithm": repr(algorithm), "problem": problem.name, "data": repr(data),
           "seed": seed, "clients_per_round": clients_per_round, "channel": repr(channel)}
    if eval_clients is not None:  # a sampled evaluation's records are estimates
        out["eval_clients"] = eval_clients
    return out


def _client_executor(algorithm: Algorithm, problem: Problem, data: FederatedDataset,
                     seed: int, client_batch: int | None):
    """``execute`` for :class:`RoundLoop`: the sampled clients' halves, ``client_batch`` at a
    time (the same result for any grouping: every draw is keyed by the client id)."""

    def execute(t: int, clients: torch.Tensor, payload: torch.Tensor, config: dict,
                state_rows: dict | None) -> Replies:
        S = int(clients.shape[0])
        whole = S == data.num_clients and client_batch is None \
            and not isinstance(data, LazyFederatedDataset)  # lazy: read on select
        bounds = [(0, S)] if client_batch is None else \
            [(a, min(a + client_batch, S)) for a in range(0, S, client_batch)]
        # Lazy data: chunks of clients of similar sizes, so that a chunk's padding (and
        # its mini-batch keys) follow its own clients, not the largest sampled one.
        order = None
        if len(bounds) > 1 and isinstance(data, LazyFederatedDataset):
            order = torch.argsort(data.train.counts[clients.cpu()], stable=True)
        uploads, states, infos = [], [], []
        for a, b in bounds:
            chunk = _chunk_rows(clients, a, b, order)
            split = data.train if whole else data.train.select(chunk)
            rows = None if state_rows is None else \
                {k: _chunk_rows(v, a, b, order) for k, v in state_rows.items()}
            sent = payload if payload.ndim == 1 else _chunk_rows(payload, a, b, order)
            ctx = ClientContext(problem, split, chunk, t, seed, state=rows, config=config)
            up, new_rows, info = checked_reply(algorithm, algorithm.client_update(sent, ctx),
                                                b - a, payload)
            uploads.append(up)
            states.append(new_rows)
            infos.append((b - a, info))
        uploads = _unsort(_joined(uploads), order)
        new_state = None
        if states[0] is not None:
            new_state = {k: _unsort(_joined([st[k] for st in states]), order)
                         for k in states[0]}
        info: dict = {}
        for n, chunk_info in infos:
            for k, v in chunk_info.items():
                info[k] = info.get(k, 0.0) + float(v) * n / S
        return Replies(uploads=uploads, received=torch.ones(S, dtype=torch.bool),
                       bytes_up=int(payload_bytes(uploads, algorithm.upload_encoding).sum()),
                       info=info, client_state=new_state)

    return execute


def _chunk_rows(rows: torch.Tensor, a: int, b: int, order: torch.Tensor | None
                ) -> torch.Tensor:
    """Rows ``a:b`` of ``rows`` (one per sampled client), taken in the client order
    ``order`` where one is given."""
    return rows[a:b] if order is None else rows[order[a:b].to(rows.device)]


def _joined(chunks: list[torch.Tensor]) -> torch.Tensor:
    """The chunks' rows in one tensor; a lone chunk as it is (no (S, P) copy)."""
    return chunks[0] if len(chunks) == 1 else torch.cat(chunks)


def _unsort(rows: torch.Tensor, order: torch.Tensor | None) -> torch.Tensor:
    """Rows computed in the client order ``order`` back in the sampled order."""
    if order is None:
        return rows
    out = torch.empty_like(rows)
    out[order.to(rows.device)] = rows
    return out


#: Vectors of P entries one client holds during its local training: its model, its
#: upload, a gradient, up to two optimizer moments (Adam), a mask and temporaries.
CLIENT_VECTORS = 8


def _auto_client_batch(problem: Problem, data: FederatedDataset, clients: int) -> int | None:
    """Clients per chunk when ``client_batch`` is None: as many as half the device's memory
    budget holds (:func:`fedsparse._memory.client_chunk`; the other half is left to the
    problem's own chunks of activations), each client counting :data:`CLIENT_VECTORS`
    model-sized vectors plus its padded training rows. None when every client fits."""
    itemsize = torch.finfo(data.dtype).bits // 8
    rows = int(data.train.counts.max()) if data.num_clients else 0
    per_client = itemsize * (CLIENT_VECTORS * problem.param_dim(data.dim) + rows * data.dim)
    chunk = _memory.client_chunk(per_client, data.device, clients=max(1, clients), share=0.5)
    return None if chunk >= clients else chunk


def _signature_refusing_two(fn) -> inspect.Signature | None:
    """``fn``'s signature where it cannot be called as ``fn(record, state)``, else None
    (also where Python cannot tell: a builtin without a signature)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(None, None)
    except TypeError:
        return signature
    return None


def _check_arguments(algorithm, problem, data, channel, dtype, device, eval_every,
                     max_update_norm, callback, checkpoint, resume, progress,
                     max_update_ratio=None, client_state_memory=None,
                     client_state_dir=None) -> None:
    def shown(value):  # a value in an error message: itself if short, else its type
        return value if value is None or isinstance(value, (str, int, float)) \
            else f"<{type(value).__name__}>"

    if not isinstance(algorithm, Algorithm):
        raise fail("algorithm", shown(algorithm),
                   "must be a fedsparse Algorithm (e.g. fs.algorithms.fed_avg(...))")
    if not isinstance(problem, Problem):
        raise fail("problem", shown(problem),
                   "must be a fedsparse Problem (e.g. fs.problems.least_squares())")
    if not isinstance(data, FederatedDataset):
        raise fail("data", shown(data), "must be a fedsparse.data.FederatedDataset")
    if channel is not None and not callable(getattr(channel, "delivered", None)):
        raise fail("channel", channel, "must be a channel with a delivered(seed, round, "
                   "clients) method, e.g. fs.channels.BernoulliChannel(0.8)")
    check_dtype("dtype", dtype, allow_none=True)
    if device is not None:
        resolve_device(device)  # "cpu", "cuda", "cuda:N", "auto" or a torch.device
    check_int("eval_every", eval_every, minimum=1)
    check_float("max_update_norm", max_update_norm, positive=True, allow_none=True)
    if check_float("max_update_ratio", max_update_ratio, allow_none=True) is not None \
            and max_update_ratio < 1:
        raise fail("max_update_ratio", max_update_ratio, "must be at least 1 (it multiplies "
                   "the round's median update distance)")
    if callback is not None and not callable(callback):
        raise fail("callback", shown(callback), "must be a function callback(record, state) "
                   "or None")
    refusing = None if callback is None else _signature_refusing_two(callback)
    if refusing is not None:
        raise fail("callback", getattr(callback, "__name__", shown(callback)),
                   f"takes {refusing}, but is called as callback(record, state) after every "
                   "round")
    if checkpoint is not None and not isinstance(checkpoint, str | Path):
        raise fail("checkpoint", shown(checkpoint), "must be a file path (str or Path) or None")
    check_bool("resume", resume)
    check_bool("progress", progress, allow_none=True)
    check_int("client_state_memory", client_state_memory, minimum=0, allow_none=True)
    if client_state_dir is not None and not isinstance(client_state_dir, str | Path):
        raise fail("client_state_dir", shown(client_state_dir),
                   "must be a directory path (str or Path) or None")


def _check_resources(bound: Algorithm, data: FederatedDataset, rounds: int,
                     clients_per_round: int | None, client_batch: int | None,
                     model_size: int) -> None:
    """Refuse, before the first round, a run that cannot fit in memory or cannot end
    (:mod:`fedsparse._resources`): its round records, the clients' models of one chunk
    and the algorithm's own state must fit; its sequential steps must end within a year."""
    N = data.num_clients
    S = min(clients_per_round or N, N)
    chunk = min(client_batch or S, S)
    itemsize = torch.finfo(data.dtype).bits // 8
    _resources.check_rounds(rounds, S)
    # every chunk holds its clients' local models and their uploads: 2 x (chunk, P)
    chunk_sizes = {"client_batch" if client_batch else "clients_per_round"
                   if clients_per_round else "num_clients": chunk, "model size": model_size}
    _resources.check_memory({"the local models": 2 * chunk * model_size * itemsize,
                             **bound.state_bytes(N, model_size, itemsize)}, chunk_sizes,
                            hint="client_batch=k runs k clients at a time")
    steps = bound.sequential_steps()
    _resources.check_work(rounds * (1 + steps), f"rounds={rounds} of {bound!r}",
                          what=f"sequential steps ({steps:.3g} local steps a round, and the "
                               "round itself)")


def simulate(algorithm: Algorithm, problem: Problem, data: FederatedDataset, *, rounds: int,
             seed: int = 0, clients_per_round: int | None = None, channel=None,
             dtype: torch.dtype | None = None, device: str | torch.device | None = None,
             checkpoint: str | Path | None = None, checkpoint_every: int = 10,
             resume: bool = False, progress: bool | None = None,
             client_batch: int | None = None, eval_every: int = 1,
             max_update_norm: float | None = None, max_update_ratio: float | None = None,
             callback=None, loggers=None, eval_clients: int | None = None,
             client_state_memory: int | None = None,
             client_state_dir: str | Path | None = None) -> History:
    """Run ``algorithm`` for ``rounds`` rounds on ``data`` and record every round.

    Parameters
    ----------
    algorithm, problem, data : what to run, on what.
    rounds : number of communication rounds T (>= 1).
    seed : every random draw is a function of (seed, round, client, ...); a neural
        problem's initial model is ``problem.init_params(..., seed)``.
    clients_per_round : clients sampled uniformly without replacement each round
        (default all); aggregation weights are renormalised among them.
    channel : decides which uploads arrive (default :class:`PerfectChannel`).
    dtype : cast the data (and so the model) to this dtype, e.g. ``torch.float64``.
    device : where the round runs: "cpu" (the default), "cuda", "cuda:N", "auto" (a GPU
        where there is one) or a torch.device; the data move there once, here.
    checkpoint : file to save the run's state to every ``checkpoint_every`` rounds and
        at the end; with ``resume=True`` an existing checkpoint is continued, giving the
        same history as an uninterrupted run (and the same tracker runs: see
        ``loggers``), and a missing one starts the run at round 0 (so one call serves
        every start of a preemptible job: check the path, a typo starts afresh); a resume
        with another run's settings (the data, problem, algorithm, channel, seed,
        ``eval_every`` or upload screening) is refused; without it an existing file is
        refused, never overwritten.
    progress : progress bar; default: shown on a terminal only.
    client_batch : process at most this many clients at once (bounds memory; the
        result is the same). None: as many as the device's memory holds
        (:func:`fedsparse._memory.memory_budget`; all of them unless models are large).
    eval_every : evaluate the global model every k rounds and at the last round; the
        records of other rounds hold no metrics of the model.
    max_update_norm : reject (as undelivered) uploads whose l2 distance to the broadcast
        exceeds this; None = accept all finite uploads.
    max_update_ratio : reject (as undelivered) uploads farther from the broadcast than
        this many times the round's median distance (>= 1; None = no such bound; the
        Flower server's default is 100, see :func:`fedsparse.screening.upload_problems`).
    callback : called as ``callback(record, state)`` after every round.
    loggers : experiment trackers to log the run to (:mod:`fedsparse.loggers`): a name
        ("tensorboard", "mlflow", "wandb"), a ``fedsparse.loggers.Logger``, or a list of
        them. Every record, the hyper-parameters and the final model are logged. A run
        resumed from a checkpoint continues the MLflow run, the TensorBoard folder and
        the W&B run its checkpoint names, each round logged once (W&B offline: a new
        folder with the same run id and only the rounds the earlier ones lack; a
        tracker without such a run starts a new one and gets every round); without a
        checkpoint it starts new ones, as a first run does.
    eval_clients : evaluate on a seeded sample of this many clients (the same every
        round) instead of all N: the record's metrics are then *estimates*, with their
        standard errors (``objective_se``, ...) and ``eval_clients``; see
        :mod:`fedsparse.sampled_eval`. None (default) evaluates every client (a lazy
        data set, :mod:`fedsparse.data.lazy`, a chunk of clients at a time).
    client_state_memory : bytes of per-client state (personalised models, FedSpa's
        masks) kept in memory; beyond it the state lives in memory-mapped files and only
        the sampled clients' rows are read (:mod:`fedsparse.client_store`). None: half
        of the memory available at the start; 0: always on disk. Results are the same.
    client_state_dir : the directory of those files, kept after the run (new or empty,
        unless resuming); None: a temporary directory, removed when the run's objects
        are. Giving one puts the state on disk whatever its size.

    Returns
    -------
    History

    Raises
    ------
    ConfigError
        before the first round, for an argument that is not allowed, and for a run that
        cannot fit in memory or cannot end: its round records (``rounds``), the clients'
        models of one chunk (``clients_per_round``, ``client_batch``) and the algorithm's
        own state must fit in the machine's memory, and its sequential steps (rounds x
        local steps, at 1 µs each, less than any torch operation takes) must end within a
        year; the error names the parameters and the estimate (see
        :mod:`fedsparse._resources`). Also when a method of ``algorithm`` returns
        something of another form than :class:`~fedsparse.algorithms.Algorithm`
        documents (named with the method), and, with ``checkpoint``, for a server state
        a checkpoint cannot hold (after ``init``: before the first round).
    DivergenceError
        when the model or a delivered upload becomes NaN/inf (a lost one changes
        nothing), or an evaluated loss of a finite model does (the objective, test or
        personalised objective: :data:`fedsparse.metric_names.LOSS_FIELDS`); it names the round
        (and the loss) and carries the history up to the round before, with that round's
        model (also saved to ``checkpoint``, with its client state, if one was given).
    """
    if clients_per_round is None:
        clients_per_round = getattr(algorithm, "clients_per_round", None)
    rounds = check_int("rounds", rounds, minimum=1)
    seed = check_seed("seed", seed)
    _check_arguments(algorithm, problem, data, channel, dtype, device, eval_every,
                     max_update_norm, callback, checkpoint, resume, progress,
                     max_update_ratio, client_state_memory, client_state_dir)
    device = None if device is None else resolve_device(device)
    check_int("clients_per_round", clients_per_round, minimum=1, allow_none=True)
    if clients_per_round is not None and clients_per_round > data.num_clients:
        raise fail("clients_per_round", clients_per_round,
                   f"must be at most the number of clients {data.num_clients}")
    check_int("checkpoint_every", checkpoint_every, minimum=1)
    if checkpoint is not None:
        # refused now, not when the first checkpoint is saved after hours of training
        existing = next(a for a in Path(checkpoint).absolute().parents if a.exists())
        if Path(checkpoint).is_dir() or not existing.is_dir():
            raise fail("checkpoint", str(checkpoint), "must be a file path (it is a "
                       "directory, or lies under a file)")
        if not resume and Path(checkpoint).exists():  # an earlier run's: never lost silently
            raise fail("checkpoint", str(checkpoint), "already holds a checkpoint; "
                       "resume=True continues that run; to start again, delete the file or "
                       "give another path")
    check_int("client_batch", client_batch, minimum=1, allow_none=True)
    if check_int("eval_clients", eval_clients, minimum=1, allow_none=True) is not None \
            and eval_clients > data.num_clients:
        raise fail("eval_clients", eval_clients,
                   f"must be at most the number of clients {data.num_clients}")
    lazy = isinstance(data, LazyFederatedDataset)
    if dtype is not None and dtype != data.dtype:
        data = data.to(dtype)
    data = checked_dataset(data)  # what from_arrays guarantees, for a hand-built data set
    data = problem.prepare(data)  # linear models read the padded (N, n_max, d) layout
    if device is not None and device.type != "cpu":
        data = data.to_device(device)
    channel = channel or PerfectChannel()
    if lazy:  # a few clients checked, the statistics read a chunk of clients at a time
        problem.check_data(data.probe())
        bound = algorithm.bind(problem, DataSpec(data.num_clients, data.feature_shape,
                                                 data.dtype, data.weights, data.device),
                               data.statistics(algorithm, problem))
    else:
        problem.check_data(data)
        bound = algorithm.bind(problem, data)
    if data.ground_truth is not None and data.ground_truth.numel() != problem.param_dim(data.dim):
        raise fail("ground_truth length", data.ground_truth.numel(),
                   f"must equal the model size {problem.param_dim(data.dim)}")
    if client_batch is None:  # sized from the device's memory; None: all clients at once
        client_batch = _auto_client_batch(problem, data, clients_per_round or data.num_clients)
    _check_resources(bound, data, rounds, clients_per_round, client_batch,
                     problem.param_dim(data.dim))
    run_channel = checked_channel(channel, data.num_clients, rounds)

    dim = problem.param_dim(data.dim)
    state = bound.init(problem, seed)
    check_state(bound, state, "init", dim, data.dtype)
    if checkpoint is not None:  # refused now, not when the first checkpoint is saved
        check_checkpointable(state, f"{type(bound).__name__}.init", checkpoint)
    store = open_client_store(bound, problem, data.num_clients, seed,
                              memory=client_state_memory, directory=client_state_dir,
                              resume=resume)
    fingerprint = _fingerprint(algorithm, problem, data, seed, clients_per_round, channel,
                               eval_clients)
    history = History(config={**fingerprint, "rounds": rounds})
    if checkpoint is not None:  # what only a checkpoint needs: the data and problem compared
        fingerprint = {**fingerprint, **contents_fingerprint(problem, data, channel, bound),
                       "round_rules": round_rules(eval_every, max_update_norm,
                                                  max_update_ratio)}

    sampled = make_evaluator(problem, data, seed, eval_clients)

    personalised = has_personal_models(bound, problem, state, seed)

    def personal_models(state, store):
        """(N, P) personalised models read a group of clients at a time (an evaluation
        never holds all N at once, nor a sampled one more than its sample), or None."""
        return PersonalModels(bound, state, store, data.num_clients, dim) \
            if personalised else None

    def measure(model, state, store, round: int) -> dict:
        personal = personal_models(state, store)
        if sampled is not None:
            return sampled(model, personal)
        out = evaluate(problem, data, model)
        if personal is not None:
            out.update(evaluate_personal(problem, data, personal))
        return out

    loop = RoundLoop(bound, data.weights, seed, clients_per_round, run_channel,
                     _client_executor(bound, problem, data, seed, client_batch), measure, store,
                     eval_every=eval_every, max_update_norm=max_update_norm,
                     max_update_ratio=max_update_ratio)
    history.initial = loop.initial_record(state, rounds)
    start = 0
    ckpt_path = Path(checkpoint) if checkpoint is not None else None
    resumed = None  # the checkpoint's tracker runs, where the run continues one
    if resume:
        if ckpt_path is None:
            raise fail("resume", resume, "needs a checkpoint path")
        if ckpt_path.exists():
            # every entry checked against this run's fresh state and placed like it
            ckpt = resume_checkpoint(ckpt_path, fingerprint=fingerprint, rounds=rounds,
                                     state=state, client_state=store.state,
                                     client_state_in_place=store.on_disk)
            state, store.state = ckpt["state"], ckpt["client_state"]
            history.records, history.initial = ckpt["records"], ckpt["initial"]
            start = ckpt["round"]
            resumed = ckpt.get("trackers", [])

    record_lines = RecordLines()

    def save(done_rounds: int, state: dict) -> None:
        if ckpt_path is not None:
            # a state aggregate changed since: named here, not by pickle inside torch.save
            check_checkpointable(state, f"{type(bound).__name__}.aggregate", checkpoint)
            content = {"format": CHECKPOINT_FORMAT, "round": done_rounds, "state": state,
                       "client_state": store.state,
                       "records": record_lines.text(history.records),
                       "initial": history.initial, "fingerprint": fingerprint}
            trackers = tracking.identities()
            if trackers:  # so that a resumed run continues these tracker runs
                content["trackers"] = trackers
            save_checkpoint(ckpt_path, content)

    if callback is not None:
        callback = checked_callback(callback, bound, checkpoint)
    tracking = _tracking(loggers, algorithm, history, device, callback,
                         None if resumed is None else start, resumed)
    try:
        with single_threaded_blas(), _memory.keep_freed_memory():
            state = loop.run(state, history, start, rounds, save=save,
                             checkpoint_every=checkpoint_every, callback=tracking.callback,
                             progress=progress)
    except BaseException as exc:
        tracking.close(getattr(exc, "history", history), exc)
        raise
    history.model = bound.model(state)
    personal = personal_models(state, store)
    if personal is not None:  # all N at once: a file for a store on disk
        personal = personal.materialize(store.directory / "personal_models.npy"
                                        if store.on_disk else None)
    history.personal_models = personal
    tracking.close(history)
    return history


def _tracking(loggers, algorithm, history, device, callback, resume_from=None,
              previous=None):
    """The run's :class:`fedsparse.loggers.Tracking`, open (logs nothing without
    loggers); a Tracking given as ``loggers`` (the experiment runner's, which names the
    run) is used as it is.

    ``resume_from``: the round of the checkpoint the run resumes from, whose tracker
    runs (``previous``, the checkpoint's ``"trackers"``) are continued and given the
    checkpoint's records they do not hold yet; None: a run from round 0."""
    from .loggers import Tracking, resolve_loggers, track_run

    if isinstance(loggers, Tracking):
        tracking = loggers.add_callback(callback)
    else:
        params = {"algorithm": {"kind": algorithm.name, **algorithm.hyperparameters()},
                  **{k: v for k, v in history.config.items() if k != "algorithm"},
                  "device": str(device or "cpu")}
        name = f"{algorithm.name}-seed{history.config['seed']}"
        tracking = track_run(resolve_loggers(loggers), name, params, callback)
    tracking.open(resume_from, previous)
    tracking.log_past(history.initial, history.records)  # round 0, and a checkpoint's
    return tracking
