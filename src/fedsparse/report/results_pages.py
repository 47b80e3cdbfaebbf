"""The numbers of docs/results/safari.md and fedmac.md, generated from committed runs.

Every quoted run is a file, ``docs/results/runs/<experiment>/summary.json``, with the
run's ``rounds``, ``seeds`` (how many), ``device``, ``gpu`` (model name or null),
``wall_clock_s``, the model and data size, the command that reruns it, and per run the
per-seed values of every quoted metric. The pages hold the tables made from these files
between markers::

    <!-- begin generated: safari-sparsity runs -->
    ...
    <!-- end generated -->

Commands (from the repository root)::

    python -m fedsparse.report.results_pages collect EXPERIMENT RUN_DIR [--command CMD]
    python -m fedsparse.report.results_pages generate          # rewrite the blocks
    python -m fedsparse.report.results_pages generate --check  # exit 1 if a page differs

``collect`` reads an output folder of ``fedsparse run EXPERIMENT`` (its summary.json,
and safari.json for a SAFARI experiment) and writes the committed summary; ``generate``
fills every block of the pages from the committed summaries.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from pathlib import Path

from .._validation import ConfigError
from ..experiments.output import attempts_so_far, marker_info
from ..history import read_json_object

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "docs" / "results"
RUNS = RESULTS / "runs"
PAGES = ("safari.md", "fedmac.md")
BLOCK = re.compile(r"(<!-- begin generated: (?P<key>[^>]+?) -->\n)(?P<body>.*?)"
                   r"(<!-- end generated -->)", re.S)
#: What every committed summary holds at the top level.
REQUIRED = ("experiment", "rounds", "seeds", "device", "gpu", "wall_clock_s", "command")
#: Model names as the pages write them.
MODEL_NAMES = {"mlp": "MLP 784-100-10", "cnn": "small CNN", "resnet20": "ResNet-20"}
#: A SAFARI run's test images as the pages write them.
TEST_SPLITS = {"official": "tested on the official test split",
               "held_out": "tested on 1/6 of each client's share held out"}


# --------------------------------------------------------------------------- collect


def collect(experiment: str, run_dir: str | Path, *, command: str | None = None,
            runs: Path = RUNS) -> Path:
    """Write ``runs/<experiment>/summary.json`` from the output folder of a run.

    Parameters
    ----------
    experiment : the named experiment that wrote ``run_dir``.
    run_dir : its ``--out`` folder.
    command : the command that reruns it (default ``fedsparse run EXPERIMENT``).

    Returns
    -------
    Path of the file written.
    """
    run_dir = Path(run_dir)
    if not (run_dir / "summary.json").is_file():
        raise ConfigError(f"{run_dir}: no summary.json; give the --out folder of a finished run")
    summary = read_json_object(run_dir / "summary.json")
    marker = marker_info(run_dir)
    if marker.get("experiment", experiment) != experiment:
        raise ConfigError(f"{run_dir} holds a run of {marker['experiment']!r}, not of "
                          f"{experiment!r}")
    if marker.get("quick") or summary.get("quick"):
        raise ConfigError(f"{run_dir} holds a --quick run; the pages quote full runs only")
    if marker and marker.get("status") != "done":
        raise ConfigError(f"{run_dir}: its run is {marker.get('status')!r}, not finished; "
                          "continue it with --resume first")
    if "skipped" in summary:
        raise ConfigError(f"{run_dir}: the run was skipped ({summary['skipped']})")
    record = {"experiment": experiment, "command": command or f"fedsparse run {experiment}",
              "rounds": summary.get("rounds"), "seeds": summary.get("seeds"),
              "device": summary.get("device", "cpu"), "gpu": summary.get("gpu"),
              "wall_clock_s": summary.get("wall_clock_s", summary.get("seconds"))}
    if "tf32" in summary:  # a GPU run: how its float32 products were rounded
        record["tf32"] = summary["tf32"]
    attempts, seconds = attempts_so_far(run_dir)
    if attempts > 1:  # continued with --resume: the summary timed only the last part
        record.update(wall_clock_s=seconds, attempts=attempts)
    safari = run_dir / "safari.json"
    if safari.exists():
        analysis = read_json_object(safari)
        budget = analysis["budget"]
        record.update(rounds=budget["rounds"], seeds=budget["seeds"], kind="safari",
                      model=budget["model"], max_examples=budget["max_examples"],
                      test_split=budget.get("test_split") or _test_split(run_dir),
                      measures=analysis["measures"], panels=analysis["panels"],
                      distances=analysis.get("distances", {}))
    else:
        record.update(kind="fedmac", eval_every=summary.get("eval_every"),
                      weighting=summary.get("weighting"),
                      **{k: summary[k] for k in ("table", "runs", "gaps") if k in summary})
    # a FedMac run's weighting is what its FedAvg and FedProx averaged: never assumed
    needed = (*REQUIRED, "weighting") if record["kind"] == "fedmac" else REQUIRED
    missing = [k for k in needed if record.get(k) is None and k != "gpu"]
    if missing:
        raise ConfigError(f"{run_dir}/summary.json lacks {', '.join(missing)}")
    path = runs / experiment / "summary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def _test_split(run_dir: Path) -> str:
    """The test split of every run in ``run_dir/config.toml`` (a SAFARI analysis written
    before its budget named the split does not say it)."""
    config = tomllib.loads((run_dir / "config.toml").read_text())
    default = config.get("defaults", {}).get("data", {}).get("test_split", "held_out")
    splits = {r.get("data", {}).get("test_split", default) for r in config.get("runs", [])}
    if len(splits) != 1:
        raise ConfigError(f"{run_dir}/config.toml: its runs test on "
                          f"{', '.join(sorted(splits)) or 'no runs'}; the pages quote runs "
                          "that share one test split")
    return splits.pop()


def load_runs(runs: Path = RUNS) -> dict[str, dict]:
    """``{experiment: committed summary}`` of every ``runs/*/summary.json``."""
    return {p.parent.name: json.loads(p.read_text())
            for p in sorted(runs.glob("*/summary.json"))}


# -------------------------------------------------------------------------- generate


def setting_line(s: dict) -> str:
    """The line that labels a block: scale, model, rounds, seeds, device, time, command."""
    where = "GPU" if s["device"].startswith("cuda") else "CPU"
    gpu = f" ({s['gpu']})" if s.get("gpu") else ""
    if "tf32" in s:
        tf32 = [name for key, name in (("matmul", "matrix products"),
                                       ("convolutions", "convolutions")) if s["tf32"].get(key)]
        gpu += f", TF32 {' and '.join(tf32)}" if tf32 else ", no TF32"
    model = MODEL_NAMES.get(s.get("model"), s.get("model"))
    data = (f", {s['max_examples']:,} images" if s.get("max_examples")
            else "")
    what = f"{model}{data}, " if model else ""
    if s.get("kind") == "safari":  # which images the global model was tested on
        what += f"{TEST_SPLITS[s['test_split']]}, "
    attempts = s.get("attempts", 1)
    parts = f" in {attempts} attempts" if attempts > 1 else ""
    return (f"*{where} run*: {what}{s['rounds']} rounds, {s['seeds']} "
            f"seed{'s' if s['seeds'] != 1 else ''}, device {s['device']}{gpu}, "
            f"{s['wall_clock_s']:,.0f} s wall clock{parts}; `{s['command']}`; data: "
            f"`docs/results/runs/{s['experiment']}/summary.json`.")


def _safari_block(s: dict, part: str) -> str:
    from ..experiments.safari import markdown_rows

    rows = markdown_rows({"panels": s["panels"], "distances": s.get("distances", {})})
    header = {"runs": "| panel | run | score | curve mean | jitter |\n|---|---|---|---|---|",
              "differences": "| panel | pair | score | curve mean |\n|---|---|---|---|",
              "distances": "| panel | within / between distance (per seed) | mean ± std |\n"
                           "|---|---|---|"}[part]
    return header + "\n" + "\n".join(rows[part])


def _cell(stat: dict) -> str:
    from ..experiments.fedmac import format_stat

    return format_stat(stat)


def _fedmac_block(s: dict, part: str) -> str:
    from ..experiments.fedmac import _fmt

    if part == "gaps" and "gaps" in s:
        lines = [f"| model | here ({s['rounds']} rounds, {s['seeds']} seed"
                 f"{'s' if s['seeds'] != 1 else ''}) | Liu et al. 2023 (MNIST, 800 rounds) |",
                 "|---|---|---|"]
        lines += [f"| {g['method']} {g['model']} | {_fmt(g['gap'])} | {g['paper_gap']:.2f} |"
                  for g in s["gaps"]]
        return "\n".join(lines)
    if part == "runs" and s["experiment"] in FIGURE_HEADERS:
        return _figure_block(s)
    if part == "seeds" and s["experiment"] in FIGURE_HEADERS:
        return _figure_seeds_block(s)
    if part != "table" or "table" not in s:
        raise ConfigError(f"{s['experiment']}: no generated block {part!r}")
    lines = ["| method | model | best over rounds (%) | last round (%) | "
             "Liu et al. 2023 (%) | best, per seed (%) |", "|---|---|---|---|---|---|"]
    for r in s["table"]:
        seeds = ", ".join("-" if v is None else f"{v:.2f}" for v in r["seeds"])
        paper = "-" if r["paper"] is None else f"{r['paper']:.2f}"
        lines.append(f"| {r['method']} | {r['model']} | {_cell(r['best'])} | "
                     f"{_cell(r['last'])} | {paper} | {seeds} |")
    return "\n".join(lines)


#: The FedMac figures' tables: header and the row fields (accuracies in %, then others).
FIGURE_HEADERS = {
    "fedmac-fig2": ("| run | GM best (%) | GM last (%) | PM best (%) | PM last (%) | training "
                    "loss, last round | first round the PM is at 95% of its best |",
                    ("gm_best", "gm_last", "pm_best", "pm_last"),
                    (("loss_last", 4), ("pm_rounds_to_95pct_of_best", None))),
    "fedmac-fig4": ("| method | PM best (%) | PM last (%) | GM best (%) | PM non-zero fraction "
                    "at the last round | first round at the 50% floor | recorded cost / dense "
                    "| paper's formula at the PMs' s / dense |",
                    ("pm_best", "pm_last", "gm_best"),
                    (("pm_density_last", 3), ("pm_floor_round", None),
                     ("recorded_cost_ratio", 3), ("formula_cost_ratio", 3))),
    "fedmac-fig6": ("| gamma_w | GM best (%) | GM last (%) | PM best (%) | PM last (%) | GM "
                    "non-zero fraction, last round | PM non-zero fraction, last round | first "
                    "round the GM is at the 50% floor |",
                    ("gm_best", "gm_last", "pm_best", "pm_last"),
                    (("gm_density_last", 3), ("pm_density_last", 3), ("gm_floor_round", None))),
}


def _figure_block(s: dict) -> str:
    """A FedMac figure's table: one row per run, each cell the mean over its seeds (the
    ``seeds`` block gives them one by one)."""
    from ..experiments.fedmac import _fmt

    header, percents, others = FIGURE_HEADERS[s["experiment"]]
    lines = [header, "|" + "---|" * header.count(" | ") + "---|"]
    for r in s["runs"]:
        cells = [_fmt(r.get(k)) for k in percents]
        cells += [str(r.get(k)) if digits is None else _fmt(r.get(k), digits)
                  for k, digits in others]
        lines.append(f"| {run_label(r)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_label(row: dict) -> str:
    """How a FedMac figure's table names a run: "panel: label", or the label alone."""
    return f"{row['panel']}: {row['label']}" if row.get("panel") else row["label"]


#: The per-replicate columns of a FedMac figure, in this order: field -> (header, decimals;
#: None for a round).
SEED_COLUMNS = {"gm_best": ("GM best (%)", 2), "gm_last": ("GM last (%)", 2),
                "pm_best": ("PM best (%)", 2), "pm_last": ("PM last (%)", 2),
                "loss_last": ("training loss, last round", 4),
                "pm_rounds_to_95pct_of_best": ("first round the PM is at 95% of its best", None),
                "pm_floor_round": ("first round the PMs are at the 50% floor", None),
                "gm_floor_round": ("first round the GM is at the 50% floor", None)}


def _figure_seeds_block(s: dict) -> str:
    """A FedMac figure's runs replicate by replicate (replicates 0, 1, ...)."""
    from ..experiments.fedmac import _fmt

    if not all("per_seed" in r for r in s["runs"]):
        raise ConfigError(f"{s['experiment']}: summary.json has no per-seed values; "
                          "collect it again from its run folder")
    fields = [k for k in SEED_COLUMNS if k in s["runs"][0]["per_seed"]]
    lines = ["| run | replicate | " + " | ".join(SEED_COLUMNS[k][0] for k in fields) + " |",
             "|" + "---|" * (len(fields) + 2)]
    for r in s["runs"]:
        label, per_seed = run_label(r), r["per_seed"]
        for k in range(len(per_seed[fields[0]])):
            cells = [str(per_seed[f][k]) if SEED_COLUMNS[f][1] is None
                     else _fmt(per_seed[f][k], SEED_COLUMNS[f][1]) for f in fields]
            lines.append(f"| {label} | {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def block(key: str, runs: dict[str, dict]) -> str:
    """The text of the generated block ``key`` ("EXPERIMENT PART")."""
    experiment, _, part = key.partition(" ")
    if experiment not in runs:
        raise ConfigError(f"generated block {key!r}: no committed run "
                          f"docs/results/runs/{experiment}/summary.json")
    s = runs[experiment]
    if part == "setting":
        return setting_line(s)
    return (_safari_block if s.get("kind") == "safari" else _fedmac_block)(s, part)


def render(text: str, runs: dict[str, dict]) -> str:
    """``text`` with every generated block filled from ``runs``."""
    return BLOCK.sub(lambda m: m.group(1) + block(m.group("key"), runs) + "\n" + m.group(4),
                     text)


def generate(*, check: bool = False, results: Path = RESULTS) -> list[str]:
    """Fill the blocks of every page; with ``check``, change nothing and return the pages
    that differ from what their committed runs give."""
    runs = load_runs(results / "runs")
    differ = []
    for name in PAGES:
        page = results / name
        text = page.read_text()
        new = render(text, runs)
        if new != text:
            differ.append(name)
            if not check:
                page.write_text(new)
    return differ


#: How far a re-run's number may lie from the quoted one, in points of %: five times the
#: largest difference measured between two machines for the same run (0.02 points, float
#: sums in another order), far below any difference a page reads as a finding. (FedMac's
#: Figure 4, whose sparse runs drift by up to 0.09 points, is pinned at 0.3.)
TOLERANCE = 0.1
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def generated_block(text: str, key: str) -> str:
    """The body of the page's generated block ``key`` (``<!-- begin generated: key -->``).

    Raises
    ------
    ValueError
        if the page has no such block.
    """
    for m in BLOCK.finditer(text):
        if m["key"] == key:
            return m["body"]
    raise ValueError(f"the page has no generated block {key!r}")


def rows_off(rows: list[str], text: str, *, key_cells: int = 2,
             tolerance: float = TOLERANCE) -> list[str]:
    """The table rows of ``rows`` that ``text`` does not quote within ``tolerance``.

    A row is found in ``text`` by its first ``key_cells`` cells (e.g. panel and run); its
    other cells must hold the same numbers, each within ``tolerance`` (points of %). A key
    that ``text`` holds in more than one row is reported, not compared: the tables of a page
    repeat keys, so pass one table (:func:`generated_block`).

    Returns
    -------
    One message per row that is missing, ambiguous or off, naming the row and the page's.
    """
    quoted: dict[tuple, list[list[str]]] = {}
    for line in text.splitlines():
        if line.startswith("|"):
            cells = _cells(line)
            quoted.setdefault(tuple(cells[:key_cells]), []).append(cells[key_cells:])
    off = []
    for row in rows:
        cells = _cells(row)
        key, values = tuple(cells[:key_cells]), cells[key_cells:]
        found = quoted.get(key, [])
        if len(found) != 1:
            off.append(f"quoted in {len(found)} rows (not one): {row}")
            continue
        page = found[0]
        ours = [_NUMBER.findall(c) for c in values]
        theirs = [_NUMBER.findall(c) for c in page[:len(values)]]
        same = len(ours) == len(theirs) and all(
            len(a) == len(b) and all(abs(float(x) - float(y)) <= tolerance + 1e-9
                                     for x, y in zip(a, b, strict=True))
            for a, b in zip(ours, theirs, strict=True))
        if not same:
            off.append(f"off by more than {tolerance}: run gives {row}; quoted "
                       f"| {' | '.join(key + tuple(page))} |")
    return off


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedsparse.report.results_pages",
                                     allow_abbrev=False, description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", allow_abbrev=False)
    c.add_argument("experiment")
    c.add_argument("run_dir")
    c.add_argument("--command")
    g = sub.add_parser("generate", allow_abbrev=False)
    g.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "collect":
            print(collect(args.experiment, args.run_dir, command=args.command))
            return 0
        differ = generate(check=args.check)
    except (ConfigError, OSError, ValueError) as exc:  # a clear line, not a traceback
        print(f"results_pages: error: {exc}", file=sys.stderr)
        return 2
    if differ:
        print(("differ from their committed runs: " if args.check else "rewrote: ")
              + ", ".join(differ))
    return 1 if differ and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
