import math

import pytest
import torch

from fedsparse._validation import ConfigError
from fedsparse.sparsity import log_cosh, phi_rho, phi_rho_grad, zero_small


def test_phi_rho_matches_the_naive_formula_where_that_is_finite():
    x = torch.linspace(-0.05, 0.05, 41, dtype=torch.float64)
    rho = 0.01
    naive = rho * torch.log(torch.cosh(x / rho)).sum()
    assert torch.allclose(phi_rho(x, rho), naive, rtol=1e-13, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_log_cosh_term_is_stable_far_beyond_overflow(dtype):
    # |x / rho| = 1000 and 5000: cosh overflows (float64 beyond ~710), log cosh does not.
    rho = 1e-3
    x = torch.tensor([1.0, -1.0, 5.0, -0.9], dtype=dtype, requires_grad=True)
    assert torch.isinf(torch.cosh(x.detach() / rho)).all()  # the naive form fails here
    value = phi_rho(x, rho)
    assert torch.isfinite(value)
    # log cosh z = |z| - log 2 + log1p(exp(-2|z|)) and the last term underflows to 0
    expected = x.detach().abs().sum() - 4 * rho * math.log(2.0)
    assert torch.allclose(value.detach(), expected.to(dtype), rtol=1e-6)
    value.backward()
    assert torch.equal(x.grad, torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=dtype))
    assert torch.isfinite(log_cosh(torch.tensor([1e30, -1e30], dtype=dtype))).all()


def test_autograd_gradient_is_tanh_including_zero():
    rho = 0.3
    x = torch.tensor([-2.0, -0.1, 0.0, 0.2, 3.0], dtype=torch.float64, requires_grad=True)
    phi_rho(x, rho).backward()
    assert torch.allclose(x.grad, torch.tanh(x.detach() / rho), rtol=1e-14, atol=1e-16)
    assert torch.equal(phi_rho_grad(x.detach(), rho), torch.tanh(x.detach() / rho))
    assert x.grad[2] == 0


def test_phi_rho_brackets_the_l1_norm_and_sums_the_last_axis():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 50, generator=gen, dtype=torch.float64)
    rho = 0.05
    value = phi_rho(x, rho)
    l1 = x.abs().sum(-1)
    assert value.shape == (3,)
    assert (value <= l1).all() and (value >= l1 - 50 * rho * math.log(2.0)).all()


@pytest.mark.parametrize("rho", [0, -1e-3, float("nan"), "small"])
def test_bad_rho_is_a_clear_error(rho):
    with pytest.raises(ConfigError, match="rho="):
        phi_rho(torch.ones(3), rho)
    with pytest.raises(ConfigError, match="rho="):
        phi_rho_grad(torch.ones(3), rho)


def test_zero_small_zeroes_entries_below_the_threshold():
    x = torch.tensor([[0.5, -0.01, 0.02, -0.3, 0.04, 1.0, 2.0, -3.0]])
    out = zero_small(x, 0.03)
    assert torch.equal(out, torch.tensor([[0.5, 0.0, 0.0, -0.3, 0.04, 1.0, 2.0, -3.0]]))
    assert torch.equal(x[0, 1], torch.tensor(-0.01))  # the input is not modified


def test_zero_small_respects_the_floor_smallest_first_ties_by_index():
    # d = 8, floor 0.5: at most 4 zeros; two exist, so 2 of the 4 small entries go,
    # the smallest |x| first; the tie -0.02 / 0.02 goes to the lower index.
    x = torch.tensor([[0.0, 0.0, -0.02, 0.02, 0.001, 0.04, 1.0, 2.0]])
    out = zero_small(x, 0.05, floor=0.5)
    assert torch.equal(out, torch.tensor([[0.0, 0.0, 0.0, 0.02, 0.0, 0.04, 1.0, 2.0]]))
    assert int((out != 0).sum()) == 4


def test_zero_small_keeps_the_threshold_itself_and_rounds_the_floor_up():
    # |x| < threshold is zeroed, |x| = threshold kept (Liu et al. 2023's rule Z)
    x = torch.tensor([[0.5, 0.25, 1.0, 1.0]])
    assert torch.equal(zero_small(x, 0.25, floor=0.0), x)
    # d = 3, floor 0.5: ceil(1.5) = 2 non-zeros stay, so one of three small entries goes
    out = zero_small(torch.full((1, 3), 0.01), 0.1, floor=0.5)
    assert torch.equal(out, torch.tensor([[0.0, 0.01, 0.01]]))


def test_zero_small_floor_times_d_a_hair_above_an_integer_keeps_that_integer():
    # floor * d = 0.28 * 25 is 7.000000000000001 in floating point, but 7 entries are the
    # floor: all 25 entries are below the threshold, so exactly the 7 largest stay
    x = torch.arange(1, 26, dtype=torch.float64) / 100
    out = zero_small(x, 1.0, floor=0.28)
    assert out.nonzero().flatten().tolist() == list(range(18, 25))
    assert torch.equal(out[18:], x[18:])


def test_zero_small_rows_are_independent_and_never_unzeroed():
    x = torch.tensor([[0.01, 0.01, 0.01, 0.01],    # all small: only 2 may go
                      [0.0, 0.0, 0.0, 0.01],       # already 3 zeros: nothing more
                      [1.0, 0.01, 1.0, 1.0]])      # one small: it goes
    out = zero_small(x, 0.1, floor=0.5)
    assert torch.equal(out, torch.tensor([[0.0, 0.0, 0.01, 0.01],
                                          [0.0, 0.0, 0.0, 0.01],
                                          [1.0, 0.0, 1.0, 1.0]]))
    assert zero_small(x, 0.0) is x
    assert torch.equal(zero_small(torch.zeros(2, 5), 1.0), torch.zeros(2, 5))
    # floor 0: everything below the threshold goes; floor 1: nothing does
    assert int((zero_small(x, 0.1, floor=0.0) != 0).sum()) == 3
    assert torch.equal(zero_small(x, 0.1, floor=1.0), x)
    # leading axes are kept, and each of the 2 x 3 rows of 4 keeps its own 2 entries
    # (not 12 of the 24 as one row)
    assert torch.equal(zero_small(torch.full((2, 3, 4), 0.01), 0.1),
                       torch.tensor([0.0, 0.0, 0.01, 0.01]).expand(2, 3, 4))


def test_zero_small_bad_input():
    with pytest.raises(ConfigError, match="threshold=-1"):
        zero_small(torch.ones(3), -1)
    with pytest.raises(ConfigError, match="floor=1.5"):
        zero_small(torch.ones(3), 0.1, floor=1.5)


def _reference_zero_small(row, threshold, floor):
    row = list(row)
    budget = max(0, len(row) - math.ceil(floor * len(row)) - sum(v == 0 for v in row))
    small = sorted((abs(v), j) for j, v in enumerate(row) if v != 0 and abs(v) < threshold)
    for _, j in small[:budget]:
        row[j] = 0.0
    return row


@pytest.mark.parametrize("seed", range(5))
def test_zero_small_matches_a_row_by_row_reference_with_many_ties(seed):
    gen = torch.Generator().manual_seed(seed)
    # values on a coarse grid (many equal |x|) and some exact zeros
    x = torch.randint(-6, 7, (7, 30), generator=gen).to(torch.float64) / 4
    threshold = float(torch.rand((), generator=gen)) * 1.5
    floor = [0.0, 0.3, 0.5, 0.7, 1.0][seed]
    out = zero_small(x, threshold, floor=floor)
    expected = torch.tensor([_reference_zero_small(r, threshold, floor) for r in x.tolist()],
                            dtype=torch.float64)
    assert torch.equal(out, expected)


def test_zero_small_cuts_each_row_at_its_own_budget():
    # distinct |x| and a different number of zeros in every row: each row over its
    # budget is cut at its own rank (one shared rank would cut the others wrongly)
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(6, 200, generator=gen, dtype=torch.float64)
    for r in range(6):
        x[r, :10 * r] = 0.0
    out = zero_small(x, 1.5, floor=0.3)
    expected = torch.tensor([_reference_zero_small(r, 1.5, 0.3) for r in x.tolist()],
                            dtype=torch.float64)
    assert torch.equal(out, expected)
    assert len({int((row == 0).sum()) for row in out}) == 1  # every row at the floor
