"""Pruning masks: magnitude, SynFlow (Tanaka et al. 2020), FedSpa (Huang et al. 2022)."""

import copy
import math
from fractions import Fraction

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings
from torch import nn

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.models import ParamLayout
from fedsparse.sparsity import (
    fedspa_drop_fraction,
    fedspa_update,
    layer_densities,
    magnitude_mask,
    random_masks,
    synflow_mask,
    synflow_scores,
)

# ----------------------------------------------------------------------------- helpers


def make_layout(sizes, flags):
    """A layout of 1-D tensors of ``sizes``; tensor ``l`` is prunable iff ``flags[l]``."""
    offsets = [0]
    for n in sizes:
        offsets.append(offsets[-1] + n)
    counts = torch.tensor(sizes)
    return ParamLayout(names=tuple(f"t{i}" for i in range(len(sizes))),
                       shapes=tuple((n,) for n in sizes), offsets=tuple(offsets),
                       prunable=torch.tensor(flags).repeat_interleave(counts),
                       layer=torch.arange(len(sizes)).repeat_interleave(counts))


def scopes(layout, scope):
    """Index lists of the prunable entries of each scope, computed without the library."""
    groups = []
    for lo, hi in zip(layout.offsets[:-1], layout.offsets[1:], strict=True):
        idx = [j for j in range(lo, hi) if layout.prunable[j]]
        if idx:
            groups.append(idx)
    if scope == "global":
        return [sum(groups, [])] if groups else []
    return groups


def top_by_h_tau(values, idx, k):
    """The k positions of idx with largest |values|, ties to the lower index."""
    return set(sorted(idx, key=lambda j: (-abs(float(values[j])), j))[:k])


# Tensor sizes and prunable flags; small integer values make ties frequent.
layouts = st.lists(st.tuples(st.integers(1, 9), st.booleans()), min_size=1, max_size=5).map(
    lambda spec: make_layout([n for n, _ in spec], [f for _, f in spec]))
percent = st.integers(1, 100)   # density = percent / 100, exact as a decimal


@st.composite
def layout_and_vector(draw):
    layout = draw(layouts)
    values = draw(st.lists(st.integers(-3, 3), min_size=layout.size, max_size=layout.size))
    return layout, torch.tensor(values, dtype=torch.float64)


# --------------------------------------------------------------------------- magnitude


@given(layout_and_vector(), percent, st.sampled_from(["layer", "global"]))
@settings(max_examples=300, deadline=None)
def test_magnitude_mask_exact_counts_ties_and_non_prunable(case, pct, scope):
    layout, x = case
    mask = magnitude_mask(layout, x, pct / 100, scope=scope)
    assert mask.dtype == torch.bool and mask.shape == (layout.size,)
    assert mask[~layout.prunable].all()                      # never prune biases/norms
    expected = set(j for j in range(layout.size) if not layout.prunable[j])
    for idx in scopes(layout, scope):
        k = -(-pct * len(idx) // 100)                        # ceil(density * count), exact
        assert int(mask[idx].sum()) == k
        expected |= top_by_h_tau(x, idx, k)
    assert set(mask.nonzero().squeeze(1).tolist()) == expected


def test_magnitude_tie_rule_and_decimal_density_by_hand():
    layout = ParamLayout.dense(5)
    x = torch.tensor([1.0, -2.0, 2.0, 1.0, -1.0])
    # ceil(0.6 * 5) = 3: both 2s, then the first of the three tied 1s.
    assert magnitude_mask(layout, x, 0.6).tolist() == [True, True, True, False, False]
    assert magnitude_mask(layout, x, 0.2).tolist() == [False, True, False, False, False]
    assert magnitude_mask(layout, x, 1.0).all()
    # 0.07 * 100 is 7.000000000000001 in binary floating point (so is 0.28 * 25): the
    # density is read as the decimal it prints as, so 7 (and 7) entries are kept, not 8.
    assert int(magnitude_mask(ParamLayout.dense(100), torch.arange(100.0), 0.07).sum()) == 7
    assert int(magnitude_mask(ParamLayout.dense(25), torch.arange(25.0), 0.28).sum()) == 7


def test_magnitude_per_layer_vs_global_on_a_module():
    net = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    layout = ParamLayout.from_module(net)
    x = torch.arange(1.0, layout.size + 1)                   # later tensors are larger
    per_layer = magnitude_mask(net, x, 0.5, scope="layer")
    glob = magnitude_mask(layout, x, 0.5, scope="global")
    w1, w2 = layout.slice("0.weight"), layout.slice("2.weight")
    assert int(per_layer[w1].sum()) == 6 and int(per_layer[w2].sum()) == 3
    # Globally the 9 kept are the largest: all of the last weight, 3 of the first.
    assert int(glob[w2].sum()) == 6 and int(glob[w1].sum()) == 3
    for name in ("0.bias", "1.weight", "1.bias", "2.bias"):
        assert per_layer[layout.slice(name)].all() and glob[layout.slice(name)].all()


def test_magnitude_mask_takes_the_layout_of_a_neural_problem():
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.GroupNorm(1, 2), nn.Flatten(), nn.Linear(8, 3))
    problem = fs.problems.neural(net)
    layout = ParamLayout.from_module(net)
    x = torch.randn(layout.size, generator=torch.Generator().manual_seed(0))
    mask = magnitude_mask(problem, x, 0.3)
    assert torch.equal(mask, magnitude_mask(layout, x, 0.3))
    assert int(mask[layout.slice("0.weight")].sum()) == 6       # ceil(0.3 * 18)
    assert int(mask[layout.slice("3.weight")].sum()) == 8       # ceil(0.3 * 24)
    assert mask[layout.slice("1.weight")].all() and mask[layout.slice("0.bias")].all()


def test_magnitude_mask_accepts_linear_problems_as_one_dense_tensor():
    x = torch.tensor([0.5, -3.0, 1.0, 2.0])
    mask = magnitude_mask(fs.problems.least_squares(), x, 0.5)
    assert mask.tolist() == [False, True, False, True]


@pytest.mark.parametrize("density", [0, 0.0, -0.1, 1.5, float("nan"), "0.5", None])
def test_density_outside_unit_interval_is_rejected_by_name(density):
    layout = ParamLayout.dense(4)
    with pytest.raises(ConfigError, match="density"):
        magnitude_mask(layout, torch.ones(4), density)
    with pytest.raises(ConfigError, match="density"):
        random_masks(layout, density, [0], seed=0)


def test_bad_scope_and_params_are_rejected():
    layout = ParamLayout.dense(4)
    with pytest.raises(ConfigError, match="scope"):
        magnitude_mask(layout, torch.ones(4), 0.5, scope="network")
    with pytest.raises(ConfigError, match="params.*P=4"):
        magnitude_mask(layout, torch.ones(5), 0.5)
    with pytest.raises(ConfigError, match="params"):
        magnitude_mask(layout, torch.ones(2, 4), 0.5)
    with pytest.raises(ConfigError, match="params"):
        magnitude_mask(layout, [1.0, 2.0, 3.0, 4.0], 0.5)
    with pytest.raises(ConfigError, match="problem"):
        magnitude_mask("resnet", torch.ones(4), 0.5)


# ----------------------------------------------------------------------------- SynFlow


def two_layer_net():
    """Linear(3,2)-ReLU-Linear(2,2) with dyadic weights, so every score below is exact."""
    net = nn.Sequential(nn.Linear(3, 2), nn.ReLU(), nn.Linear(2, 2))
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[0.5, -1.0, 0.25], [-2.0, 0.125, 1.0]]))
        net[0].bias.copy_(torch.tensor([0.5, -0.25]))
        net[2].weight.copy_(torch.tensor([[1.0, -0.5], [0.25, 2.0]]))
        net[2].bias.copy_(torch.tensor([-1.0, 0.5]))
    return net


def flat(net):
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def test_synflow_scores_by_hand():
    # With |theta| and an all-ones input, R = sum_k sum_j |W2_kj| h_j + sum_k |b2_k| with
    # h_j = sum_i |W1_ji| + |b1_j| (the ReLU never clips), so
    # score(W1_ji) = |W1_ji| * sum_k |W2_kj|  (column sums 1.25 and 2.5),
    # score(W2_kj) = |W2_kj| * h_j            (h = 2.25, 3.375).
    net = two_layer_net()
    layout = ParamLayout.from_module(net)
    s = layout.unflatten(synflow_scores(net, layout, flat(net), (3,)))
    assert s["0.weight"].tolist() == [[0.625, 1.25, 0.3125], [5.0, 0.3125, 2.5]]
    assert s["2.weight"].tolist() == [[2.25, 1.6875], [0.5625, 6.75]]
    assert s["0.bias"].tolist() == [0.5 * 1.25, 0.25 * 2.5]   # |b1_j| * sum_k |W2_kj|
    assert s["2.bias"].tolist() == [1.0, 0.5]


def test_synflow_mask_one_iteration_by_hand():
    net = two_layer_net()
    layout = ParamLayout.from_module(net)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    m = layout.unflatten(synflow_mask(net, flat(net), 0.5, iterations=1, input_shape=(3,)))
    # ceil(0.5 * 6) = 3 of W1: scores 5.0, 2.5, 1.25; ceil(0.5 * 4) = 2 of W2: 6.75, 2.25.
    assert m["0.weight"].tolist() == [[False, True, False], [True, False, True]]
    assert m["2.weight"].tolist() == [[True, False], [False, True]]
    assert m["0.bias"].all() and m["2.bias"].all()
    # Density 0.8 keeps 5 of W1: the 0.3125 tie goes to the lower index (W1_02, not W1_11).
    m = layout.unflatten(synflow_mask(net, flat(net), 0.8, iterations=1, input_shape=(3,)))
    assert m["0.weight"].tolist() == [[True, True, True], [True, False, True]]
    # Global: the 5 largest of all 10 weights: 6.75, 5.0, 2.5, 2.25, 1.6875.
    m = layout.unflatten(synflow_mask(net, flat(net), 0.5, iterations=1, scope="global",
                                      input_shape=(3,)))
    assert m["0.weight"].tolist() == [[False, False, False], [True, False, True]]
    assert m["2.weight"].tolist() == [[True, True], [False, True]]
    # The user's module is untouched: values, signs, dtype and training mode.
    assert net.training
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]) and v.dtype == torch.float32


def hand_synflow(W1, b1, W2, density, iterations, scope):
    """Iterated SynFlow on the two-layer net from the closed-form scores above."""
    W1, b1, W2 = W1.abs().double(), b1.abs().double(), W2.abs().double()
    m1, m2 = torch.ones_like(W1, dtype=torch.bool), torch.ones_like(W2, dtype=torch.bool)
    for e in range(1, iterations + 1):
        a1, a2 = W1 * m1, W2 * m2
        s1 = (a1 * a2.sum(0)[:, None]).reshape(-1).tolist()
        s2 = (a2 * (a1.sum(1) + b1)[None, :]).reshape(-1).tolist()
        live = m1.reshape(-1).tolist() + m2.reshape(-1).tolist()
        scores = s1 + s2
        d = Fraction(repr(density ** (e / iterations)))
        n1 = len(s1)
        groups = [list(range(n1)), list(range(n1, len(scores)))] if scope == "layer" \
            else [list(range(len(scores)))]
        keep = set()
        for g in groups:
            k = math.ceil(d * len(g))
            cand = [j for j in g if live[j]]
            keep |= set(sorted(cand, key=lambda j: (-scores[j], j))[:k])
        flat_keep = torch.tensor([j in keep for j in range(len(scores))])
        m1, m2 = flat_keep[:n1].reshape(W1.shape), flat_keep[n1:].reshape(W2.shape)
    return m1, m2


@given(st.lists(st.integers(-4, 4).map(lambda v: v / 4), min_size=23, max_size=23),
       percent, st.integers(1, 6), st.sampled_from(["layer", "global"]))
@settings(max_examples=60, deadline=None)
def test_iterated_synflow_matches_closed_form_and_keeps_exact_counts(values, pct, n, scope):
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    layout = ParamLayout.from_module(net)
    x = torch.tensor(values)
    mask = synflow_mask(net, x, pct / 100, iterations=n, scope=scope, input_shape=(4,))
    m = layout.unflatten(mask)
    t = layout.unflatten(x)
    m1, m2 = hand_synflow(t["0.weight"], t["0.bias"], t["2.weight"], pct / 100, n, scope)
    assert torch.equal(m["0.weight"], m1) and torch.equal(m["2.weight"], m2)
    if scope == "layer":
        assert int(m1.sum()) == -(-pct * 12 // 100) and int(m2.sum()) == -(-pct * 6 // 100)
    else:
        assert int(m1.sum() + m2.sum()) == -(-pct * 18 // 100)
    assert m["0.bias"].all() and m["2.bias"].all()


def test_iterated_synflow_never_revives_a_pruned_entry():
    # W1 = [[1, 1], [1, 2]], W2 = [[1, 1]], no biases; global scope, density 0.34, 3 passes.
    # Pass 1 keeps ceil(0.34^(1/3) * 6) = 5 of scores (1, 1, 1, 2, 2, 3): W1_10 goes.
    # Pass 2 keeps 3 of (1, 1, 0, 2, 2, 2): W1_11, W2_00, W2_01.
    # Pass 3 keeps 3 of (0, 0, 0, 2, 0, 2): W2_00 scores 0 now (its path was cut) but is
    # still held, so it stays; W1_00 (pruned in pass 2, also 0, lower index) must not
    # come back.
    net = nn.Sequential(nn.Linear(2, 2, bias=False), nn.ReLU(), nn.Linear(2, 1, bias=False))
    theta = torch.tensor([1.0, 1.0, 1.0, 2.0, 1.0, 1.0])
    mask = synflow_mask(net, theta, 0.34, iterations=3, scope="global", input_shape=(2,))
    assert mask.tolist() == [False, False, False, True, True, True]


def test_synflow_takes_abs_of_buffers_and_keeps_norm_parameters():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    layout = ParamLayout.from_module(net)
    x = flat(net)
    net[1].running_mean.copy_(torch.tensor([0.5, -1.0, 2.0, -3.0]))
    ref = synflow_scores(net, layout, x, (3,))
    # The mean enters as -|mu|: a net whose stats differ only in sign scores the same,
    # and so does one scored with buffers given explicitly.
    other = {"1.running_mean": -net[1].running_mean, "1.running_var": net[1].running_var,
             "1.num_batches_tracked": net[1].num_batches_tracked}
    assert torch.equal(synflow_scores(net, layout, x, (3,), buffers=other), ref)
    assert torch.equal(net[1].running_mean, torch.tensor([0.5, -1.0, 2.0, -3.0]))
    assert ref.dtype == torch.float64 and (ref >= 0).all()
    mask = synflow_mask(net, x, 0.25, iterations=5, input_shape=(3,))
    for name in ("0.bias", "1.weight", "1.bias", "3.bias"):
        assert mask[layout.slice(name)].all()
    assert int(mask[layout.slice("0.weight")].sum()) == 3
    assert int(mask[layout.slice("3.weight")].sum()) == 2
    with pytest.raises(ConfigError, match="buffers"):
        synflow_mask(net, x, 0.5, input_shape=(3,), buffers={"nope": torch.zeros(1)})


def test_synflow_through_batch_norm_without_running_statistics():
    # A neural problem's template keeps no running statistics (batch statistics only); a
    # single all-ones sample would then be normalised to 0 and every weight before the
    # norm would score 0. SynFlow's eval mode uses a fresh layer's statistics instead.
    from torch.func import replace_all_batch_norm_modules_

    torch.manual_seed(1)
    net = nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(),
                        nn.Linear(12, 2)).eval()
    stripped = replace_all_batch_norm_modules_(copy.deepcopy(net))
    assert stripped[1].running_mean is None
    layout = ParamLayout.from_module(net)
    x = flat(net)
    ref = synflow_scores(net, layout, x, (1, 4, 4))
    assert (ref[layout.slice("0.weight")] > 0).all()
    assert torch.equal(synflow_scores(stripped, layout, x, (1, 4, 4)), ref)
    assert stripped[1].running_mean is None                  # the user's module untouched
    assert torch.equal(synflow_mask(stripped, x, 0.5, 3, input_shape=(1, 4, 4)),
                       synflow_mask(net, x, 0.5, 3, input_shape=(1, 4, 4)))


@pytest.mark.skipif(not hasattr(fs.problems.NeuralProblem, "module"),
                    reason="NeuralProblem does not expose its template module yet")
def test_synflow_mask_of_a_neural_problem_matches_its_module():
    torch.manual_seed(2)
    net = nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(),
                        nn.Linear(12, 2))
    problem = fs.problems.neural(net)
    x = flat(net)
    expected = synflow_mask(net, x, 0.4, 4, input_shape=(1, 4, 4))
    assert torch.equal(synflow_mask(problem, x, 0.4, 4, input_shape=(1, 4, 4)), expected)
    problem.feature_shape = (1, 4, 4)           # what check_data records
    assert torch.equal(synflow_mask(problem, x, 0.4, 4), expected)


def test_synflow_validation():
    net = two_layer_net()
    x = flat(net)
    with pytest.raises(ConfigError, match="input_shape"):
        synflow_mask(net, x, 0.5)
    with pytest.raises(ConfigError, match="input_shape"):
        synflow_mask(net, x, 0.5, input_shape=(0,))
    with pytest.raises(ConfigError, match="iterations"):
        synflow_mask(net, x, 0.5, iterations=0, input_shape=(3,))
    with pytest.raises(ConfigError, match="density"):
        synflow_mask(net, x, 1.01, input_shape=(3,))
    with pytest.raises(ConfigError, match="scope"):
        synflow_mask(net, x, 0.5, scope="block", input_shape=(3,))
    with pytest.raises(ConfigError, match="params"):
        synflow_mask(net, x[:-1], 0.5, input_shape=(3,))
    with pytest.raises(ConfigError, match="problem"):
        synflow_mask(fs.problems.least_squares(), x, 0.5, input_shape=(3,))


# ------------------------------------------------------------------------------ FedSpa


def test_erk_layer_densities_by_hand():
    net = nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 3))
    layout = ParamLayout.from_module(net)
    # density ~ sum(shape) / prod(shape): 10/24 and 7/12, scaled so 18 of 36 are kept.
    d = layer_densities(layout, 0.5, "erk")
    assert d == pytest.approx([10 / 24 * 18 / 17, 7 / 12 * 18 / 17])
    assert layer_densities(layout, 0.5, "uniform") == [0.5, 0.5]
    # A small tensor that ERK would push above 1 is made dense; the rest takes up the slack.
    wide = nn.Sequential(nn.Linear(2, 1000, bias=False), nn.Linear(1000, 2, bias=False),
                         nn.Linear(2, 2, bias=False))
    layout = ParamLayout.from_module(wide)
    d = layer_densities(layout, 0.9, "erk")
    assert d[2] == 1.0 and max(d) == 1.0
    assert d[0] * 2000 + d[1] * 2000 + 4 == pytest.approx(0.9 * 4004)


@given(layouts, percent, st.sampled_from(["erk", "uniform"]), st.integers(0, 2**31))
@settings(max_examples=100, deadline=None)
def test_random_masks_exact_counts_and_independent_of_the_cohort(layout, pct, dist, seed):
    clients = torch.tensor([7, 0, 3, 12])
    masks = random_masks(layout, pct / 100, clients, seed, distribution=dist)
    assert masks.shape == (4, layout.size) and masks.dtype == torch.bool
    assert masks[:, ~layout.prunable].all()
    dens = layer_densities(layout, pct / 100, dist)
    for idx, d in zip(scopes(layout, "layer"), dens, strict=True):
        k = math.ceil(Fraction(repr(d)) * len(idx))
        assert (masks[:, idx].sum(1) == k).all()
        if dist == "uniform":
            assert k == -(-pct * len(idx) // 100)
    # A client's mask depends on (seed, client id) only, not on who else is drawn.
    alone = random_masks(layout, pct / 100, [3], seed, distribution=dist)
    other = random_masks(layout, pct / 100, [12, 5, 3, 7], seed, distribution=dist)
    assert torch.equal(alone[0], masks[2])
    assert torch.equal(other[0], masks[3]) and torch.equal(other[3], masks[0])


def test_random_masks_differ_between_clients_and_seeds():
    layout = ParamLayout.dense(200)
    a = random_masks(layout, 0.3, [0, 1], seed=1, distribution="uniform")
    b = random_masks(layout, 0.3, [0, 1], seed=2, distribution="uniform")
    assert (a.sum(1) == 60).all()
    assert not torch.equal(a[0], a[1]) and not torch.equal(a[0], b[0])
    assert torch.equal(a, random_masks(layout, 0.3, [0, 1], seed=1, distribution="uniform"))
    with pytest.raises(ConfigError, match="distribution"):
        random_masks(layout, 0.3, [0], seed=1, distribution="gaussian")
    with pytest.raises(ConfigError, match="clients"):
        random_masks(layout, 0.3, [0.5], seed=1)
    with pytest.raises(ConfigError, match="clients"):
        random_masks(layout, 0.3, [-1], seed=1)
    with pytest.raises(ConfigError, match="seed"):
        random_masks(layout, 0.3, [0], seed=1.5)


@st.composite
def fedspa_case(draw):
    layout = draw(layouts)
    S = draw(st.integers(1, 4))
    P = layout.size
    ints = st.lists(st.integers(-2, 2), min_size=S * P, max_size=S * P)
    mask = torch.tensor(draw(st.lists(st.booleans(), min_size=S * P, max_size=S * P)))
    params = torch.tensor(draw(ints), dtype=torch.float64).reshape(S, P)
    grad = torch.tensor(draw(ints), dtype=torch.float64).reshape(S, P)
    rounds = draw(st.integers(1, 10))
    t = draw(st.integers(0, rounds))
    alpha0 = draw(st.sampled_from([0.5, 1.0, 0.3, 0.0]))
    return layout, mask.reshape(S, P), params, grad, t, rounds, alpha0


@given(fedspa_case())
@settings(max_examples=300, deadline=None)
def test_fedspa_update_drops_smallest_regrows_largest_inactive_and_keeps_nnz(case):
    layout, mask, params, grad, t, rounds, alpha0 = case
    new = fedspa_update(mask, params, grad, layout, t, rounds, alpha0)
    assert new.shape == mask.shape and new.dtype == torch.bool
    non = ~layout.prunable
    assert torch.equal(new[:, non], mask[:, non])
    alpha = alpha0 / 2 * (1 + math.cos(math.pi * t / rounds))
    assert fedspa_drop_fraction(t, rounds, alpha0) == alpha
    for s in range(mask.shape[0]):
        for idx in scopes(layout, "layer"):
            old = [j for j in idx if mask[s, j]]
            off = [j for j in idx if not mask[s, j]]
            n = min(math.ceil(Fraction(repr(alpha)) * len(old)), len(off))
            kept = top_by_h_tau(params[s], old, len(old) - n)
            grown = top_by_h_tau(grad[s], off, n)
            got = set(j for j in idx if new[s, j])
            assert got == kept | grown
            assert len(got) == len(old)                          # nnz per layer constant
            assert grown <= set(off)                             # regrown were inactive


def test_fedspa_update_by_hand_and_vectorised_over_clients():
    layout = make_layout([6, 2], [True, False])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 1, 0],
                         [0, 0, 1, 1, 1, 1, 0, 1]], dtype=torch.bool)
    params = torch.tensor([[0.1, -3.0, 0.2, 2.0, 0.0, 0.0, 9.0, 0.0],
                           [0.0, 0.0, 5.0, -0.5, 0.5, 4.0, 1.0, 1.0]])
    grad = torch.tensor([[9.0, 9.0, 9.0, 9.0, -1.0, 2.0, 0.0, 0.0],
                         [3.0, -3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    # t = 0: alpha = 0.5, nnz = 4, so 2 are dropped and 2 grown per client.
    new = fedspa_update(mask, params, grad, layout, round=0, rounds=10)
    # Client 0 drops 0.1 and 0.2 and regrows positions 4, 5 (the only inactive ones; the
    # large gradients at 0..3 do not count: those were active in the old mask).
    # Client 1 drops the tied 0.5s and regrows the tied |3|s (the lower index wins).
    assert new.int().tolist() == [[0, 1, 0, 1, 1, 1, 1, 0],
                                  [1, 1, 1, 0, 0, 1, 0, 1]]
    # Each client's update equals its update alone: nothing crosses clients.
    for s in range(2):
        alone = fedspa_update(mask[s:s + 1], params[s:s + 1], grad[s:s + 1], layout, 0, 10)
        assert torch.equal(alone[0], new[s])
    # t = T: alpha = 0, nothing moves.
    assert torch.equal(fedspa_update(mask, params, grad, layout, 10, 10), mask)


def test_fedspa_dense_layer_has_no_room_to_swap():
    layout = ParamLayout.dense(4)
    mask = torch.ones(3, 4, dtype=torch.bool)
    new = fedspa_update(mask, torch.randn(3, 4), torch.randn(3, 4), layout, 0, 5)
    assert new.all()


def test_fedspa_validation():
    layout = ParamLayout.dense(4)
    m = torch.ones(2, 4, dtype=torch.bool)
    x = torch.zeros(2, 4)
    with pytest.raises(ConfigError, match="round"):
        fedspa_update(m, x, x, layout, 6, 5)
    with pytest.raises(ConfigError, match="rounds"):
        fedspa_update(m, x, x, layout, 0, 0)
    with pytest.raises(ConfigError, match="alpha0"):
        fedspa_update(m, x, x, layout, 0, 5, alpha0=1.5)
    with pytest.raises(ConfigError, match="mask"):
        fedspa_update(m.float(), x, x, layout, 0, 5)
    with pytest.raises(ConfigError, match="params"):
        fedspa_update(m, torch.zeros(3, 4), x, layout, 0, 5)
    with pytest.raises(ConfigError, match="grad"):
        fedspa_update(m, x, torch.zeros(2, 5), layout, 0, 5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_selection_by_partition_chooses_what_the_stable_sort_chooses(dtype, monkeypatch):
    # On the CPU the masks choose their top entries by one selection per row; the sort
    # they replace (still taken on other devices) chooses the same entries, ties to the
    # lower index, and a NaN score sends the choice back to the sort (which ranks NaN
    # above every number)
    from fedsparse.sparsity import _mask_common

    gen = torch.Generator().manual_seed(3)
    values = (torch.randint(-4, 5, (6, 300), generator=gen) / 2).to(dtype)  # many ties
    valid = torch.rand(6, 300, generator=gen) < 0.6
    count = torch.randint(0, 150, (6,), generator=gen)
    layout = make_layout([200, 100], [True, True])
    flat = values[0]
    chosen = (_mask_common.rank_select(values, valid, count),
              magnitude_mask(layout, flat, 0.37))
    monkeypatch.setattr(_mask_common, "_selectable", lambda x: False)
    assert torch.equal(chosen[0], _mask_common.rank_select(values, valid, count))
    assert torch.equal(chosen[1], magnitude_mask(layout, flat, 0.37))
    monkeypatch.undo()
    with_nan = flat.clone()
    with_nan[7] = float("nan")
    assert magnitude_mask(layout, with_nan, 0.01)[7]  # ranked first, as the sort ranks it
