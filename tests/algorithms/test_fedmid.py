"""FedMid and FedDualAvg with sparsity regularisers (Yuan, Zaheer, Reddi 2021)."""

import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError

DT = torch.float64


def _two_clients():
    # X_i = I_2 -> f_i(x) = (1/4)||x - y_i||^2, grad = (x - y_i) / 2.
    eye = torch.eye(2, dtype=DT)
    return fs.data.from_arrays([eye, eye], [torch.tensor([4.0, 1.0], dtype=DT),
                                            torch.tensor([0.0, 2.0], dtype=DT)], dtype=DT)


@pytest.mark.parametrize("server_lr", [0.5, 0.25, 2.0])
def test_fed_mid_two_clients_by_hand(server_lr):
    # eta_c = 0.5, K = 1, tau = 1, x_0 = 0: client steps x = H_1(0.25 y_i):
    # client 1: (1, 0.25) -> (1, 0); client 2: (0, 0.5) -> (0, 0.5); mean (0.5, 0.25).
    # server H_1(0 + eta_s ((0.5, 0.25) - 0)) = (0.5 eta_s, 0). From x_0 = 0 at eta_s = 0.5
    # the swapped mix (1 - eta_s) mean + eta_s x_t gives the same; 0.25 and 2 do not.
    algo = fs.algorithms.fed_mid(sparsity=1, client_lr=0.5, server_lr=server_lr,
                                 local_steps=1)
    h = fs.simulate(algo, fs.problems.least_squares(), _two_clients(), rounds=1, progress=False)
    assert torch.allclose(h.model, torch.tensor([0.5 * server_lr, 0.0], dtype=DT), atol=1e-15)


def test_fed_mid_l1_server_prox_takes_eta_s_eta_c():
    # eta_c = 0.5, K = 1, lambda = 0.2, x_0 = 0: client x = soft(0.25 y_i, 0.1):
    # client 1: (1, 0.25) -> (0.9, 0.15); client 2: (0, 0.5) -> (0, 0.4); mean (0.45, 0.275).
    # eta_s = 0.5: server soft(0 + 0.5 * (0.45, 0.275), 0.5 * 0.5 * 0.2) = (0.175, 0.0875).
    algo = fs.algorithms.fed_mid(regularizer="l1", penalty=0.2, client_lr=0.5,
                                 server_lr=0.5, local_steps=1)
    h = fs.simulate(algo, fs.problems.least_squares(), _two_clients(), rounds=1, progress=False)
    assert torch.allclose(h.model, torch.tensor([0.175, 0.0875], dtype=DT), atol=1e-15)


def test_fed_dual_avg_two_clients_by_hand():
    # z_0 = 0, x = H_1(0) = 0, z_i = -0.5 * grad_i(0) = 0.25 y_i;
    # server z = 0 + 2 * mean = (1, 0.75), model = H_1(z) = (1, 0).
    algo = fs.algorithms.fed_dual_avg(sparsity=1, client_lr=0.5, server_lr=2.0, local_steps=1)
    h = fs.simulate(algo, fs.problems.least_squares(), _two_clients(), rounds=1, progress=False)
    assert torch.allclose(h.model, torch.tensor([1.0, 0.0], dtype=DT), atol=1e-15)
    # the dual travels dense both ways: 2 clients x 2 values x 8 bytes
    assert h.records[0]["bytes_up"] == 32


def test_fed_mid_with_unit_server_lr_equals_fed_iter_ht():
    data = fs.data.shifted_gaussian(num_clients=6, samples_per_client=30, dim=40, sparsity=4,
                                    alpha=0.5, seed=3, dtype=DT)
    prob = fs.problems.least_squares()
    mid = fs.simulate(fs.algorithms.fed_mid(sparsity=4, client_lr=0.01, server_lr=1.0,
                                            local_steps=5, batch_size=10),
                      prob, data, rounds=6, seed=2, progress=False)
    iht = fs.simulate(fs.algorithms.fed_iter_ht(sparsity=4, step_size=0.01, local_steps=5,
                                                batch_size=10),
                      prob, data, rounds=6, seed=2, progress=False)
    assert torch.equal(mid.model, iht.model)
    assert [r["objective"] for r in mid.records] == [r["objective"] for r in iht.records]


@pytest.mark.parametrize("builder", [fs.algorithms.fed_mid, fs.algorithms.fed_dual_avg])
def test_penalties_give_sparse_models_and_decrease_objective(builder):
    data = fs.data.shifted_gaussian(num_clients=5, samples_per_client=50, dim=30, sparsity=3,
                                    alpha=0.1, exponent=0.2, seed=0, dtype=DT)
    for reg, lam in (("l1", 0.05), ("l0", 0.01)):
        algo = builder(regularizer=reg, penalty=lam, client_lr=0.05, local_steps=3)
        h = fs.simulate(algo, fs.problems.least_squares(), data, rounds=15, progress=False)
        assert h.records[-1]["objective"] < h.initial["objective"]
        assert h.records[-1]["density"] < 1.0


def test_prox_operators():
    algo = fs.algorithms.fed_mid(regularizer="l1", penalty=1.0)
    v = torch.tensor([3.0, -0.5, -2.0], dtype=DT)
    assert torch.allclose(algo.prox(v, 1.0), torch.tensor([2.0, 0.0, -1.0], dtype=DT))
    algo = fs.algorithms.fed_mid(regularizer="l0", penalty=2.0)   # threshold sqrt(2*2*1) = 2
    assert torch.allclose(algo.prox(v, 1.0), torch.tensor([3.0, 0.0, 0.0], dtype=DT))


def test_validation():
    with pytest.raises(ConfigError, match="sparsity"):
        fs.algorithms.fed_mid(client_lr=0.1)                      # l0 constraint needs tau
    with pytest.raises(ConfigError, match="penalty"):
        fs.algorithms.fed_dual_avg(regularizer="l1")
    with pytest.raises(ConfigError, match="sparsity"):
        fs.algorithms.fed_dual_avg(sparsity=3, regularizer="l1", penalty=0.1)
    with pytest.raises(ConfigError, match="client_lr"):
        fs.algorithms.fed_mid(sparsity=3, client_lr=-1.0)
    with pytest.raises(ConfigError, match="regularizer"):
        fs.algorithms.fed_mid(sparsity=3, regularizer="scad")


# --------------------------------------------------------------------------------------
# The l2 ball ||x|| <= R and the global sparsity scope (Jeong et al. 2024, Sec. V-B.2)


def test_fed_mid_radius_by_hand():
    # As test_fed_mid_two_clients_by_hand with Pi_R, R = 0.6, after every prox:
    # client 1: (1, 0.25) -> H_1 (1, 0) -> Pi (0.6, 0); client 2: (0, 0.5), inside.
    # server: H_1(0.5 * (0.3, 0.25)) = (0.15, 0), inside.
    algo = fs.algorithms.fed_mid(sparsity=1, client_lr=0.5, server_lr=0.5, local_steps=1,
                                 radius=0.6)
    h = fs.simulate(algo, fs.problems.least_squares(), _two_clients(), rounds=1, progress=False)
    assert torch.allclose(h.model, torch.tensor([0.15, 0.0], dtype=DT), atol=1e-15)


def test_fed_dual_avg_radius_acts_on_the_primal_point():
    # As test_fed_dual_avg_two_clients_by_hand: z = (1, 0.75); model = Pi_0.5(H_1(z)) = (0.5, 0)
    # while the dual stays (1, 0.75).
    algo = fs.algorithms.fed_dual_avg(sparsity=1, client_lr=0.5, server_lr=2.0, local_steps=1,
                                      radius=0.5)
    data = _two_clients()
    prob = fs.problems.least_squares()
    algo = algo.bind(prob, data)
    h = fs.simulate(algo, prob, data, rounds=1, progress=False)
    assert torch.allclose(h.model, torch.tensor([0.5, 0.0], dtype=DT), atol=1e-15)
    v = torch.tensor([3.0, -4.0, 0.0], dtype=DT)
    ball = fs.algorithms.fed_mid(regularizer="l1", penalty=1.0, radius=1.0)
    # l1 then the ball: soft threshold (2, -3, 0), then scaled to norm 1
    assert torch.allclose(ball.prox(v, 1.0), torch.tensor([2.0, -3.0, 0.0], dtype=DT) / 13 ** 0.5)


def test_fed_mid_global_scope_with_radius_equals_fed_iter_ht():
    data = fs.data.fedprox_synthetic(0.5, 0.5, num_clients=4, dim=20, num_classes=3, seed=1,
                                     dtype=DT)
    prob = fs.problems.softmax(num_classes=3)
    kw = dict(sparsity=7, local_steps=3, batch_size=8, sparsity_scope="global", radius=0.5)
    mid = fs.simulate(fs.algorithms.fed_mid(client_lr=0.5, **kw), prob, data, rounds=4, seed=1,
                      progress=False)
    iht = fs.simulate(fs.algorithms.fed_iter_ht(step_size=0.5, **kw), prob, data, rounds=4,
                      seed=1, progress=False)
    assert torch.equal(mid.model, iht.model)
    assert int((mid.model != 0).sum()) == 7
    assert float(torch.linalg.vector_norm(mid.model)) <= 0.5 + 1e-12
    free = fs.simulate(fs.algorithms.fed_mid(client_lr=0.5, **{**kw, "radius": None}), prob,
                       data, rounds=4, seed=1, progress=False)
    assert float(torch.linalg.vector_norm(free.model)) > 0.5         # so the ball binds
    dual = fs.simulate(fs.algorithms.fed_dual_avg(client_lr=0.5, **kw), prob, data, rounds=4,
                       seed=1, progress=False)
    assert int((dual.model != 0).sum()) == 7
    assert float(torch.linalg.vector_norm(dual.model)) <= 0.5 + 1e-12


def test_scope_and_radius_validation():
    with pytest.raises(ConfigError, match="sparsity_scope='model' is invalid: must be one of "
                                          "'row', 'global'"):
        fs.algorithms.fed_mid(sparsity=3, sparsity_scope="model")
    with pytest.raises(ConfigError, match="sparsity_scope='global' is invalid: must be 'row' "
                                          "with regularizer='l1'"):
        fs.algorithms.fed_dual_avg(regularizer="l1", penalty=0.1, sparsity_scope="global")
    with pytest.raises(ConfigError, match="radius=-1.0"):
        fs.algorithms.fed_dual_avg(sparsity=3, radius=-1.0)


def test_fed_mid_and_fed_dual_avg_are_two_classes_of_one_regulariser():
    # Each round is its own class: only FedDualAvg keeps and broadcasts a dual, and only
    # FedMid's uploads under the l0 constraint are sparse.
    data, problem = _two_clients(), fs.problems.least_squares()
    mid = fs.algorithms.fed_mid(sparsity=1).bind(problem, data)
    dual = fs.algorithms.fed_dual_avg(sparsity=1).bind(problem, data)
    assert isinstance(mid, fs.algorithms.FedMid) and isinstance(dual, fs.algorithms.FedDualAvg)
    assert isinstance(mid, fs.algorithms.FederatedComposite)
    assert "dual" not in mid.init(problem) and "dual" in dual.init(problem)
    assert (mid.upload_encoding, mid.broadcast_encoding) == ("sparse", "sparse")
    assert (dual.upload_encoding, dual.broadcast_encoding) == ("dense", "dense")
    l1 = fs.algorithms.fed_mid(regularizer="l1", penalty=1.0)
    assert l1.upload_encoding == "dense"


@pytest.mark.parametrize("es", [1.0, 0.5])
def test_fed_dual_avg_schedule_follows_the_round_index_through_a_lost_round(es):
    """Yuan et al. 2021, Alg. 1: eta~_{t,k} = eta_s eta_c K t + eta_c k with t the round.
    A round in which nothing arrives keeps the dual, but the next round's clients and the
    server's prox still use its index (an aggregation counter would fall one behind)."""
    import numpy as np

    rng = np.random.default_rng(5)
    xs = [np.round(rng.normal(size=(n, 6)), 2) for n in (4, 5)]
    ys = [np.round(rng.normal(size=n), 2) for n in (4, 5)]
    data = fs.data.from_arrays(xs, ys, dtype=torch.float64)
    p, ec, K, lam = np.array([4, 5]) / 9, 0.3, 2, 0.05
    delivered = np.array([[1, 1], [0, 0], [1, 1]], dtype=bool)

    def prox(v, step):
        return np.sign(v) * np.maximum(np.abs(v) - lam * step, 0)

    def grad(x, A, y):  # f_i = 1/(2 n_i) ||A x - y||^2
        return A.T @ (A @ x - y) / len(y)

    z = np.zeros(6)
    for t in range(3):
        uploads = []
        for A, y in zip(xs, ys, strict=True):
            zi = z.copy()
            for k in range(K):
                zi = zi - ec * grad(prox(zi, es * ec * K * t + ec * k), A, y)
            uploads.append(zi)
        if delivered[t].any():
            z = z + es * sum(p[i] * (uploads[i] - z) for i in range(2))
    expected = prox(z, es * ec * K * 3)
    algo = fs.algorithms.fed_dual_avg(client_lr=ec, server_lr=es, local_steps=K,
                                      regularizer="l1", penalty=lam)
    with pytest.warns(RuntimeWarning, match="no upload was delivered"):
        history = fs.simulate(algo, fs.problems.least_squares(), data, rounds=3,
                              channel=fs.channels.ScheduledChannel(torch.tensor(delivered)))
    np.testing.assert_allclose(history.model.numpy(), expected, rtol=1e-12, atol=1e-14)
