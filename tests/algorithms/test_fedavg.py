import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.algorithms import ClientContext, Cohort
from fedsparse.algorithms.local import LocalOptimizer, local_train

# Two clients, d = 3 (as in test_hard_thresholding): client 0 rows e1, e2 with targets
# 1, 2; client 1 row e3 with target 3. f_i = 1/(2 n_i) ||A_i x - y_i||^2, p = (2/3, 1/3).
XS = [torch.tensor([[1.0, 0, 0], [0, 1.0, 0]]), torch.tensor([[0, 0, 1.0]])]
YS = [torch.tensor([1.0, 2.0]), torch.tensor([3.0])]


def _round(algo):
    data = fs.data.from_arrays(XS, YS, dtype=torch.float64)
    problem = fs.problems.least_squares()
    algo = algo.bind(problem, data)
    state = algo.init(problem)
    clients = torch.arange(2)
    ctx = ClientContext(problem, data.train, clients, 0, 0, config=algo.client_config(state))
    uploads, _, _ = algo.client_update(algo.broadcast(state, clients), ctx)
    new = algo.aggregate(state, uploads, Cohort(0, clients, data.weights,
                                                torch.ones(2, dtype=torch.bool)))
    return uploads, new["model"]


def test_fed_avg_by_hand():
    # client 0: (0.25, 0.5, 0) then grad (-0.375, -0.75, 0) -> (0.4375, 0.875, 0)
    # client 1: 1.5 then 2.25; mean with p = (2/3, 1/3)
    up, model = _round(fs.algorithms.fed_avg(step_size=0.5, local_steps=2))
    assert torch.allclose(up, torch.tensor([[0.4375, 0.875, 0], [0, 0, 2.25]],
                                           dtype=torch.float64))
    assert torch.allclose(model, torch.tensor([0.4375 * 2 / 3, 0.875 * 2 / 3, 0.75],
                                              dtype=torch.float64))


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_each_local_step_takes_its_own_mini_batch(momentum, update_with_its_draws):
    # McMahan et al. 2017: step k of a client update is a step on a fresh mini-batch; the
    # reference takes batch(k) at step k, one client at a time.
    uploads, problem, draws = update_with_its_draws(
        fs.algorithms.fed_avg(step_size=0.1, local_steps=3, batch_size=2, momentum=momentum),
        dim=4, seed=1)
    x, velocity = torch.zeros(2, 4, dtype=torch.float64), torch.zeros(2, 4, dtype=torch.float64)
    for k in range(3):
        g = problem.grad(x, *draws.batch(k, 2))
        velocity = momentum * velocity + g  # (PyTorch's heavy ball: the first is g)
        x = x - 0.1 * velocity
    assert torch.allclose(uploads, x, atol=1e-14)


def test_fed_prox_term_has_a_real_gradient():
    # client 1 with mu = 1: x1 = 1.5; x2 = 1.5 - 0.5 ((1.5 - 3) + 1 * (1.5 - 0)) = 1.5
    # client 0, coordinate 1: x1 = 0.5; x2 = 0.5 - 0.5 (0.5 (0.5 - 2) + 0.5) = 0.625
    up, _ = _round(fs.algorithms.fed_prox(mu=1.0, step_size=0.5, local_steps=2))
    assert torch.allclose(up, torch.tensor([[0.3125, 0.625, 0], [0, 0, 1.5]],
                                           dtype=torch.float64))


def test_fed_prox_term_with_momentum_by_hand():
    # One client, f = 1/2 (x - 1)^2, anchor x^t = 0, mu = 1, eta = 0.5, heavy ball 0.5:
    # g1 = (0 - 1) + (0 - 0) = -1, buf = -1, x = 0.5;
    # g2 = (0.5 - 1) + (0.5 - 0) = 0, buf = 0.5 (-1) + 0 = -0.5, x = 0.75.
    # (A proximal pull of mu/2 would give 0.875: this path forms g itself, not descend_.)
    data = fs.data.from_arrays([torch.ones(1, 1)], [torch.ones(1)], dtype=torch.float64)
    history = fs.simulate(fs.algorithms.fed_prox(mu=1.0, step_size=0.5, local_steps=2,
                                                 momentum=0.5),
                          fs.problems.least_squares(), data, rounds=1)
    assert history.model.tolist() == [0.75]


@pytest.mark.parametrize("anchor_rows", [1, 3])
def test_the_proximal_term_is_the_same_with_and_without_a_mask(anchor_rows):
    # an all-True mask sends the step through the path that forms g; the plain path
    # hands it to Problem.descend_: both must pull by mu (x - anchor)
    data = fs.data.shifted_gaussian(num_clients=3, samples_per_client=8, dim=5, sparsity=2,
                                    seed=0, dtype=torch.float64)
    opt = LocalOptimizer.checked(step_size=0.05, local_steps=4, batch_size=4)
    ctx = ClientContext(fs.problems.least_squares(), data.train, torch.arange(3), 0, 0)
    gen = torch.Generator().manual_seed(3)
    x0 = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    anchor = torch.randn(anchor_rows, 5, generator=gen, dtype=torch.float64).squeeze(0)
    plain = local_train(opt, x0, ctx, mu=0.7, anchor=anchor)
    masked = local_train(opt, x0, ctx, mu=0.7, anchor=anchor,
                         mask=torch.ones(5, dtype=torch.bool))
    assert torch.allclose(masked, plain, rtol=0, atol=1e-13)
    assert not torch.allclose(plain, local_train(opt, x0, ctx))  # the term is felt


def _torch_reference(optimizer_cls, x0, X, y, steps, **kw):
    """One nn.Parameter per client, trained with torch.optim on the full local batch."""
    out = []
    for i in range(X.shape[0]):
        p = torch.nn.Parameter(x0.clone())
        opt = optimizer_cls([p], **kw)
        for _ in range(steps):
            opt.zero_grad()
            loss = 0.5 * ((X[i] @ p - y[i]) ** 2).mean()
            loss.backward()
            opt.step()
        out.append(p.detach())
    return torch.stack(out)


@pytest.mark.parametrize("optimizer,kw", [("adam", {}), ("sgd", {"momentum": 0.9})])
def test_local_optimizers_match_torch_optim(optimizer, kw):
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(3, 8, 5, generator=gen, dtype=torch.float64)
    y = torch.randn(3, 8, generator=gen, dtype=torch.float64)
    data = fs.data.from_arrays(list(X), list(y), dtype=torch.float64)
    opt = LocalOptimizer.checked(step_size=0.05, local_steps=4, batch_size=None,
                                 optimizer=optimizer, **kw)
    ctx = ClientContext(fs.problems.least_squares(), data.train, torch.arange(3), 0, 0)
    x0 = torch.full((5,), 0.1, dtype=torch.float64)
    ours = local_train(opt, x0.expand(3, -1), ctx)
    cls = torch.optim.Adam if optimizer == "adam" else torch.optim.SGD
    ref = _torch_reference(cls, x0, X, y, 4, lr=0.05, **kw)
    assert torch.allclose(ours, ref, atol=1e-12)


@pytest.mark.parametrize("setting", ["plain", "mu", "momentum", "adam", "mask"])
def test_plain_sgd_steps_through_the_problems_descend(setting):
    # x -= eta (g + mu (x - anchor)) goes to Problem.descend_ (which a network takes
    # without forming g); momentum, Adam and masks need g itself
    class Counting(type(fs.problems.least_squares())):
        calls = 0

        def descend_(self, params, X, y, w, step_size, **proximal):
            Counting.calls += 1
            return super().descend_(params, X, y, w, step_size, **proximal)

    data = fs.data.shifted_gaussian(num_clients=3, samples_per_client=8, dim=5, sparsity=2,
                                    seed=0, dtype=torch.float64)
    kw = {"momentum": {"momentum": 0.9}, "adam": {"optimizer": "adam"}}.get(setting, {})
    opt = LocalOptimizer.checked(step_size=0.05, local_steps=4, batch_size=4, **kw)
    ctx = ClientContext(Counting(), data.train, torch.arange(3), 0, 0)
    x0 = torch.full((3, 5), 0.1, dtype=torch.float64)
    local_train(opt, x0, ctx, mu=0.1 if setting == "mu" else 0.0, anchor=x0,
                mask=torch.ones(5, dtype=torch.bool) if setting == "mask" else None)
    assert Counting.calls == (4 if setting in ("plain", "mu") else 0)


def test_masked_adam_keeps_pruned_entries_exactly_zero():
    data = fs.data.shifted_gaussian(num_clients=4, samples_per_client=20, dim=12, sparsity=3,
                                    seed=0, dtype=torch.float64)
    opt = LocalOptimizer.checked(step_size=0.1, local_steps=5, batch_size=5, optimizer="adam")
    ctx = ClientContext(fs.problems.least_squares(), data.train, torch.arange(4), 0, 0)
    mask = torch.arange(12) % 3 == 0
    x = local_train(opt, torch.ones(4, 12, dtype=torch.float64), ctx, mask=mask)
    assert (x[:, ~mask] == 0).all()
    assert (x[:, mask] != 1).all()  # the kept entries did train


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("eps", [1e-8, 1e-3, 1e-14])
def test_adams_zero_moments_raised_to_the_smallest_normal_leave_every_bit(dtype, eps,
                                                                         monkeypatch):
    # On the CPU the second moments go up to the smallest normal number before their
    # square root (torch's is slow on zeros): the same bits as without, on a masked
    # network whose moments are mostly zero, and no floor where eps cannot absorb it
    from fedsparse.algorithms import local

    floor = local._adam_floor(eps, torch.zeros(1, dtype=dtype))
    absorbed = eps >= 1e-8 or dtype == torch.float64
    assert floor == (torch.finfo(dtype).tiny if absorbed else None)
    if floor is not None:  # every denominator sqrt(v) + eps keeps its bits
        tiny = torch.finfo(dtype).tiny
        v = torch.tensor([0.0, tiny / 2**20, tiny / 3, tiny, 2 * tiny, 1e-30, 1.0], dtype=dtype)
        assert torch.equal(v.clamp_min(floor).sqrt() + eps, v.sqrt() + eps)
    gen = torch.Generator().manual_seed(4)
    data = fs.data.from_arrays(list(torch.randn(3, 12, 6, generator=gen)),
                               list(torch.randint(0, 3, (3, 12), generator=gen).float()),
                               dtype=dtype)
    problem = fs.problems.neural(fs.models.mlp(6, (8,), 3), dtype=dtype)
    opt = LocalOptimizer.checked(step_size=0.01, local_steps=4, batch_size=4,
                                 optimizer="adam", eps=eps)
    mask = torch.rand(3, problem.param_dim(), generator=gen) < 0.4
    x0 = torch.randn(3, problem.param_dim(), generator=gen, dtype=dtype)

    def train():
        return local_train(opt, x0, ClientContext(problem, data.train, torch.arange(3), 0, 0),
                           mask=mask)

    floored = train()
    monkeypatch.setattr(local, "_adam_floor", lambda eps, x: None)
    assert torch.equal(floored, train())


def test_masked_training_starts_from_the_masked_model():
    # Mao et al. 2022: x_{i,0} = x^t * M_i, so the first gradient is taken at the masked
    # model: one full-batch SGD step is M * (x^t M - eta grad f_i(x^t M))
    gen = torch.Generator().manual_seed(2)
    X, y = torch.randn(1, 6, 4, generator=gen, dtype=torch.float64), \
        torch.randn(1, 6, generator=gen, dtype=torch.float64)
    data = fs.data.from_arrays(list(X), list(y), dtype=torch.float64)
    problem = fs.problems.least_squares()
    ctx = ClientContext(problem, data.train, torch.arange(1), 0, 0)
    opt = LocalOptimizer.checked(step_size=0.1, local_steps=1, batch_size=None)
    mask = torch.tensor([True, False, True, False])
    x0 = torch.tensor([[1.0, 2.0, -1.0, 3.0]], dtype=torch.float64)
    start = x0 * mask
    expected = (start - 0.1 * problem.grad(start, *ctx.full())) * mask
    assert torch.allclose(local_train(opt, x0, ctx, mask=mask), expected, atol=1e-14)


def test_fed_avg_converges_to_the_shared_least_squares_solution():
    # noiseless, every client holds an over-determined system with the same solution
    data = fs.data.shifted_gaussian(num_clients=10, samples_per_client=60, dim=30,
                                    sparsity=5, alpha=0.0, exponent=0.0, noise_std=0.0, seed=0,
                                    dtype=torch.float64)
    h = fs.simulate(fs.algorithms.fed_avg(step_size="auto", local_steps=5),
                    fs.problems.least_squares(), data, rounds=60, seed=0)
    assert h.records[-1]["rel_error"] < 1e-8
    assert h.records[-1]["density"] == 1.0  # FedAvg alone does not make the model sparse


def test_fed_avg_bad_input():
    with pytest.raises(ConfigError, match="mu=0"):
        fs.algorithms.fed_prox(mu=0)
    with pytest.raises(ConfigError, match="optimizer='rmsprop'"):
        fs.algorithms.fed_avg(optimizer="rmsprop")
    with pytest.raises(ConfigError, match="momentum=0.9"):
        fs.algorithms.fed_avg(optimizer="adam", momentum=0.9)
    with pytest.raises(ConfigError, match="step_size=-1"):
        fs.algorithms.fed_avg(step_size=-1)


def test_algorithms_of_the_linear_track_run_unchanged_on_a_network():
    """FedIter-HT on an MLP trains a network with exactly tau non-zero weights, and FedAvg
    on the same network learns; both from the problem's seeded initial model."""
    gen = torch.Generator().manual_seed(1)
    centers = torch.randn(3, 10, generator=gen) * 3
    ys = [torch.randint(0, 3, (40,), generator=gen) for _ in range(4)]
    xs = [centers[y] + torch.randn(40, 10, generator=gen) for y in ys]
    data = fs.data.from_arrays(xs, [y.float() for y in ys])
    problem = fs.problems.neural(fs.models.mlp(10, (16,), 3))
    sparse = fs.simulate(fs.algorithms.fed_iter_ht(sparsity=60, step_size=0.1, local_steps=3,
                                                   batch_size=10), problem, data, rounds=15)
    assert int((sparse.model != 0).sum()) == 60
    assert sparse.records[-1]["accuracy"] > 0.9
    dense = fs.simulate(fs.algorithms.fed_avg(step_size=0.1, local_steps=3, batch_size=10),
                        problem, data, rounds=15)
    assert dense.initial["accuracy"] < 0.6 < 0.9 < dense.records[-1]["accuracy"]
