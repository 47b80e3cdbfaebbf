import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.algorithms import ClientContext
from fedsparse.algorithms.base import Cohort

# Two clients, d = 3. Client 0: rows e1, e2 with targets 1, 2; client 1: row e3 with target 3.
# p = n_i / n = (2/3, 1/3). f_i = 1/(2 n_i) ||A_i x - y_i||^2, gamma = 0.5, x0 = 0.
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
                                                torch.tensor([True, True])))
    return uploads, new["model"]


def test_distributed_iht_by_hand():
    # client 0: grad = 1/2 (-1, -2, 0) -> x = (0.25, 0.5, 0); client 1: x = (0, 0, 1.5)
    # mean = (1/6, 1/3, 1/2) -> H_1 keeps 0.5
    up, model = _round(fs.algorithms.distributed_iht(sparsity=1, step_size=0.5))
    assert torch.allclose(up, torch.tensor([[0.25, 0.5, 0], [0, 0, 1.5]], dtype=torch.float64))
    assert model.tolist() == [0.0, 0.0, 0.5]


def test_fed_ht_by_hand():
    # second step, client 0: r = (-0.75, -1.5), grad = (-0.375, -0.75, 0) -> (0.4375, 0.875, 0)
    # client 1: r = -1.5 -> 2.25; mean = (0.291667, 0.583333, 0.75)
    up, model = _round(fs.algorithms.fed_ht(sparsity=2, step_size=0.5, local_steps=2))
    assert torch.allclose(up, torch.tensor([[0.4375, 0.875, 0], [0, 0, 2.25]],
                                           dtype=torch.float64))
    assert torch.allclose(model, torch.tensor([0, 0.875 * 2 / 3, 0.75], dtype=torch.float64))


def test_fed_iter_ht_by_hand():
    # client 0: step 1 (0.25, 0.5, 0) -> H_1 (0, 0.5, 0); step 2: r = (-1, -1.5),
    # grad = (-0.5, -0.75, 0) -> (0.25, 0.875, 0) -> H_1 (0, 0.875, 0). client 1: (0, 0, 2.25).
    up, model = _round(fs.algorithms.fed_iter_ht(sparsity=1, step_size=0.5, local_steps=2))
    assert torch.allclose(up, torch.tensor([[0, 0.875, 0], [0, 0, 2.25]], dtype=torch.float64))
    assert model.tolist() == [0.0, 0.0, 0.75]


@pytest.mark.parametrize("builder", [fs.algorithms.fed_ht, fs.algorithms.fed_iter_ht])
def test_each_local_step_takes_its_own_mini_batch(builder, update_with_its_draws):
    # Tong et al. 2022, Algorithms 1 and 2: step k is a stochastic gradient step on the
    # k-th mini-batch (FedIter-HT thresholding after each); the reference takes batch(k)
    # at step k
    uploads, problem, draws = update_with_its_draws(
        builder(sparsity=2, step_size=0.1, local_steps=3, batch_size=2), dim=5, seed=2)
    x = torch.zeros(2, 5, dtype=torch.float64)
    for k in range(3):
        x = x - 0.1 * problem.grad(x, *draws.batch(k, 2))
        if builder is fs.algorithms.fed_iter_ht:
            x = fs.sparsity.hard_threshold(x, 2)
    assert torch.allclose(uploads, x, atol=1e-14)


def test_aggregation_renormalises_over_delivered_uploads():
    data = fs.data.from_arrays(XS, YS, dtype=torch.float64)
    algo = fs.algorithms.fed_ht(sparsity=3, step_size=0.5, local_steps=1).bind(
        fs.problems.least_squares(), data)
    # the undelivered row holds NaN: it must not reach the model
    uploads = torch.tensor([[float("nan"), 0, 0], [0, 0, 4.0]])
    state = {"model": torch.zeros(3), "step_size": 0.5}
    cohort = Cohort(0, torch.arange(2), torch.tensor([0.25, 0.75], dtype=torch.float64),
                    torch.tensor([False, True]))
    new = algo.aggregate(state, uploads, cohort)
    assert new["model"].tolist() == [0.0, 0.0, 4.0]


def test_auto_step_is_one_over_the_largest_client_smoothness():
    # one example each, a = 1 and a = 2: f_i = (a_i x - y_i)^2 / 2, L_i = a_i^2 = (1, 4);
    # gamma = 1 / max_i L_i = 0.25 (1 over the mean, 2.5, would be 0.4)
    data = fs.data.from_arrays([torch.ones(1, 1), 2 * torch.ones(1, 1)],
                               [torch.ones(1), torch.ones(1)], dtype=torch.float64)
    problem = fs.problems.least_squares()
    algo = fs.algorithms.fed_iter_ht(sparsity=1, step_size="auto").bind(problem, data)
    assert algo.init(problem)["step_size"] == pytest.approx(0.25, rel=1e-12)


def test_fed_iter_ht_recovers_a_sparse_ground_truth():
    # well-conditioned: standard Gaussian designs, no mean shift, noiseless
    data = fs.data.shifted_gaussian(num_clients=10, samples_per_client=60, dim=200, sparsity=8,
                                    alpha=0.0, exponent=0.0, seed=0, dtype=torch.float64)
    algo = fs.algorithms.fed_iter_ht(sparsity=8, step_size="auto", local_steps=5)
    h = fs.simulate(algo, fs.problems.least_squares(), data, rounds=150, seed=0)
    last = h.records[-1]
    assert last["support_f1"] == 1.0
    assert last["rel_error"] < 1e-6
    assert torch.equal(h.model != 0, data.ground_truth != 0)


def test_softmax_thresholds_each_class_row():
    data = fs.data.fedprox_synthetic(0.5, 0.5, num_clients=4, dim=20, num_classes=3, seed=0)
    algo = fs.algorithms.fed_iter_ht(sparsity=4, step_size=0.5, local_steps=2, batch_size=8)
    h = fs.simulate(algo, fs.problems.softmax(num_classes=3), data, rounds=5, seed=0)
    rows = h.model.reshape(3, 20)
    # H_tau on each class row keeps tau entries in every row (Tong et al. 2022, A.2); the
    # 12 largest of the whole vector leave a row empty on these data
    assert (rows != 0).sum(1).tolist() == [4, 4, 4]
    assert h.records[-1]["objective"] < h.initial["objective"]
    assert h.records[-1]["accuracy"] > h.initial["accuracy"] + 0.2  # 0.28 -> 0.54
    whole = fs.algorithms.fed_iter_ht(sparsity=12, step_size=0.5, local_steps=2,
                                      batch_size=8, sparsity_scope="global")
    rows = fs.simulate(whole, fs.problems.softmax(num_classes=3), data, rounds=5,
                       seed=0).model.reshape(3, 20)
    assert (rows != 0).sum().item() == 12 and (rows != 0).sum(1).tolist() != [4, 4, 4]


@pytest.mark.parametrize("kwargs,match", [
    ({"sparsity": 0, "step_size": 0.1}, "sparsity=0"),
    ({"sparsity": 5, "step_size": 0.0}, "step_size=0.0"),
    ({"sparsity": 5, "step_size": -1}, "step_size=-1"),
    ({"sparsity": 5, "step_size": "fast"}, "step_size='fast'"),
    ({"sparsity": 5, "step_size": 0.1, "local_steps": 0}, "local_steps=0"),
    ({"sparsity": 5, "step_size": 0.1, "batch_size": 0}, "batch_size=0"),
])
def test_builder_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        fs.algorithms.fed_iter_ht(**kwargs)


def test_distributed_iht_takes_one_step():
    with pytest.raises(ConfigError, match="local_steps=3"):
        fs.algorithms.distributed_iht(sparsity=2, step_size=0.1, local_steps=3)


def test_sparsity_larger_than_dimension_is_a_clear_error():
    data = fs.data.from_arrays(XS, YS)
    with pytest.raises(ConfigError, match="sparsity=50 is invalid: must be at most the model "
                                          "dimension 3"):
        fs.simulate(fs.algorithms.fed_ht(sparsity=50, step_size=0.1),
                    fs.problems.least_squares(), data, rounds=1)


# --------------------------------------------------------------------------------------
# sparsity_scope: tau per class row ("row") or over the whole model ("global")


def test_hard_threshold_blocks_row_and_global_scope_by_hand():
    x = torch.tensor([3.0, -1.0, 2.0, 0.5, 4.0, -2.5])          # two blocks of 3
    row = fs.sparsity.hard_threshold_blocks(x, 2, 2)              # 2 per block
    assert row.tolist() == [3.0, 0.0, 2.0, 0.0, 4.0, -2.5]
    glob = fs.sparsity.hard_threshold_blocks(x, 2, 2, scope="global")   # 2 in total
    assert glob.tolist() == [3.0, 0.0, 0.0, 0.0, 4.0, 0.0]
    # global ties go to the lower flat index, so exactly k survive even across blocks
    ties = fs.sparsity.hard_threshold_blocks(torch.ones(2, 4), 3, 2, scope="global")
    assert ties.tolist() == [[1.0, 1.0, 1.0, 0.0]] * 2
    with pytest.raises(ConfigError, match="scope='all' is invalid: must be one of 'row', "
                                          "'global'"):
        fs.sparsity.hard_threshold_blocks(x, 2, 2, scope="all")


def test_fed_iter_ht_global_scope_keeps_exactly_tau_over_the_model():
    data = fs.data.fedprox_synthetic(0.5, 0.5, num_clients=4, dim=20, num_classes=3, seed=0)
    prob = fs.problems.softmax(num_classes=3)
    kw = dict(sparsity=5, step_size=0.5, local_steps=2, batch_size=8)
    glob = fs.simulate(fs.algorithms.fed_iter_ht(sparsity_scope="global", **kw), prob, data,
                       rounds=5, seed=0, progress=False)
    row = fs.simulate(fs.algorithms.fed_iter_ht(**kw), prob, data, rounds=5, seed=0,
                      progress=False)
    assert int((glob.model != 0).sum()) == 5                      # tau over all 60 entries
    assert int((row.model != 0).sum()) == 15                      # tau in each of 3 rows
    # tau = 5 whole-model entries travel per upload: 4 clients x 5 (1-byte index, 4-byte value)
    assert glob.records[0]["bytes_up"] == 4 * 5 * (1 + 4)
    assert glob.records[-1]["objective"] < glob.initial["objective"]
    # the global budget may exceed a class row's length (20) but not the model's (60)
    fs.simulate(fs.algorithms.fed_iter_ht(**{**kw, "sparsity": 30}, sparsity_scope="global"),
                prob, data, rounds=1, progress=False)
    with pytest.raises(ConfigError, match="sparsity=61 is invalid: must be at most the model "
                                          "dimension 60"):
        fs.simulate(fs.algorithms.fed_iter_ht(**{**kw, "sparsity": 61},
                                              sparsity_scope="global"),
                    prob, data, rounds=1, progress=False)
    with pytest.raises(ConfigError, match='sparsity_scope="global"'):   # the row error hints
        fs.simulate(fs.algorithms.fed_iter_ht(**{**kw, "sparsity": 21}), prob, data, rounds=1,
                    progress=False)


@pytest.mark.parametrize("builder", [fs.algorithms.fed_ht, fs.algorithms.fed_iter_ht,
                                     fs.algorithms.distributed_iht])
def test_bad_sparsity_scope_is_a_clear_error(builder):
    with pytest.raises(ConfigError, match="sparsity_scope='rows' is invalid: must be one of "
                                          "'row', 'global'"):
        builder(sparsity=3, step_size=0.1, sparsity_scope="rows")


@pytest.mark.parametrize("dictionary", [None, torch.eye(3, dtype=torch.float64)],
                         ids=["standard basis", "identity dictionary"])
def test_fed_iter_ht_radius_by_hand(dictionary):
    # As test_fed_iter_ht_by_hand, with Pi_R (R = 0.5) after every H_1:
    # client 0: (0.25, 0.5, 0) -> H_1 (0, 0.5, 0) -> Pi (norm 0.5, kept);
    #           step 2 -> (0.25, 0.875, 0) -> H_1 (0, 0.875, 0) -> Pi (0, 0.5, 0).
    # client 1: (0, 0, 1.5) -> Pi (0, 0, 0.5); grad = 0.5 - 3 -> 0.5 + 1.25 = 1.75 -> 0.5.
    # server: (2/3)(0, 0.5, 0) + (1/3)(0, 0, 0.5) = (0, 1/3, 1/6) -> H_1 (0, 1/3, 0), inside.
    # With the identity as dictionary (coefficients = signal) the ball binds the same way.
    up, model = _round(fs.algorithms.fed_iter_ht(sparsity=1, step_size=0.5, local_steps=2,
                                                 radius=0.5, dictionary=dictionary))
    assert torch.allclose(up, torch.tensor([[0, 0.5, 0], [0, 0, 0.5]], dtype=torch.float64))
    assert torch.allclose(model, torch.tensor([0, 1 / 3, 0], dtype=torch.float64))


def test_fed_iter_ht_radius_that_never_binds_changes_nothing_and_bad_ones_are_refused():
    up_big, model_big = _round(fs.algorithms.fed_iter_ht(sparsity=1, step_size=0.5,
                                                         local_steps=2, radius=100.0))
    up_none, model_none = _round(fs.algorithms.fed_iter_ht(sparsity=1, step_size=0.5,
                                                           local_steps=2))
    assert torch.equal(up_big, up_none) and torch.equal(model_big, model_none)
    with pytest.raises(ConfigError, match="radius=0.0"):
        fs.algorithms.fed_iter_ht(sparsity=1, step_size=0.5, radius=0.0)
    with pytest.raises(ConfigError, match="radius=1.0 is invalid: fed_ht does not take"):
        fs.algorithms.hard_thresholding._build("fed_ht", 1, 0.5, 2, None, False, radius=1.0)
