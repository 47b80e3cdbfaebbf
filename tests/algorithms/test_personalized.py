import math

import numpy as np
import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.algorithms import ClientContext, Cohort
from fedsparse.algorithms.personalized import (
    AVERAGED_DRAW,
    attention_models,
    averaged_clients,
    fedmac_bits,
)
from fedsparse.metrics import evaluate_personal
from fedsparse.problems.neural import NeuralProblem

F64 = torch.float64


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def sig(z):
    return 1.0 / (1.0 + math.exp(-z))


def tiny():
    """Softmax with 2 classes and 1 feature; the flat model is (W_class0, W_class1).

    Client 0 holds x = 1 with label 0 twice (so p = (2/3, 1/3): a p-weighted average
    would differ from the uniform one); client 1 holds x = 2 with label 1. At the zero
    model, grad_0 = (-1/2, 1/2) and grad_1 = (1, -1).
    """
    xs = [torch.tensor([[1.0], [1.0]]), torch.tensor([[2.0]])]
    ys = [torch.tensor([0.0, 0.0]), torch.tensor([1.0])]
    return fs.data.from_arrays(xs, ys, test_xs=xs, test_ys=ys, dtype=F64)


def vec(a, b):
    return torch.tensor([a, b], dtype=F64)


def run_one(algo, data=None, **kw):
    data = tiny() if data is None else data
    return fs.simulate(algo, fs.problems.softmax(2), data, rounds=kw.pop("rounds", 1), seed=0,
                       **kw)


# -- FedMac and pFedMe by hand ---------------------------------------------------------

def test_fedmac_round_by_hand():
    # eta_p = 1, eta = 1, lambda = 1/2, R = 2, K = 1, full batches, beta = 1, S = N.
    # client 0, r = 0: theta = -g(0) = (1/2, -1/2); w = 0 - 1/2 (0 - theta) = (1/4, -1/4)
    #   r = 1: g(theta) = (s1 - 1)(1, -1) with s1 = sigmoid(1);
    #   theta = theta - (g - w / 2) = (1/2 + (1 - s1) + 1/8) (1, -1)
    #   w = w - 1/2 (w - theta) = (w + theta) / 2
    # client 1, r = 0: theta = (-1, 1), w = (-1/2, 1/2)
    #   r = 1: g(theta) = 2 sigmoid(-4) (1, -1); theta = theta - (g - w / 2)
    s1, s4 = sig(1.0), sig(-4.0)
    theta0 = (0.5 + (1 - s1) + 0.125) * vec(1, -1)
    w0 = (vec(0.25, -0.25) + theta0) / 2
    theta1 = vec(-1, 1) - (2 * s4 * vec(1, -1) - vec(-0.25, 0.25))
    w1 = (vec(-0.5, 0.5) + theta1) / 2
    algo = fs.algorithms.fedmac(lam=0.5, step_size=1.0, personal_step_size=1.0,
                                local_steps=2, batch_size=None)
    h = run_one(algo)
    assert torch.allclose(h.model, (w0 + w1) / 2, rtol=1e-14, atol=1e-15)  # uniform 1/S
    assert torch.allclose(h.personal_models, torch.stack([theta0, theta1]), rtol=1e-14)
    record = h.records[-1]
    assert record["clients_sampled"] == 2 and record["averaged"] == 2


@pytest.mark.parametrize("nu, theta0, theta1", [
    # nu = 1: client 0's first gradient (-1/2, 1/2) has ||g||^2 = 1/2 <= nu: no step;
    # client 1 steps once to (-1, 1), where ||g||^2 = 2 (1/2 - 2 sigmoid(-4))^2 < 1
    (1.0, vec(0, 0), vec(-1, 1)),
    # nu = 0.45: client 0 steps once to (1/2, -1/2) (1/2 > 0.45), then its
    # ||g||^2 = 2 (sigmoid(1) - 3/4)^2 is below nu; client 1 as above
    (0.45, vec(0.5, -0.5), vec(-1, 1)),
])
def test_inner_tolerance_stops_each_clients_theta_steps_by_hand(nu, theta0, theta1):
    """Liu et al. 2023 (after eq. 9) and Dinh et al. 2020 solve theta until
    ||grad H~||^2 <= nu: a client whose gradient is within nu takes no more steps."""
    algo = fs.algorithms.pfedme(lam=0.5, step_size=1.0, personal_step_size=1.0,
                                local_steps=1, inner_steps=2, batch_size=None,
                                inner_tolerance=nu)
    h = run_one(algo)
    assert torch.allclose(h.personal_models, torch.stack([theta0, theta1]), rtol=1e-14,
                          atol=1e-15)
    assert torch.allclose(h.model, (theta0 + theta1) / 4, rtol=1e-14, atol=1e-15)


def test_a_tolerance_no_client_reaches_takes_all_k_steps():
    common = dict(lam=0.5, step_size=1.0, personal_step_size=1.0, local_steps=2,
                  inner_steps=3, batch_size=None, gamma=0.01)
    plain = run_one(fs.algorithms.fedmac(**common), rounds=2)
    tight = run_one(fs.algorithms.fedmac(**common, inner_tolerance=1e-300), rounds=2)
    assert torch.equal(plain.personal_models, tight.personal_models)
    assert torch.equal(plain.model, tight.model)
    with pytest.raises(ConfigError, match="inner_tolerance=0 "):
        fs.algorithms.fedmac(**common, inner_tolerance=0)


@pytest.mark.parametrize("eta", [1.0, 0.5])
def test_pfedme_round_by_hand_and_pm_is_theta(eta):
    # eta_p = 1, lambda = 1/2, R = 1, K = 2 on the same (full) batch.
    # client 0: theta1 = (1/2, -1/2); theta2 = theta1 - (g(theta1) + theta1 / 2)
    #   = (1/2 - (s1 - 1) - 1/4)(1, -1); w = 0 - eta / 2 (0 - theta2) = eta theta2 / 2
    # client 1: theta1 = (-1, 1); theta2 = theta1 / 2 - 2 sigmoid(-4) (1, -1); w likewise
    # (eta = 0.5 tells the w step's eta lambda from eta_p lambda)
    s1, s4 = sig(1.0), sig(-4.0)
    theta0 = (1.25 - s1) * vec(1, -1)
    theta1 = vec(-0.5, 0.5) - 2 * s4 * vec(1, -1)
    algo = fs.algorithms.pfedme(lam=0.5, step_size=eta, personal_step_size=1.0,
                                local_steps=1, inner_steps=2, batch_size=None)
    h = run_one(algo)
    assert torch.allclose(h.model, eta * (theta0 + theta1) / 4, rtol=1e-14, atol=1e-15)
    # the PM is theta_i, not the local copy w_i = theta_i / 2 that pFedMe's code evaluates
    assert torch.allclose(h.personal_models, torch.stack([theta0, theta1]), rtol=1e-14)
    data = tiny()
    expected = evaluate_personal(fs.problems.softmax(2), data, torch.stack([theta0, theta1]))
    assert h.records[-1]["personal_accuracy"] == pytest.approx(expected["personal_accuracy"])
    assert h.records[-1]["personal_objective"] == pytest.approx(
        expected["personal_objective"], rel=1e-12)


def test_modified_pfedme_gradient_by_hand():
    # Liu et al. 2023's modified pFedMe: grad l + gamma tanh(theta / rho) + lambda (theta - w);
    # theta = 1, w = 0, grad l = 0, gamma = 0.1, rho = 0.5, lambda = 1: 0.1 tanh(2) + 1
    algo = fs.algorithms.pfedme(lam=1.0, step_size=1.0, personal_step_size=1.0, gamma=0.1,
                                rho=0.5)
    g = algo.personal_gradient(torch.ones(1, 1, dtype=torch.float64),
                               torch.zeros(1, 1, dtype=torch.float64),
                               torch.zeros(1, 1, dtype=torch.float64))
    assert g.item() == pytest.approx(0.1 * math.tanh(2.0) + 1.0, rel=1e-15)


def _reference_fedmac(x0, X, y, lam, gamma, gamma_w, rho, eta, eta_p, R, floor):
    """FedMac's client update for ONE client, written out with Python floats (2 classes,
    1 feature, full batches): an independent reading of eq. 6/9 and rule Z."""

    def grad(theta):
        out = [0.0, 0.0]
        for xj, yj in zip(X, y, strict=True):
            z = [theta[0] * xj, theta[1] * xj]
            m = max(z)
            e = [math.exp(v - m) for v in z]
            p = [v / sum(e) for v in e]
            for c in range(2):
                out[c] += (p[c] - (1.0 if c == yj else 0.0)) * xj / len(X)
        return out

    def z_rule(v, eps):
        if eps == 0:
            return v
        v = list(v)
        budget = max(0, len(v) - math.ceil(floor * len(v)) - sum(a == 0 for a in v))
        small = sorted((abs(a), j) for j, a in enumerate(v) if a != 0 and abs(a) < eps)
        for _, j in small[:budget]:
            v[j] = 0.0
        return v

    w, theta = list(x0), list(x0)
    for _ in range(R):
        g = grad(theta)
        theta = [t - eta_p * (gi + gamma * math.tanh(t / rho) - lam * wi)
                 for t, gi, wi in zip(theta, g, w, strict=True)]
        theta = z_rule(theta, eta_p * gamma)
        w = [wi - eta * (lam * (wi - t) + gamma_w * math.tanh(wi / rho))
             for wi, t in zip(w, theta, strict=True)]
        w = z_rule(w, eta * gamma_w)
    return theta, w


def test_fedmac_smoothed_l1_terms_and_rule_z_match_a_scalar_reference():
    # From a non-zero start so tanh matters; thresholds chosen so rule Z fires on theta
    # and on w, and the 50% floor (P = 2: at most one zero) keeps client 0's
    # w = (0.008, 0) although 0.008 is below the threshold eta gamma_w = 0.2.
    kw = dict(lam=0.5, gamma=0.5, gamma_w=0.2, rho=0.1, eta=1.0, eta_p=0.5, R=3, floor=0.5)
    data = tiny()
    problem = fs.problems.softmax(2)
    algo = fs.algorithms.fedmac(lam=kw["lam"], gamma=kw["gamma"], gamma_w=kw["gamma_w"],
                                rho=kw["rho"], step_size=kw["eta"],
                                personal_step_size=kw["eta_p"], local_steps=kw["R"],
                                batch_size=None).bind(problem, data)
    x0 = vec(0.08, 0.6)
    clients = torch.arange(2)
    ctx = ClientContext(problem, data.train, clients, 0, 0,
                        state=algo.init_clients(problem, clients))
    uploads, state, info = algo.client_update(x0, ctx)
    zeros = 0
    for i, (X, y) in enumerate([([1.0, 1.0], [0, 0]), ([2.0], [1])]):
        theta, w = _reference_fedmac(x0.tolist(), X, y, **kw)
        assert torch.allclose(state["personal"][i], torch.tensor(theta, dtype=F64),
                              rtol=1e-13, atol=1e-15)
        assert torch.allclose(uploads[i], torch.tensor(w, dtype=F64), rtol=1e-13, atol=1e-15)
        zeros += theta.count(0.0) + w.count(0.0)
    assert zeros == 4  # rule Z fired on theta and w of both clients ...
    assert 0 < uploads[0, 0] < 0.2 * 1.0  # ... and the floor kept an entry below eta gamma_w
    assert info["personal_density"] == pytest.approx(
        float((state["personal"] != 0).double().mean()))


def test_server_averages_s_drawn_clients_uniformly_with_beta():
    gen = np.random.default_rng(0)
    xs = [gen.normal(size=(n, 3)) for n in (5, 2, 7, 3)]
    ys = [gen.integers(0, 2, n).astype(float) for n in (5, 2, 7, 3)]
    data = fs.data.from_arrays(xs, ys, dtype=F64)
    problem = fs.problems.softmax(2)
    algo = fs.algorithms.fedmac(lam=0.1, step_size=2.0, personal_step_size=0.1,
                                local_steps=2, batch_size=None, beta=1.5,
                                clients_per_round=2).bind(problem, data)
    state = algo.init(problem, seed=3)
    state["model"] = torch.linspace(-1, 1, 6, dtype=F64)
    clients = torch.arange(4)
    ctx = ClientContext(problem, data.train, clients, 5, 3,
                        state=algo.init_clients(problem, clients))
    uploads, _, _ = algo.client_update(algo.broadcast(state, clients), ctx)
    everyone = torch.ones(4, dtype=torch.bool)
    new = algo.aggregate(state, uploads, Cohort(5, clients, data.weights, everyone, seed=3))
    chosen = averaged_clients(Cohort(5, clients, data.weights, everyone, seed=3), 2)
    assert int(chosen.sum()) == 2
    expected = -0.5 * state["model"] + 1.5 * uploads[chosen].mean(0)
    assert torch.allclose(new["model"], expected, rtol=1e-14)
    assert new["averaged"] == 2
    # the draw is keyed by (seed, round): it changes with the round, not with repeats
    draws = {tuple(averaged_clients(Cohort(t, clients, data.weights, everyone, seed=3),
                                    2).tolist()) for t in range(20)}
    assert len(draws) > 1
    assert torch.equal(averaged_clients(Cohort(5, clients, data.weights, everyone, seed=3),
                                        2), chosen)
    # it is the stream of ClientContext.random, keyed by (seed, round, client, counter)
    keys = ctx.random(AVERAGED_DRAW)
    assert torch.equal(chosen, keys <= keys.sort().values[1])
    # a lost upload among S^t leaves the average of the rest
    lost = chosen & (torch.cumsum(chosen.long(), 0) == 1)
    new = algo.aggregate(state, uploads, Cohort(5, clients, data.weights, ~lost, seed=3))
    keep = chosen & ~lost
    assert torch.allclose(new["model"], -0.5 * state["model"] + 1.5 * uploads[keep][0])


def test_fedmac_applies_rule_z_to_the_global_model():
    # The server's average is zeroed like every w step: entries below eta * gamma_w = 0.01
    # go, as long as half of the entries stay non-zero (Liu et al. 2023, Alg. 1 with the
    # rule Z of docs/decisions.md, section 5). pFedMe has no gamma_w: no rule Z there.
    gen = np.random.default_rng(1)
    xs = [gen.normal(size=(3, 4)) for _ in range(2)]
    data = fs.data.from_arrays(xs, [np.array([0.0, 1.0, 1.0])] * 2, dtype=F64)
    problem = fs.problems.softmax(2)
    mean = torch.tensor([1.0, 2.0, 0.001, -0.002, 3.0, 4.0, 5.0, 0.0005], dtype=F64)
    uploads = torch.stack([mean + 0.5, mean - 0.5])  # their mean is `mean`
    cohort = Cohort(0, torch.arange(2), data.weights, torch.ones(2, dtype=torch.bool))
    kw = dict(lam=0.1, step_size=2.0, personal_step_size=0.1, local_steps=1, batch_size=None)
    fedmac = fs.algorithms.fedmac(**kw, gamma_w=0.005).bind(problem, data)
    new = fedmac.aggregate(fedmac.init(problem), uploads, cohort)
    expected = mean.clone()
    expected[[2, 3, 7]] = 0.0
    assert torch.equal(new["model"], expected)
    assert fedmac.round_metrics(new)["model_density"] == 5 / 8
    pfedme = fs.algorithms.pfedme(**kw).bind(problem, data)
    assert torch.allclose(pfedme.aggregate(pfedme.init(problem), uploads, cohort)["model"],
                          mean, rtol=1e-15)


def test_rule_z_thresholds_scale_with_the_w_step_eta_gamma_w():
    # eta = 0.5, gamma_w = 0.4: the w step's shrink size, and so rule Z's threshold, is
    # eta gamma_w = 0.2 (not gamma_w = 0.4), on the client's w step and on the server's
    # mix alike (density_floor = 0, so only the threshold decides). lambda = 1 and
    # theta = w make the w step w - 0.2 tanh(w / rho), with rho = 1e-3 so tanh is the
    # sign: (0.5, 0.3) -> (0.3, 0.1), and Z zeroes 0.1 only (a threshold of 0.4 would
    # zero 0.3 too).
    data = tiny()
    problem = fs.problems.softmax(2)
    algo = fs.algorithms.fedmac(lam=1.0, step_size=0.5, personal_step_size=0.1, gamma_w=0.4,
                                local_steps=1, batch_size=None, density_floor=0.0
                                ).bind(problem, data)
    w = torch.tensor([[0.5, 0.3]], dtype=F64)
    new = algo.global_step(w.clone(), w.clone())
    assert torch.allclose(new, torch.tensor([[0.3, 0.0]], dtype=F64), rtol=1e-14)
    assert new[0, 1] == 0
    # the server applies the same threshold to its beta-mix (here the uploads' mean)
    mean = torch.tensor([0.3, 0.1], dtype=F64)
    uploads = torch.stack([mean + 0.01, mean - 0.01])
    cohort = Cohort(0, torch.arange(2), data.weights, torch.ones(2, dtype=torch.bool))
    model = algo.aggregate(algo.init(problem), uploads, cohort)["model"]
    assert torch.allclose(model, torch.tensor([0.3, 0.0], dtype=F64), rtol=1e-14)
    assert model[1] == 0


def test_all_clients_train_and_grouping_does_not_change_the_run():
    data = label_skew(N=5, C=4, seed=1)
    algo = fs.algorithms.fedmac(lam=0.01, step_size=30, personal_step_size=0.2, gamma=1e-3,
                                gamma_w=1e-3, local_steps=3, batch_size=4, clients_per_round=2)
    a = fs.simulate(algo, fs.problems.softmax(4), data, rounds=3, seed=1)
    b = fs.simulate(algo, fs.problems.softmax(4), data, rounds=3, seed=1, client_batch=2)
    assert torch.equal(a.model, b.model)
    assert torch.equal(a.personal_models, b.personal_models)
    assert all(r["clients_sampled"] == 5 and r["averaged"] == 2 for r in a.records)


def test_density_and_bit_cost_are_recorded_every_round():
    data = label_skew(N=4, C=4, seed=2)
    algo = fs.algorithms.fedmac(lam=0.01, step_size=30, personal_step_size=0.2, gamma=0.05,
                                gamma_w=0.01, local_steps=4, batch_size=5)
    h = fs.simulate(algo, fs.problems.softmax(4), data, rounds=4, seed=0, eval_every=3)
    d = h.model.numel()
    total, broadcast_density = 0.0, 0.0  # round 1 broadcasts the zero initial model
    for r in h.records:
        assert 0.5 <= r["model_density"] <= 1.0  # the 50% floor holds on the global model
        # per client: the upload at its mean density, the broadcast w^t at its own
        assert r["fedmac_bits"] == pytest.approx(
            fedmac_bits(d, r["upload_density"], broadcast_density))
        total += r["fedmac_bits"]
        assert r["fedmac_bits_total"] == pytest.approx(total)
        broadcast_density = r["model_density"]
    assert "density" not in h.records[0]  # evaluation rounds only ...
    assert h.records[-1]["model_density"] == h.records[-1]["density"]  # ... agree with it
    assert min(r["model_density"] for r in h.records) < 1.0  # the l1 term did sparsify
    assert min(r["personal_density"] for r in h.records) < 1.0
    # the paper's Section 5.5: at 50% non-zeros the cost is 66/128 of the dense 2 * 64 d
    assert fedmac_bits(79510, 0.5, 0.5) / (2 * 64 * 79510) == 66 / 128


def test_fedmac_bits_count_only_the_uploads_that_arrived():
    # d = 6; the broadcast w^t = (1, 0, 0, 0, 0, 0) has density 1/6; only the first upload
    # (density 3/6 = 1/2) arrived, the dense second one was lost, so s_up = 1/2:
    # 64 d (1/2 + 1/6) + d (2 - 1/2 - 1/6) + d = 256 + 8 + 6 = 270 bits
    # (counting the lost upload, s_up = 3/4, would give 364.5)
    gen = np.random.default_rng(0)
    xs = [gen.normal(size=(n, 3)) for n in (5, 2)]
    ys = [gen.integers(0, 2, n).astype(float) for n in (5, 2)]
    data = fs.data.from_arrays(xs, ys, dtype=F64)
    problem = fs.problems.softmax(2)
    algo = fs.algorithms.fedmac(lam=0.1, step_size=0.1, personal_step_size=0.1,
                                local_steps=1, batch_size=None).bind(problem, data)
    state = algo.init(problem, seed=0)
    state["model"] = torch.tensor([1.0, 0, 0, 0, 0, 0], dtype=F64)
    uploads = torch.tensor([[1.0, 2, 3, 0, 0, 0], [1.0, 1, 1, 1, 1, 1]], dtype=F64)
    cohort = Cohort(0, torch.arange(2), data.weights, torch.tensor([True, False]), seed=0)
    new = algo.aggregate(state, uploads, cohort)
    assert new["fedmac_bits"] == pytest.approx(270.0, abs=1e-9)
    assert new["fedmac_bits"] == pytest.approx(fedmac_bits(6, 1 / 2, 1 / 6))

# -- Per-FedAvg -------------------------------------------------------------------------


def test_per_fedavg_round_by_hand():
    # alpha = 1, beta_m = 1/2, R = 1, full batches, from 0:
    # client 0: w~ = (1/2, -1/2); w = -1/2 g(w~) = (1 - s1)/2 (1, -1); PM = 0 - g(0)
    # client 1: w~ = (-1, 1); g(w~) = 2 sigmoid(-4) (1, -1); w = -sigmoid(-4) (1, -1)
    s1, s4 = sig(1.0), sig(-4.0)
    algo = fs.algorithms.per_fedavg(step_size=0.5, inner_step_size=1.0, local_steps=1,
                                    batch_size=None)
    h = run_one(algo)
    w0, w1 = (1 - s1) / 2 * vec(1, -1), -s4 * vec(1, -1)
    assert torch.allclose(h.model, (w0 + w1) / 2, rtol=1e-14)
    assert torch.allclose(h.personal_models, torch.stack([vec(0.5, -0.5), vec(-1, 1)]))


def test_per_fedavg_never_reads_test_labels():
    data = label_skew(N=4, C=4, seed=3)
    flipped = label_skew(N=4, C=4, seed=3, test_label_shift=1)
    assert not torch.equal(data.test.y, flipped.test.y)
    algo = fs.algorithms.per_fedavg(step_size=0.1, inner_step_size=0.2, local_steps=3,
                                    batch_size=4)
    a = fs.simulate(algo, fs.problems.softmax(4), data, rounds=3, seed=0, clients_per_round=3)
    b = fs.simulate(algo, fs.problems.softmax(4), flipped, rounds=3, seed=0,
                    clients_per_round=3)
    assert torch.equal(a.personal_models, b.personal_models)
    assert torch.equal(a.model, b.model)
    assert a.records[-1]["personal_accuracy"] == b.records[-1]["personal_accuracy"]
    assert a.records[-1]["personal_test_accuracy"] != b.records[-1]["personal_test_accuracy"]


def test_a_client_that_never_trained_is_represented_by_the_global_model():
    data = label_skew(N=4, C=4, seed=4)
    problem = fs.problems.softmax(4)
    algo = fs.algorithms.per_fedavg(step_size=0.1, inner_step_size=0.1, local_steps=2,
                                    batch_size=3)
    h = fs.simulate(algo, problem, data, rounds=1, seed=0, clients_per_round=2)
    trained = torch.tensor(h.records[0]["delivered_clients"])
    rest = torch.tensor([i for i in range(4) if i not in trained.tolist()])
    assert torch.equal(h.personal_models[rest], h.model.expand(2, -1))
    assert not torch.equal(h.personal_models[trained], h.model.expand(2, -1))


# -- HeurFedAMP -------------------------------------------------------------------------

def test_heur_fedamp_u_i_differ_per_client_and_match_the_formula():
    gen = torch.Generator().manual_seed(0)
    W = torch.randn(5, 7, generator=gen, dtype=F64)
    clients = torch.tensor([0, 2, 3, 4])
    sigma, xi = 3.0, 0.3
    u = attention_models(W, clients, sigma, xi)
    for row, i in enumerate(clients.tolist()):
        others = [j for j in range(5) if j != i]
        cos = [float(W[i] @ W[j] / (W[i].norm() * W[j].norm())) for j in others]
        e = [math.exp(sigma * c) for c in cos]
        expected = xi * W[i] + sum((1 - xi) * ej / sum(e) * W[j]
                                   for ej, j in zip(e, others, strict=True))
        assert torch.allclose(u[row], expected, rtol=1e-13)
    assert len({tuple(r.tolist()) for r in u}) == 4  # one u_i per client, no aliasing
    assert u.data_ptr() != W.data_ptr()
    # self_weight 1 keeps each client's own model; one client alone is its own u
    assert torch.allclose(attention_models(W, clients, sigma, 1.0), W[clients])
    assert torch.equal(attention_models(W[:1], torch.tensor([0]), sigma, 0.5), W[:1])


def test_heur_fedamp_sends_one_model_per_client_and_trains_with_a_real_prox():
    # lambda / alpha_k = 1, eta_p = 1, R = 2, from u = 0 (all stored models are 0):
    # client 0: w1 = (1/2, -1/2); w2 = w1 - (g(w1) + 1 * (w1 - 0)) = (1 - s1)(1, -1)
    s1 = sig(1.0)
    data = tiny()
    problem = fs.problems.softmax(2)
    algo = fs.algorithms.heur_fedamp(lam=0.5, alpha_k=0.5, sigma=2.0, step_size=1.0,
                                     self_weight=0.8, local_steps=2, batch_size=None)
    h = run_one(algo, data=data, rounds=1)
    assert torch.allclose(h.personal_models[0], (1 - s1) * vec(1, -1), rtol=1e-14)
    bound = algo.bind(problem, data)
    state = bound.init(problem)
    state["models"] = torch.stack([vec(1.0, 0.0), vec(0.3, 2.0)])
    sent = bound.broadcast(state, torch.arange(2))
    assert torch.allclose(sent, torch.stack([vec(0.86, 0.4), vec(0.44, 1.6)]), rtol=1e-14)
    new = bound.aggregate(state, torch.stack([vec(5, 5), vec(7, 7)]),
                          Cohort(0, torch.arange(2), data.weights, torch.tensor([True, False])))
    assert torch.equal(new["models"], torch.stack([vec(5, 5), vec(0.3, 2.0)]))
    assert torch.equal(new["model"], new["models"].mean(0))


def test_heur_fedamp_pulls_each_client_towards_its_own_u_i():
    # Two clients with different stored models, so u_1 != u_2 != their mean. Client i's R
    # SGD steps from u_i on l_i(w) + (lambda / (2 alpha_k)) ||w - u_i||^2, by hand with
    # the problem's gradient on client i alone (full batches); an anchor at the mean of
    # the u_i, or at the global model, gives other models.
    data = tiny()
    problem = fs.problems.softmax(2)
    eta, lam, alpha_k, R = 0.3, 0.5, 0.5, 3
    algo = fs.algorithms.heur_fedamp(lam=lam, alpha_k=alpha_k, sigma=2.0, step_size=eta,
                                     self_weight=0.6, local_steps=R,
                                     batch_size=None).bind(problem, data)
    state = algo.init(problem)
    state["models"] = torch.stack([vec(1.0, -0.5), vec(-0.8, 2.0)])
    clients = torch.arange(2)
    u = algo.broadcast(state, clients)
    assert not torch.allclose(u[0], u[1])
    ctx = ClientContext(problem, data.train, clients, 0, 0,
                        state=algo.init_clients(problem, clients))
    uploads, client_state, _ = algo.client_update(u, ctx)
    mu = lam / alpha_k
    for i in range(2):
        mine = data.train.select(torch.tensor([i]))
        w = u[i].clone()
        for _ in range(R):
            g = problem.grad(w[None], mine.X, mine.y, mine.mean_weights())[0]
            w = w - eta * (g + mu * (w - u[i]))
        assert torch.allclose(uploads[i], w, rtol=1e-13, atol=1e-15), i
        assert torch.equal(client_state["personal"][i], uploads[i])  # the PM is w_i


# -- every algorithm on linear and neural problems ----------------------------------------

ALGORITHMS = {
    "fedmac": lambda: fs.algorithms.fedmac(lam=0.01, step_size=20, personal_step_size=0.1,
                                           gamma=1e-3, gamma_w=1e-3, local_steps=3,
                                           batch_size=4, clients_per_round=2),
    "pfedme": lambda: fs.algorithms.pfedme(lam=15, step_size=0.01, personal_step_size=0.05,
                                           local_steps=3, batch_size=4, gamma=1e-3,
                                           clients_per_round=2),
    "per_fedavg": lambda: fs.algorithms.per_fedavg(step_size=0.05, inner_step_size=0.05,
                                                   local_steps=3, batch_size=4),
    "heur_fedamp": lambda: fs.algorithms.heur_fedamp(lam=1.0, alpha_k=0.5, sigma=5.0,
                                                     step_size=0.05, local_steps=3,
                                                     batch_size=4),
}


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_runs_on_a_neural_problem_and_records_both_models(name):
    torch.manual_seed(0)
    data = label_skew(N=3, C=3, d=4, seed=5, layout="pooled")
    problem = fs.problems.neural(fs.models.mlp(4, (5,), 3), dtype=F64)
    algo = ALGORITHMS[name]()
    per_round = None if name in ("fedmac", "pfedme") else 2
    h = fs.simulate(algo, problem, data, rounds=2, seed=0, clients_per_round=per_round)
    P = problem.param_dim()
    personal = h.personal_models
    assert personal.shape == (3, P) and torch.isfinite(personal).all()
    for r in h.records:
        for key in ("accuracy", "test_accuracy", "personal_accuracy",
                    "personal_test_accuracy"):
            assert 0.0 <= r[key] <= 1.0
    # the network trained: the objective fell, and the personal models fit their clients'
    # data better than the shared start did (a third right, chance, before)
    assert h.records[-1]["objective"] < h.initial["objective"]
    assert h.records[-1]["personal_accuracy"] >= h.initial["personal_accuracy"] + 0.15
    # and the personal models of the clients that trained are personal: apart from the
    # global model and from each other
    trained = sorted({c for r in h.records for c in r["delivered_clients"]})
    assert len(trained) >= 2
    assert (personal[trained] - h.model).abs().amax(1).min() > 1e-3
    assert min((personal[i] - personal[j]).abs().max() for i in trained for j in trained
               if j < i) > 1e-3
    assert repr(algo).startswith(name + "(")


@pytest.mark.parametrize("name", ["fedmac", "pfedme"])
def test_the_theta_step_block_by_block_is_the_whole_gradient_step_bit_for_bit(name):
    # On the CPU an MLP takes the theta step one column block of the gradient at a time
    # (eq. 9's terms built per block, by rows of two clients here); a problem whose
    # gradient is its own takes it on the whole (S, P) gradient: the same bits, float32
    # and with both smoothed-l1 terms on
    class WholeGradient(NeuralProblem):
        def grad(self, params, X, y, w):
            return super().grad(params, X, y, w)

    data = label_skew(N=5, C=3, d=6, seed=2, layout="pooled")
    blockwise = fs.problems.neural(fs.models.mlp(6, (7,), 3), chunk_clients=2)
    whole = WholeGradient(fs.models.mlp(6, (7,), 3), chunk_clients=2)
    extra = {"gamma_w": 0.5} if name == "fedmac" else {}
    algo = getattr(fs.algorithms, name)(lam=0.5, step_size=0.1, personal_step_size=0.2,
                                        gamma=0.3, rho=0.5, local_steps=3, batch_size=4,
                                        **extra)
    results = []
    for problem in (blockwise, whole):
        bound = algo.bind(problem, data)
        state = bound.init(problem, seed=1)
        state["model"] = torch.randn(problem.param_dim(),
                                     generator=torch.Generator().manual_seed(3))
        clients = torch.arange(5)
        ctx = ClientContext(problem, data.train, clients, 0, 0)
        uploads, personal, _ = bound.client_update(bound.broadcast(state, clients), ctx)
        results.append((uploads, personal))
    (w_block, theta_block), (w_whole, theta_whole) = results
    assert torch.equal(w_block, w_whole)
    assert torch.equal(theta_block["personal"], theta_whole["personal"])
    assert (theta_block["personal"] == 0).any()  # rule Z zeroed entries: gamma was on


def test_fedmac_pm_beats_its_gm_on_label_skewed_data():
    # 8 clients, 2 of 8 overlapping classes each: the global model must tell 8 classes
    # apart, a personalised one only its client's 2.
    data = label_skew(N=8, C=8, d=5, n=40, n_test=20, spread=0.8, seed=0)
    algo = fs.algorithms.fedmac(lam=0.01, step_size=30, personal_step_size=0.2,
                                local_steps=10, batch_size=10, clients_per_round=4)
    h = fs.simulate(algo, fs.problems.softmax(8), data, rounds=30, seed=0)
    gm = max(r["test_accuracy"] for r in h.records)
    pm = max(r["personal_test_accuracy"] for r in h.records)
    assert pm > gm + 0.1
    assert h.records[-1]["personal_test_accuracy"] > h.records[-1]["test_accuracy"] + 0.05


# -- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize("build,match", [
    (lambda: fs.algorithms.fedmac(lam=0.1, step_size=1, personal_step_size=1, rho=0), "rho=0"),
    (lambda: fs.algorithms.fedmac(lam=0.1, step_size=1, personal_step_size=1, rho=-1e-3),
     "rho=-0.001"),
    (lambda: fs.algorithms.pfedme(lam=1, step_size=1, personal_step_size=1, rho=0), "rho=0"),
    (lambda: fs.algorithms.fedmac(lam=0.1, step_size=1, personal_step_size=1, beta=0),
     r"beta=0 is invalid: must lie in \(0, 2\]"),
    (lambda: fs.algorithms.pfedme(lam=1, step_size=1, personal_step_size=1, beta=2.5),
     "beta=2.5"),
    (lambda: fs.algorithms.heur_fedamp(lam=1, alpha_k=0.5, sigma=1, step_size=0.1,
                                       self_weight=1.5), r"self_weight=1.5 .*\[0, 1\]"),
    (lambda: fs.algorithms.heur_fedamp(lam=1, alpha_k=0.5, sigma=1, step_size=0.1,
                                       self_weight=-0.1), "self_weight=-0.1"),
    (lambda: fs.algorithms.fedmac(lam=0, step_size=1, personal_step_size=1), "lam=0"),
    (lambda: fs.algorithms.fedmac(lam=0.1, step_size=1, personal_step_size=1, gamma=-1),
     "gamma=-1"),
    (lambda: fs.algorithms.fedmac(lam=0.1, step_size=1, personal_step_size=1,
                                  clients_per_round=0), "clients_per_round=0"),
    (lambda: fs.algorithms.per_fedavg(step_size=0.1, inner_step_size=0), "inner_step_size=0"),
    (lambda: fs.algorithms.heur_fedamp(lam=1, alpha_k=0, sigma=1, step_size=0.1), "alpha_k=0"),
])
def test_bad_hyperparameters_are_clear_errors(build, match):
    with pytest.raises(ConfigError, match=match):
        build()


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_problem_without_classes_is_a_clear_error(name):
    data = fs.data.from_arrays([torch.ones(3, 2)], [torch.ones(3)], dtype=F64)
    with pytest.raises(ConfigError, match="least_squares.*classification problem"):
        fs.simulate(ALGORITHMS[name](), fs.problems.least_squares(), data, rounds=1)


def test_more_averaged_clients_than_clients_is_a_clear_error():
    algo = fs.algorithms.fedmac(lam=0.1, step_size=1, personal_step_size=1,
                                clients_per_round=3)
    with pytest.raises(ConfigError, match="clients_per_round=3.*number of clients 2"):
        run_one(algo)


# -- data ---------------------------------------------------------------------------------

def label_skew(N=4, C=4, d=3, n=12, n_test=8, spread=1.5, seed=0, test_label_shift=0,
               layout="auto"):
    """Gaussian classes; client i holds labels i % C and (i + 1) % C."""
    gen = np.random.default_rng(seed)
    means = gen.normal(0, spread, (C, d))
    xs, ys, txs, tys = [], [], [], []
    for i in range(N):
        labels = np.array([i % C, (i + 1) % C])
        y = labels[gen.integers(0, 2, n + n_test)]
        x = means[y] + gen.normal(0, 1.0, (n + n_test, d))
        xs.append(x[:n])
        ys.append(y[:n].astype(float))
        txs.append(x[n:])
        tys.append(((y[n:] + test_label_shift) % C).astype(float))
    return fs.data.from_arrays(xs, ys, test_xs=txs, test_ys=tys, dtype=F64, layout=layout)


def test_a_resumed_run_continues_exactly(tmp_path):
    data = label_skew(N=4, C=4, seed=6)
    problem = fs.problems.softmax(4)
    algo = fs.algorithms.fedmac(lam=0.01, step_size=30, personal_step_size=0.2, gamma=0.01,
                                gamma_w=1e-3, local_steps=3, batch_size=4, clients_per_round=2)
    whole = fs.simulate(algo, problem, data, rounds=4, seed=2)
    path = tmp_path / "run.pt"
    fs.simulate(algo, problem, data, rounds=2, seed=2, checkpoint=path)
    resumed = fs.simulate(algo, problem, data, rounds=4, seed=2, checkpoint=path, resume=True)
    assert torch.equal(resumed.model, whole.model)
    assert torch.equal(resumed.personal_models, whole.personal_models)
    assert resumed.records[-1]["fedmac_bits_total"] == whole.records[-1]["fedmac_bits_total"]


def test_per_fedavg_takes_independent_batches_d_and_d_prime():
    # Fallah et al. 2020: meta-step r adapts on D and steps on an independent D' (here
    # ctx.batch(2r) and ctx.batch(2r + 1)); the PM adapts w^t on a third batch (ctx.batch(2R))
    gen = torch.Generator().manual_seed(3)
    X = torch.randn(2, 8, 3, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (2, 8), generator=gen).to(torch.float64)
    data = fs.data.from_arrays(list(X), list(y), dtype=torch.float64)
    problem = fs.problems.softmax(3)
    algo = fs.algorithms.per_fedavg(step_size=0.2, inner_step_size=0.1, local_steps=2,
                                    batch_size=2).bind(problem, data)
    clients = torch.arange(2)
    start = torch.linspace(-1, 1, problem.param_dim(3), dtype=torch.float64).expand(2, -1)
    uploads, state, _ = algo.client_update(start[0], ClientContext(problem, data.train,
                                                                   clients, 0, 9))
    draws = ClientContext(problem, data.train, clients, 0, 9)
    w = start
    for r in range(2):
        w_tilde = w - 0.1 * problem.grad(w, *draws.batch(2 * r, 2))
        w = w - 0.2 * problem.grad(w_tilde, *draws.batch(2 * r + 1, 2))
    assert torch.allclose(uploads, w, atol=1e-14)
    personal = start - 0.1 * problem.grad(start, *draws.batch(4, 2))
    assert torch.allclose(state["personal"], personal, atol=1e-14)
