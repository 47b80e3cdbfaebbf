"""The record of a run: one row of metrics per round, the final model, and its files."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch


@dataclass
class History:
    """What :func:`fedsparse.simulate` returns.

    Attributes
    ----------
    records : one dict per round (``round`` = rounds completed, from 1), with the
        fields of SPEC.md section 4; ``None`` where a field is not defined.
    initial : the same metrics for the initial model (round 0).
    model : (P,) final global model.
    config : what produced the run (algorithm, problem, data, seed, ...).
    """

    records: list[dict] = field(default_factory=list)
    initial: dict = field(default_factory=dict)
    model: torch.Tensor | None = None
    config: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.records)

    def column(self, name: str, *, with_initial: bool = False) -> list:
        """Values of one field, round by round (optionally starting at round 0)."""
        rows = ([self.initial] if with_initial and self.initial else []) + self.records
        return [r.get(name) for r in rows]

    def fields(self) -> list[str]:
        """Every field name of the initial and per-round records, in first-seen order."""
        names: dict[str, None] = {}
        for r in [self.initial, *self.records]:
            names.update(dict.fromkeys(r))
        return list(names)

    def save(self, directory: str | Path) -> None:
        """Write ``history.jsonl``, ``history.csv`` (round 0 first) and ``model.npy``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        rows = ([self.initial] if self.initial else []) + self.records
        with open(directory / "history.jsonl", "w") as fh:
            for r in rows:
                fh.write(json.dumps(_jsonable(r)) + "\n")
        names = self.fields()
        with open(directory / "history.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=names)
            writer.writeheader()
            for r in rows:
                writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in names})
        if self.model is not None:
            np.save(directory / "model.npy", self.model.detach().cpu().numpy())

    @classmethod
    def load(cls, directory: str | Path) -> History:
        """Read back what :meth:`save` wrote."""
        directory = Path(directory)
        with open(directory / "history.jsonl") as fh:
            rows = [json.loads(line) for line in fh]
        initial = rows.pop(0) if rows and rows[0].get("round") == 0 else {}
        model = None
        if (directory / "model.npy").exists():
            model = torch.from_numpy(np.load(directory / "model.npy"))
        return cls(records=rows, initial=initial, model=model)


def _jsonable(row: dict) -> dict:
    out = {}
    for k, v in row.items():
        if isinstance(v, float) and not math.isfinite(v):
            v = str(v)  # JSON has no NaN/inf; keep them readable rather than invalid
        out[k] = v
    return out
