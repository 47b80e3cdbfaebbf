"""The Flower ServerApp: any fedsparse Algorithm, round by round, over Flower's grid.

One run:

1. wait for the nodes (``flower.min_nodes``, default one per client, at most
   ``flower.wait_timeout`` seconds), then a ``query`` handshake maps Flower's random
   node ids to fedsparse client ids (node config ``partition-id``) and collects each
   client's weight, size, feature shape and the per-client statistics the algorithm
   asks for (:meth:`Algorithm.statistics`, e.g. L_i for ``step_size="auto"``). Every
   reply is checked (:mod:`fedsparse.flower.replies`): a node that answers with an
   error or with anything out of bounds (a partition id outside 0..N-1, a non-finite or
   non-positive weight, a weight above its example count, ...), claims a partition
   another node also claims, or has not answered within ``flower.round_timeout``
   seconds :data:`HANDSHAKE_TRIES` times (it is asked again each round), is refused:
   logged, listed in ``history.config["refused_nodes"]``, never asked again and never
   sent work. The run goes on with the other nodes; only when no node is
   left does it stop (:class:`FlowerRunError`, with every refusal's reason);
2. ``algorithm.bind`` with a :class:`DataSpec` (N, feature shape, dtype, weights) and
   those statistics -- exactly what the simulator binds with -- then ``init``;
3. the rounds are :class:`fedsparse.rounds.RoundLoop`, the simulator's loop: clients
   sampled with the same seeded draw, one ``train`` message per sampled client with its
   encoded broadcast and ``algorithm.client_config(state)``; replies within
   ``flower.round_timeout`` seconds, without error and well-formed (right shape and
   dtype, consistent encoding, finite, within ``flower.max_update_norm`` of the
   broadcast when set, and within ``flower.max_update_ratio`` (default 100) times the
   round's median distance to the broadcast) are the received uploads; the rest (error
   replies, timeouts, malformed, non-finite or too distant replies, clients with no node)
   are failed uploads, logged and counted in the record's ``rejected``; never fatal. The
   job's ``channel`` applies on top, as in the simulator; a round with no delivered
   upload warns and keeps the model. What a client reports about its work (its reply's
   metrics) is recorded only under the names the algorithm declares
   (``algorithm.client_metrics``), as finite numbers; the record's own fields are the
   server's;
4. the global model is evaluated on the nodes before training, every
   ``flower.evaluate_every`` rounds and at the end (never if it is -1; the round loop's
   ``eval_every`` decides, as in the simulator); an evaluate reply that fails its checks (no weight,
   a weight other than the handshake's, a non-finite or negative objective, ...) is
   left out of the average, logged, and counted in the record's
   ``evaluations_dropped`` (present where it is not 0). The history is saved to
   ``flower.out_dir`` if set -- at the end, or when the run diverges (with the last
   finite model) -- and so is a checkpoint every ``checkpoint_every`` rounds, which
   ``flower.resume`` continues (:mod:`fedsparse.flower.server_checkpoint`).

Without ``flower.max_update_norm`` and with ``flower.max_update_ratio = 0`` nothing
bounds how far one client's upload moves the model; the server says so loudly when
it starts.

The handshake and the refused nodes are :mod:`fedsparse.flower.handshake`; a round's
``train`` and ``evaluate`` messages are :mod:`fedsparse.flower.grid_round`.
"""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO, WARNING
from pathlib import Path

import torch
from flwr.app import Context
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from .._validation import ConfigError, expand_home, fail
from ..algorithms.base import DataSpec
from ..channels import checked_channel
from ..checkpoints import (
    CHECKPOINT_FORMAT,
    RecordLines,
    load_checkpoint,
    save_checkpoint,
    validate_checkpoint,
)
from ..client_store import ClientStore, has_personal_models
from ..contract import check_checkpointable, check_state, checked_callback
from ..experiments.folder_lock import folder_held
from ..history import History
from ..metrics import MODEL_FIELDS
from ..rounds import DivergenceError, RoundLoop
from .grid_round import evaluate_on_nodes, grid_executor
from .handshake import (
    HANDSHAKE_TRIES,
    Refusals,
    handshake,
    node_statistics,
    refuse_unfit_nodes,
    wait_for_nodes,
)
from .job import Job, job_from_config
from .messaging import exchange
from .server_checkpoint import (
    CHECKPOINT,
    RunTimeline,
    check_same_nodes,
    checkpoint_to_continue,
    in_flower_terms,
    node_reports,
    saved_refusals,
    server_fingerprint,
)

__all__ = ["HANDSHAKE_TRIES", "FlowerRunError", "app", "exchange", "make_server_app",
           "run_on_grid"]


class FlowerRunError(RuntimeError):
    """The run could not start (no nodes, inconsistent nodes); the message says why."""


def run_on_grid(grid: Grid, job: Job, *, callback: Callable | None = None,
                checkpoint: Path | None = None, resume_from: Path | None = None) -> History:
    """Run ``job`` over ``grid``; return its :class:`~fedsparse.History`.

    The rounds are :class:`fedsparse.rounds.RoundLoop`, the simulator's own loop, with
    the clients' work sent as messages and the evaluation done on the nodes.

    Parameters
    ----------
    grid : Flower's grid (deployment or simulation runtime).
    job : the validated job.
    callback : called as ``callback(record, state)`` after every round.
    checkpoint : the file to save the run's state to every ``job.checkpoint_every``
        rounds, at the end and, with the last finite state, when the run diverges.
    resume_from : a checkpoint of this job (see
        :func:`~fedsparse.flower.server_checkpoint.checkpoint_to_continue`) to go on from;
        read before the nodes are waited for; the nodes its run refused stay refused.

    Returns
    -------
    History
        One record per round, ``history.model`` the final global model;
        ``history.config["refused_nodes"]`` maps each refused node id to the reason, and
        ``history.config["nodes"]`` is the number of clients a node held at some point of
        the run (from its first round: a resumed run counts those held before the stop,
        as the uninterrupted run does).

    Raises
    ------
    FlowerRunError
        when no node is left after the handshake (none answered, or every one was
        refused; the message gives each reason).
    ConfigError
        when ``resume_from`` was written by another job, or its clients' nodes now report
        other data.
    """
    fl = job.flower
    timeout, poll = float(fl["round_timeout"]), float(fl["poll_interval"])
    problem = job.build_problem()
    algorithm = job.build_algorithm()
    N = job.num_clients
    needed = int(fl["min_nodes"]) or N
    refusals = Refusals()
    fingerprint = server_fingerprint(job)
    saved = None
    if resume_from is not None:
        # read and matched to this job before the nodes are waited for (its content is
        # checked against the fresh state below); the nodes its run refused stay refused
        # (never asked again) and listed, as in the uninterrupted run
        with in_flower_terms():
            saved = load_checkpoint(resume_from, fingerprint)
        refusals.reasons.update(saved_refusals(saved.get("refused_nodes"), resume_from))
    nodes = wait_for_nodes(grid, needed, float(fl["wait_timeout"]))
    log(INFO, "fedsparse: %d node(s) connected, %d client(s) in the job", len(nodes), N)
    max_norm = float(fl["max_update_norm"]) or None
    max_ratio = float(fl["max_update_ratio"]) or None
    if max_norm is None and max_ratio is None:
        log(WARNING, "fedsparse: NO BOUND ON UPLOADS: flower.max_update_norm and "
            "flower.max_update_ratio are both 0, so one client's upload can move the model "
            "arbitrarily far; set flower.max_update_ratio (default 100) to bound it")
    table = handshake(grid, [n for n in nodes if n not in refusals.reasons], job, refusals)
    if not table:
        why = {**{node: "no handshake reply within round_timeout" for node in
                  refusals.unanswered}, **refusals.reasons}
        reasons = "; ".join(f"node {node}: {w}" for node, w in list(why.items())[:10])
        raise FlowerRunError(f"no usable node: {len(nodes)} connected, none passed the "
                             f"handshake within {fl['round_timeout']} s"
                             + (f" ({reasons})" if reasons else ""))
    missing = sorted(set(range(N)) - set(table))
    if missing:
        log(WARNING, "fedsparse: no node holds clients %s%s; their uploads never arrive",
            missing[:10], " ..." if len(missing) > 10 else "")
    feature_shape = next(iter(table.values()))["feature_shape"]
    dtype = job.torch_dtype
    # Clients without a node get weight 0 until a node takes them (``add_joined``): they
    # are never delivered, so the renormalised mean over delivered uploads does not use it.
    weights = torch.zeros(N, dtype=torch.float64)
    for pid, info in table.items():
        weights[pid] = info["weight"]
    spec = DataSpec(N, feature_shape, dtype, weights)
    bound = algorithm.bind(problem, spec, node_statistics(table, N, dtype))
    # As in simulate: the job's cohort size, else the one the algorithm asks for.
    per_round = job.clients_per_round or getattr(algorithm, "clients_per_round", None)
    state = bound.init(problem, job.seed)
    check_state(bound, state, "init", problem.param_dim(spec.dim), dtype)
    if checkpoint is not None:  # refused now, not when the first checkpoint is saved
        check_checkpointable(state, f"{type(bound).__name__}.init", checkpoint)
    # what the nodes report as personal_* metrics
    personal = has_personal_models(bound, problem, state, job.seed)

    history = History(config={"algorithm": repr(algorithm), "problem": problem.name,
                              "data": repr(job.data), "seed": job.seed,
                              "clients_per_round": per_round, "rounds": job.rounds,
                              "runtime": "flower", "nodes": len(table),
                              "refused_nodes": refusals.reasons})

    # What the nodes are told of the run's start and checkpoints; a resumed run's rules
    # for its nodes (set below once the checkpoint is read).
    timeline = RunTimeline(saved=None if checkpoint is None else 0)

    def evaluate(model, state, store, round: int) -> dict:
        # The simulator's record fields (None where the server cannot know them: it has
        # no ground truth, and no accuracy for a regression problem).
        out = dict.fromkeys(MODEL_FIELDS)
        metrics, dropped = evaluate_on_nodes(grid, table, model, round, timeout, poll, personal,
                                             timeline.start,
                                             problem.task == "classification")
        out.update(metrics)
        if dropped:
            out["evaluations_dropped"] = dropped
        return out

    def support(model) -> dict:
        # the server holds the model: its support is known every round, evaluated or not
        nnz = int((model != 0).sum())
        return {"nnz": nnz, "density": nnz / model.numel()}

    if callback is not None:  # as in simulate: it must leave the model finite
        callback = checked_callback(callback, bound)

    def logged(record, state):
        log(INFO, "fedsparse: round %d/%d: %d/%d delivered, %d rejected, %d B up, %d B down",
            record["round"], job.rounds, record["delivered"], record["clients_sampled"],
            record["rejected"], record["bytes_up"], record["bytes_down"])
        if callback is not None:
            callback(record, state)

    loop = RoundLoop(bound, weights, job.seed, per_round,
                     checked_channel(job.build_channel(), N, job.rounds),
                     grid_executor(grid, job, bound, table, refusals, weights,
                                   feature_shape, timeline),
                     evaluate, ClientStore(None), eval_every=int(fl["evaluate_every"]),
                     max_update_norm=max_norm, max_update_ratio=max_ratio,
                     # the losses are the nodes' reports, a non-finite one left out
                     # (evaluations_dropped): one node cannot stop the run
                     stop_on_nonfinite_upload=False, stop_on_nonfinite_loss=False,
                     every_round=support)
    start = 0
    if saved is not None:
        with in_flower_terms():
            ckpt = validate_checkpoint(saved, path=resume_from, rounds=job.rounds,
                                       state=state, client_state=None,
                                       file_size=resume_from.stat().st_size)
        check_same_nodes(ckpt.get("nodes"), node_reports(table), resume_from)
        state, start = ckpt["state"], ckpt["round"]
        timeline.start, timeline.saved = start, start if checkpoint is not None else None
        timeline.reports.update(ckpt["nodes"])
        timeline.needs_kept_state = bound.stateful_clients
        refuse_unfit_nodes(table, weights, refusals, timeline)
        if not table:
            reasons = "; ".join(f"node {n}: {w}" for n, w in list(refusals.reasons.items())[:3])
            raise FlowerRunError(f"no node can continue the run of {resume_from} ({reasons})")
        history.records, history.initial = ckpt["records"], ckpt["initial"]
        log(INFO, "fedsparse: resuming at round %d of %d from %s", start, job.rounds,
            resume_from)
    else:
        history.initial = loop.initial_record(state, job.rounds)
        if checkpoint is not None and bound.stateful_clients:
            memory_only = sorted(pid for pid, info in table.items() if not info["keeps_state"])
            if memory_only:
                log(WARNING, "fedsparse: the nodes of clients %s keep their state in memory "
                    "only (no node config state-dir): if this run stops, a resumed run "
                    "cannot take them back", memory_only[:10])
    record_lines = RecordLines()

    def save(done_rounds: int, state: dict) -> None:
        check_checkpointable(state, f"{type(bound).__name__}.aggregate", checkpoint)
        timeline.saved = done_rounds
        save_checkpoint(checkpoint, {
            "format": CHECKPOINT_FORMAT, "round": done_rounds, "state": state,
            "client_state": None, "records": record_lines.text(history.records),
            "initial": history.initial, "fingerprint": fingerprint,
            # every client a node has held, late joiners included (``table`` grows)
            "nodes": {**timeline.reports, **node_reports(table)},
            "refused_nodes": dict(refusals.reasons)})

    try:
        state = loop.run(state, history, start, job.rounds, callback=logged, progress=False,
                         save=None if checkpoint is None else save,
                         checkpoint_every=job.checkpoint_every)
    finally:  # a diverged run's history is saved too
        # Every client a node held in the run: those that joined late, and in a resumed
        # run those held before the stop (the checkpoint's node reports), whether or not
        # their nodes are back; so a resumed run counts what the uninterrupted run does,
        # not the nodes that answered its own handshake.
        history.config["nodes"] = len(set(timeline.reports) | {str(pid) for pid in table})
    history.model = bound.model(state)
    return history


def make_server_app(job: Job | None = None, *, callback: Callable | None = None,
                    on_finish: Callable[[History], None] | None = None) -> ServerApp:
    """A ServerApp that runs a fedsparse job.

    Parameters
    ----------
    job : the job to run when the run config is empty (the Python simulation API);
        under ``flwr run`` the job comes from the app's run config.
    callback : ``callback(record, state)`` after every round.
    on_finish : called with the final :class:`~fedsparse.History`.

    Returns
    -------
    ServerApp
        Whose ``main`` runs the job with :func:`run_on_grid` and saves the history to
        ``flower.out_dir`` if set.
    """
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run_config = dict(context.run_config)
        the_job = job_from_config(run_config) if run_config else job
        if the_job is None:
            raise ConfigError("this ServerApp has no fedsparse job: the run config is empty "
                              "and make_server_app() was given none")
        # "~" is the home folder, as for the simulator's --out; a relative folder is
        # relative to the ServerApp's working folder (the SuperLink's), so the messages
        # name it in full
        out_dir = expand_home("flower.out_dir", the_job.flower["out_dir"]).absolute() \
            if the_job.flower["out_dir"] else None
        if out_dir is None:
            history = run_on_grid(grid, the_job, callback=callback)
        else:
            if not out_dir.exists():
                try:
                    out_dir.mkdir(parents=True)
                except OSError as exc:
                    raise fail("flower.out_dir", str(out_dir), "cannot be created: "
                               f"{exc.strerror}") from None
            # one ServerApp at a time in the folder (a second would write the same
            # checkpoint and history), held from before its checks to the last save
            with folder_held(out_dir, "flower.out_dir"):
                resume_from = checkpoint_to_continue(out_dir, resume=the_job.flower["resume"])
                if the_job.flower["resume"] and resume_from is None:
                    log(INFO, "fedsparse: no %s in %s yet: the run starts at round 0",
                        CHECKPOINT, out_dir)
                try:
                    history = run_on_grid(grid, the_job, callback=callback,
                                          checkpoint=out_dir / CHECKPOINT,
                                          resume_from=resume_from)
                except DivergenceError as exc:  # keep the last finite model and its rounds
                    exc.history.save(out_dir, overwrite=True)
                    log(INFO, "fedsparse: history to round %d and the last finite model "
                        "saved to %s", exc.round - 1, out_dir)
                    raise
                history.save(out_dir, overwrite=True)
            log(INFO, "fedsparse: history and model saved to %s", out_dir)
        if on_finish is not None:
            on_finish(history)

    return app


#: The ServerApp ``flwr run`` loads (``fedsparse.flower.server_app:app``); its job comes
#: from the run config.
app = make_server_app()
