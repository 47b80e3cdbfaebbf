"""A Flower node's clients' state on disk, so a resumed run goes on with the state the
clients had at the server's checkpoint.

Algorithms whose clients keep state between rounds (the personalised ones, SAFARI with
FedSpa's masks) keep it on the node, in the Flower run's context, which a new run does
not have. With the node config ``state-dir`` set, the node also writes its client's
state after every round it trains in, as ``after-round-<r>.pt`` (the state once round r
is done; the checkpoint format of :mod:`fedsparse.checkpoint_file`: atomic, with a
checksum) in ``<state-dir>/job-<digest>/client-<id>/``, the digest naming the job
without its rounds (:func:`fedsparse.flower.server_checkpoint.server_fingerprint`).

Every ``train`` and ``evaluate`` message says which round the run started from (0, or
the round of the checkpoint it resumed) and every ``train`` message the server's last
checkpoint round. The first message of a run deletes the files of rounds after its
start -- those of a stopped run's rounds that its checkpoint does not hold, or of an
earlier run of the same job -- so every file left belongs to this run's history; a
client whose context has no state (a new run, or a node restarted within one) reads the
latest file. Files older than the newest one at or before the last checkpoint round are
deleted as the run goes, so a node keeps at most a few.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import torch

from .._validation import ConfigError
from ..checkpoint_file import read_checkpoint, save_checkpoint
from .server_checkpoint import json_digest, server_fingerprint

__all__ = ["NodeStateStore", "job_digest"]

_FILE = re.compile(r"after-round-(\d+)\.pt")
#: Which run last started here, and from which round (JSON: ``run_id``, ``start``).
_TIMELINE = "timeline.json"


def job_digest(job) -> str:
    """A short digest of ``job`` without its rounds and server settings: a run of the
    same job extended or resumed finds its clients' state under it."""
    return json_digest(server_fingerprint(job))


class NodeStateStore:
    """The state of one client, by round, in ``<root>/job-<digest>/client-<id>/``.

    Parameters
    ----------
    root : the node config's ``state-dir``.
    job : the node's :class:`~fedsparse.flower.job.Job`.
    partition_id : the client.
    """

    def __init__(self, root: str | Path, job, partition_id: int):
        self.folder = Path(root).expanduser() / f"job-{job_digest(job)}" / \
            f"client-{partition_id}"

    def _files(self) -> dict[int, Path]:
        """``{round: file}`` of the states kept."""
        if not self.folder.is_dir():
            return {}
        found = (_FILE.fullmatch(p.name) for p in self.folder.iterdir())
        return {int(m.group(1)): self.folder / m.group(0) for m in found if m}

    def begin(self, run_id: int, start: int) -> None:
        """Once per run (run ``run_id``, which started at round ``start``): delete the
        states of rounds after ``start``, which no checkpoint of this run's history
        holds. A node restarted within the run finds its timeline already set and
        keeps the states this run wrote."""
        marker = self.folder / _TIMELINE
        try:
            if json.loads(marker.read_text()) == {"run_id": run_id, "start": start}:
                return
        except (OSError, ValueError):
            pass  # none yet, or unreadable: set it anew
        for done, path in self._files().items():
            if done > start:
                path.unlink(missing_ok=True)
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = marker.with_name(marker.name + ".tmp")
        tmp.write_text(json.dumps({"run_id": run_id, "start": start}))
        os.replace(tmp, marker)

    def save(self, done: int, state: dict[str, torch.Tensor]) -> None:
        """Keep the client's ``state`` once round ``done`` is over."""
        save_checkpoint(self.folder / f"after-round-{done:08d}.pt",
                        {"state": {k: v.detach().cpu() for k, v in state.items()}})

    def load(self, fresh: dict[str, torch.Tensor], before: int) -> dict | None:
        """The latest state kept for a round up to ``before``, checked against the
        client's ``fresh`` state (``algorithm.init_clients``) and placed like it, or None.

        Raises
        ------
        ConfigError
            naming the file when it is damaged or does not hold this algorithm's state.
        """
        kept = {done: path for done, path in self._files().items() if done <= before}
        if not kept:
            return None
        path = kept[max(kept)]
        saved = read_checkpoint(path).get("state") if path.exists() else None
        if not isinstance(saved, dict) or set(saved) != set(fresh):
            raise ConfigError(f"client state file {str(path)!r} does not hold this "
                              f"algorithm's client state ({', '.join(sorted(fresh))})")
        out = {}
        for name, like in fresh.items():
            value = saved[name]
            if (not isinstance(value, torch.Tensor) or value.shape != like.shape
                    or value.dtype != like.dtype
                    or (value.is_floating_point() and torch.isnan(value).any())):
                raise ConfigError(f"client state file {str(path)!r}: {name} is not a NaN-free "
                                  f"{like.dtype} tensor of shape {tuple(like.shape)}")
            out[name] = value.to(like.device)
        return out

    def prune(self, saved_round: int) -> None:
        """Delete the states older than the newest one kept for a round up to
        ``saved_round`` (the server's last checkpoint): a resume never reads them."""
        files = self._files()
        anchor = max((done for done in files if done <= saved_round), default=None)
        for done, path in files.items():
            if anchor is not None and done < anchor:
                path.unlink(missing_ok=True)
