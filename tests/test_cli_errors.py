"""Bad command lines and configs: each is a clear error naming the key, exit code 2, no
traceback; and a property test of the ``--set`` value parser."""

import importlib.util
import math
from pathlib import Path

import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsparse.cli import _assignment, _parse_value

#: (case, edit of the TOML text, extra arguments, substrings the error must contain)
CONFIG_CASES = [
    ("typo in a table name", ("[defaults]\n", "[defualts]\n"), [],
     ["[defualts]", "did you mean 'defaults'"]),
    ("unknown top-level key", ("title =", "foo = 1\ntitle ="), [], ["'foo'", "allowed"]),
    # named in [defaults], where it was written, not in the first run it reaches
    ("misspelt key in [defaults]", ("rounds =", "roundz ="), [],
     ["[defaults] has an unknown key 'roundz'", "did you mean 'rounds'"]),
    ("[flower] beside [[runs]]", None, ["+[flower]\nround_timeout = 5\n"],
     ["[flower]", "[defaults.flower]"]),
    ("unknown [plot] key", None, ['+[plot]\ny = ["objective"]\nlogx = true\n'],
     ["'logx'", "did you mean 'logy'"]),
    ("[plot] y not a list", None, ['+[plot]\ny = "objective"\n'], ["plot.y", "list"]),
    ("[plot] unknown band", None, ['+[plot]\nband = "sem"\n'], ["plot.band", "ci95"]),
    ("misspelt plot metric", None, ['+[plot]\ny = ["objectve"]\n'],
     ["objectve", "did you mean 'objective'"]),
    ("plot metric no run records", None, ['+[plot]\ny = ["test_accuracy"]\n'],
     ["test_accuracy", "no run records it"]),
    ("personal metric of a global-model algorithm", None,
     ['+[plot]\ny = ["personal_objective"]\n'], ["personal_objective", "no run records it"]),
    ("unknown [compare] key", ("at_rounds = [2]", 'at_rounds = [2]\nmetrc = "objective"'), [],
     ["'metrc'", "did you mean 'metric'"]),
    ("misspelt compare metric", ("at_rounds = [2]", 'at_rounds = [2]\nmetric = "acuracy"'), [],
     ["compare.metric", "accuracy"]),
    ("compare metric the reference does not record",
     ("at_rounds = [2]", 'at_rounds = [2]\nmetric = "test_objective"'), [],
     ["compare.metric", "does not record"]),
    ("compare reference not a label", ('reference = "Fed-HT"', 'reference = "FedHT"'), [],
     ["compare.reference", "did you mean 'Fed-HT'"]),
    ("compare at_rounds not integers", ("at_rounds = [2]", 'at_rounds = ["2"]'), [],
     ["compare.at_rounds[0]"]),
    ("misspelt algorithm argument", ("step_size = 0.01", "stepsize = 0.01"), [],
     ["stepsize", "did you mean 'step_size'", "sparsity, step_size"]),
    ("misspelt data argument", ("dim = 30", "dimm = 30"), [], ["dimm", "did you mean 'dim'"]),
    ("problem argument it does not take",
     ('problem = { kind = "least_squares" }', 'problem = { kind = "least_squares", l2 = 1 }'),
     [], ["'l2'", "(none)"]),
    ("misspelt algorithm kind", ('kind = "fed_ht"', 'kind = "fedht"'), [],
     ["algorithm.kind", "did you mean 'fed_ht'"]),
    ("data set as the run's dtype", ("dim = 30", 'dim = 30\ndtype = "float64"'), [],
     ["data.dtype is set by the run"]),
    ("unknown run key", ('label = "Fed-HT"', 'label = "Fed-HT"\nround = 4'), [],
     ["'round'", "did you mean 'rounds'"]),
    ("label not a string", ('label = "Fed-HT"', "label = 5"), [], ["label=5"]),
    ("rounds a string", ("rounds = 2", 'rounds = "2"'), [], ["rounds='2'", "integer"]),
    ("problem a string, not a table",
     ('problem = { kind = "least_squares" }', 'problem = "least_squares"'), [],
     ["problem", "table"]),
    ("runs not an array of tables", None, ["=title = 'x'\nruns = 3\n"], ["runs=3"]),
    ("bad [runs.flower] key", ('label = "Fed-HT"', 'label = "Fed-HT"\nflower = { wait = 1 }'),
     [], ["'wait'", "wait_timeout"]),
    ("missing data file", ('kind = "shifted_gaussian"',
                           'kind = "libsvm_file"\npath = "nofile.svm"'), [],
     ["nofile.svm", "--set data.path="]),
]

#: (case, arguments after `run TINY`, substrings)
SET_CASES = [
    ("--set on a table", ["--set", "algorithm=3"], ["algorithm=3", "is a table"]),
    ("--set on a table (channel)", ["--set", "channel=bernoulli"], ["channel", "table"]),
    ("--set rounds=abc", ["--set", "rounds=abc"], ["--set rounds=abc is invalid", "integer"]),
    ("--set rounds=2.5", ["--set", "rounds=2.5"], ["rounds=2.5", "integer"]),
    ("--set seed=[1, 2]", ["--set", "seed=[1, 2]"], ["seed=[1, 2]"]),
    ("--set label=7", ["--set", "label=7"], ["label=7", "string"]),
    ("--set dtype=float16", ["--set", "dtype=float16"], ["--set dtype=float16 is", "float32"]),
    ("--set under a scalar", ["--set", "algorithm.kind.x=1"], ["algorithm.kind", "not a table"]),
    ("--set misspelt field", ["--set", "algorithm.stepsize=0.1"], ["did you mean 'step_size'"]),
    ("--set unknown run field", ["--set", "stepsize=0.1"], ["'stepsize'", "allowed"]),
    ("--set wrong value type", ["--set", "algorithm.step_size=fast"],
     ["--set algorithm.step_size=fast"]),
    ("--set data.num_clients=two", ["--set", "data.num_clients=two"],
     ["--set data.num_clients=two"]),
    ("--set clients_per_round too large", ["--set", "clients_per_round=99"],
     ["clients_per_round=99", "at most"]),
    ("--set LABEL: unknown label", ["--set", "FedIterHT:algorithm.step_size=1"],
     ["FedIterHT", "did you mean 'FedIter-HT'"]),
    ("--only unknown label", ["--only", "FedIterHT"], ["--only", "did you mean 'FedIter-HT'"]),
    ("--set without FIELD", ["--set", "=3"], ["no FIELD"]),
    ("--set without =", ["--set", "rounds"], ["FIELD=VALUE"]),
    ("--quick on a TOML experiment", ["--quick"], ["no quick form", "--rounds"]),
    ("--resume with --force", ["--resume", "--force"], ["exclude each other"]),
    ("--rounds 0", ["--rounds", "0"], ["rounds=0"]),
    ("--band without --seeds", ["--band", "ci95"], ["--band ci95", "--seeds"]),
    ("--band unknown", ["--seeds", "2", "--band", "sem"], ["--band", "invalid choice"]),
]


@pytest.fixture
def tiny(tmp_path, tiny_toml):
    path = tmp_path / "tiny.toml"
    path.write_text(tiny_toml(compare=True))
    return path


@pytest.mark.parametrize("case,edit,extra,expected", CONFIG_CASES,
                         ids=[c[0] for c in CONFIG_CASES])
def test_config_errors(tiny, tmp_path, case, edit, extra, expected, cli):
    text = tiny.read_text()
    if edit is not None:
        assert edit[0] in text
        text = text.replace(edit[0], edit[1], 1)
    for e in extra:
        text = text + e[1:] if e[0] == "+" else e[1:]
    path = tmp_path / "bad.toml"
    path.write_text(text)
    out = tmp_path / "out"
    cli.refused(["run", str(path), "--out", str(out), "--quiet"], *expected)
    assert not out.exists()  # a refused config leaves no folder behind


@pytest.mark.parametrize("case,args,expected", SET_CASES, ids=[c[0] for c in SET_CASES])
def test_command_line_errors(tiny, tmp_path, case, args, expected, cli):
    out = tmp_path / "out"
    cli.refused(["run", str(tiny), "--out", str(out), "--quiet", *args], *expected)
    assert not out.exists()


def test_out_errors(tiny, tmp_path, cli):
    afile = tmp_path / "afile"
    afile.write_text("x")
    cli.refused(["run", str(tiny), "--out", str(afile)], *["--out", "is a file"])
    cli.refused(["run", str(tiny), "--out", str(afile / "sub")], *["--out", "is a file"])
    cli.refused(["sweep", str(tiny), "--grid", "seed=[0, 1]", "--out", str(afile)], *["is a file"])
    for command in (["run", str(tiny)], ["sweep", str(tiny), "--grid", "seed=[0, 1]"],
                    ["data", "write", "digits"], ["flower", "app", str(tiny)]):
        # an empty --out is no folder (not the current one, nor the default)
        cli.refused([*command, "--out", " "], "argument --out: expected a folder, got ' '")
    if Path("/proc").is_dir():
        cli.refused(["run", str(tiny), "--out", "/proc/fedsparse-cannot"], *["cannot be written"])
    full = tmp_path / "full"
    full.mkdir()
    (full / "summary.json").write_text("{}")
    # files that are not a fedsparse run: --resume and --force would be refused, so the
    # first refusal does not offer them
    cli.refused(["run", str(tiny), "--out", str(full)], *["fedsparse did not write",
                                                          "--resume and --force do not apply"])
    cli.refused(["run", str(tiny), "--out", str(tmp_path)], *["fedsparse did not write"])
    cli.run(["run", str(tiny), "--out", str(tmp_path / "run")])
    cli.refused(["run", str(tiny), "--out", str(tmp_path / "run")],
                *["already holds results", "--resume", "--force"])


def test_experiment_and_command_errors(tiny, tmp_path, cli):
    cli.refused(["run", "fedht-fig33", "--out", str(tmp_path / "a")],
           *["'fedht-fig33'", "Did you mean 'fedht-fig3'", "fedsparse list"])
    cli.refused(["show", "fedht-fig33"], *["Did you mean 'fedht-fig3'"])
    cli.refused(["run", str(tmp_path / "missing.toml")], *["does not exist"])
    cli.refused(["run", str(tmp_path), "--out", str(tmp_path / "b")], *["not a file"])
    cli.refused(["sweep", str(tiny)], *["--grid"])
    # what a Python experiment cannot take (it takes --rounds, --seeds, --resume, --quick)
    for opt in (["--set", "rounds=3"], ["--only", "x"], ["--seeds", "2", "--band", "ci95"]):
        cli.refused(["run", "fig6-mnist5k", "--out", str(tmp_path / "c"), *opt],
               *["Python experiment", opt[-2], "fedht-fig6-mnist5k"])
    assert not (tmp_path / "c").exists()


@pytest.mark.skipif(importlib.util.find_spec("flwr") is None, reason="needs flwr")
def test_flower_app_refuses_what_it_would_drop(tiny, tmp_path, cli):
    from fedsparse.experiments.registry import toml_experiments

    out = str(tmp_path / "app")
    # several runs: which one?
    err = cli.refused(["flower", "app", str(tiny), "--out", out], *["--run", "0 'Fed-HT'"])
    assert "1 'FedIter-HT'" in err
    # a label that two panels share
    fig3 = str(toml_experiments()["fedht-fig3"])
    cli.refused(["flower", "app", fig3, "--run", "FedIter-HT", "--out", out],
           *["ambiguous", "Simulation I (regression)/FedIter-HT"])
    cli.refused(["flower", "app", fig3, "--run", "FedIterHT", "--out", out],
           *["did you mean", "FedIter-HT"])
    # a top-level [flower] table beside [[runs]] would be dropped
    with_flower = tmp_path / "flower.toml"
    with_flower.write_text(tiny.read_text() + "[flower]\nround_timeout = 5\n")
    cli.refused(["flower", "app", str(with_flower), "--run", "Fed-HT", "--out", out],
           *["[flower]", "[defaults.flower]"])
    typo = tmp_path / "typo.toml"
    typo.write_text(tiny.read_text().replace("[defaults]\n", "[defualts]\n"))
    cli.refused(["flower", "app", str(typo), "--run", "0", "--out", out], *["did you mean"])
    assert not Path(out).exists()
    # an unambiguous panel/label works
    code, _, err = cli.run(["flower", "app", fig3, "--run",
                            "Simulation I (regression)/FedIter-HT", "--out", out])
    assert code == 0, err


# ---------------------------------------------------------------------------------------
# The --set value parser.

def _toml(value) -> str:
    """How a user writes ``value`` on the command line (TOML, tables inline)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return tomli_w.dumps({"v": value})[len("v = "):].strip()


scalars = (st.integers(min_value=-2**63, max_value=2**63 - 1)
           | st.floats(allow_nan=False, allow_infinity=False)
           | st.booleans()
           | st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=20))
values = scalars | st.lists(st.integers(-1000, 1000), max_size=5) \
    | st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True),
                      st.integers(-10, 10) | st.booleans(), max_size=3)


@settings(max_examples=300, deadline=None)
@given(values)
def test_set_values_round_trip_through_their_toml_spelling(value):
    parsed = _parse_value(_toml(value))
    assert type(parsed) is type(value)
    assert parsed == value or (isinstance(value, float) and math.isclose(parsed, value))


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_set_parser_never_raises_and_returns_a_toml_type(text):
    parsed = _parse_value(text)
    assert isinstance(parsed, bool | int | float | str | list | dict)


@settings(max_examples=300, deadline=None)
@given(st.from_regex(r"[A-Za-z_/~][A-Za-z0-9_./~-]{0,30}", fullmatch=True))
def test_bare_words_are_strings(word):
    if word in ("true", "false", "True", "False", "inf", "nan"):
        return
    assert _parse_value(word) == word


@settings(max_examples=200, deadline=None)
@given(st.from_regex(r"[a-z_]{1,10}(\.[a-z_]{1,10}){0,2}", fullmatch=True), values)
def test_assignment_splits_field_and_value(field, value):
    key, parsed = _assignment(f"{field}={_toml(value)}")
    assert key == field
    assert parsed == value or (isinstance(value, float) and math.isclose(parsed, value))


@pytest.mark.parametrize("text,expected", [
    ("0.01", 0.01), ("1e-3", 1e-3), (".5", 0.5), ("1.", 1.0), ("3", 3), ("True", True),
    ("true", True), ("auto", "auto"), ("/data/E2006.train", "/data/E2006.train"),
    ('"3"', "3"), ("[0.1, 1]", [0.1, 1.0]), ("2024-01-01", "2024-01-01"),
    ("1\nseed = 2", "1\nseed = 2"), ('{kind = "bernoulli", probability = 0.5}',
                                     {"kind": "bernoulli", "probability": 0.5}),
])
def test_set_values(text, expected):
    assert _parse_value(text) == expected
