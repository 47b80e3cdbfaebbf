"""Sparsity operators: hard thresholding, supports, projections (SPEC.md section 1)."""

from .dictionaries import (
    Dictionary,
    approx_projection,
    as_dictionary,
    gaussian_dictionary,
    identity_dictionary,
)
from .ksvd import ksvd, omp
from .supports import density, support, support_scores, support_union
from .thresholding import (
    hard_threshold,
    hard_threshold_blocks,
    project_l2_ball,
    smooth_l1,
    smooth_l1_grad,
    top_indices,
)

__all__ = [
    "Dictionary",
    "approx_projection",
    "as_dictionary",
    "gaussian_dictionary",
    "identity_dictionary",
    "ksvd",
    "omp",
    "density",
    "hard_threshold",
    "hard_threshold_blocks",
    "project_l2_ball",
    "smooth_l1",
    "smooth_l1_grad",
    "support",
    "support_scores",
    "support_union",
    "top_indices",
]

from .masks import (  # noqa: E402  (appended: pruning masks of SPEC.md section 5.2)
    fedspa_drop_fraction,
    fedspa_update,
    layer_densities,
    magnitude_mask,
    random_masks,
    synflow_mask,
    synflow_scores,
)

__all__ += [
    "fedspa_drop_fraction",
    "fedspa_update",
    "layer_densities",
    "magnitude_mask",
    "random_masks",
    "synflow_mask",
    "synflow_scores",
]

from .smooth import log_cosh, phi_rho, phi_rho_grad, zero_small  # noqa: E402  (FedMac, SPEC 5.3)

__all__ += ["log_cosh", "phi_rho", "phi_rho_grad", "zero_small"]
