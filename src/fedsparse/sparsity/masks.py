"""Pruning masks over the flat parameter vector of a model (Mao et al. 2022;
docs/decisions.md, section 4).

Magnitude and SynFlow masks (Tanaka et al. 2020) are data-free: one (P,) bool mask per
model. FedSpa (Huang et al. 2022) keeps one persistent mask per client and evolves it
after local training: cosine-annealed drop by magnitude, regrowth by gradient.

Every mask keeps an exact number of entries per scope: ``ceil(density * count)``
prunable entries, chosen by score with ties broken as for H_tau (the lower flat index
wins, docs/decisions.md, section 1). Only prunable entries compete (conv and linear weights, as
:class:`~fedsparse.models.layout.ParamLayout` marks them); biases and normalisation
parameters are always kept.

``density`` is the fraction *kept* (docs/decisions.md, section 4): Mao et al. 2022's
"60% pruned" is ``density=0.4``.

The magnitude mask is defined here; SynFlow's in :mod:`.synflow`, FedSpa's in :mod:`.fedspa`,
their shared selection in :mod:`._mask_common`. All are importable from this module.
"""

from __future__ import annotations

import torch

from .._validation import check_choice
from ._checks import check_tensor
from ._mask_common import (
    SCOPES,
    check_density,
    check_vector,
    layout_of,
    scopes,
    select,
)
from .fedspa import (
    DISTRIBUTIONS,
    fedspa_drop_fraction,
    fedspa_update,
    layer_densities,
    random_masks,
)
from .synflow import synflow_mask, synflow_scores

__all__ = ["DISTRIBUTIONS", "SCOPES", "fedspa_drop_fraction", "fedspa_update",
           "layer_densities", "magnitude_mask", "random_masks", "synflow_mask",
           "synflow_scores"]


def magnitude_mask(problem, params: torch.Tensor, density: float, scope: str = "layer"
                   ) -> torch.Tensor:
    """Magnitude pruning mask (MAG in Mao et al. 2022): keep the largest ``|params|``.

    Parameters
    ----------
    problem : a problem (its ``layout`` or ``module`` gives the parameter tensors), a
        :class:`~fedsparse.models.layout.ParamLayout` or a torch module. A problem without
        a module (linear models) is one fully prunable tensor.
    params : (P,) flat parameter vector the mask is scored on.
    density : fraction of prunable entries kept, in (0, 1].
    scope : ``"layer"`` keeps ``ceil(density * n_l)`` entries of every prunable tensor
        ``l``; ``"global"`` keeps ``ceil(density * n)`` of all ``n`` prunable entries.

    Returns
    -------
    (P,) bool mask, True on kept entries and on every non-prunable entry. Ties in
    ``|params|`` go to the lower flat index, so the count is exact.
    """
    density = check_density(density)
    scope = check_choice("scope", scope, SCOPES)
    # the type first: a linear problem's layout is sized by params
    size = check_tensor("params", params, "(P,), the flat parameter vector").shape[-1]
    layout = layout_of(problem, size)
    params = check_vector("params", params, layout.size)
    return select(params.detach().abs(), layout, scopes(layout, scope), density)
