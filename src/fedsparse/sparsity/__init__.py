"""Sparsity operators: hard thresholding, supports, projections, dictionaries, pruning
masks and the smoothed l1 norm (see docs/decisions.md, section 1)."""

from .dictionaries import (
    Dictionary,
    approx_projection,
    as_dictionary,
    gaussian_dictionary,
    identity_dictionary,
)
from .ksvd import ksvd, omp
from .masks import (
    fedspa_drop_fraction,
    fedspa_update,
    layer_densities,
    magnitude_mask,
    random_masks,
    synflow_mask,
    synflow_scores,
)
from .smooth import log_cosh, phi_rho, phi_rho_grad, zero_small
from .supports import density, support, support_scores, support_union
from .thresholding import hard_threshold, hard_threshold_blocks, project_l2_ball, top_indices

__all__ = [
    "Dictionary",
    "approx_projection",
    "as_dictionary",
    "density",
    "fedspa_drop_fraction",
    "fedspa_update",
    "gaussian_dictionary",
    "hard_threshold",
    "hard_threshold_blocks",
    "identity_dictionary",
    "ksvd",
    "layer_densities",
    "log_cosh",
    "magnitude_mask",
    "omp",
    "phi_rho",
    "phi_rho_grad",
    "project_l2_ball",
    "random_masks",
    "support",
    "support_scores",
    "support_union",
    "synflow_mask",
    "synflow_scores",
    "top_indices",
    "zero_small",
]
