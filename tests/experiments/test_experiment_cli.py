"""The FedMac experiments from the command line: --rounds and --seeds between --quick and
the paper's 800 rounds, --resume after an interruption, the GM/PM table whichever way a
Table 1 row is started, and ``show`` without Tong et al. 2022's f*."""

from __future__ import annotations

import json

from fedsparse.cli import main
from fedsparse.experiments import fedmac_runs
from fedsparse.experiments import runner as R

TIMING = {"seconds", "elapsed", "wall_clock_s", "fedsparse_version"}


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def test_table1_takes_rounds_seeds_and_resumes_from_the_cli(tmp_path, capsys, monkeypatch):
    args = ["run", "fedmac-table1-synthetic", "--quick", "--rounds", "3", "--seeds", "2"]
    assert main([*args, "--out", str(tmp_path / "whole")]) == 0
    printed = capsys.readouterr().out
    assert "T = 3" in printed and "2 seed(s)" in printed
    assert any(line.startswith("FedMac") and "PM" in line for line in printed.splitlines())
    whole = json.loads((tmp_path / "whole" / "summary.json").read_text())
    assert whole["rounds"] == 3 and whole["seeds"] == 2 and whole["device"] == "cpu"

    # Ctrl-C in the second seed: the command to continue is printed and works
    monkeypatch.setattr(fedmac_runs, "CHECKPOINT_EVERY", 2)
    original, done = R.simulate, [0]

    def interrupted(*a, **kw):
        inner = kw.get("callback")

        def callback(record, state):
            if inner is not None:
                inner(record, state)
            done[0] += 1
            if done[0] == 6 * 3 + 2:
                raise KeyboardInterrupt

        return original(*a, **{**kw, "callback": callback})

    monkeypatch.setattr(R, "simulate", interrupted)
    cut = tmp_path / "cut"
    assert main([*args, "--out", str(cut)]) == 130
    assert "--resume" in capsys.readouterr().err
    monkeypatch.setattr(R, "simulate", original)
    assert main([*args, "--out", str(cut), "--resume"]) == 0
    resumed = json.loads((cut / "summary.json").read_text())
    assert _strip(resumed) == _strip(whole)


def test_toml_variant_of_a_table1_row_prints_the_table(tmp_path, capsys):
    assert main(["run", "fedmac-table1-synthetic-runs", "--rounds", "1", "--set",
                 "data.size_scale=1", "--out", str(tmp_path), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "Liu et al. 2023, Table 1, Synthetic" in printed
    assert "by client size here" in printed


def test_show_fedmac_has_no_fstar(capsys):
    for name in ("fedmac-table1-fmnist", "fedmac-fig3"):
        assert main(["show", name]) == 0
        header = capsys.readouterr().out.split("\n[")[0]
        assert "f*" not in header and "--rounds N" in header, name
    assert main(["show", "fig6-mnist5k"]) == 0
    assert "f*" in capsys.readouterr().out  # Tong et al. 2022's Figure 6 has one
