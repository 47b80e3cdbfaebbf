"""FedGradMP (Jeong, Needell, Qin 2024, Algorithms 1-2)."""

import numpy as np
import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.algorithms.sparse_models import SparseModel

DT = torch.float64


def test_two_client_round_by_hand():
    # X_i = I_3, so f_i(x) = (1/6)||x - y_i||^2, grad at 0 = -y_i/3 and the restricted
    # minimiser on any support is y_i restricted to it. tau = 1, K = 1, full batch:
    # client 1: Gamma = top-2 |y1| = {0, 1} -> b = (3, 1, 0) -> x1 = (3, 0, 0);
    # client 2: Gamma = {1, 2} -> b = (0, 2, 1) -> x2 = (0, 2, 0);
    # server: H_1((x1 + x2) / 2) = H_1((1.5, 1, 0)) = (1.5, 0, 0).
    eye = torch.eye(3, dtype=DT)
    data = fs.data.from_arrays([eye, eye], [torch.tensor([3.0, 1.0, 0.5], dtype=DT),
                                            torch.tensor([0.2, 2.0, 1.0], dtype=DT)],
                               dtype=DT)
    algo = fs.algorithms.fed_grad_mp(sparsity=1, local_steps=1)
    h = fs.simulate(algo, fs.problems.least_squares(), data, rounds=1, progress=False)
    assert torch.allclose(h.model, torch.tensor([1.5, 0.0, 0.0], dtype=DT), atol=1e-14)
    # each upload: one (1-byte index, 8-byte value) pair
    assert h.records[0]["bytes_up"] == 2 * (1 + 8)


def _alg1_reference(xs, ys, tau, local_steps):
    """Jeong et al. 2024, Alg. 1 in NumPy, standard basis, least squares, full batches.

    ``f_i(x) = ||X_i x - y_i||^2 / (2 n_i)``, p_i = n_i / n, x_0 = 0, ties to the lower
    index; client i, for k = 1..K: r = grad f_i(x) at the CURRENT local iterate,
    Gamma = top 2 tau of |r|, Gamma^ = Gamma u Lambda (Lambda = supp(x_t) at k = 1, then
    the support just kept), b = least squares on Gamma^, x = H_tau(b); server
    H_tau(sum_i p_i x_i).
    """
    def top(v, k):
        return sorted(range(v.size), key=lambda j: (-abs(v[j]), j))[:k]

    d = xs[0].shape[1]
    p = np.array([len(y) for y in ys], dtype=float)
    p /= p.sum()
    mean = np.zeros(d)
    for X, y, p_i in zip(xs, ys, p, strict=True):
        x, support = np.zeros(d), set()
        for _ in range(local_steps):
            r = X.T @ (X @ x - y) / len(y)
            merged = sorted(set(top(r, 2 * tau)) | support)
            b = np.zeros(d)
            b[merged] = np.linalg.lstsq(X[:, merged], y, rcond=None)[0]
            support = set(top(b, tau))
            x = np.zeros(d)
            x[sorted(support)] = b[sorted(support)]
        mean += p_i * x
    out = np.zeros(d)
    kept = top(mean, tau)
    out[kept] = mean[kept]
    return out


@pytest.mark.parametrize("local_steps", [2, 3])
def test_several_local_iterations_and_size_weights_match_algorithm_1(local_steps):
    # Two clients of 3 and 5 examples (p = 3/8, 5/8), d = 4, tau = 1, checked against the
    # reference above. Each of these departures gives another model here, at K = 2 and 3:
    # r at x_t instead of the local iterate (0.257 e_1 in place of 1.036 e_1 at K = 2), a
    # uniform server mean (1.188 e_1), Gamma^ without Lambda or Lambda kept at supp(x_t)
    # (0.355 e_2).
    xs = [np.array([[0.1, -0.1, 0.6, 0.1], [-0.5, 0.4, 1.3, 0.9], [-0.7, -1.3, -0.6, 0.0]]),
          np.array([[-2.3, -0.2, -1.2, -0.7], [-0.5, -0.3, 0.4, 1.0], [-0.1, 1.4, -0.7, 0.4],
                    [0.8, 0.2, -0.3, 1.1], [0.3, -0.9, 0.5, -0.4]])]
    ys = [np.array([0.9, 0.1, -0.7]), np.array([-0.9, -0.5, 0.2, 0.6, -0.3])]
    data = fs.data.from_arrays([torch.tensor(X, dtype=DT) for X in xs],
                               [torch.tensor(y, dtype=DT) for y in ys], dtype=DT)
    h = fs.simulate(fs.algorithms.fed_grad_mp(sparsity=1, local_steps=local_steps),
                    fs.problems.least_squares(), data, rounds=1, progress=False)
    expected = torch.tensor(_alg1_reference(xs, ys, 1, local_steps), dtype=DT)
    assert torch.allclose(h.model, expected, rtol=1e-10, atol=1e-12)


def test_the_client_thresholds_before_it_projects_onto_the_ball():
    # Alg. 2: x = P_Lambda(b), then Pi_R. One client, X = I_2, y = (3, 4), tau = 1, K = 1:
    # b = y = (3, 4), P_Lambda(b) = (0, 4), Pi_3.5 -> (0, 3.5); projecting first would
    # give H_1(0.7 b) = (0, 2.8), also inside the ball.
    data = fs.data.from_arrays([torch.eye(2, dtype=DT)], [torch.tensor([3.0, 4.0], dtype=DT)],
                               dtype=DT)
    algo = fs.algorithms.fed_grad_mp(sparsity=1, local_steps=1, radius=3.5)
    h = fs.simulate(algo, fs.problems.least_squares(), data, rounds=1, progress=False)
    assert torch.allclose(h.model, torch.tensor([0.0, 3.5], dtype=DT), atol=1e-14)


def test_the_restricted_solve_reads_the_clients_full_data_not_the_mini_batch():
    # Jeong et al. 2024, Alg. 1: b = argmin f_i over R(A_Gamma^) on the client's FULL local
    # data; only r is a mini-batch gradient. d = 2, tau = 1: Gamma^ is both coordinates
    # whatever the batch, so b is the least-squares fit on all 6 rows (noisy: a one-row
    # batch would fit another b), and the model H_1(b).
    gen = torch.Generator().manual_seed(4)
    X, y = torch.randn(6, 2, generator=gen, dtype=DT), torch.randn(6, generator=gen, dtype=DT)
    b = torch.linalg.lstsq(X, y).solution
    expected = torch.where(b.abs() == b.abs().max(), b, torch.zeros_like(b))
    algo = fs.algorithms.fed_grad_mp(sparsity=1, local_steps=1, batch_size=1)
    h = fs.simulate(algo, fs.problems.least_squares(), fs.data.from_arrays([X], [y], dtype=DT),
                    rounds=1, progress=False)
    assert torch.allclose(h.model, expected, atol=1e-12)


def _fig9(**kw):
    return fs.data.shifted_gaussian(num_clients=30, samples_per_client=100, dim=1000,
                                    sparsity=10, alpha=1.0, exponent=1.1, seed=kw.get("seed", 0),
                                    dtype=DT)


@pytest.mark.parametrize("seed", [0, 1])
def test_figure9_noiseless_recovery_within_8_rounds(seed):
    data = _fig9(seed=seed)
    algo = fs.algorithms.fed_grad_mp(sparsity=10, local_steps=3, batch_size=40)
    h = fs.simulate(algo, fs.problems.least_squares(), data, rounds=8, seed=seed, progress=False)
    last = h.records[-1]
    assert last["rel_error"] < 1e-10
    assert last["support_precision"] == 1.0 and last["support_recall"] == 1.0
    # and the paper's "about four rounds"
    first = next(r["round"] for r in h.records if r["rel_error"] < 1e-10)
    assert first <= 6


def test_algorithm_clients_per_round_is_honoured():
    data = fs.data.shifted_gaussian(num_clients=12, samples_per_client=40, dim=50, sparsity=3,
                                    dtype=DT)
    algo = fs.algorithms.fed_grad_mp(sparsity=3, local_steps=2, clients_per_round=5)
    h = fs.simulate(algo, fs.problems.least_squares(), data, rounds=3, progress=False)
    assert all(r["clients_sampled"] == 5 for r in h.records)
    # the simulator's own argument wins
    h = fs.simulate(algo, fs.problems.least_squares(), data, rounds=1, clients_per_round=7,
                    progress=False)
    assert h.records[0]["clients_sampled"] == 7


def _dictionary_data(d=200, m=100, tau=5, clients=10, n=60, seed=0):
    D = fs.sparsity.gaussian_dictionary(dim=d, atoms=m, seed=7)
    g = torch.Generator().manual_seed(seed)
    coef = torch.zeros(m, dtype=DT)
    coef[torch.randperm(m, generator=g)[:tau]] = torch.randn(tau, generator=g, dtype=DT)
    truth = D @ coef
    xs = [torch.randn(n, d, generator=g, dtype=DT) for _ in range(clients)]
    data = fs.data.from_arrays(xs, [x @ truth for x in xs], ground_truth=truth, dtype=DT)
    return data, D, coef


@pytest.mark.parametrize("spec", ["tensor", "dict"])
def test_dictionary_sparse_ground_truth_is_recovered(spec):
    data, D, coef = _dictionary_data()
    dictionary = D if spec == "tensor" else {"kind": "gaussian", "atoms": 100, "seed": 7}
    algo = fs.algorithms.fed_grad_mp(sparsity=5, local_steps=3, batch_size=30,
                                     dictionary=dictionary)
    h = fs.simulate(algo, fs.problems.least_squares(), data, rounds=6, progress=False)
    assert h.records[-1]["rel_error"] < 1e-10           # evaluated on the signal A a
    # the model travels as 5 coefficients out of 100: 1-byte index + 8-byte value each
    assert h.records[-1]["bytes_up"] == 10 * 5 * 9


def test_dictionary_problem_used_directly_evaluates_coefficients():
    data, D, coef = _dictionary_data()
    data = fs.data.FederatedDataset(train=data.train, weights=data.weights, ground_truth=coef)
    prob = fs.problems.DictionaryProblem(fs.problems.least_squares(), D)
    h = fs.simulate(fs.algorithms.fed_grad_mp(sparsity=5, batch_size=30), prob, data, rounds=6,
                    progress=False)
    assert h.records[-1]["rel_error"] < 1e-10 and h.model.shape == (100,)


def test_the_gradient_support_ranks_atoms_by_normalised_correlation():
    # approx_2tau of the proxy picks the atoms of largest |A^T r|_j / ||a_j||
    # (docs/decisions.md, section 1), not of largest |A^T r|_j. A = diag(1, 10) with
    # A^T r = (1, 5): normalised (1, 0.5), so atom 0; unnormalised would pick atom 1.
    D = fs.sparsity.Dictionary(torch.diag(torch.tensor([1.0, 10.0], dtype=DT)))
    geometry = SparseModel(1, 1, D)
    chosen = geometry.select(torch.tensor([[1.0, 5.0]], dtype=DT), 1)
    assert chosen.tolist() == [[True, False]]


def test_inexact_gradient_descent_reports_inner_iterations():
    data = fs.data.shifted_gaussian(num_clients=8, samples_per_client=60, dim=80, sparsity=4,
                                    alpha=0.2, exponent=0.2, dtype=DT)
    algo = fs.algorithms.fed_grad_mp(sparsity=4, local_steps=2, inner_solver="gd",
                                     inner_tol=1e-9, inner_max_iter=500)
    h = fs.simulate(algo, fs.problems.least_squares(), data, rounds=10, progress=False)
    # warm starts make late rounds cheap; the first round needs real iterations
    assert h.records[0]["inner_iterations"] > 1
    assert h.records[-1]["rel_error"] < 1e-5


def test_sgd_inner_solver_and_radius_on_softmax():
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(40, 10, generator=g, dtype=DT) for _ in range(4)]
    W = torch.randn(10, 3, generator=g, dtype=DT)
    ys = [(x @ W).argmax(-1).to(DT) for x in xs]
    data = fs.data.from_arrays(xs, ys, dtype=DT)
    prob = fs.problems.softmax(num_classes=3)
    algo = fs.algorithms.fed_grad_mp(sparsity=3, local_steps=3, batch_size=10,
                                     inner_solver="sgd", inner_steps=2, radius=5.0)
    h = fs.simulate(algo, prob, data, rounds=5, progress=False)
    assert torch.linalg.vector_norm(h.model) <= 5.0 + 1e-12
    # at most tau non-zeros per class row
    assert ((h.model.reshape(3, 10) != 0).sum(-1) <= 3).all()
    assert h.records[-1]["objective"] < h.initial["objective"]
    assert h.records[-1]["inner_iterations"] == 2.0


def test_sgd_inner_solver_auto_step_by_hand():
    # One client, X = I_2, y = (1, 2): f = (1/4)||x - y||^2, gradient (x - y) / 2, restricted
    # Hessian I / 2, so inner_lr="auto" is 1 / (1.05 * 0.5) = 1 / 0.525. tau = 1, K = 1:
    # Gamma = both coordinates; one full-batch inner step from 0: c = (0.5, 1) / 0.525,
    # and H_1 keeps (0, 1 / 0.525) = (0, 40/21).
    data = fs.data.from_arrays([torch.eye(2, dtype=DT)], [torch.tensor([1.0, 2.0], dtype=DT)],
                               dtype=DT)
    algo = fs.algorithms.fed_grad_mp(sparsity=1, local_steps=1, inner_solver="sgd",
                                     inner_steps=1)
    h = fs.simulate(algo, fs.problems.least_squares(), data, rounds=1, progress=False)
    assert torch.allclose(h.model, torch.tensor([0.0, 40 / 21], dtype=DT), atol=1e-12)


def test_sgd_inner_solver_draws_batches_of_its_own():
    # Jeong et al. 2024, Alg. 2: the inner solver's mini-batches are fresh draws, after
    # the K outer ones: outer step k draws counter k, its inner steps K + k J .. K + (k+1) J - 1
    from fedsparse.algorithms import ClientContext

    drawn = []

    class Recording(ClientContext):
        # every mini-batch, copied out (batch) or read in place (batch_grad), is this draw
        def batch_index(self, step, batch_size):
            drawn.append(step)
            return super().batch_index(step, batch_size)

    gen = torch.Generator().manual_seed(5)
    X, y = torch.randn(2, 9, 4, generator=gen, dtype=DT), torch.randn(2, 9, generator=gen,
                                                                      dtype=DT)
    data = fs.data.from_arrays(list(X), list(y), dtype=DT)
    problem = fs.problems.least_squares()
    algo = fs.algorithms.fed_grad_mp(sparsity=1, local_steps=2, batch_size=1,
                                     inner_solver="sgd", inner_steps=2).bind(problem, data)
    state = algo.init(problem)
    ctx = Recording(problem, data.train, torch.arange(2), 0, 7,
                    config=algo.client_config(state))
    algo.client_update(algo.broadcast(state, torch.arange(2)), ctx)
    assert drawn == [0, 2, 3, 1, 4, 5]


def test_exact_newton_on_logistic_improves_objective():
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(50, 20, generator=g, dtype=DT) for _ in range(3)]
    truth = torch.zeros(20, dtype=DT)
    truth[:3] = torch.tensor([2.0, -1.5, 1.0], dtype=DT)
    ys = [((x @ truth) > 0).to(DT) for x in xs]
    data = fs.data.from_arrays(xs, ys, dtype=DT)
    h = fs.simulate(fs.algorithms.fed_grad_mp(sparsity=3, local_steps=2, radius=10.0),
                    fs.problems.logistic(l2=0.01), data, rounds=4, progress=False)
    assert h.records[-1]["accuracy"] > 0.9


def test_validation_errors_name_the_parameter():
    with pytest.raises(ConfigError, match="inner_solver"):
        fs.algorithms.fed_grad_mp(sparsity=3, inner_solver="lbfgs-ish")
    with pytest.raises(ConfigError, match="radius"):
        fs.algorithms.fed_grad_mp(sparsity=3, radius=-1.0)
    with pytest.raises(ConfigError, match="dictionary"):
        fs.algorithms.fed_grad_mp(sparsity=3, dictionary={"kind": "wavelet"})
    data = fs.data.shifted_gaussian(num_clients=2, samples_per_client=5, dim=10, sparsity=2)
    with pytest.raises(ConfigError, match="sparsity"):
        fs.simulate(fs.algorithms.fed_grad_mp(sparsity=11), fs.problems.least_squares(), data,
                    rounds=1, progress=False)
    with pytest.raises(ConfigError, match="dictionary shape"):
        fs.simulate(fs.algorithms.fed_grad_mp(sparsity=2, dictionary=torch.randn(9, 4)),
                    fs.problems.least_squares(), data, rounds=1, progress=False)
    with pytest.raises(ConfigError, match="atoms"):
        fs.simulate(fs.algorithms.fed_grad_mp(sparsity=5, dictionary={"kind": "gaussian",
                                                                      "atoms": 4}),
                    fs.problems.least_squares(), data, rounds=1, progress=False)


def test_registry_builds_from_config_kwargs():
    algo = fs.algorithms.REGISTRY["fed_grad_mp"](sparsity=4, dictionary={"kind": "gaussian",
                                                                         "atoms": 20})
    assert "gaussian" in repr(algo)


def test_fed_iter_ht_accepts_a_dictionary():
    data, D, coef = _dictionary_data()
    algo = fs.algorithms.fed_iter_ht(sparsity=5, local_steps=3, dictionary=D)
    h = fs.simulate(algo, fs.problems.least_squares(), data, rounds=30, progress=False)
    assert h.records[-1]["rel_error"] < 0.1 < h.records[0]["rel_error"]
    assert h.records[-1]["bytes_up"] == 10 * 5 * 9          # coefficients travel
    assert "dictionary" in algo.hyperparameters()
    with pytest.raises(ConfigError, match="dictionary"):
        fs.algorithms.hard_thresholding._build("fed_ht", 5, "auto", 3, None, False, D)


def test_ctx_batch_copies_the_drawn_rows():
    from fedsparse.algorithms import ClientContext

    data = fs.data.shifted_gaussian(num_clients=5, samples_per_client=30, dim=20, sparsity=3,
                                    dtype=DT)
    clients = torch.tensor([0, 2, 4])
    ctx = ClientContext(fs.problems.least_squares(), data.train.select(clients), clients, 3, 7)
    X, y, _ = ctx.batch(1, 12)
    Xf, yf, _ = ctx.full()
    # ctx.batch copies whole rows with index_select: the same rows an element-wise gather picks
    index, _ = ctx.batch_index(1, 12)
    assert torch.equal(X, torch.gather(Xf, 1, index.unsqueeze(-1).expand(-1, -1, Xf.shape[-1])))
    assert torch.equal(y, torch.gather(yf, 1, index))


def test_jeong2024_configs_build():
    from fedsparse.experiments.config import build_algorithm, load_config, resolve_runs
    from fedsparse.experiments.registry import toml_experiments

    names = [n for n in toml_experiments() if n.startswith("fedgradmp-")]
    assert len(names) >= 9
    for name in names:
        for run in resolve_runs(load_config(toml_experiments()[name])):
            build_algorithm(run["algorithm"])


@pytest.mark.slow
def test_video_experiment_quick(tmp_path):
    pytest.importorskip("av")
    pytest.importorskip("skvideo")
    from fedsparse.experiments.fedgradmp import video_recovery

    summary = video_recovery(tmp_path, quick=True)
    assert (tmp_path / "frames.png").exists()
    assert summary["rel_error"] < 0.5


# --------------------------------------------------------------------------------------
# sparsity_scope="global": ||x||_0 <= tau over the whole softmax model (Sec. V-B.2)


def _restricted_newton(lam: float) -> tuple[float, float]:
    """argmin over (a, b) of (1/3)[logsumexp(3a, 3b, 0) - 3a] + (lam/2)(a^2 + b^2), by a
    2 x 2 Newton iteration written out here (independent of the library's solver)."""
    a = b = 0.0
    for _ in range(50):
        e = torch.tensor([3 * a, 3 * b, 0.0], dtype=DT).softmax(0)
        p0, p1 = float(e[0]), float(e[1])
        g = torch.tensor([p0 - 1 + lam * a, p1 + lam * b], dtype=DT)
        H = torch.tensor([[3 * p0 * (1 - p0) + lam, -3 * p0 * p1],
                          [-3 * p0 * p1, 3 * p1 * (1 - p1) + lam]], dtype=DT)
        step = torch.linalg.solve(H, g)
        a, b = a - float(step[0]), b - float(step[1])
    return a, b


def test_global_scope_one_local_iteration_by_hand():
    # Softmax, 3 classes, d = 3, one client with three examples (w = 1/3 each):
    # (3, 0, 0) label 0, (0, 1, 0) label 1, (0, 0, 1) label 2; l2 = 0.5, tau = 1, K = 1.
    # At x = 0 every softmax probability is 1/3, so grad_c[j] = (1/3)(1/3 - [y_j = c]) X_jj:
    #   row 0: (-2/3, 1/9, 1/9), row 1: (1/3, -2/9, 1/9), row 2: (1/3, 1/9, -2/9).
    # Global identify, 2 tau = 2 largest |r| over the whole model: flat 0 (2/3), then
    # flat 3 and flat 6 tie at 1/3 -> the lower index, 3. Gamma^ = {0, 3} (Lambda empty).
    # Restricted problem on (a, b) = (x_0[0], x_1[0]): only example 1 moves,
    #   (1/3)[logsumexp(3a, 3b, 0) - 3a] + (0.5/2)(a^2 + b^2) + const,
    # with a > 0 > b and |a| > |b| (example 1 is of class 0). H_1 over the whole model
    # keeps a alone; the server (one client) keeps it too.
    X = torch.tensor([[3.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]], dtype=DT)
    data = fs.data.from_arrays([X], [torch.tensor([0.0, 1.0, 2.0], dtype=DT)], dtype=DT)
    prob = fs.problems.softmax(num_classes=3, l2=0.5)
    a, b = _restricted_newton(0.5)
    assert a > -b > 0
    h = fs.simulate(fs.algorithms.fed_grad_mp(sparsity=1, local_steps=1,
                                              sparsity_scope="global"),
                    prob, data, rounds=1, progress=False)
    expected = torch.zeros(9, dtype=DT)
    expected[0] = a
    assert torch.allclose(h.model, expected, atol=1e-9)
    # row scope: tau = 1 in each class row -> three non-zeros
    row = fs.simulate(fs.algorithms.fed_grad_mp(sparsity=1, local_steps=1), prob, data,
                      rounds=1, progress=False)
    assert ((row.model.reshape(3, 3) != 0).sum(-1) == 1).all()


def test_global_scope_softmax_run_keeps_tau_over_the_model():
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(40, 10, generator=g, dtype=DT) for _ in range(4)]
    W = torch.randn(10, 3, generator=g, dtype=DT)
    ys = [(x @ W).argmax(-1).to(DT) for x in xs]
    data = fs.data.from_arrays(xs, ys, dtype=DT)
    prob = fs.problems.softmax(num_classes=3)
    algo = fs.algorithms.fed_grad_mp(sparsity=12, local_steps=3, batch_size=10,
                                     inner_solver="sgd", inner_steps=2, radius=5.0,
                                     sparsity_scope="global")
    h = fs.simulate(algo, prob, data, rounds=5, progress=False)
    assert int((h.model != 0).sum()) == 12           # 12 of 30, more than a row's 10 allowed
    assert torch.linalg.vector_norm(h.model) <= 5.0 + 1e-12
    assert h.records[-1]["objective"] < h.initial["objective"]
    assert algo.hyperparameters()["sparsity_scope"] == "global"


def test_global_scope_with_a_dictionary_projects_each_row_on_its_atoms():
    from fedsparse.algorithms.sparse_models import SparseModel
    from fedsparse.sparsity.dictionaries import Dictionary

    g = torch.Generator().manual_seed(0)
    D = Dictionary(torch.randn(6, 4, generator=g, dtype=DT))
    # 2 rows x 4 atoms, scores |a_j| ||a_j||: choose coefficients so that the 3 largest
    # scores are atoms 0, 1 of row 0 and atom 2 of row 1 (row 0 gets 2, row 1 gets 1).
    a = torch.tensor([5.0, 4.0, 0.01, 0.02, 0.03, 0.01, 6.0, 0.02], dtype=DT) / torch.cat(
        [D.norms, D.norms])
    geo = SparseModel(3, 2, D, scope="global")
    out, mask = geo.approx(a)
    assert mask.tolist() == [True, True, False, False, False, False, True, False]
    for r, atoms in ((0, [0, 1]), (1, [2])):
        w = D.matrix @ a[4 * r: 4 * r + 4]
        sol = torch.linalg.lstsq(D.matrix[:, atoms], w.unsqueeze(-1)).solution.squeeze(-1)
        expect = torch.zeros(4, dtype=DT)
        expect[atoms] = sol
        assert torch.allclose(out[4 * r: 4 * r + 4], expect, atol=1e-12)
    # with the identity dictionary, global approx_tau is the global hard threshold
    eye = SparseModel(3, 2, Dictionary(torch.eye(4, dtype=DT)), scope="global")
    v = torch.tensor([[1.0, -5, 2, 0, 3, 0.5, -4, 1]], dtype=DT)
    assert torch.allclose(eye.approx(v)[0],
                          fs.sparsity.hard_threshold_blocks(v, 3, 2, scope="global"))


def test_global_scope_validation():
    with pytest.raises(ConfigError, match="sparsity_scope='whole' is invalid: must be one of "
                                          "'row', 'global'"):
        fs.algorithms.fed_grad_mp(sparsity=3, sparsity_scope="whole")
    data = fs.data.fedprox_synthetic(0.5, 0.5, num_clients=2, dim=5, num_classes=3, seed=0)
    prob = fs.problems.softmax(num_classes=3)
    with pytest.raises(ConfigError, match="sparsity=16 is invalid: must be at most the model "
                                          "dimension 15"):
        fs.simulate(fs.algorithms.fed_grad_mp(sparsity=16, sparsity_scope="global"), prob,
                    data, rounds=1, progress=False)
    with pytest.raises(ConfigError, match="sparsity=9 is invalid: must be at most the number "
                                          "of atoms of all class rows 6"):
        fs.simulate(fs.algorithms.fed_grad_mp(sparsity=9, sparsity_scope="global",
                                              dictionary={"kind": "gaussian", "atoms": 2}),
                    prob, data, rounds=1, progress=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_top_mask_on_the_cpu_matches_topk_with_ties_nan_and_inf(dtype):
    # On the CPU the k-th largest magnitude comes from numpy's partition; the mask must
    # be the one topk's threshold gives (ties to the lower index, NaN ranked largest).
    from fedsparse.algorithms.sparse_models import top_mask
    from fedsparse.sparsity import top_indices

    def reference(x, k):
        mag = x.abs()
        kth = torch.topk(mag, k, dim=-1, sorted=False).values.amin(-1, keepdim=True)
        mask = mag >= kth
        tied = mask.sum(-1) != k
        rows = mag[tied]
        mask[tied] = torch.zeros_like(rows, dtype=torch.bool).scatter_(
            -1, top_indices(rows, k), True)
        return mask

    g = torch.Generator().manual_seed(0)
    for trial in range(200):
        x = torch.randn(6, 1, 12, generator=g, dtype=dtype)
        if trial % 2:
            x = torch.round(2 * x)  # many ties
        if trial % 3 == 0:
            x.view(-1)[torch.randint(0, x.numel(), (4,), generator=g)] = float("nan")
        if trial % 5 == 0:
            x.view(-1)[torch.randint(0, x.numel(), (3,), generator=g)] = float("inf")
        for k in (1, 3, 11):
            assert torch.equal(top_mask(x, k), reference(x, k)), (trial, k)


@pytest.mark.parametrize("problem", [fs.problems.least_squares(), fs.problems.logistic(l2=0.1),
                                     fs.problems.softmax(3)])
@pytest.mark.parametrize("block_bytes", [2 << 20, 6000])  # one block; blocks of two clients
def test_batch_grad_is_the_gradient_on_the_copied_batch_bit_for_bit(problem, block_bytes,
                                                                     monkeypatch):
    # ctx.batch_grad reads the drawn rows in place (linear models on dense CPU data);
    # the numbers must be those of problem.grad on ctx.batch's copy, to the last bit.
    from fedsparse.algorithms import ClientContext

    monkeypatch.setattr("fedsparse.problems.base._FUSED_BLOCK_BYTES", block_bytes)
    gen = torch.Generator().manual_seed(3)
    X = torch.randn(13, 30, 50, generator=gen, dtype=DT)
    y = torch.randint(0, 2 if problem.blocks == 1 else 3, (13, 30), generator=gen).to(DT)
    data = fs.data.from_arrays(list(X), list(y), dtype=DT)
    params = torch.randn(13, problem.param_dim(50), generator=gen, dtype=DT)
    for step in range(3):
        ctx = ClientContext(problem, data.train, torch.arange(13), 2, 0)
        expected = problem.grad(params, *ctx.batch(step, 7))
        ctx = ClientContext(problem, data.train, torch.arange(13), 2, 0)
        assert torch.equal(ctx.batch_grad(problem, params, step, 7), expected)
