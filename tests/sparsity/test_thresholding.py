import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings
from hypothesis.extra.numpy import arrays

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


def test_support_scores():
    s = support_scores(torch.tensor([1.0, 0, 2, 0]), torch.tensor([1.0, 1, 0, 0]))
    assert s == {"support_precision": 0.5, "support_recall": 0.5, "support_f1": 0.5}


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
