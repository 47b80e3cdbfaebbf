"""docs/decisions.md says what the SAFARI experiments run: the words follow the code."""

from __future__ import annotations

import re
from pathlib import Path

from fedsparse.experiments import safari as S
from fedsparse.experiments import safari_paper as SP
from fedsparse.experiments.config import resolve_runs
from fedsparse.experiments.registry import python_experiments

DOC = Path(__file__).resolve().parents[2] / "docs" / "decisions.md"


def _section(text: str, number: int) -> str:
    start = text.index(f"\n## {number}. ")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def test_no_part_is_left_as_a_specification():
    text = DOC.read_text()
    assert "treat them as a specification" not in text
    status = text[text.index("| part | status |"):text.index("\n\n", text.index("| part |"))]
    assert "planned" not in status


def test_safari_section_names_the_models_the_experiments_run():
    section = _section(DOC.read_text(), 4)
    paper = sorted(n for n in python_experiments() if n.startswith("safari-paper-"))
    cpu = sorted(n for n in python_experiments()
                 if n.startswith("safari-") and n not in paper)
    for name in paper + cpu:
        short = name.removeprefix("safari-paper")
        assert f"`{name}`" in section or (name in paper and f"`{short}`" in section), name
    # the paper-scale configs are ResNet-20 on 32 x 32, the CPU ones the MLP and the CNN
    for model, count in (("resnet20", "272,186"), ("mlp", "79,510"), ("cnn", "215,370")):
        assert count in section, model
    runs = resolve_runs(S.fig2_config(SP.PAPER))
    assert {r["problem"]["model"]["kind"] for r in runs} == {"resnet20"}
    assert {r["data"]["pad"] for r in runs} == {2} and SP.PAPER.rounds >= 300
    assert {r["problem"]["model"]["kind"] for r in resolve_runs(S.fig2_config(S.FULL))} \
        == {"mlp"}
    assert re.search(r"300 rounds, 3 seeds", section)


def test_safari_section_says_which_images_the_global_model_is_evaluated_on(monkeypatch,
                                                                          tmp_path):
    # The paper-scale runs deal the official test split by label, and so does every
    # CPU-scale run: the page names each of them, and says a hand-built budget does too.
    section = " ".join(_section(DOC.read_text(), 4).split())
    monkeypatch.setattr(S, "run_safari", lambda config, out, budget, **_: (config, budget))
    cpu = {name: getattr(S, name.replace("-", "_"))(tmp_path)
           for name in python_experiments()
           if name.startswith("safari-") and not name.startswith("safari-paper")}
    official = section[section.index("the paper-scale runs below do so"):]
    official = official[:official.index(".")]
    for name, (config, budget) in cpu.items():
        data = [r["data"] for r in resolve_runs(config)]
        assert budget.test_split == "official" and {d["test_split"] for d in data} == {
            "official"}, name
        assert not any("test_fraction" in d for d in data), name
        assert f"`{name}`" in official, name
    assert S.Budget(rounds=1, seeds=1).test_split == "official"
    assert "a hand-built `Budget` as well" in section
    paper = [r["data"] for r in resolve_runs(S.fig2_config(SP.PAPER))]
    assert {d["test_split"] for d in paper} == {"official"}
    assert not any("test_fraction" in d for d in paper)
    assert 'test_split="official"' in section and "the paper-scale runs below do so" in section
    assert "all 60,000 Fashion-MNIST training images" in section
