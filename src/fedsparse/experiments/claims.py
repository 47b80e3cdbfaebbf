"""A paper's claims as checks on an experiment's runs, with a plain verdict.

An experiment config may state what the paper claims as ``[[claims]]`` entries that can
be checked on its own runs::

    [[claims]]
    text = "FedIter-HT reaches Distributed-IHT's round-100 objective within 25 rounds"
    kind = "reaches"              # run reaches reference's value at reference_round ...
    run = "FedIter-HT"
    reference = "Distributed-IHT"
    reference_round = 100
    within = 25                   # ... by this round
    panel = "Simulation I (regression)"   # optional: default every panel with both runs
    metric = "objective"          # optional

    [[claims]]
    text = "at round 200, FedIter-HT < Fed-HT < Distributed-IHT"
    kind = "order"                # the runs' metric, best first
    runs = ["FedIter-HT", "Fed-HT", "Distributed-IHT"]
    at = "final"                  # or "best" (the best value over rounds)
    metric = "objective"          # optional; lower is better, accuracy-like higher

Each claim gets one verdict over the panels it applies to:

* ``holds`` -- it holds in every panel;
* ``does not hold`` -- it fails in at least one panel (a diverged run is last in an
  ordering; a run that ran ``within`` rounds without reaching the target fails);
* ``not tested here`` -- no panel can decide it: the rounds it needs were not run
  (``--rounds``). (A claim about runs that ``--only`` leaves out is dropped.)

With ``--seeds`` the checks read the mean curves, so an ordering is one of means. The
verdict's ``detail`` says what was measured in each panel, so a reader sees by how much
a claim holds or fails.
"""

from __future__ import annotations

import itertools
import math

from .._validation import ConfigError, check_int, fail
from ..history import History, higher_is_better

HOLDS, FAILS, UNTESTED = "holds", "does not hold", "not tested here"
KEYS = {"reaches": ("text", "kind", "run", "reference", "reference_round", "within", "panel",
                    "metric"),
        "order": ("text", "kind", "runs", "at", "panel", "metric")}


def check_claims(claims, check_metric) -> list[dict]:
    """Check the ``[[claims]]`` entries of a config (types and keys, not run labels).

    Parameters
    ----------
    claims : the config's ``claims`` value (a list of tables).
    check_metric : ``(name, value) -> value``, raising on a metric name no run records.

    Raises
    ------
    ConfigError
        naming ``claims[i].key``, the value and what is allowed.
    """
    if not isinstance(claims, list) or not all(isinstance(c, dict) for c in claims):
        raise fail("claims", claims, "must be an array of tables ([[claims]] entries)")
    for i, claim in enumerate(claims):
        name = f"claims[{i}]"
        kind = claim.get("kind")
        if kind not in KEYS:
            raise fail(f"{name}.kind", kind, " or ".join(f'"{k}"' for k in KEYS))
        unknown = sorted(set(claim) - set(KEYS[kind]))
        if unknown:
            raise fail(f"{name}.{unknown[0]}", claim[unknown[0]],
                       f"a {kind!r} claim takes only {', '.join(KEYS[kind])}")
        if not isinstance(claim.get("text"), str) or not claim["text"].strip():
            raise fail(f"{name}.text", claim.get("text"), "must say the claim in words")
        if "panel" in claim and not isinstance(claim["panel"], str):
            raise fail(f"{name}.panel", claim["panel"], "must be a panel name")
        check_metric(f"{name}.metric", claim.get("metric", "objective"))
        if kind == "reaches":
            for key in ("run", "reference"):
                if not isinstance(claim.get(key), str):
                    raise fail(f"{name}.{key}", claim.get(key), "must be a run label")
            check_int(f"{name}.reference_round", claim.get("reference_round"), minimum=1)
            check_int(f"{name}.within", claim.get("within"), minimum=1)
        else:
            runs = claim.get("runs")
            if (not isinstance(runs, list) or len(runs) < 2
                    or not all(isinstance(r, str) for r in runs) or len(set(runs)) < len(runs)):
                raise fail(f"{name}.runs", runs, "must list two or more distinct run labels, "
                           "best first")
            if claim.get("at", "final") not in ("final", "best"):
                raise fail(f"{name}.at", claim["at"], '"final" or "best"')
    return claims


def claim_labels(claim: dict) -> list[str]:
    """The run labels a claim names."""
    return claim["runs"] if claim["kind"] == "order" else [claim["run"], claim["reference"]]


def check_claim_labels(claims: list[dict], labels: set[str],
                       panels: set[str] | None = None) -> None:
    """Every run a claim names is a run of the config, and its ``panel`` one of the
    config's panels (a misspelt panel would leave the claim silently untested)."""
    for i, claim in enumerate(claims):
        for label in claim_labels(claim):
            if label not in labels:
                raise ConfigError(f"claims[{i}] names the run {label!r}, which is not a run "
                                  f"of this config: {', '.join(sorted(labels))}")
        if panels is not None and "panel" in claim and claim["panel"] not in panels:
            known = ", ".join(repr(p) for p in sorted(panels)) or "none (no run names one)"
            raise fail(f"claims[{i}].panel", claim["panel"], f"must be a panel of this "
                       f"config's runs: {known}")


def _value(history: History, metric: str, at: str) -> float | None:
    """The last round's (``at="final"``) or the best recorded value; None if there is
    none (a diverged run's last rounds record null)."""
    def finite(v):
        return isinstance(v, int | float) and math.isfinite(v)

    if at == "final":
        last = history.records[-1].get(metric) if history.records else None
        return last if finite(last) else None
    values = [v for r in history.records if finite(v := r.get(metric))]
    if not values:
        return None
    return max(values) if higher_is_better(metric) else min(values)


def rounds_to_reach(history: History, target: float, metric: str = "objective") -> int | None:
    """First round whose ``metric`` reaches ``target``: at most the target for losses and
    errors, at least the target for accuracy-like metrics (None if never)."""
    up = higher_is_better(metric)
    for r in history.records:
        v = r.get(metric)
        if v is not None and (v >= target if up else v <= target):
            return r["round"]
    return None


def _reaches(claim: dict, runs: dict[str, History]) -> tuple[str, str]:
    metric = claim.get("metric", "objective")
    ref, run = runs[claim["reference"]], runs[claim["run"]]
    at, within = claim["reference_round"], claim["within"]
    if len(ref.records) < at or ref.records[at - 1].get(metric) is None:
        return UNTESTED, f"{claim['reference']} has no round-{at} {metric}"
    target = ref.records[at - 1][metric]
    needed = rounds_to_reach(run, target, metric)
    what = f"{claim['reference']}'s round-{at} {metric} {target:.4g}"
    if needed is not None and needed <= within:
        return HOLDS, f"{claim['run']} reaches {what} at round {needed} (claim: by {within})"
    if needed is not None:
        return FAILS, f"{claim['run']} reaches {what} at round {needed}, not by {within}"
    if len(run.records) >= within:
        return FAILS, (f"{claim['run']} does not reach {what} within its "
                       f"{len(run.records)} rounds (claim: by {within})")
    return UNTESTED, f"{claim['run']} ran {len(run.records)} rounds, fewer than {within}"


def _order(claim: dict, runs: dict[str, History]) -> tuple[str, str]:
    metric, at = claim.get("metric", "objective"), claim.get("at", "final")
    values = {label: _value(runs[label], metric, at) for label in claim["runs"]}
    up = higher_is_better(metric)
    # a diverged run (no value) ranks last; ties do not satisfy a strict ordering
    ranked = [(v if v is not None else (-math.inf if up else math.inf)) for v in values.values()]
    ok = all((a > b) if up else (a < b) for a, b in itertools.pairwise(ranked))
    shown = ", ".join(f"{k} {'diverged' if v is None else f'{v:.4g}'}"
                      for k, v in values.items())
    return (HOLDS if ok else FAILS), f"{at} {metric}: {shown}"


def verdicts(claims: list[dict], panels: dict[str, dict[str, History]]) -> list[dict]:
    """One verdict per claim from the runs of each panel.

    Parameters
    ----------
    claims : checked ``[[claims]]`` entries.
    panels : panel name -> run label -> History (the mean History with seeds).

    Returns
    -------
    list of dict
        ``{"text", "verdict", "details": [(panel, verdict, detail), ...]}`` per claim;
        ``verdict`` is one of ``"holds"``, ``"does not hold"``, ``"not tested here"``.
    """
    out = []
    for claim in claims:
        named = claim_labels(claim)
        details = []
        for panel, runs in panels.items():
            if "panel" in claim and panel != claim["panel"]:
                continue
            if not all(label in runs for label in named):
                continue
            check = _order if claim["kind"] == "order" else _reaches
            details.append((panel, *check(claim, runs)))
        decided = [d[1] for d in details if d[1] != UNTESTED]
        verdict = (UNTESTED if not decided else FAILS if FAILS in decided else HOLDS)
        if not details:
            details.append(("", UNTESTED, "the runs it names are not part of this run"))
        out.append({"text": claim["text"], "verdict": verdict,
                    "details": [list(d) for d in details]})
    return out


def format_verdicts(paper_claim: str, results: list[dict],
                    stated: list[dict] | None = None) -> list[str]:
    """The lines the command line prints: the paper's claim, then each checked claim's
    verdict and what was measured.

    Parameters
    ----------
    stated : the config's ``claims`` entry: an empty list when it had claims that
        ``--only`` dropped (their runs were left out), None when it states none.
    """
    lines = [f"Paper's claim: {paper_claim}"] if paper_claim else []
    if paper_claim and not results:
        lines.append("  not tested here: the config's claims compare runs that --only left "
                     "out" if stated == [] else
                     "  not tested here: the config states this claim in words only, with no "
                     "check fedsparse can run on its runs")
    for r in results:
        lines.append(f"  {r['verdict'].upper()}: {r['text']}")
        for panel, verdict, detail in r["details"]:
            where = f"[{panel}] " if panel else ""
            lines.append(f"    {where}{detail}" + (f" ({verdict})" if verdict == UNTESTED else ""))
    return lines
