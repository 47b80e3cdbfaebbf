"""The metrics a round record can hold, and what a name says about one: whether larger
values are better.

Kept apart from :mod:`fedsparse.history` so that the report's drawing code and the
experiment runner can ask without importing the run record (which itself draws through
the report).
"""

from __future__ import annotations

__all__ = ["HIGHER_IS_BETTER_WORDS", "METRICS", "higher_is_better"]

#: Every numeric field a round record can hold (:func:`fedsparse.metrics.evaluate`, the
#: round loop, personalised models' ``personal_*`` metrics, and algorithms' diagnostics:
#: FedGradMP's ``inner_iterations``, the compensation's ``compensated`` and ``dropped``);
#: a plot, comparison or History look-up naming anything else is a typo. A new record
#: field must be added here to be plotted from a config.
METRICS = ("round", "objective", "accuracy", "test_objective", "test_accuracy", "rel_error",
           "support_precision", "support_recall", "support_f1", "nnz", "density",
           "bytes_up", "bytes_down", "bytes_up_total", "bytes_down_total", "bytes_total",
           "clients_sampled", "delivered", "rejected", "seconds", "elapsed",
           "inner_iterations", "compensated", "dropped", "personal_objective",
           "personal_accuracy", "personal_test_objective", "personal_test_accuracy",
           "mask_density")

#: Words that make a metric "higher is better" (accuracy, support precision/recall/F1);
#: every other metric (objective, errors, bytes, density) is lower-is-better.
HIGHER_IS_BETTER_WORDS = ("accuracy", "f1", "precision", "recall")


def higher_is_better(metric: str) -> bool:
    """True for accuracy-like metrics (names containing accuracy, f1, precision or
    recall), which are maximised; losses, errors and costs are minimised."""
    return any(word in metric for word in HIGHER_IS_BETTER_WORDS)
