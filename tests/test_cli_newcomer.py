"""What a newcomer reads and gets: seeds said plainly, honest verdicts and help texts, a
README that can be copied top to bottom, Flower results readable with ``load_run``,
plots whose axes show what happened, optional dependencies that say how to get them."""

from __future__ import annotations

import contextlib
import io
import json
import re
import tomllib
from pathlib import Path

import pytest
import torch

from fedsparse.cli import build_parser, main
from fedsparse.history import History

ROOT = Path(__file__).resolve().parents[1]


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


# --- seeds ---------------------------------------------------------------------------------


def test_summary_and_the_run_line_say_the_run_seed_and_the_data_seed(tmp_path, tiny_toml):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(tiny_toml(labels=("Fed-HT",), algorithms=("fed_ht",)))
    code, printed, err = _run(["run", str(cfg), "--out", str(tmp_path / "o"), "--quiet",
                               "--set", "seed=7"])
    assert code == 0, err
    row = json.loads((tmp_path / "o" / "summary.json").read_text())["runs"][0]
    assert row["seed"] == 7 and row["data_seed"] == 0
    assert "run seed 7" in printed and "data seed 0" in printed


def test_show_says_which_seed_is_which():
    code, printed, _ = _run(["show", "fedht-default"])
    assert code == 0
    comments = "\n".join(line for line in printed.splitlines() if line.startswith("#"))
    assert "run seed" in comments and "data.seed" in comments and "--set data.seed=" in comments
    body = "\n".join(line for line in printed.splitlines() if not line.startswith("#"))
    assert tomllib.loads(body)["runs"]  # still a config one can save and run


# --- help texts and verdicts ---------------------------------------------------------------


def _help(*command) -> str:
    parser = build_parser()
    for name in command:
        parser = next(a for a in parser._actions if hasattr(a, "choices")
                      and isinstance(a.choices, dict)).choices[name]
    return parser.format_help()


def test_quick_says_what_it_is_and_where_its_time_is():
    text = " ".join(_help("run").split())
    assert "seconds-long" not in text
    assert "--quick" in text and "fedsparse list" in text
    code, printed, _ = _run(["list"])
    assert "seconds-long" not in printed


def test_a_claim_stated_only_as_text_gets_no_invented_results_page():
    from fedsparse.experiments.claims import format_verdicts

    lines = format_verdicts("Liu et al. report FedAvg at 85.69%", [])
    text = "\n".join(lines)
    assert "results page" not in text and "no check" in text


def test_claims_left_out_by_only_are_said_to_be_left_out(tmp_path):
    code, printed, err = _run(["run", "fedht-default", "--only", "Fed-HT", "--rounds", "2",
                               "--quiet", "--out", str(tmp_path / "o")])
    assert code == 0, err
    assert "states no checkable claim" not in printed
    assert "--only" in printed and "not tested here" in printed


# --- README ---------------------------------------------------------------------------------


def test_readme_says_to_install_cpu_torch_before_the_first_install():
    readme = (ROOT / "README.md").read_text()
    cpu = readme.index("download.pytorch.org/whl/cpu")
    first_install = readme.index("pip install -c constraints.txt . && fedsparse run")
    assert cpu < first_install
    # the two quick-start commands, unchanged (CI runs the second verbatim)
    assert "\npip install -c constraints.txt . && fedsparse run\n" in readme
    assert '\npip install -c constraints.txt -e ".[test,data,flower]" && python -m pytest\n' \
        in readme


def test_readme_neural_example_states_its_runtime_and_shows_progress():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("A neural network across clients")[1].split("```python")[1]
    block = block.split("```")[0]
    assert "progress=True" in block
    after = readme.split("A neural network across clients")[1].split("```")[2]
    assert re.search(r"\d+ (s|seconds|minutes?)\b", after), after[:300]


# --- Flower results, History plots, pandas -------------------------------------------------


def test_load_run_reads_a_flower_demo_folder(tmp_path):
    import fedsparse as fs

    demo = tmp_path / "flower-demo"
    h = History(records=[{"round": 1, "objective": 0.5}], initial={"round": 0, "objective": 1.0},
                model=torch.zeros(3))
    h.save(demo)
    (demo / "flower" / "logs").mkdir(parents=True)
    (demo / "flower" / "logs" / "superlink.log").write_text("...")
    runs = fs.load_run(demo)
    assert list(runs) == ["flower-demo"]
    assert runs["flower-demo"].records == h.records


def test_history_plot_uses_a_log_axis_for_values_spanning_decades():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h = History(records=[{"round": r, "objective": 10.0 ** (-5 * r)} for r in range(1, 6)],
                initial={"round": 0, "objective": 1.0})
    fig, ax = plt.subplots()
    h.plot("objective", ax=ax)
    assert ax.get_yscale() == "log"
    flat = History(records=[{"round": 1, "objective": 0.8}], initial={"round": 0, "objective": 1.0})
    fig2, ax2 = plt.subplots()
    flat.plot("objective", ax=ax2)
    assert ax2.get_yscale() == "linear"
    acc = History(records=[{"round": 1, "accuracy": 0.9}], initial={"round": 0, "accuracy": 0.001})
    fig3, ax3 = plt.subplots()
    acc.plot("accuracy", ax=ax3)
    assert ax3.get_yscale() == "linear"  # accuracies stay on a linear axis
    plt.close("all")


def test_to_pandas_names_the_extra_that_installs_pandas(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"fedsparse\[report\]"):
        History(records=[{"round": 1}]).to_pandas()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert any(d.startswith("pandas") for d in extras["report"])
