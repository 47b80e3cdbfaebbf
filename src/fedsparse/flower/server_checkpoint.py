"""The Flower server's checkpoints: saved in ``flower.out_dir``, continued with
``flower.resume``.

With ``flower.out_dir`` set, the server saves ``checkpoint.pt`` there every
``checkpoint_every`` rounds, at the end, and with the last finite model when the run
diverges: the simulator's checkpoint format (:mod:`fedsparse.checkpoints`: atomic, with a
checksum, every entry checked on resume). A run that stops early (the ServerApp killed, the
machine lost) is continued by starting it again on the same folder with
``flower.resume = true`` (``flwr run ... --run-config 'flower.resume=true'``): the server
reads the checkpoint, checks that it was written by this job -- the same settings except
``rounds`` (a run may be extended), and nodes that report the same data for the clients
they held then, or join later (a node that joins with other data is refused) -- and
goes on from its round. The nodes its run refused stay refused (never asked again) and
listed in ``refused_nodes``, as in the uninterrupted run. Without a checkpoint there, a
resumed run starts at round 0 (so a restart policy may always set ``resume``).

The state of clients that keep some between rounds (personalised algorithms, SAFARI with
FedSpa's masks) lives on the nodes, in the Flower run's context, which a new Flower run
does not have; a node with the node config ``state-dir`` also keeps it on disk, by round
(:mod:`fedsparse.flower.node_state`), and a resumed run of such an algorithm goes on
with the state its clients had at the checkpoint. A node without ``state-dir`` cannot
take part in it: it is refused (logged, listed in ``refused_nodes``), and its client's
uploads are failed uploads.
"""

from __future__ import annotations

import hashlib
import json
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .._validation import ConfigError, fail
from ..checkpoints import round_rules

#: The checkpoint's file name in ``flower.out_dir``.
CHECKPOINT = "checkpoint.pt"
#: What :meth:`fedsparse.History.save` writes into ``flower.out_dir`` at the end of a run.
SAVED = ("history.jsonl", "history.csv", "model.npy", "personal_models.npy", "config.json")


def checkpoint_to_continue(out: Path, *, resume: bool) -> Path | None:
    """Check ``flower.out_dir`` before any node is asked for anything.

    Parameters
    ----------
    out : the folder (``flower.out_dir``).
    resume : ``flower.resume``.

    Returns
    -------
    Path or None
        The checkpoint the run continues, or None for a run from round 0.

    Raises
    ------
    ConfigError
        naming ``flower.out_dir``: the folder is a file, it holds a finished run's
        history (nothing to resume, and never overwritten), or it holds a stopped run's
        checkpoint but ``resume`` is false.
    """
    if out.exists() and not out.is_dir():
        raise fail("flower.out_dir", str(out), "is a file; give a folder for the history, "
                   "the model and the checkpoints")
    earlier = [name for name in SAVED if (out / name).exists()]
    if earlier:
        why = "a finished run's" if resume else "a run's"
        raise fail("flower.out_dir", str(out), f"already holds {why} {', '.join(earlier)}; "
                   "give another folder, so this run cannot overwrite them")
    checkpoint = out / CHECKPOINT
    if not checkpoint.exists():
        return None
    if not resume:
        raise fail("flower.out_dir", str(out), f"holds the {CHECKPOINT} of a stopped run; "
                   "continue it with flower.resume = true (flwr run ... --run-config "
                   "'flower.resume=true'), or give another folder")
    return checkpoint


def server_fingerprint(job) -> dict:
    """What a checkpoint's run and the resuming run must share: the job without its
    ``rounds``, ``checkpoint_every`` and the ``[flower]`` settings of how the server waits
    and saves, and the round loop's rules (:func:`fedsparse.checkpoints.round_rules`)."""
    settings = job.to_dict()
    for key in ("rounds", "checkpoint_every", "flower"):
        settings.pop(key)
    flower = job.flower
    return {"runtime": "flower", "job": json.dumps(settings, sort_keys=True, default=str),
            "round_rules": round_rules(int(flower["evaluate_every"]),
                                       float(flower["max_update_norm"]) or None,
                                       float(flower["max_update_ratio"]) or None)}


def json_digest(value) -> str:
    """A short digest of ``value``'s JSON text (keys sorted, other objects as text)."""
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def node_report(info: dict) -> str:
    """A digest of what a node said of its client's data in the handshake (example
    counts, weight, feature shape, statistics)."""
    return json_digest({k: info[k] for k in ("count", "test_count", "weight",
                                              "feature_shape", "stats")})


def node_reports(table: dict[int, dict]) -> dict[str, str]:
    """``{partition id: digest}`` (:func:`node_report`) of every client in ``table``."""
    return {str(pid): node_report(info) for pid, info in table.items()}


def saved_refusals(saved, path: Path) -> dict[int, str]:
    """The nodes a checkpoint's run had refused, ``{node id: why}``: a resumed run keeps
    them refused and in its ``refused_nodes``, as the uninterrupted run would (a
    checkpoint without the entry had refused none)."""
    if saved is None:
        return {}
    if not isinstance(saved, dict) or not all(
            isinstance(node, int) and not isinstance(node, bool) and isinstance(why, str)
            for node, why in saved.items()):
        raise ConfigError(f"checkpoint {str(path)!r} is damaged: its refused_nodes is not a "
                          "table of node ids and reasons")
    return dict(saved)


def check_same_nodes(saved, now: dict[str, str], path: Path) -> None:
    """Refuse to continue a run whose clients now report other data: each client held
    by a node both then and now must report what it did then (a client whose node has
    not come back yet may join later, as in any run, and is held to the same:
    :func:`fedsparse.flower.handshake.add_joined`)."""
    if not isinstance(saved, dict):
        raise ConfigError(f"checkpoint {str(path)!r} is damaged: it has no node reports")
    changed = sorted(int(pid) for pid in now if pid in saved and saved[pid] != now[pid])
    if changed:
        raise fail("flower.resume", True, f"the nodes now holding clients {changed[:10]} "
                   f"report other data than when checkpoint {str(path)!r} was written (counts, "
                   "weights, shape or statistics differ); it belongs to another run: give "
                   "another flower.out_dir")


@contextmanager
def in_flower_terms():
    """The checkpoint checks shared with the simulator name its options (``--rounds``,
    ``--resume``); a Flower run is told its own: ``--run-config 'rounds=N'`` and another
    ``flower.out_dir`` (the same folder without ``resume`` is refused while its
    checkpoint is there)."""
    try:
        yield
    except ConfigError as exc:
        text = re.sub(r"\(e\.g\. --rounds (\d+)\)", r"(--run-config 'rounds=\1')", str(exc))
        text = re.sub(r"start (the run )?over without --resume",
                      r"start \1over in another flower.out_dir", text)
        if text == str(exc):
            raise
        raise ConfigError(text) from None


@dataclass
class RunTimeline:
    """What the nodes are told of the run's history, and what a resumed run asks of them.

    Attributes
    ----------
    start : the round the run started from (0, or its checkpoint's).
    saved : the last round checkpointed (the start round when resumed); None without
        checkpoints, when a node that keeps state on disk keeps only its latest.
    reports : a resumed run's node reports (:func:`node_reports`), to which the nodes
        that join later are held; every client a node has held, so that a second resume
        still checks a client whose node is not back.
    needs_kept_state : a resumed run of an algorithm whose clients keep state: only
        nodes that keep it on disk (node config ``state-dir``) can go on.
    """

    start: int = 0
    saved: int | None = None
    reports: dict[str, str] = field(default_factory=dict)
    needs_kept_state: bool = False

    def refusal(self, pid: int, info: dict) -> str | None:
        """Why the node of client ``pid``, handshake ``info``, cannot take part, or None."""
        if str(pid) in self.reports and node_report(info) != self.reports[str(pid)]:
            return (f"it reports other data for client {pid} (counts, weights, shape or "
                    "statistics) than the checkpoint this run resumes was written with")
        if self.needs_kept_state and not info.get("keeps_state"):
            return (f"it keeps client {pid}'s state in memory only (no node config "
                    "state-dir), so it lost it with the run that stopped; this resumed run "
                    "needs the state the client had at the checkpoint")
        return None
