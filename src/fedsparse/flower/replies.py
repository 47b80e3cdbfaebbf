"""What a node sends the server, checked before the server uses any of it.

A node is not trusted: its handshake and evaluate replies are read here, field by
field, and a reply that fails a check is refused with a reason (the value it sent, cut
short) instead of reaching the run. The server then excludes that node (handshake) or
leaves its evaluation out (evaluate), logs the reason and counts it; it never stops.

Handshake (``query``) reply, record :data:`~fedsparse.flower.codec.NODE`:

* ``partition_id``: an integer in ``0..N-1`` (not a bool, not a float);
* ``num_partitions``: the job's N;
* ``count``: the node's training examples, an integer in ``1..MAX_EXAMPLES``;
* ``weight``: its aggregation weight p_i, finite, positive and at most ``count``. A
  weight is self-reported: p_i = n_i / n (a generator's data) or n_i (a node's file),
  so it never exceeds the node's count. Within that bound a node can still overstate
  its share; the bound on update distances (``flower.max_update_ratio``) keeps what it
  uploads near the other clients' updates, so its weight cannot carry the average away;
* ``test-examples`` (where the node has test data): an integer in ``1..MAX_EXAMPLES``,
  the weight of its test metrics. Self-reported like ``count``; an evaluate reply must
  repeat it, so a node cannot change its share of the test metrics between evaluations;
* ``feature_shape``: 1 to 8 positive integers with at most ``MAX_ELEMENTS`` entries in
  all;
* ``stat.<name>``: at most :data:`~fedsparse.screening.MAX_CLIENT_METRICS` statistics,
  each a finite number from 0 to float32's largest (e.g. the smoothness L_i).

Evaluate reply, record :data:`~fedsparse.flower.codec.METRICS`: ``weight`` and
``num-examples`` equal to the node's handshake (the server uses its own copies), a finite
``objective`` >= 0 (every fedsparse objective is a loss), accuracies in [0, 1],
``test_*`` only with ``test-examples``, equal to the handshake's, ``personal_*`` only for
an algorithm with personalised models.
"""

from __future__ import annotations

import math
import re
from numbers import Integral, Real

from flwr.app import ConfigRecord, MetricRecord

from ..metric_names import FRACTION_SLACK, LOSS_FIELDS
from ..screening import MAX_CLIENT_METRICS, MAX_METRIC_NAME, cut, shown
from . import codec

#: The most training examples one node may claim (2^31): a larger count is a lie that
#: would let one node outweigh every other.
MAX_EXAMPLES = 2**31
#: The largest float32, the bound of a node's statistics (stored in the run's dtype).
FLOAT32_MAX = float.fromhex("0x1.fffffep+127")
#: Features of one example: at most 8 axes.
MAX_FEATURE_AXES = 8
#: Metrics an evaluate reply may carry: the global model's and the personalised one's
#: (their losses: :data:`fedsparse.metric_names.LOSS_FIELDS`).
ACCURACIES = ("accuracy", "test_accuracy", "personal_accuracy", "personal_test_accuracy")


#: How Flower 1.41 writes a ClientApp's exception into an error reply's reason:
#: ``<class 'module.Name'>:<'message'>`` (a SuperNode, and the simulation runtime).
_FLOWER_REASON = re.compile(r"<class '(?:[\w.]*\.)?(\w+)'>:<'(.*)'>", re.DOTALL)
#: What the simulation runtime puts before the ClientApp's own message.
_SIMULATION_PREFIX = re.compile(r"\s*Exception ClientAppException occurred\. Message: ")


def error_reason(error) -> str:
    """What a node's error reply says, cut short (:func:`~fedsparse.screening.cut`):
    the exception's name and message first, without Flower's wrapping
    (``<class 'fedsparse._validation.ConfigError'>:<'...'>``), so that the cut keeps the
    node's own words (a node config error names the key, its value and the known keys)."""
    text = str(getattr(error, "reason", error))
    wrapped = _FLOWER_REASON.fullmatch(text)
    if wrapped:
        name, message = wrapped.groups()
        inner = _SIMULATION_PREFIX.match(message)
        # the simulation runtime keeps the ClientApp's message, not its exception's name
        text = message[inner.end():] if inner else f"{name}: {message}"
    return cut(text)


class Refused(ValueError):
    """A reply the server does not use; the message says which field and why."""


def _record(content, name: str, kinds: tuple[type, ...]) -> dict:
    """The record ``name`` of a reply, one of ``kinds``, as a dict."""
    try:
        record = content[name]
    except (KeyError, TypeError):
        raise Refused(f"no {name!r} record") from None
    if not isinstance(record, kinds):
        raise Refused(f"the {name!r} record is a {type(record).__name__}, not a "
                      + " or ".join(k.__name__ for k in kinds))
    return dict(record)


def _field(values: dict, key: str):
    if key not in values:
        raise Refused(f"no {key}")
    return values[key]


def integer(values: dict, key: str, low: int, high: int) -> int:
    """``values[key]`` as an int in ``low..high`` (bools and floats refused)."""
    value = _field(values, key)
    if isinstance(value, bool) or not isinstance(value, Integral) or not low <= value <= high:
        raise Refused(f"{key}={shown(value)} is not an integer in {low}..{high}")
    return int(value)


def number(values: dict, key: str, *, low: float = -math.inf, high: float = math.inf,
           low_open: bool = False) -> float:
    """``values[key]`` as a finite float in [low, high] ((low, high] with ``low_open``)."""
    value = _field(values, key)
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise Refused(f"{key}={shown(value)} is not a finite number")
    value = float(value)
    if value < low or value > high or (low_open and value == low):
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise Refused(f"{key}={value:g} is outside {interval}")
    return value


def node_info(content, num_clients: int) -> dict:
    """The checked handshake of one node.

    Parameters
    ----------
    content : the reply's RecordDict.
    num_clients : the job's N.

    Returns
    -------
    dict
        ``partition_id``, ``count``, ``test_count`` (None without test data),
        ``weight``, ``feature_shape`` (tuple), ``stats`` ({name: float}) and
        ``keeps_state`` (the node keeps its clients' state on disk; False if unsaid).

    Raises
    ------
    Refused
        naming the first field that fails its check (see the module docstring).
    """
    info = _record(content, codec.NODE, (ConfigRecord,))
    pid = integer(info, codec.PARTITION_ID, 0, num_clients - 1)
    num = _field(info, codec.NUM_PARTITIONS)
    if num != num_clients or isinstance(num, bool):
        raise Refused(f"{codec.NUM_PARTITIONS}={shown(num)}, but the job has {num_clients} clients")
    count = integer(info, codec.COUNT, 1, MAX_EXAMPLES)
    test_count = integer(info, codec.TEST_EXAMPLES, 1, MAX_EXAMPLES) \
        if codec.TEST_EXAMPLES in info else None
    weight = number(info, codec.WEIGHT, low=0.0, high=float(count), low_open=True)
    shape = _field(info, codec.FEATURE_SHAPE)
    if (not isinstance(shape, list) or not 1 <= len(shape) <= MAX_FEATURE_AXES
            or not all(isinstance(n, Integral) and not isinstance(n, bool) and n >= 1
                       for n in shape)
            or math.prod(shape) > codec.MAX_ELEMENTS):
        raise Refused(f"{codec.FEATURE_SHAPE}={shown(shape)} is not 1 to {MAX_FEATURE_AXES} "
                      f"positive integers with at most {codec.MAX_ELEMENTS} entries")
    names = [k for k in info if isinstance(k, str) and k.startswith(codec.STAT_PREFIX)]
    if len(names) > MAX_CLIENT_METRICS:
        raise Refused(f"{len(names)} statistics (at most {MAX_CLIENT_METRICS})")
    stats = {}
    for key in names:
        name = key.removeprefix(codec.STAT_PREFIX)
        if not name or len(name) > MAX_METRIC_NAME:
            raise Refused(f"statistic name {shown(name)} is empty or too long")
        # at most float32's largest: the server stores the statistics in the run's dtype
        stats[name] = number(info, key, low=0.0, high=FLOAT32_MAX)
    keeps_state = _field(info, codec.KEEPS_STATE) if codec.KEEPS_STATE in info else False
    if not isinstance(keeps_state, bool):
        raise Refused(f"{codec.KEEPS_STATE}={shown(keeps_state)} is not true or false")
    return {"partition_id": pid, "count": count, "test_count": test_count, "weight": weight,
            "feature_shape": tuple(int(n) for n in shape), "stats": stats,
            "keeps_state": keeps_state}


def evaluation(content, node: dict, personal: bool, classification: bool = True) -> dict:
    """The checked metrics of one node's evaluate reply.

    Parameters
    ----------
    content : the reply's RecordDict.
    node : the node's checked handshake (:func:`node_info`).
    personal : whether the algorithm has personalised models (``personal_*`` metrics).
    classification : whether the problem has classes; a regression problem has no
        accuracy, so a reply that reports one is refused.

    Returns
    -------
    dict
        The metrics of the reply that the server averages: ``weight`` and
        ``num-examples`` (the handshake's), ``test-examples`` and every objective and
        accuracy the reply holds, as floats.

    Raises
    ------
    Refused
        naming the first field that fails its check (see the module docstring).
    """
    metrics = _record(content, codec.METRICS, (MetricRecord, ConfigRecord))
    weight = number(metrics, codec.WEIGHT, low=0.0, low_open=True)
    if not math.isclose(weight, node["weight"], rel_tol=1e-9):
        raise Refused(f"weight={weight:g} differs from the handshake's {node['weight']:g}")
    examples = integer(metrics, codec.NUM_EXAMPLES, 1, MAX_EXAMPLES)
    if examples != node["count"]:
        raise Refused(f"{codec.NUM_EXAMPLES}={examples} differs from the handshake's "
                      f"count {node['count']}")
    out: dict = {codec.WEIGHT: node["weight"], codec.NUM_EXAMPLES: node["count"]}
    if codec.TEST_EXAMPLES in metrics:
        tests = integer(metrics, codec.TEST_EXAMPLES, 1, MAX_EXAMPLES)
        if tests != node.get("test_count"):
            said = "no test data" if node.get("test_count") is None else \
                f"{node['test_count']} test examples"
            raise Refused(f"{codec.TEST_EXAMPLES}={tests}, but its handshake reported {said}")
        out[codec.TEST_EXAMPLES] = tests
    if "objective" not in metrics:
        raise Refused("no objective")
    # an accuracy is a weighted sum, which rounding can leave a hair above 1
    for names, high in ((LOSS_FIELDS, math.inf), (ACCURACIES, 1.0 + FRACTION_SLACK)):
        for key in names:
            if key not in metrics:
                continue
            if key.startswith("personal_") and not personal:
                raise Refused(f"{key}, but the algorithm has no personalised models")
            if key.endswith("accuracy") and not classification:
                raise Refused(f"{key}, but the problem is a regression (it has no accuracy)")
            if "test_" in key and codec.TEST_EXAMPLES not in out:
                raise Refused(f"{key} without {codec.TEST_EXAMPLES}")
            out[key] = number(metrics, key, low=0.0, high=high)
    return out
