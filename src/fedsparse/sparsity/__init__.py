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
