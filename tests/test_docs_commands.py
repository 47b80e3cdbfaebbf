"""The commands and examples that README.md and docs/ show still work as written.

Every ``fedsparse ...`` command in a code block or inline code span is parsed by the real
command-line parser (an option renamed or removed fails here, not in a reader's shell),
the experiment it names must exist, and the ``--set``/``--grid`` fields it gives a TOML
experiment must be accepted by that experiment's config. README's Python examples run
as written, for fewer rounds: the first must recover its signal.
"""
import re
import shlex
from pathlib import Path

import pytest

from fedsparse.cli import build_parser
from fedsparse.cli_common import leaf_parser
from fedsparse.cli_run import _apply_overrides
from fedsparse.data import GENERATORS
from fedsparse.experiments.builders import (
    build_algorithm,
    build_channel,
    build_problem,
    builder_arguments,
)
from fedsparse.experiments.config import check_config, load_config, resolve_runs
from fedsparse.experiments.registry import python_experiments, toml_experiments

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

#: What the pages write in place of a value the reader chooses.
PLACEHOLDERS = {"NAME": "fedht-default", "EXPERIMENT": "fedht-default",
                "CONFIG": "fedht-default", "DATASET": "fashion_mnist", "DIR": "some-dir", "N": "3"}


def _commands(text: str) -> list[str]:
    found = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip().startswith("fedsparse "):
                found.append(line.strip())
    found += re.findall(r"`(fedsparse [^`]+)`", text.replace("\n", " "))
    return found


def _argv(command: str) -> list[str]:
    words = shlex.split(command, comments=True)[1:]
    if ">" in words:  # `fedsparse show NAME > my.toml`
        words = words[:words.index(">")]
    kept: list[str] = []
    for word in words:
        if word != "...":  # "[CONFIG]": an optional argument
            bare = word[1:-1] if word.startswith("[") and word.endswith("]") else word
            kept.append(PLACEHOLDERS.get(bare, word))
        elif kept and kept[-1].startswith("--"):  # "--partition ...": an elided option
            kept.pop()
    return kept


COMMANDS = sorted({(page.relative_to(ROOT).as_posix(), c)
                   for page in PAGES for c in _commands(page.read_text())})


def test_the_pages_show_commands():
    # the collection itself: a change of the pages' markup must not make this file vacuous
    pages = {page for page, _ in COMMANDS}
    assert {"README.md", "docs/deploy.md", "docs/results/fedht.md"} <= pages
    assert len(COMMANDS) > 60


#: A line of prose that is one upper-case word, or a to-do mark: text a page was meant to
#: get and never got (a results section once read only "FIG2" where its table belongs).
UNFINISHED = re.compile(r"^[A-Z][A-Z0-9_]{2,}$|\b(?:TODO|TBD|FIXME|XXX)\b")


def _prose_lines(text: str) -> list[str]:
    """The page's lines outside code blocks (a shell here-document ends with ``EOF``)."""
    return [line.strip() for line in re.sub(r"```.*?```", "", text, flags=re.S).splitlines()]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_pages_hold_no_unfinished_text(page):
    unfinished = [line for line in _prose_lines(page.read_text()) if UNFINISHED.search(line)]
    assert not unfinished, f"{page.name}: {unfinished}"


@pytest.mark.parametrize("page,command", COMMANDS)
def test_documented_command_parses_and_names_what_exists(page, command):
    argv = _argv(command)
    parser = build_parser(only=argv[0] if argv else "")
    if argv and _names_a_command(parser, argv):  # "`fedsparse data describe` prints ..."
        return
    try:
        args, extra = parser.parse_known_args(argv)
    except SystemExit:
        pytest.fail(f"{page}: {command!r} is refused by the parser")
    assert not extra, f"{page}: {command!r}: unknown arguments {extra}"
    name = getattr(args, "experiment", None) or getattr(args, "config", None)
    if name is None or name.endswith(".toml"):
        return
    tomls = toml_experiments()
    assert name in tomls or name in python_experiments(), \
        f"{page}: {command!r} names no experiment {name!r}"
    assignments = list(getattr(args, "set", None) or [])
    assignments += [(field, values[0]) for field, values in getattr(args, "grid", None) or []]
    if name in tomls and (assignments or getattr(args, "rounds", None)):
        config = _apply_overrides(load_config(tomls[name]), assignments,
                                  getattr(args, "rounds", None))
        for run in resolve_runs(check_config(config)):
            _check_buildable_without_data(run)


def _check_buildable_without_data(run: dict) -> None:
    """Build a run's problem, algorithm and channel, and check its ``[data]`` keys (the
    data itself may be a file the reader has and this machine has not)."""
    build_problem(run["problem"])
    build_algorithm(run["algorithm"])
    build_channel(run.get("channel"))
    data = run["data"]
    allowed = builder_arguments(GENERATORS[data["kind"]], data)
    assert allowed is None or set(data) - {"kind"} <= set(allowed), (data, allowed)


def _names_a_command(parser, argv: list[str]) -> bool:
    """Whether ``argv`` is only the names of nested sub-commands, as prose mentions them."""
    for word in argv:
        leaf = leaf_parser(parser, [word])
        if leaf is parser:
            return False
        parser = leaf
    return True


def _python_examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def test_readme_linear_example_runs_and_recovers_the_signal():
    code = _python_examples()[0]
    assert code.count("rounds=100") == 1
    scope: dict = {}
    # 30 of its 100 rounds (a few seconds): the support is found and the error is 3e-4
    exec(compile(code.replace("rounds=100", "rounds=30"), "README.md", "exec"), scope)
    last = scope["history"].records[-1]
    assert last["round"] == 30 and last["support_f1"] == 1.0 and last["rel_error"] < 1e-3, last
    assert tuple(scope["history"].model.shape) == (1000,)


def test_readme_neural_example_runs_for_two_rounds():
    from fedsparse.experiments.safari import fashion_available

    if not fashion_available():
        pytest.skip("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")
    code = _python_examples()[1]
    assert code.count("rounds=60") == 1
    scope = {"fs": __import__("fedsparse"), "torch": __import__("torch")}
    exec(compile(code.replace("rounds=60", "rounds=2").replace("progress=True",
                                                               "progress=False"),
                 "README.md", "exec"), scope)
    last = scope["history"].records[-1]
    assert last["round"] == 2 and 0.0 < last["test_accuracy"] <= 1.0
