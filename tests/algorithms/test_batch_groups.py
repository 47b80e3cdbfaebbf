"""Mini-batch draws on clients of uneven sizes: grouped by size, the same draw."""

import torch

import fedsparse as fs
from fedsparse import rng
from fedsparse.algorithms import ClientContext


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
