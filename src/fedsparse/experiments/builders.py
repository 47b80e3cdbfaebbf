"""Build what a config's tables describe: the data set, the problem, the algorithm and
the channel of a run (each table's ``kind`` picks a registered builder, the other keys
are its arguments; a mistake is a ConfigError naming the table and the key)."""

from __future__ import annotations

import inspect
from pathlib import Path

import torch

from .._validation import ConfigError, check_choice, check_int, fail
from .config_checks import check_keys, check_table, did_you_mean


def _kwargs(table: dict) -> dict:
    return {k: v for k, v in table.items() if k != "kind"}


def builder_arguments(fn, table: dict | None = None) -> tuple[str, ...] | None:
    """The keyword arguments ``fn`` takes (None when it takes ``**kwargs``).

    The real-data builders (``federated_real``, ``libsvm_file``) pass their ``**kwargs``
    to a partitioner: given their ``table``, they take that partition's options (None for
    a partition they do not know, which they refuse by name).
    """
    params = inspect.signature(fn).parameters
    names = tuple(name for name, p in params.items()
                  if p.kind in (inspect.Parameter.KEYWORD_ONLY,
                                inspect.Parameter.POSITIONAL_OR_KEYWORD))
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return names
    partition = _partition_of(fn, table)
    if partition is None:
        return None
    from ..data.real import partition_options

    return names + partition_options(partition)


def _partition_of(fn, table: dict | None) -> str | None:
    """The partition a real-data builder's ``table`` asks for (its default when unset),
    or None for another builder or a partition that is not one of PARTITIONS."""
    from ..data.real import PARTITIONS, federated_real, libsvm_file

    if table is None or fn not in (federated_real, libsvm_file):
        return None
    partition = table.get("partition", inspect.signature(fn).parameters["partition"].default)
    return partition if isinstance(partition, str) and partition in PARTITIONS else None


def _build(table: str, registry: dict, spec: dict, **extra):
    """``registry[spec["kind"]](**rest of spec, **extra)``; an unknown kind or keyword, or
    a value the builder cannot take, is a ConfigError naming the table and the key."""
    spec = check_table(table, spec)
    kind = spec.get("kind")
    if not isinstance(kind, str) or kind not in registry:
        raise fail(f"{table}.kind", kind, f"must be one of {', '.join(map(repr, registry))}"
                   f"{did_you_mean(kind, registry)}")
    fn, kwargs = registry[kind], _kwargs(spec)
    allowed = builder_arguments(fn, spec)
    if allowed is not None:
        allowed = [a for a in allowed if a not in extra]
        partition = _partition_of(fn, spec)
        for key in kwargs:
            if key not in allowed:
                if key in extra:
                    why = f"{table}.{key} is set by the run itself"
                elif partition is None:
                    why = f"{table} {kind!r} takes no argument {key!r}{did_you_mean(key, allowed)}"
                else:  # an option of another partition, or a typo
                    from ..data.real import partition_option_note

                    why = (f"{table} {kind!r} with partition {partition!r} takes no argument "
                           f"{key!r}{did_you_mean(key, allowed) or partition_option_note(key)}")
                raise ConfigError(f"{why}; its arguments: {', '.join(allowed) or '(none)'}")
    try:
        return fn(**kwargs, **extra)
    except ConfigError:
        raise
    except ValueError as exc:  # e.g. a DataFormatError naming the file and the line
        raise ConfigError(f"{table} {kind!r}: {exc}") from None
    except (TypeError, RuntimeError, OverflowError) as exc:
        # a value of the wrong type that slipped past the builder's own checks: name the
        # table and its arguments rather than show a traceback from inside torch/numpy
        raise ConfigError(f"{table} {kind!r} cannot be built from {kwargs}: "
                          f"{type(exc).__name__}: {exc}") from None


def build_data(spec: dict, dtype: torch.dtype):
    """The FederatedDataset of a ``[data]`` table (``kind`` = a key of GENERATORS)."""
    from .. import data as data_mod
    from ..data.real import check_path

    path = spec.get("path") if isinstance(spec, dict) else None
    if path is not None and spec.get("kind") == "federated_real":
        check_path(spec.get("dataset"), path, "data.path")  # before asking if it exists
    place = "folder" if isinstance(spec, dict) and spec.get("kind") == "ondisk" else "file"
    hint = f"; point it at your copy with --set data.path=/path/to/{place}"
    if isinstance(path, str) and path and not Path(path).expanduser().exists():
        raise ConfigError(f"data.path={path!r} does not exist{hint}")
    try:
        return _build("data", data_mod.GENERATORS, spec, dtype=dtype)
    except ConfigError as exc:
        if str(exc).startswith("path=None"):  # a data set read from a file, no path given
            raise ConfigError(f"{exc}{hint}") from None
        if "'NaN/inf'" in str(exc) and path is None:  # a generator overflowed: name its input
            given = ", ".join(f"data.{k}={v!r}" for k, v in spec.items() if k != "kind")
            raise ConfigError(f"data {spec.get('kind')!r} made values that are not finite "
                              f"({exc}): one of {given} is too large for {dtype}") from None
        raise
    except FileNotFoundError as exc:  # e.g. a named data set that is not installed
        raise ConfigError(f"data {spec.get('kind')!r}: {exc}"
                          f"{hint if isinstance(path, str) else ''}") from None


def build_problem(spec: dict):
    """The Problem of a ``[problem]`` table (``kind`` = a key of problems.REGISTRY)."""
    from .. import problems

    return _build("problem", problems.REGISTRY, spec)


def build_algorithm(spec: dict):
    """The Algorithm of an ``[algorithm]`` table (``kind`` = a key of algorithms.REGISTRY)."""
    from .. import algorithms

    return _build("algorithm", algorithms.REGISTRY, spec)


#: The keys of each ``[channel]`` kind (:func:`build_channel`).
CHANNEL_KEYS = {
    "perfect": ("kind",),
    "bernoulli": ("kind", "probability"),
    "safari": ("kind", "probability", "groups", "num_clients", "num_groups",
               "at_least_one_per_group", "full_first_round"),
    "scheduled": ("kind", "delivered", "cycle"),
}


def _scheduled_channel(spec: dict, scheduled):
    """A ``scheduled`` channel table checked before it reaches torch."""
    rows = spec.get("delivered")
    allowed = ("a list of rounds, each a list of 0/1 or true/false with one entry per "
               "client, all rounds of the same length")
    if not isinstance(rows, list) or not rows or not all(
            isinstance(r, list) and r and len(r) == len(rows[0]) for r in rows):
        raise fail("channel.delivered", rows, allowed)
    if not all(v in (0, 1) and (isinstance(v, bool) or type(v) is int) for r in rows for v in r):
        raise fail("channel.delivered", rows, allowed)
    cycle = spec.get("cycle", False)
    if not isinstance(cycle, bool):
        raise fail("channel.cycle", cycle, "must be true or false")
    return scheduled(torch.tensor(rows, dtype=torch.bool), cycle=cycle)


def build_channel(spec: dict | None):
    """The channel of a ``[channel]`` table (None when there is none: every upload arrives).

    Kinds:

    * ``perfect``: every upload arrives;
    * ``bernoulli``: ``probability`` = one number in [0, 1] or one per client;
    * ``scheduled``: a recorded delivery trace, ``delivered`` = one list of 0/1 (or
      true/false) per round with one entry per client, repeated after its last round if
      ``cycle = true`` (:class:`fedsparse.channels.ScheduledChannel`);
    * ``safari``: the channel of Mao et al. 2022's experiments
      (:func:`fedsparse.channels.safari_channel`): ``probability`` (a number, one per
      client, or ``"asymmetric"``: 0.18 for group 0 and 0.6 for the rest, the public
      code's variant), the client groups, and ``at_least_one_per_group`` /
      ``full_first_round`` (both default true). The groups are either ``groups`` = one id
      per client, or ``num_clients`` and ``num_groups``: consecutive blocks of clients
      (:func:`fedsparse.data.partition.contiguous_groups`), the same rule as the data
      table ``partition = "groups"`` with ``contiguous = true``, so the two agree when
      they name the same numbers. A channel does not see the data set, so the numbers
      are repeated in the channel table; a run whose data has more clients than the
      channel has groups for stops with an error naming ``groups``.

    Example::

        channel = {kind = "safari", probability = 0.6, num_clients = 50, num_groups = 2}
    """
    from ..channels import BernoulliChannel, PerfectChannel, ScheduledChannel, safari_channel

    if not spec:
        return None
    spec = check_table("channel", spec)
    kind = check_choice("channel.kind", spec.get("kind"), tuple(CHANNEL_KEYS))
    check_keys("[channel]", spec, CHANNEL_KEYS[kind])
    if kind == "perfect":
        return PerfectChannel()
    if kind == "scheduled":
        return _scheduled_channel(spec, ScheduledChannel)
    if "probability" not in spec:
        raise fail("channel.probability", None, f"a {kind} channel needs a probability in "
                   "[0, 1]" + (' (or "asymmetric")' if kind == "safari" else ""))
    if kind == "bernoulli":
        return BernoulliChannel(spec["probability"])
    if "groups" in spec:
        if "num_clients" in spec or "num_groups" in spec:
            raise fail("channel.groups", spec["groups"], "give either groups (one id per "
                       "client) or num_clients and num_groups (consecutive blocks), not both")
        groups = spec["groups"]
        if not isinstance(groups, list) or not groups or not all(
                isinstance(g, int) and not isinstance(g, bool) for g in groups):
            raise fail("channel.groups", groups, "must be a list of integer group ids, one "
                       "per client")
    else:
        from ..data.partition import contiguous_groups

        missing = [k for k in ("num_clients", "num_groups") if k not in spec]
        if missing:
            raise fail(f"channel.{missing[0]}", None, "a safari channel needs its client "
                       "groups: groups = [one id per client], or num_clients and num_groups "
                       "(consecutive blocks, as the data's contiguous group split)")
        groups = contiguous_groups(check_int("channel.num_clients", spec["num_clients"],
                                             minimum=1),
                                   check_int("channel.num_groups", spec["num_groups"],
                                             minimum=1))
    flags = {}
    for key in ("at_least_one_per_group", "full_first_round"):
        value = spec.get(key, True)
        if not isinstance(value, bool):
            raise fail(f"channel.{key}", value, "must be true or false")
        flags[key] = value
    probability = spec["probability"]
    if isinstance(probability, str) and probability != "asymmetric":
        raise fail("channel.probability", probability, 'must be a number in [0, 1], one '
                   'per client, or "asymmetric"')
    return safari_channel(probability, groups, **flags)
