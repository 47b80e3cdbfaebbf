"""Mini-batch draws: grouped by size on clients of uneven sizes, or drawn for many steps
ahead, the same draw as one step's over the padded keys."""

import pytest
import torch

import fedsparse as fs
from fedsparse import rng
from fedsparse.algorithms import ClientContext, context


def _dense_draw(ctx, step, b):
    """The draw over the padded (S, n_max) keys, as before grouping."""
    counts = ctx.data.counts
    n_max = ctx.data.X.shape[1]
    keys = rng.uniform(ctx.seed, rng.BATCH, ctx.round, ctx.clients[:, None], step,
                       torch.arange(n_max)[None, :])
    valid = torch.arange(n_max)[None, :] < counts[:, None]
    return rng.choose_without_replacement(keys, valid, b)


def test_grouped_draw_picks_what_the_padded_draw_picks():
    gen = torch.Generator().manual_seed(0)
    sizes = [int(v) for v in torch.exp(torch.randn(40, generator=gen) * 1.5 + 3).ceil()]
    sizes[0] = 400  # one long client: most of the padded keys are padding
    xs = [torch.randn(n, 3, generator=gen) for n in sizes]
    ys = [torch.zeros(n) for n in sizes]
    data = fs.data.from_arrays(xs, ys, layout="padded")
    clients = torch.arange(40) * 7 + 3
    assert 2 * sum(sizes) < 40 * max(sizes)  # the grouped path
    for step, b in ((0, 5), (3, 17), (9, 60)):
        ctx = ClientContext(fs.problems.least_squares(), data.train, clients, 2, 11)
        index, w = ctx.batch_index(step, b)
        want, picked = _dense_draw(ctx, step, b)
        assert torch.equal(w > 0, picked)
        assert torch.equal(index[picked], want[picked])  # same examples, same order
        counts = data.train.counts[:, None].expand(-1, b)
        assert (index[~picked] >= counts[~picked]).all()  # unpicked: padding (reads 0)
        X, y, _ = ctx.batch(step, b)
        rows = torch.arange(40)[:, None].expand(-1, b)
        assert torch.equal(X[picked], ctx.data.X[rows[picked], want[picked]])
        assert (X[~picked] == 0).all()


@pytest.mark.parametrize("uneven", [False, True], ids=["even", "uneven"])
@pytest.mark.parametrize("steps_at_once, blocks", [(7, 1), (3, 3)],
                         ids=["one-block", "in-parts"])
def test_prefetched_draws_are_the_step_by_step_draws(monkeypatch, uneven, steps_at_once,
                                                     blocks):
    gen = torch.Generator().manual_seed(1)
    sizes = [int(v) for v in torch.exp(torch.randn(40, generator=gen) * 1.5 + 3).ceil()] \
        if uneven else [50 + i % 7 for i in range(40)]
    sizes[0] = 60 if not uneven else 400
    sizes[1] = 3  # fewer than b: takes all three and pads
    data = fs.data.from_arrays([torch.randn(n, 2, generator=gen) for n in sizes],
                               [torch.zeros(n) for n in sizes], layout="padded")
    clients, b, steps = torch.arange(40) * 3 + 1, 8, range(2, 9)
    # the budget counts each step's keys over the (S, n_max) padded positions
    monkeypatch.setattr(context, "PREFETCH_KEYS", steps_at_once * 40 * max(sizes))
    draws = []
    real = ClientContext._draw_steps
    monkeypatch.setattr(ClientContext, "_draw_steps",
                        lambda self, s, size: draws.append(list(s)) or real(self, s, size))
    ahead = ClientContext(fs.problems.least_squares(), data.train, clients, 4, 5)
    ahead.prefetch(steps, b)
    by_step = ClientContext(fs.problems.least_squares(), data.train, clients, 4, 5)
    for step in steps:
        got, want = ahead.batch_index(step, b), by_step._draw_steps([step], b)[0]
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert len(draws) == blocks + len(steps)  # the prefetched ones, then the step by step
    assert not ahead._drawn  # each handed out once
    # a step outside the plan, or another batch size, is drawn on its own
    assert torch.equal(ahead.batch_index(9, b)[0], by_step._draw_steps([9], b)[0][0])
    assert torch.equal(ahead.batch_index(3, 5)[0], by_step._draw_steps([3], 5)[0][0])


def _two_clients():
    """Clients of 2 and 5 examples."""
    data = fs.data.from_arrays([torch.randn(2, 3), torch.randn(5, 3)],
                               [torch.zeros(2), torch.zeros(5)], layout="padded")
    return ClientContext(fs.problems.least_squares(), data.train, torch.tensor([0, 1]), 0, 3)


def test_a_client_with_fewer_examples_than_the_batch_weights_all_of_its_own_equally():
    _, w = _two_clients().batch_index(0, 4)
    # client 0: both of its 2 examples, 1/2 each, and 2 padding slots; client 1: 4 of 5
    assert sorted(w[0].tolist()) == [0.0, 0.0, 0.5, 0.5]
    assert w[1].tolist() == [0.25] * 4


def test_a_batch_as_large_as_the_largest_client_is_the_full_batch():
    ctx = _two_clients()
    assert ctx.is_full_batch(5) and ctx.is_full_batch(None) and not ctx.is_full_batch(4)
