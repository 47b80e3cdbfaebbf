"""SAFARI's experiments (Mao et al. 2022 on Fashion-MNIST): configs, the channel table, the
distance-record analysis and a tiny end-to-end run (the numbers of docs/results/safari.md
are pinned in test_safari_pins.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fedsparse._validation import ConfigError
from fedsparse.channels import GroupChannel
from fedsparse.data.partition import contiguous_groups, partition_groups
from fedsparse.experiments import safari as S
from fedsparse.experiments.config import build_channel, resolve_runs
from fedsparse.experiments.registry import INFO, python_experiments

needs_fashion = pytest.mark.skipif(not S.fashion_available(),
                                   reason="Fashion-MNIST is not installed "
                                          "(apt-get install dataset-fashion-mnist)")


# ------------------------------------------------------------------------- the split


def test_contiguous_group_split_is_the_papers():
    y = np.repeat(np.arange(10), 30)  # 30 examples of each label
    parts, groups = partition_groups(y, 50, 2, 5, seed=3, return_groups=True, contiguous=True)
    assert groups.tolist() == [0] * 25 + [1] * 25
    for i, p in enumerate(parts):
        labels = set(y[p].tolist())
        assert labels == (set(range(5)) if i < 25 else set(range(5, 10)))
        # balanced: 30 examples of a label over 25 holders -> 1 or 2 each
        counts = np.bincount(y[p], minlength=10)[sorted(labels)]
        assert counts.min() >= 1 and counts.max() - counts.min() <= 1
    assert sorted(np.concatenate(parts).tolist()) == list(range(y.size))
    # only which examples go where depends on the seed
    other = partition_groups(y, 50, 2, 5, seed=4, contiguous=True)
    assert [set(y[p]) for p in other] == [set(y[p]) for p in parts]
    assert any(not np.array_equal(a, b) for a, b in zip(parts, other, strict=True))


def test_contiguous_groups_blocks_and_errors():
    assert contiguous_groups(5, 2).tolist() == [0, 0, 0, 1, 1]
    with pytest.raises(ConfigError, match="num_groups"):
        contiguous_groups(2, 3)
    with pytest.raises(ConfigError, match="contiguous"):
        partition_groups(np.arange(10), 4, 2, 2, contiguous="yes")


def test_default_group_split_unchanged():
    # contiguous=False keeps the seeded random layout (same draws as before the option)
    y = np.repeat(np.arange(10), 20)
    a, ga = partition_groups(y, 20, 5, 2, seed=3, return_groups=True)
    b, gb = partition_groups(y, 20, 5, 2, seed=3, return_groups=True, contiguous=False)
    assert ga.tolist() == gb.tolist() and ga.tolist() != sorted(ga.tolist())
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))


# ----------------------------------------------------------------------- the channel


def test_safari_channel_table():
    ch = build_channel(S.channel_table("asymmetric"))
    assert isinstance(ch, GroupChannel)
    assert ch.groups.tolist() == [0] * 25 + [1] * 25
    p = ch.channel.probability
    # (the values pass through float32 inside safari_channel: equal to ~1e-8)
    assert torch.allclose(p, torch.tensor([0.18] * 25 + [0.6] * 25, dtype=torch.float64),
                          rtol=0, atol=1e-7)
    clients = torch.arange(50)
    assert ch.delivered(0, 0, clients).all()  # full first round
    for t in range(1, 40):  # at least one client of each group every round
        d = ch.delivered(0, t, clients)
        assert d[:25].any() and d[25:].any()
    explicit = build_channel({"kind": "safari", "probability": 0.6, "groups": [0, 1, 1],
                              "full_first_round": False})
    assert explicit.groups.tolist() == [0, 1, 1] and not explicit.full_first_round


@pytest.mark.parametrize("table, match", [
    ({"kind": "safari", "probability": 0.6}, "num_clients"),
    ({"kind": "safari", "probability": 0.6, "groups": [0, 1], "num_groups": 2}, "not both"),
    ({"kind": "safari", "probability": "asym", "groups": [0, 1]}, "asymmetric"),
    ({"kind": "safari", "probability": 1.5, "groups": [0, 1]}, r"\[0, 1\]"),
    ({"kind": "safari", "groups": [0, 1]}, "probability"),
    ({"kind": "safari", "probability": 0.5, "groups": [0, 1], "full_first_round": 1},
     "full_first_round"),
    ({"kind": "safari", "probability": 0.5, "groups": [0.5, 1]}, "integer group ids"),
    ({"kind": "safari", "probability": 0.5, "groups": [0, 1], "p": 1}, "unknown key 'p'"),
    ({"kind": "bernoulli", "probability": 0.5, "groups": [0, 1]}, "unknown key 'groups'"),
    ({"kind": "lossy"}, "channel.kind"),
])
def test_channel_table_errors(table, match):
    with pytest.raises(ConfigError, match=match):
        build_channel(table)


# ------------------------------------------------------------------------ the configs


def test_configs_hold_the_papers_setup():
    b = S.Budget(rounds=7, seeds=1)
    config = S.fig2_config(b)
    runs = resolve_runs(config)
    # one shared no-drop run, then compensation / none at P = 0.6 and the asymmetric P
    assert len(runs) == 5
    panels = S.figure_panels(config, {r["slug"]: r["label"] for r in runs})
    assert list(panels) == ["MAG + FedAvg, P = 0.6", "MAG + FedAvg, asymmetric P (0.18 / 0.6)"]
    assert all(list(p.values()) == [S.NO_DROP, S.COMP, S.NO_COMP] for p in panels.values())
    for run in runs:
        algo, data = run["algorithm"], run["data"]
        assert (algo["density"], algo["step_size"], algo["local_steps"], algo["batch_size"],
                algo["optimizer"], algo["scope"]) == (0.4, 1e-3, 5, 64, "adam", "layer")
        assert (data["num_clients"], data["num_groups"], data["labels_per_group"],
                data["contiguous"]) == (50, 2, 5, True)
        assert run["rounds"] == 7
        if run["label"] == S.NO_DROP:
            assert run["channel"] == {"kind": "perfect"} and not algo["compensation"]
        else:
            assert run["channel"]["kind"] == "safari"
            assert algo["compensation"] == (run["label"] == S.COMP)
    probs = {r["channel"]["probability"] for r in resolve_runs(S.probability_config(b))}
    assert probs == set(S.PROBABILITIES)
    densities = sorted(r["algorithm"]["density"] for r in resolve_runs(S.sparsity_config(b)))
    assert densities == [0.2, 0.3, 0.4, 0.6, 0.8, 1.0]
    prox = resolve_runs(S.pruners_config(b, "fed_prox", ("magnitude", "synflow", "fedspa"),
                                         (0.6,)))
    assert all(r["algorithm"]["mu"] == 0.001 for r in prox) and len(prox) == 9
    fedspa = [r for r in prox if r["algorithm"]["pruner"] == "fedspa"]
    # FedSpa anneals over the run's own rounds: its table gives none that could disagree
    assert fedspa and all("rounds" not in r["algorithm"] for r in fedspa)


def test_registered_and_listed():
    exps = python_experiments()
    for name in ("safari-fmnist", "safari-pruners", "safari-fedprox", "safari-probability",
                 "safari-sparsity"):
        assert name in exps
        assert INFO[name].paper == "safari"


def test_cnn_variant_runs_the_asymmetric_panel_on_images():
    assert "safari-fmnist-cnn" in python_experiments()
    runs = resolve_runs(S.fig2_config(S.CNN, probabilities=(S.ASYMMETRIC,)))
    assert [r["label"] for r in runs] == [S.NO_DROP, S.COMP, S.NO_COMP]
    for run in runs:
        assert run["problem"]["model"]["kind"] == "cnn"
        # the CNN takes 28 x 28 images, the MLP flat 784-vectors
        assert run["data"]["flatten"] is False and run["data"]["max_examples"] == 12_000
        assert run["rounds"] == S.CNN.rounds


def test_budget_errors():
    with pytest.raises(ConfigError, match="model"):
        S.Budget(rounds=1, seeds=1, model="resnet").checked()
    with pytest.raises(ConfigError, match="max_examples"):
        S.Budget(rounds=1, seeds=1, max_examples=10).checked()


# ------------------------------------------------------------------------ the analysis


def test_group_distance_ratio_by_hand():
    inf = float("inf")
    d = torch.tensor([[inf, 1.0, 4.0, inf],
                      [1.0, inf, 6.0, 2.0],
                      [4.0, 6.0, inf, 3.0],
                      [inf, 2.0, 3.0, inf]])
    r = S.group_distance_ratio(d, [0, 0, 1, 1])
    # within: pairs (0,1)=1 and (2,3)=3 -> 2; between: (0,2)=4, (1,2)=6, (1,3)=2 -> 4
    assert r["within"] == pytest.approx(2.0) and r["between"] == pytest.approx(4.0)
    assert r["ratio"] == pytest.approx(0.5) and r["measured_pairs"] == 5
    none = S.group_distance_ratio(torch.full((2, 2), inf), [0, 1])
    assert none["ratio"] is None


def test_score_is_the_mean_of_the_last_rounds():
    from fedsparse.history import History

    h = History(records=[{"round": t, "test_accuracy": a}
                         for t, a in enumerate([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7], 1)])
    assert S.score(h, last=5) == pytest.approx(0.5)
    assert S.curve_mean(h) == pytest.approx(0.4)


# ------------------------------------------------------------------ a tiny real run


@needs_fashion
def test_tiny_safari_fmnist_run_writes_its_plots(tmp_path):
    # the safari-fmnist --quick pipeline at a few seconds' size: one panel, 2 rounds
    b = S.Budget(rounds=2, seeds=1, max_examples=400)
    summary = S.run_safari(S.fig2_config(b, probabilities=("asymmetric",)), tmp_path, b,
                           heatmaps=True, log=lambda *_: None)
    for name in ("test_accuracy_vs_round.png", "test_objective_vs_round.png"):
        assert name in summary["plots"] and (tmp_path / name).stat().st_size > 0
    heat = [p for p in summary["plots"] if p.startswith("distances-")]
    assert len(heat) == 1 and (tmp_path / heat[0]).exists()
    analysis = json.loads((tmp_path / "safari.json").read_text())
    panel = "MAG + FedAvg, asymmetric P (0.18 / 0.6)"
    runs = analysis["panels"][panel]["runs"]
    assert set(runs) == {S.NO_DROP, S.COMP, S.NO_COMP}
    assert all(0 <= r["score"]["mean"] <= 1 for r in runs.values())
    ratio = analysis["distances"][panel]["ratio"]["mean"]
    assert ratio is not None and ratio > 0
    # round 0 delivers everything, so the record is full: every pair was measured
    assert analysis["distances"][panel]["per_seed"][0]["measured_pairs"] == 50 * 49 // 2


def test_redrawing_a_folder_with_a_damaged_summary_names_the_file(tmp_path):
    (tmp_path / "summary.json").write_text('"done"')
    b = S.Budget(rounds=7, seeds=1)
    with pytest.raises(ConfigError, match=r"summary\.json: holds a JSON str"):
        S.finish_safari(S.fig2_config(b), tmp_path, b)
