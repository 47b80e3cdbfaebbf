"""SAFARI (Mao et al. 2022) experiments, the analysis: each run's score over seeds, the
paired differences between runs that share a seed, Figure 5's distance record as a heat
map with its within/between-group ratio, the figures and the text and Markdown tables.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from .._validation import ConfigError
from ..algorithms.compensation import check_record, dense_record
from ..checkpoints import read_checkpoint
from ..history import History
from ..report.plots import plot_panels, plot_sweep, wrap
from .config import resolve_runs
from .safari_setup import (
    COMP,
    NO_DROP,
    NUM_CLIENTS,
    NUM_GROUPS,
    REFERENCES,
    SCORE_ROUNDS,
    figure_panels,
)


def score(history: History, last: int = SCORE_ROUNDS) -> float | None:
    """Mean test accuracy of the last ``last`` recorded rounds (None if there is none)."""
    values = [v for v in history.column("test_accuracy") if v is not None]
    if not values:
        return None
    tail = values[-last:]
    return float(sum(tail) / len(tail))


def curve_mean(history: History) -> float | None:
    """Mean test accuracy over all recorded rounds: higher when a run learns sooner."""
    values = [v for v in history.column("test_accuracy") if v is not None]
    return float(sum(values) / len(values)) if values else None


def _stats(values: list[float]) -> dict:
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return {"mean": None, "std": None, "n": 0, "values": []}
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else 0.0,
            "n": int(v.size), "values": [float(x) for x in v]}


def jitter(history: History) -> float | None:
    """Mean |change| of the test accuracy from one round to the next over the second half
    of the run: how much the curve shakes once it has left the start."""
    values = [v for v in history.column("test_accuracy") if v is not None]
    tail = np.asarray(values[len(values) // 2:], dtype=float)
    return float(np.abs(np.diff(tail)).mean()) if tail.size > 1 else None


#: What :func:`analyse` reports per run: name -> function of one seed's history.
MEASURES = {"score": score, "curve_mean": curve_mean, "jitter": jitter}


def seed_histories(out: Path, run: dict, seeds: int) -> list[History]:
    """The per-seed histories of ``run`` written by :func:`run_experiment` with seeds."""
    return [History.load(out / run["slug"] / f"seed-{run['seed'] + k}") for k in range(seeds)]


def analyse(config: dict, out: Path, seeds: int) -> dict:
    """Per figure panel (:func:`figure_panels`): each run's :data:`MEASURES` over the
    seeds, and for every pair of runs the per-seed differences of their scores and curve
    means -- a paired comparison: runs with the same seed share the model's
    initialisation, the partition, the mini-batches and the channel draws."""
    measured = {}
    for run in resolve_runs(config):
        hists = seed_histories(out, run, seeds)
        measured[run["slug"]] = {name: _stats([fn(h) for h in hists])
                                 for name, fn in MEASURES.items()} | {"dir": run["slug"]}
    panels: dict[str, dict] = {}
    for panel, runs in figure_panels(config, measured).items():
        entry = panels[panel] = {"runs": runs, "differences": {}}
        labels = list(runs)
        for i, a in enumerate(labels):
            for b in labels[i + 1:]:
                entry["differences"][f"{a} - {b}"] = {
                    name: _stats([x - y for x, y in zip(runs[a][name]["values"],
                                                        runs[b][name]["values"],
                                                        strict=True)])
                    for name in ("score", "curve_mean")}
    return panels


def draw_figures(config: dict, out: Path, title: str) -> list[str]:
    """Test accuracy and test loss against rounds, one panel per figure panel
    (:func:`figure_panels`), each run its mean over the seeds with a ± std band."""
    means = {run["slug"]: History.load(out / run["slug"]) for run in resolve_runs(config)}
    panels = figure_panels(config, means)
    written = []
    for y in ("test_accuracy", "test_objective"):
        name = f"{y}_vs_round.png"
        if plot_panels(panels, y=y, x="round", path=out / name, title=title):
            written.append(name)
    return written


def group_distance_ratio(distances: torch.Tensor, groups) -> dict:
    """Mean distance between clients of the same group, of different groups, and their
    ratio (below 1: the record sees the groups), over the measured pairs u != v.

    Parameters
    ----------
    distances : (N, N) the server's distance record, +inf where never measured.
    groups : (N,) group id of each client.
    """
    d = torch.as_tensor(distances, dtype=torch.float64)
    g = torch.as_tensor(np.asarray(groups))
    same = g[:, None] == g[None, :]
    off = ~torch.eye(d.shape[0], dtype=torch.bool)
    ok = torch.isfinite(d) & off
    within = d[ok & same]
    between = d[ok & ~same]
    if within.numel() == 0 or between.numel() == 0:
        return {"within": None, "between": None, "ratio": None,
                "measured_pairs": int(ok.sum()) // 2}
    w, b = float(within.mean()), float(between.mean())
    return {"within": w, "between": b, "ratio": w / b, "measured_pairs": int(ok.sum()) // 2}


def distance_record(checkpoint: Path, num_clients: int = NUM_CLIENTS) -> torch.Tensor:
    """The server's final distance record from a run's checkpoint, as the (N, N) matrix
    (+inf where never measured; the state keeps only the measured pairs). The file is
    verified as a resume would verify it (:func:`fedsparse.checkpoints.read_checkpoint`)."""
    ckpt = read_checkpoint(checkpoint)
    state = ckpt.get("state", {}) if isinstance(ckpt, dict) else {}
    if "similarity" not in state:
        raise ConfigError(f"checkpoint {str(checkpoint)!r} holds no distance record (was "
                          "the run compensated?)")
    check_record(state["similarity"], num_clients)
    return dense_record(state["similarity"], num_clients)


def plot_heatmap(distances: torch.Tensor, path: Path, *, title: str) -> None:
    """The distance record as an image (never-measured pairs and the diagonal blank)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = torch.as_tensor(distances, dtype=torch.float64).clone()
    d[~torch.isfinite(d)] = float("nan")
    d.fill_diagonal_(float("nan"))
    fig, ax = plt.subplots(figsize=(5.6, 4.8), layout="constrained")
    im = ax.imshow(d.numpy(), cmap="viridis", interpolation="nearest")
    fig.colorbar(im, ax=ax, label="||x_u - x_v||_2 (last round both arrived)")
    ax.set_xlabel("client v")
    ax.set_ylabel("client u")
    ax.set_title(wrap(title, 5.0, 10), fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def heatmaps_analysis(config: dict, out: Path, seeds: int) -> dict:
    """Figure 5 from every compensated run of ``config``: the seed-0 heat map and the
    within/between ratio of every seed."""
    from ..data.partition import contiguous_groups

    groups = contiguous_groups(NUM_CLIENTS, NUM_GROUPS)
    result = {}
    for run in resolve_runs(config):
        if not run["algorithm"].get("compensation"):
            continue
        per_seed = []
        for k in range(seeds):
            folder = out / run["slug"] / f"seed-{run['seed'] + k}"
            record = distance_record(folder / "checkpoint.pt")
            per_seed.append(group_distance_ratio(record, groups))
            if k == 0:
                name = f"distances-{run['slug']}.png"
                plot_heatmap(record, out / name, title=f"Final distance record, "
                             f"{run['panel']} (seed {run['seed']})")
        result[run["panel"]] = {"image": name, "per_seed": per_seed,
                                "ratio": _stats([r["ratio"] for r in per_seed])}
    return result


def sweep_plot(config: dict, analysis: dict, out: Path, field: str, value_of, name: str,
                title: str) -> str | None:
    """Score against the swept value, one line per panel (mean ± std over seeds)."""
    table: dict[str, list[dict]] = {}
    for run in resolve_runs(config):
        s = analysis[run["panel"]]["runs"][run["label"]]["score"]
        table.setdefault(run["panel"] or "score", []).append(
            {"x": value_of(run), "value": s["mean"], "std": s["std"], "diverged": False})
    ok = plot_sweep(table, field=field, metric="test_accuracy", path=out / name, title=title,
                    ylabel=f"test accuracy (mean of the last {SCORE_ROUNDS} rounds)")
    return name if ok else None


def _fmt(s: dict, scale: float = 100.0) -> str:
    if s.get("mean") is None:
        return "n/a"
    return f"{s['mean'] * scale:.2f} ± {s['std'] * scale:.2f} (n={s['n']})"


def report_lines(analysis: dict) -> list[str]:
    """The analysis as printable lines (accuracies and differences in points of %)."""
    lines = []
    for panel, entry in analysis["panels"].items():
        lines.append(f"[{panel or 'runs'}] mean ± std over seeds, in %: score (last "
                     f"{SCORE_ROUNDS} rounds) / curve mean / jitter")
        for label, r in entry["runs"].items():
            lines.append(f"  {label}: {_fmt(r['score'])} / {_fmt(r['curve_mean'])} / "
                         f"{_fmt(r['jitter'])}")
        for pair, d in entry["differences"].items():
            if pair.startswith((NO_DROP, COMP)):
                lines.append(f"  {pair}: score {_fmt(d['score'])}, curve mean "
                             f"{_fmt(d['curve_mean'])}")
    for panel, d in analysis.get("distances", {}).items():
        lines.append(f"[{panel}] within-group / between-group mean distance: "
                     f"{_fmt(d['ratio'], 1.0)}")
    return lines


def _pm(s: dict) -> str:
    """``mean ± std`` in points of % (two decimals), as the results page prints it."""
    if s.get("mean") is None:
        return "n/a"
    return f"{s['mean'] * 100:.2f} ± {s['std'] * 100:.2f}"


def markdown_rows(analysis: dict) -> dict[str, list[str]]:
    """The analysis as the Markdown table rows of the results page (each cell in points of
    %, mean ± std over the seeds); the pins test re-runs an experiment and looks for these
    rows on the page.

    Returns
    -------
    ``{"runs": [...], "differences": [...], "distances": [...]}``: rows ``| panel | run |
    score | curve mean | jitter |``; rows ``| panel | pair | score | curve mean |`` for
    the pairs (paired by seed) with a run of :data:`REFERENCES`; and rows ``| panel |
    within / between distance (per seed) | mean ± std |``.
    """
    rows: dict[str, list[str]] = {"runs": [], "differences": [], "distances": []}
    for panel, entry in analysis["panels"].items():
        for label, r in entry["runs"].items():
            rows["runs"].append(f"| {panel} | {label} | {_pm(r['score'])} | "
                                f"{_pm(r['curve_mean'])} | {_pm(r['jitter'])} |")
        for pair, d in entry["differences"].items():
            if set(pair.split(" - ")) & REFERENCES:
                rows["differences"].append(f"| {panel} | {pair} | {_pm(d['score'])} | "
                                           f"{_pm(d['curve_mean'])} |")
    for panel, d in analysis.get("distances", {}).items():
        per_seed = ", ".join(f"{r['ratio']:.3f}" for r in d["per_seed"])
        rows["distances"].append(f"| {panel} | {per_seed} | {d['ratio']['mean']:.3f} ± "
                                 f"{d['ratio']['std']:.3f} |")
    return rows
