"""The local refinement that ends a tuning (:mod:`fedsparse.experiments.tune`).

A model-based sampler (Optuna's TPE) finds the region worth searching, but with a small
budget it rarely pins down the best value inside it: TPE draws from a density around the
good trials, so its proposals scatter over a region rather than close in. The last
trials of a tuning therefore do a golden-section line search around the best trial so
far (the incumbent), one field at a time (Kiefer 1953; Brent 1973, *Algorithms for
Minimization without Derivatives*, chapter 5):

* each field is measured on the scale the sampler uses: its logarithm for ``log`` and
  ``logint`` spaces, the value for ``uniform`` and ``int``; the range maps to [0, 1];
* the bracket is the nearest value of the field tried on the line on each side of the
  incumbent's (the range's end where no trial lies beyond it): only trials that share
  the incumbent's other values count, as a trial off the line says nothing of the
  objective along it; trials still running count as tried, so a batch of ``jobs``
  refinement trials splits the bracket further;
* the next value lies a fraction :data:`GOLDEN` of the way from the incumbent into the
  longer side of the bracket. Every bracket end is no better than the incumbent (or is
  the range's end, or a diverged trial), so the bracket holds a local minimum and the
  longer side shrinks by the golden ratio at each step, whichever way the trial turns
  out. Brent's parabolic steps are left out: fitted through step-size objectives that
  jump where a hard-thresholded support changes, they crept along one side and did
  worse than golden-section steps alone on the default experiment;
* integer fields round the value; a step that rounds onto a tried value, a bracket with
  no room left and ``choice`` fields (no order to search along) are skipped, and the
  sampler proposes that trial instead.

The refined field cycles over the ordered fields (one per refinement trial); the others
keep the incumbent's values. Everything here is a function of the results told, so a
tuning stays repeatable.
"""

from __future__ import annotations

import math

#: Golden-section fraction (3 - sqrt(5)) / 2: the step into the longer side of a bracket.
GOLDEN = (3 - math.sqrt(5)) / 2
#: Smallest distance, as a fraction of the range on the searched scale, between a
#: refinement step and a tried value (closer steps learn nothing new).
MIN_GAP = 1e-3


def refine_count(trials: int, startup: int, space: dict) -> int:
    """Trials that refine the incumbent: the trials after the start-up, divided by the
    number of fields (one line search's share; the model-based sampler gets the rest, as
    it searches all fields at once); none where every field is a ``choice``."""
    if all(s.kind == "choice" for s in space.values()):
        return 0
    return max(0, trials - startup) // len(space)


def to_unit(space, value) -> float:
    """``value`` of a field with ``space`` on the searched scale, its range mapped to
    [0, 1]."""
    if space.kind in ("log", "logint"):
        return (math.log(value) - math.log(space.low)) / (math.log(space.high)
                                                         - math.log(space.low))
    return (value - space.low) / (space.high - space.low)


def from_unit(space, u: float):
    """The field's value at ``u`` on the searched scale (integers rounded, kept in
    range)."""
    u = min(1.0, max(0.0, u))
    if space.kind in ("log", "logint"):
        value = math.exp(math.log(space.low) + u * (math.log(space.high) - math.log(space.low)))
    else:
        value = space.low + u * (space.high - space.low)
    if space.kind in ("int", "logint"):
        return int(min(space.high, max(space.low, round(value))))
    return min(space.high, max(space.low, value))


def refine_point(space: dict, tried: list[tuple[dict, float | None]], field: str,
                 pending: list[dict] = ()) -> dict | None:
    """The next point of the line search along ``field`` around the incumbent.

    Parameters
    ----------
    space : {field: :class:`fedsparse.experiments.tune.Space`}.
    tried : (point, score) of each finished trial, in trial order; the score is what the
        sampler minimises (None for a trial that diverged).
    field : the field to move (not a ``choice`` one).
    pending : points proposed but not yet scored.

    Returns
    -------
    dict or None
        The point (the incumbent's values, ``field`` moved), or None where there is no
        incumbent or no new value to try along ``field``.
    """
    done = [(p, y) for p, y in tried if y is not None]
    if not done:
        return None
    best, y_best = min(done, key=lambda t: t[1])  # min keeps the earliest of equal scores
    s = space[field]
    u_best = to_unit(s, best[field])
    # the trials on the line: a trial elsewhere says nothing of the objective along it,
    # so it cannot end a bracket that must hold a local minimum of the line
    points = [p for p, _ in tried] + list(pending)
    line = [p for p in points if all(p[n] == best[n] for n in space if n != field)]
    sides = [to_unit(s, p[field]) for p in line]
    # the nearest value tried on the line on each side, or the range's end
    left = max((u for u in sides if u < u_best), default=0.0)
    right = min((u for u in sides if u > u_best), default=1.0)
    if right - left <= MIN_GAP:
        return None
    long_right = right - u_best >= u_best - left
    u = u_best + GOLDEN * ((right - u_best) if long_right else (left - u_best))
    value = from_unit(s, u)
    if value == best[field] or any(p[field] == value for p in line):
        return None  # an integer step rounded onto a tried value
    return {**best, field: value}
