"""Where each tensor of a model lives in its flat parameter vector.

Every model in fedsparse is one flat (P,) vector (a cohort of S models is (S, P)): the
concatenation of ``p.reshape(-1)`` for the trainable ``p`` in ``module.parameters()``
order. Codecs, byte counts, aggregation, thresholding and masks all work on that vector;
:class:`ParamLayout` says which entries belong to which tensor and which may be pruned.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from .._validation import check_int, fail

#: Module types whose ``weight`` is prunable (docs/decisions.md, section 4: conv and linear
#: weights only; biases and normalisation parameters are never masked).
PRUNABLE_TYPES = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)


def trainable_parameters(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """``(name, parameter)`` of the trainable parameters of ``module``, in flat-vector order."""
    named = []
    for name, p in module.named_parameters():
        if isinstance(p, nn.parameter.UninitializedParameter):
            raise fail("module", type(module).__name__,
                       f"parameter {name!r} is uninitialised (a lazy layer); run one forward "
                       "pass before building the problem")
        if p.requires_grad:
            named.append((name, p))
    return named


@dataclass(frozen=True, eq=False)
class ParamLayout:
    """Names, shapes and positions of a model's tensors in its flat (P,) vector.

    Attributes
    ----------
    names : parameter names (``module.named_parameters()``), in flat-vector order.
    shapes : shape of each tensor.
    offsets : start of each tensor in the flat vector, plus P at the end
        (``len(names) + 1`` entries).
    prunable : (P,) bool, True on the weights of conv and linear layers only.
    layer : (P,) int64, the index into ``names`` of the tensor holding each entry.
    """

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]
    prunable: torch.Tensor
    layer: torch.Tensor

    @property
    def size(self) -> int:
        """P, the length of the flat vector."""
        return self.offsets[-1]

    def __len__(self) -> int:
        return len(self.names)

    def __repr__(self) -> str:
        return (f"ParamLayout(tensors={len(self.names)}, size={self.size}, "
                f"prunable={int(self.prunable.sum())})")

    def _index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            shown = ", ".join(self.names[:8]) + (", ..." if len(self.names) > 8 else "")
            raise fail("name", name, f"must be one of the layout's tensors ({shown})") from None

    def slice(self, name: str) -> slice:
        """Positions of tensor ``name`` in the flat vector."""
        i = self._index(name)
        return slice(self.offsets[i], self.offsets[i + 1])

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Views of the tensors in ``flat``.

        Parameters
        ----------
        flat : (..., P) flat vector(s).

        Returns
        -------
        dict name -> (..., *shape) view into ``flat`` (writes go through).
        """
        if flat.ndim < 1 or flat.shape[-1] != self.size:
            raise fail("flat", tuple(flat.shape), f"must have last dimension {self.size}")
        lead = flat.shape[:-1]
        return {name: flat[..., a:b].view(*lead, *shape)
                for name, shape, a, b in zip(self.names, self.shapes, self.offsets[:-1],
                                             self.offsets[1:], strict=True)}

    def flatten(self, tensors: Mapping[str, torch.Tensor] | Iterable[torch.Tensor]
                ) -> torch.Tensor:
        """The flat vector(s) of ``tensors`` (the inverse of :meth:`unflatten`).

        Parameters
        ----------
        tensors : dict name -> (..., *shape), or the tensors in layout order. Leading
            dimensions (the same for every tensor) are kept.

        Returns
        -------
        (..., P) tensor.
        """
        if isinstance(tensors, Mapping):
            missing = [n for n in self.names if n not in tensors]
            extra = [n for n in tensors if n not in self.names]
            if missing or extra:
                raise fail("tensors", sorted(tensors),
                           f"must have exactly the layout's names (missing {missing[:5]}, "
                           f"unknown {extra[:5]})")
            tensors = [tensors[n] for n in self.names]
        tensors = list(tensors)
        if len(tensors) != len(self.names):
            raise fail("tensors", f"{len(tensors)} tensors",
                       f"must be {len(self.names)} tensors, one per layout entry")
        parts, lead = [], None
        for name, shape, t in zip(self.names, self.shapes, tensors, strict=True):
            k = len(shape)
            if tuple(t.shape[t.ndim - k:]) != shape or t.ndim < k:
                raise fail(f"tensors[{name!r}]", tuple(t.shape), f"must end with shape {shape}")
            here = tuple(t.shape[:t.ndim - k])
            if lead is None:
                lead = here
            elif here != lead:
                raise fail(f"tensors[{name!r}]", tuple(t.shape),
                           f"must have the leading dimensions {lead} of the first tensor")
            parts.append(t.reshape(*here, -1))
        return torch.cat(parts, dim=-1)

    @classmethod
    def from_module(cls, module: nn.Module) -> ParamLayout:
        """The layout of ``module``'s trainable parameters (``parameters()`` order).

        Prunable: ``weight`` of :class:`~torch.nn.Conv1d`/``2d``/``3d`` and
        :class:`~torch.nn.Linear` modules (never biases or norm parameters).
        """
        if not isinstance(module, nn.Module):
            raise fail("module", type(module).__name__, "must be a torch.nn.Module")
        prunable_ids = {id(m.weight) for m in module.modules()
                        if isinstance(m, PRUNABLE_TYPES) and isinstance(m.weight, nn.Parameter)
                        and m.weight.ndim >= 2}
        named = trainable_parameters(module)
        names = tuple(n for n, _ in named)
        shapes = tuple(tuple(p.shape) for _, p in named)
        sizes = [math.prod(s) for s in shapes]
        offsets = [0]
        for s in sizes:
            offsets.append(offsets[-1] + s)
        flags = torch.tensor([id(p) in prunable_ids for _, p in named], dtype=torch.bool)
        counts = torch.tensor(sizes, dtype=torch.int64)
        return cls(names=names, shapes=shapes, offsets=tuple(offsets),
                   prunable=flags.repeat_interleave(counts),
                   layer=torch.arange(len(names), dtype=torch.int64).repeat_interleave(counts))

    @classmethod
    def dense(cls, P: int) -> ParamLayout:
        """The layout of a linear model: one tensor ``"weight"`` of P entries, all prunable."""
        P = check_int("P", P, minimum=1)
        return cls(names=("weight",), shapes=((P,),), offsets=(0, P),
                   prunable=torch.ones(P, dtype=torch.bool),
                   layer=torch.zeros(P, dtype=torch.int64))
