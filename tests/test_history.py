"""History from Python: pandas, plots, best/final values, files, fs.load_run."""

import json
import math
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import fedsparse as fs  # noqa: E402
from fedsparse import ConfigError  # noqa: E402
from fedsparse.cli import main  # noqa: E402
from fedsparse.history import History, higher_is_better  # noqa: E402

CONFIG = """
title = "tiny"
[defaults]
rounds = 3
problem = { kind = "least_squares" }
algorithm = { kind = "fed_iter_ht", sparsity = 3, local_steps = 2, step_size = 0.05 }
[defaults.data]
kind = "shifted_gaussian"
num_clients = 4
samples_per_client = 20
dim = 30
sparsity = 3
alpha = 0.0
exponent = 0.0
[[runs]]
label = "FedIter-HT"
[[runs]]
label = "too big a step"
algorithm = { step_size = 5000.0 }
"""


def _history():
    records = [{"round": t, "objective": v, "support_f1": f, "bytes_total": 100 * t,
                "delivered_clients": [0, 1]}
               for t, v, f in [(1, 0.5, 0.2), (2, 0.3, 0.6), (3, 0.4, 0.4)]]
    return History(records=records, initial={"round": 0, "objective": 1.0, "support_f1": 0.0,
                                             "bytes_total": 0})


def test_to_pandas_one_row_per_round():
    df = _history().to_pandas()
    assert list(df["round"]) == [0, 1, 2, 3]
    assert list(df["objective"]) == [1.0, 0.5, 0.3, 0.4]
    assert list(_history().to_pandas(with_initial=False)["round"]) == [1, 2, 3]


def test_to_pandas_without_pandas_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas -> ImportError
    with pytest.raises(ImportError, match="pip install pandas"):
        _history().to_pandas()


def test_plot_draws_on_given_axes_and_refuses_unrecorded_metrics():
    fig, ax = plt.subplots()
    assert _history().plot("objective", x="bytes_total", ax=ax, label="run") is ax
    (line,) = ax.get_lines()
    assert list(line.get_ydata()) == [1.0, 0.5, 0.3, 0.4]
    assert ax.get_xlabel().startswith("cumulative bytes")
    with pytest.raises(ConfigError, match="accuracy.*it records round, objective"):
        _history().plot("accuracy", ax=ax)
    with pytest.raises(ConfigError, match="x='bytes'.*it records round, objective"):
        _history().plot("objective", x="bytes", ax=ax)
    with pytest.raises(ConfigError, match=r"'objectve'.* \(did you mean 'objective'\?\)"):
        _history().plot("objectve", ax=ax)
    with pytest.raises(ConfigError, match=r"y='support_f1'.*plot\(metric='support_f1'"):
        _history().plot(y="support_f1", ax=ax)
    with pytest.raises(ConfigError, match="ax=3 is invalid: must be a matplotlib Axes"):
        _history().plot(ax=3)
    with pytest.raises(ConfigError, match="logy='x'"):
        _history().plot(ax=ax, logy="x")
    assert len(ax.get_lines()) == 1  # nothing drawn by the refused calls
    plt.close(fig)


def test_best_follows_the_metric_direction():
    h = _history()
    assert higher_is_better("test_accuracy") and higher_is_better("support_f1")
    assert not higher_is_better("objective") and not higher_is_better("rel_error")
    assert h.best("objective") == 0.3 and h.best("support_f1") == 0.6
    assert h.best("objective", maximize=True) == 1.0
    with pytest.raises(ConfigError, match="maximize='no' is invalid: must be True or False"):
        h.best("objective", maximize="no")  # truthy: it took the largest objective
    assert h.final("objective") == 0.4 and h.final("accuracy") is None
    assert h.recorded() == ["round", "objective", "support_f1", "bytes_total"]


def test_a_misspelt_field_is_refused_and_an_unrecorded_metric_reads_none():
    h = _history()
    assert h.column("accuracy") == [None] * len(h.records) and h.best("accuracy") is None
    for call, parameter in ((h.column, "name"), (h.best, "metric"), (h.final, "metric")):
        with pytest.raises(ConfigError, match=rf"{parameter}='objectiv'.*did you mean "
                                              r"'objective'\?.*hold: round, objective"):
            call("objectiv")


def test_non_finite_values_survive_a_save_and_load(tmp_path):
    h = _history()
    h.records[-1]["objective"] = math.inf
    h.save(tmp_path)
    for line in (tmp_path / "history.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-strict {c}"))
    back = History.load(tmp_path)
    assert back.records[-1]["objective"] == math.inf and back.initial["objective"] == 1.0


def test_save_never_replaces_a_saved_history_unless_told(tmp_path):
    _history().save(tmp_path / "run")
    before = (tmp_path / "run" / "history.jsonl").read_bytes()
    other = History(records=[{"round": 1, "objective": 9.0}], initial={"round": 0})
    with pytest.raises(ConfigError, match="already holds a saved history; give "
                                          "overwrite=True"):
        other.save(tmp_path / "run")
    assert (tmp_path / "run" / "history.jsonl").read_bytes() == before
    other.save(tmp_path / "run", overwrite=True)
    assert History.load(tmp_path / "run").records == other.records


def test_save_onto_a_file_is_refused_and_keeps_it(tmp_path):
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(ConfigError, match="directory=.*afile.* is a file: a history is saved "
                                          "as a folder"):
        _history().save(tmp_path / "afile", overwrite=True)
    with pytest.raises(ConfigError, match="directory=.*cannot be created: Not a directory"):
        _history().save(tmp_path / "afile" / "run")
    assert (tmp_path / "afile").read_text() == "mine"


def test_a_damaged_or_missing_history_is_named_not_a_traceback(tmp_path):
    _history().save(tmp_path / "run")
    with pytest.raises(ConfigError, match="directory=.*must be a folder holding a history"):
        History.load(tmp_path / "run" / "history.csv")
    lines = (tmp_path / "run" / "history.jsonl").read_text().splitlines()
    (tmp_path / "run" / "history.jsonl").write_text("\n".join([lines[0], "nope", *lines[1:]]))
    with pytest.raises(ConfigError, match=r"history\.jsonl, line 2: not valid JSON"):
        fs.load_run(tmp_path / "run")
    (tmp_path / "run" / "history.jsonl").write_text("\n".join([lines[0], "[1]"]))
    with pytest.raises(ConfigError, match="line 2: a round record must be a JSON object"):
        History.load(tmp_path / "run")
    (tmp_path / "run" / "history.jsonl").write_text("\n".join(lines))
    (tmp_path / "run" / "model.npy").write_bytes(b"not an array")
    with pytest.raises(ConfigError, match=r"model\.npy: not a NumPy array file"):
        History.load(tmp_path / "run")
    _history().save(tmp_path / "run2")
    (tmp_path / "run2" / "config.json").write_text('["seed", 0]')
    with pytest.raises(ConfigError, match=r"config\.json: holds a JSON list"):
        History.load(tmp_path / "run2")


def _two_runs(tmp_path) -> tuple:
    """A run folder ``a/`` (two rounds, 3 entries) beside another one ``b/`` (5 entries)."""
    for name, size in (("a", 3), ("b", 5)):
        History(records=[{"round": 1, "objective": 0.5}], initial={"round": 0},
                model=torch.zeros(size)).save(tmp_path / name / "run")
        (tmp_path / name / "summary.json").write_text(json.dumps(
            {"runs": [{"label": "mine", "panel": "", "dir": "run"}]}))
    return tmp_path / "a", tmp_path / "b"


@pytest.mark.parametrize("folder", ["ABSOLUTE", "../b/run", "run/../../b/run", "", 7])
def test_load_run_and_report_read_no_run_outside_the_folder(tmp_path, folder):
    a, b = _two_runs(tmp_path)
    assert tuple(fs.load_run(a)["mine"].model.shape) == (3,)
    folder = str(b / "run") if folder == "ABSOLUTE" else folder
    (a / "summary.json").write_text(json.dumps(
        {"runs": [{"label": "mine", "panel": "", "dir": folder}]}))
    expected = rf"summary\.json: runs\[0\]\.dir={re.escape(repr(folder))} is invalid: must " \
        "be the name of a folder inside"
    with pytest.raises(ConfigError, match=expected):
        fs.load_run(a)
    assert main(["report", str(a)]) == 2
    assert not (a / "report.html").exists()


def test_load_run_names_a_damaged_summary(tmp_path):
    a, _ = _two_runs(tmp_path)
    for text, message in [('{"runs": [', "summary.json: not valid JSON"),
                          ("[1, 2]", "summary.json: holds a JSON list"),
                          ('{"runs": [{"dir": "run", "label": 1}]}', r"runs\[0\]\.label=1"),
                          ('{"runs": [{"dir": "run", "label": "x", "seeds": {"seeds": ["0"]}}]}',
                           "seeds are a list of whole numbers"),
                          # a TypeError from {**params}, a KeyError from row['panel']
                          ('{"runs": [{"dir": "run", "label": "x", "params": [1]}]}',
                           r"runs\[0\]\.params=<list> is invalid: must be an object"),
                          ('{"runs": [{"dir": "run", "label": "x", "panel": 3}]}',
                           r"runs\[0\]\.panel=3 is invalid: must be a string"),
                          # one of the two was silently left out of load_run's dict
                          ('{"runs": [{"dir": "run", "label": "x"}, {"dir": "run", "label": '
                           '"x"}]}', r"runs\[1\] is invalid: it shares panel and label \('', "
                           r"'x'\) with runs\[0\]")]:
        (a / "summary.json").write_text(text)
        with pytest.raises(ConfigError, match=message):
            fs.load_run(a)


def test_load_run_reads_the_run_folders_of_a_summary_that_lists_none(tmp_path):
    # a Python experiment's summary.json is its own table: its rows name no folder
    a, _ = _two_runs(tmp_path)
    (a / "summary.json").write_text(json.dumps({"runs": [{"label": "beta 1", "best": 0.8}]}))
    assert list(fs.load_run(a)) == ["run"]
    for table in ({"table": [1, 2]}, {"runs": {"0": {"seconds": 1.5}}}):  # scale-million's
        (a / "summary.json").write_text(json.dumps(table))
        assert list(fs.load_run(a)) == ["run"]
        assert main(["report", str(a)]) == 0


@pytest.mark.parametrize("edit,message", [
    (lambda rows: rows[1].update(round="two"), "line 2: round='two' is invalid"),
    (lambda rows: rows[1].update(round=True), "line 2: round=True is invalid"),
    (lambda rows: rows[2].update(round=1), "line 3: round=1 follows round 1"),
    (lambda rows: rows[0].update(objective="hello"), "line 1: objective='hello' is invalid"),
    (lambda rows: rows[1].update(bytes_total=-5), "line 2: bytes_total=-5 is invalid: must "
     "not be negative"),
    (lambda rows: rows[3].update(support_f1=1.5), "line 4: support_f1=1.5 is invalid: must be "
     "a fraction"),
    (lambda rows: rows[3].update(objective=[1, 2]), "line 4: objective=<list> is invalid"),
    # an integer no float holds: the report's plots and means would raise OverflowError
    (lambda rows: rows[0].update(objective=10**400), "line 1: objective=<an int of 1329 bits> "
     "is invalid: must be a float or an integer from -2**63 to 2**63 - 1"),
    (lambda rows: rows[1].update(bytes_total=2**64), "line 2: bytes_total=18446744073709551616 "
     "is invalid: must be a float or an integer"),
    (lambda rows: rows[1].update(round=2**63), "line 2: round=9223372036854775808 is invalid: "
     "must be at most 2**63 - 1"),
])
def test_records_unlike_fedsparse_s_are_refused_naming_the_line(tmp_path, edit, message):
    _history().save(tmp_path / "run")
    path = tmp_path / "run" / "history.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    edit(rows)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ConfigError, match=re.escape(message)):
        fs.load_run(tmp_path / "run")
    assert main(["report", str(tmp_path / "run")]) == 2


def test_an_accuracy_a_hair_above_one_from_rounding_is_read_back(tmp_path):
    # 13 examples weighted 1/13 each, all classified right: the sum rounds above 1
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(13, 4, generator=gen, dtype=torch.float64)
    truth = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64)
    data = fs.data.from_arrays([X], [(X @ truth > 0).double()], dtype=torch.float64)
    problem = fs.problems.logistic()
    accuracy = fs.metrics.evaluate(problem, data, 10 * truth)["accuracy"]
    assert accuracy >= 1.0  # 1.0000000000000002 with torch 2.13
    h = History(records=[{"round": 1, "accuracy": accuracy},
                         {"round": 2, "accuracy": 1.0000001192092896}],  # float32's
                initial={"round": 0, "accuracy": 0.5})
    h.save(tmp_path / "run")
    assert History.load(tmp_path / "run").records == h.records
    h.records[1]["accuracy"] = 95.0  # a percentage is no fraction
    h.save(tmp_path / "run2")
    with pytest.raises(ConfigError, match="accuracy=95.0 is invalid: must be a fraction"):
        History.load(tmp_path / "run2")


def test_a_history_that_is_not_text_is_named(tmp_path):
    _history().save(tmp_path / "run")
    (tmp_path / "run" / "history.jsonl").write_bytes(b"\xff\xfe garbage\n")
    with pytest.raises(ConfigError, match="history.jsonl: not a text file of JSON lines"):
        fs.load_run(tmp_path / "run")


def test_load_run_reads_a_cli_folder(tmp_path, capsys):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(CONFIG)
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    # a run stopped by a non-finite model is said as a command line says it, not as a
    # Python warning (a source path and line)
    capsys.readouterr()
    assert main(["run", str(cfg), "--out", str(tmp_path / "nan"), "--quiet", "--set",
                 "too big a step:algorithm.step_size=1e308"]) == 0
    err = capsys.readouterr().err
    assert "fedsparse: warning: too-big-a-step: round 1: the model became non-finite" in err
    assert "model.npy" in err and "RuntimeWarning" not in err and ".py:" not in err
    runs = fs.load_run(out)
    assert list(runs) == ["FedIter-HT", "too big a step"]
    h = runs["FedIter-HT"]
    assert len(h) == 3 and h.model is not None
    assert h.config["algorithm"]["step_size"] == 0.05 and h.config["rounds"] == 3
    assert h.config["diverged"] is False
    summary = json.loads((out / "summary.json").read_text())
    row = next(r for r in summary["runs"] if r["label"] == "FedIter-HT")
    assert row["objective"] == h.records[-1]["objective"]
    assert row["params"]["data"]["kind"] == "shifted_gaussian"
    # the diverged run: its value is null, marked with the round it diverged at
    bad = next(r for r in summary["runs"] if r["label"] == "too big a step")
    assert bad["diverged"] is True and bad["objective"] is None
    assert bad["diverged_round"] == runs["too big a step"].config["diverged_round"] >= 1
    with pytest.raises(ConfigError, match="not a fedsparse run folder"):
        fs.load_run(tmp_path)  # holds only the TOML and the run folder's parent


def test_personal_models_and_the_config_survive_a_save_and_load(tmp_path):
    personal = torch.arange(12.0).reshape(3, 4)
    h = History(records=[{"round": 1, "objective": 1.0}], initial={"round": 0},
                model=torch.zeros(4), personal_models=personal,
                config={"algorithm": "fedmac(...)", "seed": 3,
                        "refused_nodes": {17: "sent 2 uploads"}, "odd": torch.float32})
    h.save(tmp_path)
    back = History.load(tmp_path)
    assert torch.equal(back.personal_models, personal)
    # JSON keys are strings; a value JSON cannot hold is kept as its repr
    assert back.config == {"algorithm": "fedmac(...)", "seed": 3,
                           "refused_nodes": {"17": "sent 2 uploads"}, "odd": "torch.float32"}
    History(records=[{"round": 1}], initial={"round": 0}).save(tmp_path / "plain")
    assert not (tmp_path / "plain" / "personal_models.npy").exists()
    assert History.load(tmp_path / "plain").personal_models is None
