"""Paper claims as checks: verdicts on hand-made histories, config errors, the CLI line."""

import copy

import pytest

from fedsparse import ConfigError
from fedsparse.experiments.claims import FAILS, HOLDS, UNTESTED, format_verdicts, verdicts
from fedsparse.experiments.config import check_config
from fedsparse.experiments.run_selection import select_runs
from fedsparse.history import History


def _history(values, metric="objective"):
    return History(records=[{"round": t + 1, metric: v} for t, v in enumerate(values)])


REF = _history([10, 8, 6, 5, 4, 3])                    # round 4: 5
FAST = _history([7, 5, 3, 2, 1, 1])                     # reaches 5 at round 2
SLOW = _history([9, 8, 7, 6, 5.5, 5])                   # reaches 5 at round 6
REACHES = {"text": "fast reaches ref's round-4 value by round 3", "kind": "reaches",
           "run": "fast", "reference": "ref", "reference_round": 4, "within": 3}


def test_reaches_holds_fails_and_is_untested_by_hand():
    claim = dict(REACHES)
    assert verdicts([claim], {"": {"ref": REF, "fast": FAST}})[0]["verdict"] == HOLDS
    late = verdicts([claim], {"": {"ref": REF, "fast": SLOW}})[0]
    assert late["verdict"] == FAILS
    assert "at round 6, not by 3" in late["details"][0][2]
    # never reaching the target within the claimed rounds fails too
    never = verdicts([claim], {"": {"ref": REF, "fast": _history([9, 9, 9])}})[0]
    assert never["verdict"] == FAILS
    # a run shorter than the claim's rounds that has not reached it yet decides nothing
    short = verdicts([claim], {"": {"ref": REF, "fast": _history([9, 9])}})[0]
    assert short["verdict"] == UNTESTED
    # nor does a reference that did not run to reference_round (--rounds 3)
    cut = verdicts([claim], {"": {"ref": _history([10, 8, 6]), "fast": FAST}})[0]
    assert cut["verdict"] == UNTESTED


def test_one_failing_panel_makes_the_claim_fail_and_panel_restricts_it():
    panels = {"A": {"ref": REF, "fast": FAST}, "B": {"ref": REF, "fast": SLOW}}
    assert verdicts([REACHES], panels)[0]["verdict"] == FAILS
    assert verdicts([{**REACHES, "panel": "A"}], panels)[0]["verdict"] == HOLDS


def test_order_of_final_and_best_values_with_direction_and_divergence():
    runs = {"a": _history([3, 1, 2]), "b": _history([2, 1.5, 1.5])}
    order = {"text": "a below b", "kind": "order", "runs": ["a", "b"]}
    assert verdicts([order], {"": runs})[0]["verdict"] == FAILS        # final: 2 > 1.5
    best = {**order, "at": "best"}
    assert verdicts([best], {"": runs})[0]["verdict"] == HOLDS         # best: 1 < 1.5
    # accuracy-like metrics are maximised
    acc = {"a": _history([0.5, 0.9], "test_accuracy"), "b": _history([0.6, 0.7], "test_accuracy")}
    up = {**order, "metric": "test_accuracy"}
    assert verdicts([up], {"": acc})[0]["verdict"] == HOLDS
    # a diverged run (null last value) ranks last; ties are not an ordering
    diverged = {"a": _history([1, None]), "b": _history([2, 2])}
    assert verdicts([order], {"": diverged})[0]["verdict"] == FAILS
    assert verdicts([{**order, "runs": ["b", "a"]}], {"": diverged})[0]["verdict"] == HOLDS
    tie = {"a": _history([1, 1]), "b": _history([2, 1])}
    assert verdicts([order], {"": tie})[0]["verdict"] == FAILS


def test_printed_lines_name_the_verdict_and_what_was_measured():
    lines = format_verdicts("the paper says so", verdicts([REACHES], {"P": {"ref": REF,
                                                                             "fast": FAST}}))
    assert lines[0] == "Paper's claim: the paper says so"
    assert lines[1].startswith("  HOLDS: fast reaches")
    assert "[P] fast reaches ref's round-4 objective 5 at round 2" in lines[2]
    # a claim stated in words only: said so, with no invented results page
    words = format_verdicts("x", [])
    assert words[1].startswith("  not tested here: ") and "no check" in words[1]
    assert "results page" not in words[1]
    # claims that --only dropped (their runs were left out): not tested here, and why
    dropped = format_verdicts("x", [], stated=[])
    assert "not tested here" in dropped[1] and "--only" in dropped[1]


CONFIG = {"title": "t",
          "defaults": {"rounds": 5, "problem": {"kind": "least_squares"},
                       "data": {"kind": "shifted_gaussian", "num_clients": 4, "dim": 10,
                                "sparsity": 2, "samples_per_client": 10},
                       "algorithm": {"sparsity": 2, "step_size": 0.1}},
          "runs": [{"label": "ref", "algorithm": {"kind": "fed_ht"}},
                   {"label": "fast", "algorithm": {"kind": "fed_iter_ht"}}],
          "claims": [dict(REACHES)]}


@pytest.mark.parametrize("change, match", [
    (lambda c: c.update(claims={"kind": "order"}), r"claims=.*array of tables"),
    (lambda c: c["claims"][0].update(kind="beats"), r"claims\[0\]\.kind"),
    (lambda c: c["claims"][0].update(runs=["a"]), r"claims\[0\]\.runs"),
    (lambda c: c["claims"][0].pop("text"), r"claims\[0\]\.text"),
    (lambda c: c["claims"][0].update(within=0), r"claims\[0\]\.within"),
    (lambda c: c["claims"][0].update(metric="acuracy"), r"claims\[0\]\.metric"),
    (lambda c: c["claims"][0].update(run="fats"), r"names the run 'fats'"),
    (lambda c: c["claims"].append({"text": "t", "kind": "order", "runs": ["ref", "ref"]}),
     r"claims\[1\]\.runs"),
    (lambda c: c["claims"].append({"text": "t", "kind": "order", "runs": ["ref", "fast"],
                                   "at": "last"}), r"claims\[1\]\.at"),
])
def test_bad_claims_name_the_key(change, match):
    config = copy.deepcopy(CONFIG)
    change(config)
    with pytest.raises(ConfigError, match=match):
        check_config(config)


@pytest.mark.parametrize("claim", [
    {"text": "t", "kind": "order", "runs": ["fast", "ref"], "metric": "accuracy"},
    {**REACHES, "metric": "test_accuracy"}])
def test_a_claim_on_a_metric_its_runs_do_not_record_is_refused_before_they_run(claim):
    # least squares records no accuracy: the verdict would read each run as diverged
    from fedsparse.experiments.config import resolve_runs
    from fedsparse.experiments.runner import check_runs_buildable

    config = copy.deepcopy(CONFIG) | {"claims": [claim]}
    check_config(config)
    with pytest.raises(ConfigError, match=r"claims\[0\]\.metric='\w*accuracy' is invalid: "
                                          r"the run '(fast|ref)' does not record it; it "
                                          r"records round, objective"):
        check_runs_buildable(config, resolve_runs(config), {})
    check_runs_buildable(CONFIG, resolve_runs(CONFIG), {})  # the objective: recorded


def test_only_drops_the_claims_about_runs_it_leaves_out():
    assert select_runs(copy.deepcopy(CONFIG), ["ref"])["claims"] == []
    assert len(select_runs(copy.deepcopy(CONFIG), ["ref", "fast"])["claims"]) == 1


def test_default_experiment_prints_a_verdict(tmp_path):
    from fedsparse.cli import resolve_experiment
    from fedsparse.experiments.runner import run_experiment

    _, config, _ = resolve_experiment("fedht-default")
    lines = []
    summary = run_experiment(config, tmp_path, progress=False, log=lines.append)
    assert [c["verdict"] for c in summary["claims"]] == [HOLDS]
    assert any(line.startswith("  HOLDS: FedIter-HT needs at most half") for line in lines)


def test_reaching_the_target_exactly_at_the_claimed_round_holds():
    # REF's round-4 objective is 5; this run first reaches it at round 3, the claim's own
    # bound (by round 3): on time, so the claim holds
    on_time = verdicts([REACHES], {"": {"ref": REF, "fast": _history([9, 7, 5])}})[0]
    assert on_time["verdict"] == HOLDS


def test_a_final_value_that_is_not_a_number_ranks_last():
    runs = {"a": _history([1, float("nan")]), "b": _history([2, 2])}
    order = {"text": "b below a", "kind": "order", "runs": ["b", "a"]}
    assert verdicts([order], {"": runs})[0]["verdict"] == HOLDS  # 2 < a's (none: last)
    assert verdicts([{**order, "runs": ["a", "b"]}], {"": runs})[0]["verdict"] == FAILS
