"""Liu et al. 2023's (FedMac) numbers and the text tables that set ours beside them.

Table 1 reports, per data set and (method, model), the **maximum over the evaluated
rounds** of the mean test accuracy (micro-averaged over all clients' test examples),
after Huang et al. 2021, for the global model (GM, ``test_accuracy``) and the
personalised models (PM, ``personal_test_accuracy``); ours is then the mean and
standard deviation over seeds (:func:`fedsparse.experiments.seeds.seed_stats`), with
the last round's value beside it.

Which model is which: FedAvg and FedProx have only a GM; HeurFedAMP and Per-FedAvg only
a PM (HeurFedAMP has no global model; Per-FedAvg's GM is its meta-model, not reported
by the paper); pFedMe and FedMac both.
"""

from __future__ import annotations

import json
from pathlib import Path

from .fedmac_runs import RunResult
from .seeds import strict_json

#: Liu et al. 2023, Table 1: best mean test accuracy (%) per data set and (method, model).
PAPER_TABLE1 = {
    "mnist": {("FedAvg", "GM"): 96.8603, ("FedProx", "GM"): 96.8564,
              ("HeurFedAMP", "PM"): 98.4425, ("Per-FedAvg", "PM"): 98.1474,
              ("pFedMe", "GM"): 96.8698, ("pFedMe", "PM"): 98.9223,
              ("FedMac", "GM"): 96.8964, ("FedMac", "PM"): 98.9547},
    "fmnist": {("FedAvg", "GM"): 85.6949, ("FedProx", "GM"): 85.6569,
               ("HeurFedAMP", "PM"): 99.1756, ("Per-FedAvg", "PM"): 99.3051,
               ("pFedMe", "GM"): 84.9582, ("pFedMe", "PM"): 99.2327,
               ("FedMac", "GM"): 85.7958, ("FedMac", "PM"): 99.3698},
    "cifar100": {("FedAvg", "GM"): 85.7712, ("FedProx", "GM"): 86.0150,
                 ("HeurFedAMP", "PM"): 90.4033, ("Per-FedAvg", "PM"): 89.7828,
                 ("pFedMe", "GM"): 84.9512, ("pFedMe", "PM"): 90.1374,
                 ("FedMac", "GM"): 86.5691, ("FedMac", "PM"): 90.8987},
    "synthetic": {("FedAvg", "GM"): 84.6333, ("FedProx", "GM"): 84.5475,
                  ("HeurFedAMP", "PM"): 84.2741, ("Per-FedAvg", "PM"): 88.7006,
                  ("pFedMe", "GM"): 83.5622, ("pFedMe", "PM"): 87.4969,
                  ("FedMac", "GM"): 84.8889, ("FedMac", "PM"): 89.0583},
}
#: The paper's Table 1 columns, in its order: (method label, model).
COLUMNS = (("FedAvg", "GM"), ("FedProx", "GM"), ("HeurFedAMP", "PM"), ("Per-FedAvg", "PM"),
           ("pFedMe", "GM"), ("pFedMe", "PM"), ("FedMac", "GM"), ("FedMac", "PM"))
#: Record field of each model's mean test accuracy.
FIELD = {"GM": "test_accuracy", "PM": "personal_test_accuracy"}
#: Liu et al. 2023, Figure 3 (MNIST): points by which the FedMac PM beats each model.
PAPER_FIG3_GAPS = {("FedMac", "GM"): 1.79, ("pFedMe", "PM"): 0.55, ("pFedMe", "GM"): 2.29,
                   ("Per-FedAvg", "PM"): 0.75, ("HeurFedAMP", "PM"): 0.13,
                   ("FedProx", "GM"): 1.96, ("FedAvg", "GM"): 1.92}


def percent(x: float | None) -> float | None:
    """``x`` in % (None stays None)."""
    return None if x is None else 100.0 * x


def cell(stats: dict, kind: str, metric: str) -> dict:
    """``{"mean", "std", "n"}`` in % of ``metric`` in ``stats[kind]`` (``kind``: "best" or
    "final" of :func:`fedsparse.experiments.seeds.seed_stats`)."""
    s = stats[kind].get(metric, {"mean": None, "std": None, "n": 0})
    return {"mean": percent(s["mean"]), "std": percent(s["std"]), "n": s["n"]}


def format_stat(s: dict) -> str:
    """``"99.12 ± 0.05"`` (mean ± std over seeds, in %), ``"99.12"`` for one seed,
    ``"-"`` when not recorded."""
    if s["mean"] is None:
        return "-"
    return f"{s['mean']:.2f}" + ("" if s["std"] is None else f" ± {s['std']:.2f}")


def table_rows(results: dict[tuple[str, str], RunResult], paper: dict) -> list[dict]:
    """Table 1's cells from runs labelled as the paper's methods.

    Returns
    -------
    One dict per (method, model) of :data:`COLUMNS` that was run: ``method``, ``model``,
    ``best`` and ``last`` ({mean, std, n} in %, over seeds), ``paper`` (%), ``seeds``
    (each seed's best, %) and ``diverged`` (messages).
    """
    by_label = {label: r for (_, label), r in results.items()}
    rows = []
    for method, model in COLUMNS:
        r = by_label.get(method)
        if r is None:
            continue
        metric = FIELD[model]
        rows.append({"method": method, "model": model,
                     "best": cell(r.stats, "best", metric),
                     "last": cell(r.stats, "final", metric),
                     "paper": paper.get((method, model)),
                     "seeds": [percent(h.best(metric)) for h in r.mean.seeds],
                     "diverged": r.errors})
    return rows


def format_table(rows: list[dict], title: str) -> str:
    """The GM/PM table as text: one line per (method, model)."""
    lines = [title, f"{'method':<11} {'model':<5} {'best over rounds':>18} "
                    f"{'last round':>16} {'paper':>8}"]
    for r in rows:
        paper = "-" if r["paper"] is None else f"{r['paper']:.2f}"
        lines.append(f"{r['method']:<11} {r['model']:<5} {format_stat(r['best']):>18} "
                     f"{format_stat(r['last']):>16} {paper:>8}"
                     + ("  (diverged: " + "; ".join(r["diverged"]) + ")" if r["diverged"]
                        else ""))
    return "\n".join(lines)


def write_summary(out: Path, summary: dict) -> None:
    """``out/summary.json``, strict JSON (a non-finite number is written as null)."""
    (out / "summary.json").write_text(json.dumps(strict_json(summary), indent=2,
                                                 allow_nan=False) + "\n")


def write_report(out: Path, lines: list[str], log, **summary) -> dict:
    """Write a figure's text table (``table.txt``) and ``summary.json``, log the table,
    return the summary."""
    text = "\n".join(lines)
    (out / "table.txt").write_text(text + "\n")
    write_summary(out, summary)
    log(text)
    return summary


def best_pct(r: RunResult, metric: str) -> float | None:
    """``metric``'s best over rounds (mean over seeds), in %."""
    return cell(r.stats, "best", metric)["mean"]


def final_pct(r: RunResult, metric: str) -> float | None:
    """``metric``'s last-round value (mean over seeds), in %."""
    return cell(r.stats, "final", metric)["mean"]


def seed_cells(r: RunResult, **extra) -> dict[str, list]:
    """Each replicate's best and last GM and PM test accuracy (%), for a figure's
    ``per_seed`` entry, with ``extra`` fields (``name=function(seed History)``) beside.

    Returns
    -------
    ``{"gm_best": [...], "gm_last": [...], "pm_best": [...], "pm_last": [...], **extra}``,
    one value per replicate in run order (None where not recorded).
    """
    seeds = r.mean.seeds
    cells = {}
    for model, metric in (("gm", "test_accuracy"), ("pm", "personal_test_accuracy")):
        cells[f"{model}_best"] = [percent(h.best(metric)) for h in seeds]
        cells[f"{model}_last"] = [percent(h.final(metric)) for h in seeds]
    cells.update({name: [f(h) for h in seeds] for name, f in extra.items()})
    return cells


def fmt(x: float | None, digits: int = 2) -> str:
    """``x`` with ``digits`` decimals, ``"-"`` for None."""
    return "-" if x is None else f"{x:.{digits}f}"


def dense_bits(dim: int) -> float:
    """The paper's cost of one client and round without sparsity: ``2 * 64 * d`` bits
    (upload and broadcast, no index matrix; Liu et al. 2023, Section 5.5)."""
    return 2.0 * 64 * dim
