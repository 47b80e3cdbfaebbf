"""What a metric's name says about it: whether larger values are better.

Kept apart from :mod:`fedsparse.history` so that the report's drawing code and the
experiment runner can ask without importing the run record (which itself draws through
the report).
"""

from __future__ import annotations

__all__ = ["HIGHER_IS_BETTER_WORDS", "higher_is_better"]

#: Words that make a metric "higher is better" (accuracy, support precision/recall/F1);
#: every other metric (objective, errors, bytes, density) is lower-is-better.
HIGHER_IS_BETTER_WORDS = ("accuracy", "f1", "precision", "recall")


def higher_is_better(metric: str) -> bool:
    """True for accuracy-like metrics (names containing accuracy, f1, precision or
    recall), which are maximised; losses, errors and costs are minimised."""
    return any(word in metric for word in HIGHER_IS_BETTER_WORDS)
