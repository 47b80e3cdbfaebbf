"""``fedsparse report``: one self-contained page per run or sweep folder.

The page's numbers are checked against summary.json and the histories; its HTML is
parsed strictly (html5lib, where installed; Python's parser otherwise); where Debian's
Chromium is installed the page is rendered headless and its DOM checked for the charts
the script draws.
"""

import base64
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from fedsparse.cli import main
from fedsparse.report.html import fmt

TINY = """
title = "tiny sweep"
[defaults]
rounds = 3
problem = { kind = "least_squares" }
[defaults.data]
kind = "shifted_gaussian"
num_clients = 4
samples_per_client = 20
dim = 30
sparsity = 3
[defaults.algorithm]
sparsity = 3
step_size = 0.01
[[runs]]
label = "Fed-HT"
algorithm = { kind = "fed_ht", local_steps = 2 }
"""


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """The default experiment, as `fedsparse run` writes it, with its report."""
    out = tmp_path_factory.mktemp("report") / "fedht-default"
    assert main(["run", "--out", str(out), "--quiet"]) == 0
    assert main(["report", str(out)]) == 0
    return out


class Page(HTMLParser):
    """The page's elements as (tag, attributes, text) -- enough to find table cells."""

    def __init__(self):
        super().__init__()
        self.cells, self.stack, self.rows, self.scripts = [], [], [], {}
        self.details = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "tr":
            self.rows.append({"attrs": attrs, "cells": []})
        if tag == "details":
            self.details.append(attrs)
        self.stack.append((tag, attrs, []))

    def handle_endtag(self, tag):
        while self.stack:
            t, attrs, text = self.stack.pop()
            content = "".join(text)
            if self.stack:
                self.stack[-1][2].append(content)
            if t in ("td", "th") and self.rows:
                self.rows[-1]["cells"].append((attrs, content))
                self.rows[-1].setdefault("details", self.details[-1] if self.details else {})
            if t == "script":
                self.scripts[attrs.get("id", len(self.scripts))] = content
            if t == "details" and self.details:
                self.details.pop()
            if t == tag:
                break

    def handle_data(self, data):
        if self.stack:
            self.stack[-1][2].append(data)


def _parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def test_the_page_is_valid_html_and_self_contained(default_run):
    text = (default_run / "report.html").read_text(encoding="utf-8")
    html5lib = pytest.importorskip("html5lib")
    parser = html5lib.HTMLParser(strict=True)
    parser.parse(text)  # raises on any parse error
    assert parser.errors == []
    # nothing fetched from elsewhere: no http(s) or protocol-relative src/href
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert "<img" in text and "data:image/png;base64," in text


def test_the_page_numbers_equal_summary_json(default_run):
    summary = json.loads((default_run / "summary.json").read_text())
    page = _parse(default_run / "report.html")
    rows = {r["attrs"]["data-run"]: r for r in page.rows
            if "data-run" in r["attrs"] and not r["details"]}
    assert sorted(rows) == sorted(r["dir"] for r in summary["runs"])
    checked = 0
    for run in summary["runs"]:
        cells = {a.get("data-key"): (a, text) for a, text in rows[run["dir"]]["cells"]}
        assert cells["label"][1] == run["label"]
        for key in ("rounds", "objective", "accuracy", "density", "bytes_total"):
            attrs, text = cells.get(key, ({}, None))
            if run.get(key) is None:
                assert key not in cells or "data-value" not in attrs
                continue
            assert float(attrs["data-value"]) == run[key]  # exact, as summary.json has it
            assert text.strip() == fmt(run[key])
            checked += 1
    assert checked >= 6 * 4
    # the claim and its verdict
    text = (default_run / "report.html").read_text(encoding="utf-8")
    for claim in summary["claims"]:
        assert claim["verdict"] in text
        assert claim["text"].replace("'", "&#x27;") in text


def test_every_round_of_every_run_is_in_the_page(default_run):
    summary = json.loads((default_run / "summary.json").read_text())
    page = _parse(default_run / "report.html")
    for run in summary["runs"]:
        records = [json.loads(line) for line in
                   (default_run / run["dir"] / "history.jsonl").read_text().splitlines()]
        table = [r for r in page.rows if r["details"].get("data-run") == run["dir"]]
        body = [r for r in table if r["cells"] and r["cells"][0][0].get("data-key")]
        assert len(body) == len(records)
        for row, record in zip(body, records, strict=True):
            values = {a["data-key"]: float(a["data-value"]) for a, _ in row["cells"]
                      if "data-value" in a}
            assert values["round"] == record["round"]
            assert values["objective"] == record["objective"]
        assert float(dict((a["data-key"], a["data-value"]) for a, _ in body[-1]["cells"]
                          if "data-value" in a)["objective"]) == run["objective"]
    # the curves the script draws hold the same numbers
    data = json.loads(page.scripts["fedsparse-data"])
    chart = next(c for c in data["charts"] if c["y"] == "objective" and c["x"] == "round")
    first = chart["series"][0]
    run = next(r for r in summary["runs"] if r["label"] == first["name"]
               and r["panel"] in chart["title"])
    assert first["points"][-1] == [run["rounds"], run["objective"]]


def test_a_seeds_run_shows_mean_and_spread(tmp_path):
    out = tmp_path / "seeds"
    (tmp_path / "tiny.toml").write_text(TINY)
    assert main(["run", str(tmp_path / "tiny.toml"), "--out", str(out), "--seeds", "3",
                 "--quiet"]) == 0
    assert main(["report", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    stats = summary["runs"][0]["seeds"]["final"]["objective"]
    text = (out / "report.html").read_text()
    assert "Seeds and spread" in text
    assert f'data-std="{stats["std"]!r}"' in text
    assert f"± {fmt(stats['std'])} (3)" in text
    assert "seeds 0, 1, 2" in text


def test_the_curves_shade_the_band_the_figures_draw(tmp_path):
    """With ``--band ci95`` the PNG figures shade the 95% interval of the mean; the page's
    curves, which say they show the same, shade it too (not ± std), and say which."""
    from scipy.stats import t

    (tmp_path / "tiny.toml").write_text(TINY)
    for band in ("std", "ci95"):
        out = tmp_path / band
        assert main(["run", str(tmp_path / "tiny.toml"), "--out", str(out), "--seeds", "3",
                     "--band", band, "--quiet"]) == 0
        assert main(["report", str(out)]) == 0
        page = _parse(out / "report.html")
        chart = json.loads(page.scripts["fedsparse-data"])["charts"][0]
        assert (chart["y"], chart["x"]) == ("objective", "round")
        records = [json.loads(line) for line in
                   (out / "fed-ht" / "history.jsonl").read_text().splitlines()]
        (series,) = chart["series"]
        assert len(series["band"]) == len(records)
        for (x, lo, hi), rec in zip(series["band"], records, strict=True):
            assert x == rec["round"] and rec["n_seeds"] == 3
            half = rec["objective_std"] * (1 if band == "std" else
                                           t.ppf(0.975, 2) / 3 ** 0.5)
            assert (hi - lo) / 2 == pytest.approx(half, rel=1e-9, abs=1e-15)
        text = (out / "report.html").read_text()
        assert ("95% confidence interval of the mean" in text) == (band == "ci95")
        assert ("mean ± one sample standard deviation" in text) == (band == "std")


def test_report_on_a_sweep_folder_and_on_a_folder_of_folders(tmp_path, capsys):
    (tmp_path / "tiny.toml").write_text(TINY)
    runs = tmp_path / "runs"
    assert main(["sweep", str(tmp_path / "tiny.toml"), "--grid",
                 "algorithm.step_size=[0.1, 0.01, 0.001]", "--out", str(runs / "sw")]) == 0
    assert main(["run", str(tmp_path / "tiny.toml"), "--out", str(runs / "one"),
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["report", str(runs)]) == 0
    assert capsys.readouterr().out.split() == ["wrote", str(runs / "one" / "report.html"),
                                               "wrote", str(runs / "sw" / "report.html")]
    best = json.loads((runs / "sw" / "best.json").read_text())
    page = _parse(runs / "sw" / "report.html")
    value = [a for r in page.rows for a, _ in r["cells"] if a.get("data-key") == "value"]
    assert [float(a["data-value"]) for a in value] == [best["Fed-HT"]["value"]]
    data = json.loads(page.scripts["fedsparse-data"])
    (chart,) = data["charts"]
    assert chart["logx"] and len(chart["series"][0]["points"]) == 3
    # a report folder stays fedsparse's: --force replaces it, the page of the old results
    # included
    assert main(["run", str(tmp_path / "tiny.toml"), "--out", str(runs / "one"), "--force",
                 "--quiet"]) == 0
    assert not (runs / "one" / "report.html").exists()
    assert "report.html" not in capsys.readouterr().out


def test_a_sweep_csv_edited_to_hold_a_number_no_float_holds_is_no_traceback(tmp_path, capsys):
    (tmp_path / "tiny.toml").write_text(TINY.replace("rounds = 3", "rounds = 1"))
    sw = tmp_path / "sw"
    assert main(["sweep", str(tmp_path / "tiny.toml"), "--grid",
                 "algorithm.step_size=[0.1, 0.01]", "--out", str(sw), "--quiet"]) == 0
    lines = (sw / "sweep.csv").read_text().splitlines()
    head, first = lines[0].split(","), lines[1].split(",")
    first[head.index("objective")] = "9" * 400  # was an OverflowError from math.isfinite
    (sw / "sweep.csv").write_text("\n".join([lines[0], ",".join(first), *lines[2:]]) + "\n")
    capsys.readouterr()
    assert main(["report", str(sw)]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert (sw / "report.html").is_file()


def test_report_embeds_no_file_from_outside_the_folder(tmp_path, capsys):
    """A page embeds its figures' bytes: a received folder's summary.json (or a link in
    it) naming a file elsewhere must not copy that file into the page one shares."""
    secret = tmp_path / "secret.txt"
    secret.write_text("PRIVATE-KEY-MATERIAL")
    (tmp_path / "tiny.toml").write_text(TINY.replace("rounds = 3", "rounds = 1"))
    run = tmp_path / "run"
    assert main(["run", str(tmp_path / "tiny.toml"), "--out", str(run), "--quiet"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    encoded = base64.b64encode(secret.read_bytes()).decode()
    for plots in (["../secret.txt"], [str(secret)], [7], "objective_vs_round.png"):
        (run / "summary.json").write_text(json.dumps({**summary, "plots": plots}))
        capsys.readouterr()
        assert main(["report", str(run)]) == 2
        err = capsys.readouterr().err
        assert "summary.json: plots" in err and "is invalid" in err and "Traceback" not in err
        assert not (run / "report.html").exists()
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "stolen.png").symlink_to(secret)
    for listed in (summary["plots"] + ["stolen.png"], []):  # named, or found by *.png
        (run / "summary.json").write_text(json.dumps({**summary, "plots": listed}))
        capsys.readouterr()
        assert main(["report", str(run)]) == 2
        assert "links to" in capsys.readouterr().err
        assert not (run / "report.html").exists()
    (run / "stolen.png").unlink()
    (run / "summary.json").write_text(json.dumps(summary))
    assert main(["report", str(run)]) == 0
    assert encoded not in (run / "report.html").read_text()


def test_a_run_whose_history_is_gone_is_named(default_run, tmp_path, capsys):
    # its curves and rounds were left out of the page without a word
    run = tmp_path / "run"
    shutil.copytree(default_run, run)
    gone = sorted(p.parent.name for p in run.glob("*/history.jsonl"))[0]
    (run / gone / "history.jsonl").unlink()
    (run / "report.html").unlink()
    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    err = capsys.readouterr().err
    assert "no history.jsonl for " in err and f"({gone}/)" in err
    text = (run / "report.html").read_text(encoding="utf-8")
    assert "Missing histories" in text and f"({gone}/)" in text


def test_report_refuses_a_folder_fedsparse_did_not_write(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("x")
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "DIR=" in err and "not a fedsparse run, sweep or tuning folder" in err
    assert main(["report", str(tmp_path / "missing")]) == 2


def test_report_on_a_run_that_did_not_finish_says_how_to_continue_it(tmp_path, capsys):
    from fedsparse.experiments.output import FAILED, failed_text

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text("rounds = 3\n")
    (run / FAILED).write_text(failed_text(
        "interrupted", resume_command=f"fedsparse run tiny.toml --out {run} --resume",
        rerun_command=None))
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "holds a run that did not finish" in err and "interrupted" in err
    assert f"fedsparse run tiny.toml --out {run} --resume" in err
    assert not (run / "report.html").exists()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (apt-get install chromium)")
def test_the_page_renders_its_charts_in_a_headless_browser(default_run, tmp_path):
    page = default_run / "report.html"
    data = json.loads(_parse(page).scripts["fedsparse-data"])
    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                          "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert f'data-charts="{len(data["charts"])}"' in dom  # the script ran to its end
    drawn = re.findall(r'<path[^>]*class="series"[^>]*data-name="([^"]*)"', dom)
    assert len(drawn) == sum(len(c["series"]) for c in data["charts"])
    assert dom.count('data-ready="1"') == len(data["charts"])
    shot = tmp_path / "page.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile2'}",
                    "--window-size=1280,2400", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.stat().st_size > 50_000  # a page with figures, not a blank one


def test_a_file_of_another_shape_is_named_not_only_its_folder(tmp_path, capsys):
    """A hand-edited summary.json, config.toml, best.json or sweep.csv: the error names
    the file (and the line of a CSV row), where it named the folder of several files."""
    (tmp_path / "tiny.toml").write_text(TINY.replace("rounds = 3", "rounds = 1"))
    run, sw = tmp_path / "run", tmp_path / "sw"
    assert main(["run", str(tmp_path / "tiny.toml"), "--out", str(run), "--quiet"]) == 0
    assert main(["sweep", str(tmp_path / "tiny.toml"), "--grid",
                 "algorithm.step_size=[0.1, 0.01]", "--out", str(sw), "--quiet"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    config = (run / "config.toml").read_text()
    lines = (sw / "sweep.csv").read_text().splitlines()
    cases = [
        (run / "summary.json", json.dumps({**summary, "claims": ["holds"]}), ""),
        (run / "summary.json", json.dumps({**summary, "comparisons": "none"}), ""),
        (run / "config.toml", config + "\n[plot]\nx = 5\n" if "[plot]" not in config
         else config.replace("[plot]", "[plot]\nx = 5\n[unused]", 1), ""),
        (sw / "best.json", json.dumps({"Fed-HT": 5}), ""),
        (sw / "sweep.csv", "\n".join([*lines[:2], lines[2] + ",7", *lines[3:]]) + "\n",
         ", line 3"),
        (sw / "sweep.csv", "\n".join([lines[0], lines[1].rsplit(",", 1)[0], *lines[2:]])
         + "\n", ", line 2"),
    ]
    for path, text, line in cases:
        before = path.read_text()
        path.write_text(text)
        capsys.readouterr()
        assert main(["report", str(path.parent)]) == 2
        err = capsys.readouterr().err
        assert f"error: {path}{line}: " in err and "Traceback" not in err, (path.name, err)
        assert not (path.parent / "report.html").exists()
        path.write_text(before)
    assert main(["report", str(run)]) == 0 and main(["report", str(sw)]) == 0
