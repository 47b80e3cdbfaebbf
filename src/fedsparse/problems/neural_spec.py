"""A neural problem from a config table: the model's ``kind`` and its builder's arguments,
with the input shape and class count filled in from the data."""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping

from .._validation import check_choice, fail
from .neural import NeuralProblem, neural


def neural_from_spec(spec: Mapping, *, feature_shape: tuple[int, ...] | None = None,
                     num_classes: int | None = None, **options) -> NeuralProblem:
    """A neural problem from a config table such as ``{kind = "mlp", hidden = [100]}``.

    Parameters
    ----------
    spec : mapping with ``kind`` (a key of :data:`fedsparse.models.REGISTRY`) and keyword
        arguments of that builder. ``in_features`` (mlp), ``in_channels`` and
        ``image_size`` (conv models) and ``num_classes`` default to the data's.
    feature_shape : the data's feature shape, e.g. ``(784,)`` or ``(1, 28, 28)``.
    num_classes : the data's number of classes.
    **options : passed to :func:`neural` (``dtype``, ``path``, ``chunk_clients``, ``autocast``).
    """
    from ..models import REGISTRY

    if not isinstance(spec, Mapping) or "kind" not in spec:
        raise fail("model", spec, 'must be a table with a "kind" key, e.g. '
                                  '{kind = "mlp", hidden = [100]}')
    spec = dict(spec)
    kind = check_choice("model.kind", spec.pop("kind"), REGISTRY)
    builder = REGISTRY[kind]
    accepted = inspect.signature(builder).parameters
    unknown = sorted(set(spec) - set(accepted))
    if unknown:
        raise fail("model", unknown, f"unknown keys for kind {kind!r}; allowed: "
                                     + ", ".join(accepted))
    if feature_shape is not None:
        fs = tuple(int(s) for s in feature_shape)
        if kind == "mlp":
            spec.setdefault("in_features", math.prod(fs))
        else:
            if len(fs) != 3:
                raise fail("feature_shape", fs, f"must be (channels, height, width) for "
                                                f"model kind {kind!r}")
            spec.setdefault("in_channels", fs[0])
            if "image_size" in accepted:
                if fs[1] != fs[2]:
                    raise fail("feature_shape", fs, f"must hold square images for model kind "
                                                    f"{kind!r}")
                spec.setdefault("image_size", fs[1])
    if num_classes is not None:
        spec.setdefault("num_classes", num_classes)
    missing = [n for n, p in accepted.items()
               if p.default is inspect.Parameter.empty and n not in spec]
    if missing:
        raise fail("model", {"kind": kind, **spec},
                   f"needs {', '.join(missing)} (or the data's feature shape)")
    return neural(builder(**spec), **options)
