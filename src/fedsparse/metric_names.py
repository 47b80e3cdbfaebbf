"""The metrics a round record can hold, and what a name says about one: whether larger
values are better.

Kept apart from :mod:`fedsparse.history` so that the report's drawing code and the
experiment runner can ask without importing the run record (which itself draws through
the report).
"""

from __future__ import annotations

from ._validation import INT64_MAX, check_bool, shown

__all__ = ["HIGHER_IS_BETTER_WORDS", "LOSS_FIELDS", "METRICS", "best_direction",
           "higher_is_better", "record_problem"]

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

#: The losses of a round record: the evaluated objectives of the global model (train,
#: test) and of the personalised models. A NaN or inf here with a finite model is
#: divergence (a loss that overflows); the other fields are not losses: an accuracy or a
#: support score of a finite model is finite, and the relative error, divided by a
#: ground truth's norm that may be 0, is a distance, not the run's loss. They are also
#: the losses a Flower node's evaluate reply may carry.
LOSS_FIELDS = ("objective", "test_objective", "personal_objective",
               "personal_test_objective")

#: Words that make a metric "higher is better" (accuracy, support precision/recall/F1);
#: every other metric (objective, errors, bytes, density) is lower-is-better.
HIGHER_IS_BETTER_WORDS = ("accuracy", "f1", "precision", "recall")


def higher_is_better(metric: str) -> bool:
    """True for accuracy-like metrics (names containing accuracy, f1, precision or
    recall), which are maximised; losses, errors and costs are minimised."""
    return any(word in metric for word in HIGHER_IS_BETTER_WORDS)


def best_direction(metric: str, maximize: bool | None) -> bool:
    """True to maximise ``metric``: ``maximize`` if given, else :func:`higher_is_better`.

    Raises
    ------
    ConfigError
        naming ``maximize`` when it is neither None nor a bool: ``bool("false")`` is
        True, and would pick the worst point of a sweep as its best.
    """
    maximize = check_bool("maximize", maximize, allow_none=True)
    return higher_is_better(metric) if maximize is None else maximize


#: Metrics that count or measure something (entries, bytes, clients, seconds): never
#: negative.
NON_NEGATIVE = ("nnz", "bytes_up", "bytes_down", "bytes_up_total", "bytes_down_total",
                "bytes_total", "clients_sampled", "delivered", "rejected", "seconds",
                "elapsed", "inner_iterations", "compensated", "dropped")
#: How far above 1 a fraction may read: an accuracy is a weighted sum, which rounding
#: can leave a hair above 1 (13 weights of 1/13 sum to 1.0000000000000002).
FRACTION_SLACK = 1e-3
#: Metrics that are fractions: between 0 and 1 (up to :data:`FRACTION_SLACK`).
FRACTIONS = ("accuracy", "test_accuracy", "support_precision", "support_recall",
             "support_f1", "density", "personal_accuracy", "personal_test_accuracy",
             "mask_density")


def record_problem(record: dict) -> str | None:
    """What is wrong with a round record read from a file (a ``history.jsonl`` line, a
    checkpoint's record), or None.

    ``round`` must be a whole number from 0, every metric of :data:`METRICS` a number
    (NaN and infinities included: a diverged round records them) or None, counts never
    negative and fractions within [0, 1] (a percentage is not one). An integer must be a
    64-bit one (as every count fedsparse writes): a larger one has no float, so no plot,
    mean or comparison could read it. Other fields (a callback's own) are not checked.
    """
    rnd = record.get("round")
    if not isinstance(rnd, int) or isinstance(rnd, bool) or rnd < 0:
        return f"round={shown(rnd)} is invalid: must be a whole number 0, 1, 2, ..."
    if rnd > INT64_MAX:
        return f"round={shown(rnd)} is invalid: must be at most 2**63 - 1"
    for name in METRICS:
        value = record.get(name)
        if value is None or name == "round":
            continue
        if not isinstance(value, int | float) or isinstance(value, bool):
            return f"{name}={shown(value)} is invalid: must be a number or null"
        if name in NON_NEGATIVE and value < 0:
            return f"{name}={shown(value)} is invalid: must not be negative"
        if name in FRACTIONS and not 0 <= value <= 1 + FRACTION_SLACK and value == value:
            return f"{name}={shown(value)} is invalid: must be a fraction between 0 and 1"
        if isinstance(value, int) and not -INT64_MAX - 1 <= value <= INT64_MAX:
            return (f"{name}={shown(value)} is invalid: must be a float or an integer from "
                    "-2**63 to 2**63 - 1")
    return None
