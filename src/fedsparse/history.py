"""The record of a run: one row of metrics per round, the final model, and its files."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ._validation import ConfigError, check_bool, fail

# Both names stay importable from here, where they were first defined.
from .metric_names import HIGHER_IS_BETTER_WORDS as HIGHER_IS_BETTER_WORDS
from .metric_names import METRICS, best_direction, record_problem
from .metric_names import higher_is_better as higher_is_better


@dataclass
class History:
    """What :func:`fedsparse.simulate` returns.

    Attributes
    ----------
    records : one dict per round (``round`` = rounds completed, from 1), with the
        fields of docs/decisions.md, "Conventions"; ``None`` where a field is not defined.
    initial : the same metrics for the initial model (round 0).
    model : (P,) final global model.
    config : what produced the run (algorithm, problem, data, seed, ...).
    seeds : the per-seed histories when this one is their mean (``fedsparse run
        --seeds``, :func:`fedsparse.experiments.seeds.mean_history`): its records then
        hold the mean of every numeric field over the seeds that did not diverge, with
        ``<field>_std`` (sample standard deviation) and ``n_seeds`` beside them.
        Empty for a single run.
    """

    records: list[dict] = field(default_factory=list)
    initial: dict = field(default_factory=dict)
    model: torch.Tensor | None = None
    #: (N, P) personalised models at the end, for personalised algorithms (else None).
    personal_models: torch.Tensor | None = None
    config: dict = field(default_factory=dict)
    seeds: list[History] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.records)

    def column(self, name: str, *, with_initial: bool = False) -> list:
        """Values of one field, round by round (optionally starting at round 0); None
        in the rounds that did not record it."""
        self._check_field("name", name)
        return self._values(name, with_initial)

    def _values(self, name: str, with_initial: bool) -> list:
        rows = ([self.initial] if with_initial and self.initial else []) + self.records
        return [r.get(name) for r in rows]

    def _check_field(self, parameter: str, name) -> None:
        """Refuse a name that is neither a field of these records nor a metric some run
        records: a typo would otherwise read as a metric never recorded (all None)."""
        if isinstance(name, str) and (name in METRICS or name in self.fields()
                                      or name.removesuffix("_std") in METRICS):
            return
        from .experiments.config_checks import did_you_mean  # (experiments import history)

        known = self.fields()
        raise fail(parameter, name, f"no record holds it, nor can a run record it"
                   f"{did_you_mean(name, [*known, *METRICS])}; these records hold: "
                   f"{', '.join(known)}")

    def fields(self) -> list[str]:
        """Every field name of the initial and per-round records, in first-seen order."""
        names: dict[str, None] = {}
        for r in [self.initial, *self.records]:
            names.update(dict.fromkeys(r))
        return list(names)

    def recorded(self) -> list[str]:
        """The fields that hold a number in at least one record (round 0 included), in
        first-seen order: the metrics one can plot, compare or sweep on."""
        rows = [self.initial, *self.records]
        return [k for k in self.fields()
                if any(_is_number(r.get(k)) for r in rows)]

    def final(self, metric: str) -> float | None:
        """``metric`` at the last round (round 0 if no round ran), None if not recorded
        there or not finite."""
        self._check_field("metric", metric)
        last = self.records[-1] if self.records else self.initial
        v = last.get(metric)
        return float(v) if _is_number(v) and math.isfinite(v) else None

    def best(self, metric: str, *, maximize: bool | None = None) -> float | None:
        """Best finite value of ``metric`` over rounds 0..T: the largest for accuracy-like
        metrics (:func:`higher_is_better`) or when ``maximize``, else the smallest."""
        self._check_field("metric", metric)
        up = best_direction(metric, maximize)
        vals = [float(v) for v in self._values(metric, with_initial=True)
                if _is_number(v) and math.isfinite(v)]
        if not vals:
            return None
        return max(vals) if up else min(vals)

    def to_pandas(self, *, with_initial: bool = True, seeds: bool = False):
        """The records as a ``pandas.DataFrame``, one row per round.

        Parameters
        ----------
        with_initial : include round 0 (the initial model).
        seeds : for a mean over seeds (:attr:`seeds` not empty), return every seed's
            rows instead, with a ``seed`` column (the run seed) -- the long format
            ``seaborn`` and ``groupby`` expect.

        Returns
        -------
        pandas.DataFrame
            columns = :meth:`fields` (plus ``seed``), indexed 0..rows-1; missing values
            are NaN.

        Raises
        ------
        ImportError
            when pandas is not installed (it is optional: the ``report`` extra,
            ``pip install 'fedsparse[report]'``).
        """
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("History.to_pandas() needs pandas, an optional dependency: "
                              "pip install 'fedsparse[report]' (or pip install pandas)") from None
        if seeds and self.seeds:
            frames = []
            for i, h in enumerate(self.seeds):
                df = h.to_pandas(with_initial=with_initial)
                df.insert(0, "seed", h.config.get("seed", i))
                frames.append(df)
            return pd.concat(frames, ignore_index=True)
        rows = ([self.initial] if with_initial and self.initial else []) + self.records
        return pd.DataFrame.from_records(rows, columns=self.fields())

    def plot(self, metric: str = "objective", x: str = "round", ax=None, *,
             label: str | None = None, band: str | None = "std", logy: bool | None = None,
             **kwargs):
        """Draw ``metric`` against ``x`` (round 0 included) on a matplotlib axes.

        Parameters
        ----------
        metric, x : record fields for the y and x axes (e.g. "objective",
            "test_accuracy"; "round", "bytes_total").
        ax : axes to draw on; default the current axes of pyplot.
        label : legend entry (default the metric name).
        band : for a mean over seeds, shade mean ± std (sample standard deviation,
            "std"), a 95% confidence interval of the mean ("ci95"), or nothing (None).
        logy : log-scale y axis (non-positive values are left out); None = automatic: a
            log axis when the values are positive and span two decades or more (an
            objective falling to 1e-25 stays readable), never for accuracy-like metrics.
        **kwargs : passed to ``ax.plot`` (color, linestyle, marker, ...).

        Returns
        -------
        matplotlib.axes.Axes
            the axes drawn on, with axis labels set (bytes in KB/MB/GB, integer rounds).
        """
        from .report.axes import draw_history

        if "y" in kwargs:
            raise fail("y", kwargs["y"], "History.plot takes the y axis as metric "
                       f"(plot(metric={kwargs['y']!r}, x=...))")
        for name, value in (("metric", metric), ("x", x)):
            if value not in self.recorded():
                from .experiments.config_checks import did_you_mean

                raise fail(name, value, "is not recorded by this run"
                           f"{did_you_mean(value, self.recorded())}; it records "
                           + ", ".join(self.recorded()))
        if band not in (None, "std", "ci95"):
            raise fail("band", band, '"std", "ci95" or None')
        check_bool("logy", logy, allow_none=True)
        if ax is None:
            import matplotlib.pyplot as plt

            ax = plt.gca()
        elif not callable(getattr(ax, "plot", None)):
            raise fail("ax", ax, "must be a matplotlib Axes (or None: the current axes)")
        if logy is None:
            from .report.axes import auto_log

            logy = auto_log(metric, self._values(metric, with_initial=True))
        draw_history(ax, self, y=metric, x=x, label=label or metric, band=band, logy=logy,
                     **kwargs)
        return ax

    def save(self, directory: str | Path, *, overwrite: bool = False) -> None:
        """Write ``history.jsonl``, ``history.csv`` (round 0 first), ``model.npy``, and
        where the run has them ``personal_models.npy`` and ``config.json`` (what ran, and
        for a Flower run the nodes it refused).

        A folder that already holds a saved history (another run's, or this one's) is
        refused unless ``overwrite=True``: an earlier run is never replaced silently.
        """
        directory = Path(directory)
        if not overwrite and (directory / "history.jsonl").exists():
            raise fail("directory", str(directory), "already holds a saved history; give "
                       "overwrite=True to replace it, or another folder")
        if directory.exists() and not directory.is_dir():
            raise fail("directory", str(directory), "is a file: a history is saved as a "
                       "folder of files (history.jsonl, model.npy, ...); give a folder")
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file on the way, no permission
            raise fail("directory", str(directory), f"cannot be created: {exc.strerror}") \
                from None
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
        if self.personal_models is not None:
            np.save(directory / "personal_models.npy",
                    self.personal_models.detach().cpu().numpy())
        if self.config:
            # never fails after a long run: a value JSON cannot hold is written as its repr
            (directory / "config.json").write_text(
                json.dumps(self.config, indent=1, sort_keys=True, default=repr) + "\n")

    @classmethod
    def load(cls, directory: str | Path) -> History:
        """Read back what :meth:`save` wrote.

        Raises
        ------
        ConfigError
            naming the file (and the line of ``history.jsonl``) that is missing or not
            as :meth:`save` writes it.
        """
        directory = Path(directory)
        if not (directory / "history.jsonl").is_file():
            raise fail("directory", str(directory), "must be a folder holding a "
                       "history.jsonl (what History.save and fedsparse run write)")
        rows = read_records(directory / "history.jsonl")
        initial = rows.pop(0) if rows and rows[0].get("round") == 0 else {}
        model = personal = None
        if (directory / "model.npy").exists():
            model = torch.from_numpy(_read_array(directory / "model.npy"))
        if (directory / "personal_models.npy").exists():  # (N, P): paged in as it is read
            personal = torch.from_numpy(_read_array(directory / "personal_models.npy",
                                                    mmap_mode="c"))
        config = {}
        if (directory / "config.json").exists():
            config = read_json_object(directory / "config.json")
        return cls(records=rows, initial=initial, model=model, personal_models=personal,
                   config=config)


def read_records(path: Path) -> list[dict]:
    """The round records of a ``history.jsonl`` (round 0 first where it was saved), blank
    lines skipped, non-finite values read back as floats.

    Raises
    ------
    ConfigError
        naming the file and the line that is not a JSON object, or a record unlike the
        ones fedsparse writes (:func:`~fedsparse.metric_names.record_problem`; rounds
        in increasing order).
    """
    rows = []
    try:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise ConfigError(f"{path}, line {n}: not valid JSON ({exc})") from None
                if not isinstance(row, dict):
                    raise ConfigError(f"{path}, line {n}: a round record must be a JSON "
                                      "object")
                row = _from_json(row)
                problem = record_problem(row)
                if problem is None and rows and row["round"] <= rows[-1]["round"]:
                    problem = (f"round={row['round']} follows round {rows[-1]['round']}: "
                               "rounds must increase")
                if problem is not None:
                    raise ConfigError(f"{path}, line {n}: {problem}; the file was not "
                                      "written by fedsparse or was edited since")
                rows.append(row)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a text file of JSON lines ({exc})") from None
    return rows


def read_json_object(path: Path) -> dict:
    """A JSON file fedsparse wrote (``summary.json``, ``best.json``), whose top level must
    be an object; a ConfigError naming the file otherwise (run folders are often copied
    or edited by hand)."""
    try:
        with open(path, encoding="utf-8") as fh:
            value = json.load(fh)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc}); it was not written by fedsparse "
                          "or was damaged since") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: holds a JSON {type(value).__name__}, where fedsparse "
                          "writes an object")
    return value


def _read_array(path: Path, **kwargs) -> np.ndarray:
    """A saved model array, or a ConfigError naming the file (never runs pickled code)."""
    try:
        return np.load(path, **kwargs)
    except (ValueError, OSError, EOFError) as exc:
        raise ConfigError(f"{path}: not a NumPy array file as History.save writes it "
                          f"({exc})") from None


def _is_number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _from_json(row: dict) -> dict:
    # :func:`_jsonable` wrote non-finite floats as the strings "inf", "-inf", "nan"
    return {k: float(v) if v in _NON_FINITE else v for k, v in row.items()}


_NON_FINITE = ("inf", "-inf", "nan")


def _jsonable(row: dict) -> dict:
    out = {}
    for k, v in row.items():
        if isinstance(v, float) and not math.isfinite(v):
            v = str(v)  # JSON has no NaN/inf; keep them readable rather than invalid
        out[k] = v
    return out
