import hypothesis.strategies as st
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis.extra.numpy import arrays

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.sparsity import (
    hard_threshold,
    hard_threshold_blocks,
    project_l2_ball,
    support_scores,
    top_indices,
)

# Small integer-valued floats make ties frequent, which is what the tie rule is about.
vectors = arrays("float64", st.integers(1, 12), elements=st.integers(-3, 3).map(float))


@given(vectors, st.integers(0, 14))
@settings(max_examples=300, deadline=None)
def test_keeps_exactly_k_positions_largest_first_ties_to_lower_index(v, k):
    x = torch.from_numpy(v)
    out = hard_threshold(x, k)
    d = x.numel()
    kept = top_indices(x, min(k, d))
    assert kept.numel() == min(k, d)
    # The kept set is the first min(k, d) positions of the order on (-|x_j|, j).
    order = sorted(range(d), key=lambda j: (-abs(v[j]), j))
    assert sorted(kept.tolist()) == sorted(order[: min(k, d)])
    mask = torch.zeros(d, dtype=torch.bool)
    mask[kept] = True
    assert torch.equal(out[mask], x[mask]) and (out[~mask] == 0).all()
    assert int((out != 0).sum()) <= k


@given(vectors, st.integers(0, 14))
@settings(max_examples=200, deadline=None)
def test_idempotent(v, k):
    x = torch.from_numpy(v)
    once = hard_threshold(x, k)
    assert torch.equal(hard_threshold(once, k), once)


def test_tie_rule_by_hand():
    x = torch.tensor([1.0, -2.0, 2.0, 1.0, -1.0])
    assert hard_threshold(x, 1).tolist() == [0.0, -2.0, 0.0, 0.0, 0.0]
    assert hard_threshold(x, 3).tolist() == [1.0, -2.0, 2.0, 0.0, 0.0]
    # never "keep all >= k-th value" (would keep 5) nor "prune all <= k-th" (would keep 2)
    assert int((hard_threshold(x, 3) != 0).sum()) == 3


def test_batched_and_per_block():
    x = torch.tensor([[3.0, 1.0, 2.0, 0.5], [0.1, -4.0, 0.2, 0.3]])
    assert hard_threshold(x, 1).tolist() == [[3.0, 0, 0, 0], [0, -4.0, 0, 0]]
    flat = torch.tensor([3.0, 1.0, 2.0, 0.5, 0.1, -4.0])  # two blocks of 3
    assert hard_threshold_blocks(flat, 1, 2).tolist() == [3.0, 0, 0, 0, 0, -4.0]


def test_k_at_least_d_returns_input_and_negative_k_is_rejected():
    x = torch.tensor([1.0, 2.0])
    assert torch.equal(hard_threshold(x, 5), x)
    with pytest.raises(ConfigError, match="k=-1"):
        hard_threshold(x, -1)


def test_l2_ball_projection():
    u = torch.tensor([[3.0, 4.0], [0.3, 0.4]])
    out = project_l2_ball(u, 1.0)
    assert torch.allclose(out[0], torch.tensor([0.6, 0.8]))
    assert torch.equal(out[1], u[1])


def _scores(x, truth):
    s = support_scores(torch.tensor(x), torch.tensor(truth))
    return s["support_precision"], s["support_recall"], s["support_f1"]


def test_support_scores():
    s = support_scores(torch.tensor([1.0, 0, 2, 0]), torch.tensor([1.0, 1, 0, 0]))
    assert s == {"support_precision": 0.5, "support_recall": 0.5, "support_f1": 0.5}
    # 1 hit of 2 estimated and 3 true: P = 1/2, R = 1/3, F1 = 2 (1/6) / (5/6) = 0.4
    assert _scores([1.0, 1, 0, 0], [1.0, 0, 1, 1]) == pytest.approx((0.5, 1 / 3, 0.4))
    # the edge cases the docstring promises: an empty estimate has precision 1, an empty
    # truth recall 1, zero against zero scores 1, and disjoint supports score 0
    assert _scores([0.0, 0, 0], [1.0, 0, 0]) == (1.0, 0.0, 0.0)
    assert _scores([1.0, 0, 0], [0.0, 0, 0]) == (0.0, 1.0, 0.0)
    assert _scores([0.0, 0, 0], [0.0, 0, 0]) == (1.0, 1.0, 1.0)
    assert _scores([1.0, 0], [0.0, 1]) == (0.0, 0.0, 0.0)
    assert fs.sparsity.density(torch.tensor([1.0, 0, 0, 0])) == 0.25


@given(arrays("float64", st.tuples(st.integers(1, 4), st.integers(1, 12)),
              elements=st.sampled_from([-2.0, -1.0, 0.0, 1.0, 2.0, float("nan")])),
       st.integers(0, 14))
@settings(max_examples=200, deadline=None)
def test_numpy_and_torch_paths_agree(v, k):
    """The CPU fast path (numpy) and the autograd/device path (torch) keep the same set."""
    x = torch.from_numpy(v)
    fast = hard_threshold(x, k)
    reference = hard_threshold(x.clone().requires_grad_(True), k).detach()
    assert torch.equal(fast.isnan(), reference.isnan())
    assert torch.equal(fast.nan_to_num(), reference.nan_to_num())


@given(arrays(st.sampled_from(["float32", "float64"]),
              st.tuples(st.integers(1, 4), st.integers(1, 12)),
              elements=st.sampled_from([-2.0, -1.0, -0.0, 0.0, 1.0, 2.0, float("nan"),
                                        float("-nan"), float("-inf")])),
       st.integers(1, 11))
@settings(max_examples=200, deadline=None)
def test_numpy_path_keeps_every_bit_of_what_it_keeps(v, k):
    """On the CPU fast path a kept entry keeps all its bits (a NaN's sign, a -0.0 tied at
    a zero threshold) and a dropped one becomes +0.0."""
    x = torch.from_numpy(v)
    out = hard_threshold(x, k)
    ints = torch.int32 if x.dtype == torch.float32 else torch.int64
    bits, kept = out.view(ints), out.view(ints) == x.view(ints)
    assert out.dtype == x.dtype and out.shape == x.shape
    assert torch.equal(bits[~kept], torch.zeros_like(bits[~kept]))  # +0.0
    assert torch.equal(kept | (out == 0), torch.ones_like(kept))


_W, _D = torch.randn(10, dtype=torch.float64), torch.randn(10, 12, dtype=torch.float64)
_MUST_BE_TENSOR = r"='(ndarray|list)' is invalid: must be a torch tensor of shape "
#: A wrong type or shape for each public operator of fs.sparsity that takes tensors: the
#: error names the argument, what it got and what it must be.
BAD_ARGUMENTS = [
    ("top_indices", lambda S: S.top_indices(np.arange(5.0), 2), r"^x" + _MUST_BE_TENSOR),
    ("top_indices", lambda S: S.top_indices(torch.tensor(1.0), 0),
     r"^x='tensor of shape \(\)' is invalid: must have shape \(\.\.\., d\)"),
    ("hard_threshold", lambda S: S.hard_threshold(np.arange(5.0), 2),
     r"^x" + _MUST_BE_TENSOR + r"\(\.\.\., d\)"),
    ("hard_threshold", lambda S: S.hard_threshold([1.0, 2.0], 1), r"^x" + _MUST_BE_TENSOR),
    ("hard_threshold", lambda S: S.hard_threshold(torch.tensor(1.0), 1),
     r"^x='tensor of shape \(\)'"),
    ("hard_threshold_blocks", lambda S: S.hard_threshold_blocks([1.0, 2.0], 1, 2),
     r"^x" + _MUST_BE_TENSOR + r"\(\.\.\., blocks \* m\)"),
    ("project_l2_ball", lambda S: S.project_l2_ball([1.0, 2.0], 1.0), r"^u" + _MUST_BE_TENSOR),
    ("project_l2_ball", lambda S: S.project_l2_ball(torch.arange(3), 1.0),
     r"^u='tensor of dtype torch.int64' is invalid: must be a floating-point tensor"),
    ("approx_projection", lambda S: S.approx_projection(_W, 2, torch.randn(7, 12)),
     r"^w='tensor of shape \(10,\)' is invalid: must have shape \(\.\.\., 7\): the "
     r"dictionary \(7, 12\) has atoms of length 7"),
    ("approx_projection", lambda S: S.approx_projection(np.ones(10), 2, _D),
     r"^w" + _MUST_BE_TENSOR + r"\(\.\.\., 10\)"),
    ("approx_projection", lambda S: S.approx_projection([1.0, 2.0], 1), r"^w" + _MUST_BE_TENSOR),
    ("approx_projection", lambda S: S.approx_projection(None, 1, _D),
     r"^w=None is invalid: must be a \(\.\.\., d\) tensor when no coefficients are given"),
    ("approx_projection", lambda S: S.approx_projection(None, 2, _D, coefficients=torch.ones(7)),
     r"^coefficients='tensor of shape \(7,\)' is invalid: must have shape \(12,\): one per "
     r"atom of the dictionary \(10, 12\)"),
    ("approx_projection", lambda S: S.approx_projection(
        torch.ones(3, 10, dtype=torch.float64), 2, _D, coefficients=torch.ones(2, 12)),
     r"^coefficients='tensor of shape \(2, 12\)' is invalid: must have shape \(3, 12\)"),
    ("approx_projection", lambda S: S.approx_projection(torch.arange(10), 2, _D),
     r"^w='tensor of dtype torch.int64' is invalid: must be a floating-point tensor"),
    ("identity_dictionary", lambda S: S.identity_dictionary(3, dtype="float32"),
     r"^dtype='float32' is invalid: must be torch.float32 or torch.float64"),
    ("gaussian_dictionary", lambda S: S.gaussian_dictionary(dim=3, atoms=2, dtype=np.float32),
     r"^dtype=<class 'numpy.float32'> is invalid"),
    ("ksvd", lambda S: S.ksvd([[1.0], [1.0, 2.0]], atoms=2, sparsity=1),
     r"^signals='list' is invalid: must be a \(num_signals, dim\) tensor or array"),
    ("ksvd", lambda S: S.ksvd((r for r in torch.ones(4, 3)), atoms=2, sparsity=1),
     r"^signals='generator' is invalid"),
    ("support", lambda S: S.support(np.ones(3)), r"^x" + _MUST_BE_TENSOR),
    ("support", lambda S: S.support(torch.ones(3), "0.1"), r"^tol='0.1' is invalid"),
    ("support_union", lambda S: S.support_union(), r"^xs=\(\) is invalid: needs at least one"),
    ("support_union", lambda S: S.support_union(torch.ones(3), torch.ones(4)),
     r"^xs\[1\]='tensor of shape \(4,\)' is invalid: must have the shape \(3,\) of xs\[0\]"),
    ("support_scores", lambda S: S.support_scores(torch.ones(3), torch.ones(1)),
     r"^truth='tensor of shape \(1,\)' is invalid: must have the shape \(3,\) of x"),
    ("support_scores", lambda S: S.support_scores([1.0], torch.ones(1)), r"^x" + _MUST_BE_TENSOR),
    ("density", lambda S: S.density([1.0, 0.0]), r"^x" + _MUST_BE_TENSOR),
    ("log_cosh", lambda S: S.log_cosh(np.ones(3)), r"^z" + _MUST_BE_TENSOR),
    ("phi_rho", lambda S: S.phi_rho([1.0, 0.0], 1.0), r"^x" + _MUST_BE_TENSOR),
    ("phi_rho_grad", lambda S: S.phi_rho_grad(np.ones(2), 1.0), r"^x" + _MUST_BE_TENSOR),
    ("zero_small", lambda S: S.zero_small(torch.tensor(1.0), 0.5),
     r"^x='tensor of shape \(\)' is invalid: must have shape \(\.\.\., d\)"),
    ("zero_small", lambda S: S.zero_small([1.0, 0.0], 0.5), r"^x" + _MUST_BE_TENSOR),
    ("magnitude_mask", lambda S: S.magnitude_mask(fs.problems.least_squares(), [1.0, 2.0], 0.5),
     r"^params" + _MUST_BE_TENSOR + r"\(P,\)"),
    ("fedspa_update", lambda S: S.fedspa_update([[True]], torch.ones(1, 1), torch.ones(1, 1),
                                                fs.problems.least_squares(), 0, 3),
     r"^mask" + _MUST_BE_TENSOR + r"\(S, P\)"),
]


@pytest.mark.parametrize("name, call, match", BAD_ARGUMENTS,
                         ids=[f"{n}-{i}" for i, (n, *_) in enumerate(BAD_ARGUMENTS)])
def test_a_wrong_type_or_shape_is_named_by_every_public_operator(name, call, match):
    with pytest.raises(ConfigError, match=match):
        call(fs.sparsity)


def test_every_public_operator_taking_tensors_has_a_wrong_argument_case():
    # classes, and builders of masks whose arguments are checked elsewhere (layouts,
    # densities, counts), need no case here
    checked_elsewhere = {"Dictionary", "as_dictionary", "omp", "fedspa_drop_fraction",
                         "layer_densities", "random_masks", "synflow_mask", "synflow_scores"}
    covered = {name for name, *_ in BAD_ARGUMENTS}
    assert set(fs.sparsity.__all__) - checked_elsewhere == covered
