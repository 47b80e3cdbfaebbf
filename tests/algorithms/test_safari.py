"""SAFARI's sparse training (Mao et al. 2022): masked local steps, sparse uploads, bytes."""

import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.algorithms import ClientContext, Cohort
from fedsparse.comm import index_bytes
from fedsparse.sparsity.masks import magnitude_mask


def _mlp_data():
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(30, 12, generator=gen) for _ in range(6)]
    ys = [torch.randint(0, 3, (30,), generator=gen).float() for _ in range(6)]
    return fs.data.from_arrays(xs, ys)


def _mlp():
    return fs.problems.neural(fs.models.mlp(12, (8,), 3))


def _one_round(algo, problem, data, seed=0, round=0, total_rounds=10):
    algo = algo.bind(problem, data)
    state = algo.init(problem, seed)
    clients = torch.arange(data.num_clients)
    # the round loop sends the run's length T with the algorithm's client config
    config = {**algo.client_config(state), "total_rounds": total_rounds}
    ctx = ClientContext(problem, data.train, clients, round, seed, config=config,
                        state=algo.init_clients(problem, clients, seed))
    payload = algo.broadcast(state, clients)
    uploads, new_state, info = algo.client_update(payload, ctx)
    return algo, state, payload, uploads, new_state, info


def test_magnitude_masked_adam_keeps_pruned_weights_zero_and_biases_dense():
    problem, data = _mlp(), _mlp_data()
    algo, state, payload, uploads, _, info = _one_round(
        fs.algorithms.safari(density=0.4, optimizer="adam", step_size=0.01, batch_size=8,
                             compensation=False), problem, data)
    mask = magnitude_mask(problem, payload, 0.4, "layer")
    layout = problem.layout(12)
    assert (uploads[:, ~mask] == 0).all()              # pruned weights exactly zero
    assert (uploads[:, mask] != payload[mask]).any()   # kept weights trained
    assert bool(mask[~layout.prunable].all())          # biases are never pruned
    # per layer: ceil(0.4 * n_l) weights kept
    for name, shape in zip(layout.names, layout.shapes, strict=True):
        if name.endswith("weight"):
            n = shape[0] * shape[1]
            assert int(mask[layout.slice(name)].sum()) == -(-4 * n // 10)
    assert info["mask_density"] == pytest.approx(float(mask.double().mean()))


def test_sparse_uploads_are_counted_as_index_and_value():
    problem, data = _mlp(), _mlp_data()
    h = fs.simulate(fs.algorithms.safari(density=0.4, step_size=0.01, batch_size=8,
                                         compensation=False), problem, data, rounds=2, seed=0)
    algo, _, _, uploads, _, _ = _one_round(
        fs.algorithms.safari(density=0.4, step_size=0.01, batch_size=8, compensation=False),
        problem, data)
    P = problem.param_dim(12)
    nnz = (uploads != 0).sum(1)
    expected = int((nnz * (4 + index_bytes(P))).sum())  # float32 value + smallest index
    assert h.records[0]["bytes_up"] == expected
    assert expected < data.num_clients * 4 * P  # sparse beats dense at density 0.4


def test_update_payload_keeps_the_global_model_dense_and_model_payload_sparsifies_it():
    problem, data = _mlp(), _mlp_data()
    kw = dict(density=0.3, step_size=0.01, batch_size=8, compensation=False)
    model = fs.simulate(fs.algorithms.safari(**kw), problem, data, rounds=2).records[-1]
    update = fs.simulate(fs.algorithms.safari(**kw, payload="update"), problem, data,
                         rounds=2).records[-1]
    assert model["density"] < 0.5
    assert update["density"] > 0.99


def test_fedspa_masks_are_client_state_and_keep_their_size():
    problem, data = _mlp(), _mlp_data()
    algo, _, _, uploads, new_state, _ = _one_round(
        fs.algorithms.safari(density=0.5, pruner="fedspa", optimizer="sgd",
                             step_size=0.05, batch_size=8, compensation=False), problem, data)
    old = algo.init_clients(problem, torch.arange(6))["mask"]
    new = new_state["mask"]
    assert not torch.equal(old, new)                        # the masks moved
    assert torch.equal(old.sum(1), new.sum(1))              # same number kept
    assert (uploads[~new] == 0).all()                       # upload x * M_new
    assert not torch.equal(old[0], old[1])                  # one mask per client


def test_fed_prox_aggregator_pulls_towards_the_broadcast():
    problem, data = _mlp(), _mlp_data()
    kw = dict(density=1.0, step_size=0.5, optimizer="sgd", batch_size=8, compensation=False,
              local_steps=5)
    _, _, payload, avg, _, _ = _one_round(fs.algorithms.safari(**kw), problem, data)
    _, _, _, prox, _, _ = _one_round(fs.algorithms.safari(**kw, aggregator="fed_prox", mu=1.0),
                                     problem, data)
    assert (prox - payload).norm() < (avg - payload).norm()


def test_fed_avg_ignores_mu_and_only_fed_prox_uses_it():
    # mu weighs FedProx's term mu (x - x^t); with aggregator="fed_avg" there is none, so
    # the uploads of one round are the same bits for any mu
    problem, data = _mlp(), _mlp_data()
    kw = dict(density=1.0, optimizer="sgd", step_size=0.1, batch_size=8, compensation=False)
    small, large = (_one_round(fs.algorithms.safari(**kw, aggregator="fed_avg", mu=mu),
                               problem, data)[3] for mu in (0.001, 0.5))
    assert torch.equal(small, large)
    prox = _one_round(fs.algorithms.safari(**kw, aggregator="fed_prox", mu=0.5), problem,
                      data)[3]
    assert not torch.equal(small, prox)


def test_aggregation_renormalises_over_what_arrived():
    problem, data = _mlp(), _mlp_data()
    algo, state, _, uploads, _, _ = _one_round(
        fs.algorithms.safari(density=0.5, step_size=0.01, compensation=False), problem, data)
    delivered = torch.tensor([True, False, False, True, False, False])
    new = algo.aggregate(state, uploads, Cohort(0, torch.arange(6), data.weights, delivered))
    torch.testing.assert_close(new["model"], (uploads[0] + uploads[3]) / 2)


@pytest.mark.parametrize("payload", ["model", "update"])
def test_aggregation_weighs_what_arrived_by_client_weight(payload):
    # Mao et al. 2022, eq. 1: w_i = n_i / N, renormalised over the arrivals. Clients 0
    # and 2 arrive with weights 0.1 and 0.3: the average is (0.1 u_0 + 0.3 u_2) / 0.4
    # (a uniform mean, (u_0 + u_2) / 2, is another model); the update form adds it to x^t.
    problem, data = _mlp(), _mlp_data()
    algo, state, _, uploads, _, _ = _one_round(
        fs.algorithms.safari(density=0.5, step_size=0.01, compensation=False,
                             payload=payload), problem, data)
    weights = torch.tensor([0.1, 0.2, 0.3, 0.1, 0.2, 0.1], dtype=torch.float64)
    delivered = torch.tensor([True, False, True, False, False, False])
    new = algo.aggregate(state, uploads, Cohort(0, torch.arange(6), weights, delivered))
    mean = (0.1 * uploads[0] + 0.3 * uploads[2]) / 0.4
    expected = mean if payload == "model" else state["model"] + mean
    torch.testing.assert_close(new["model"], expected)


@pytest.mark.parametrize("kw,match", [
    (dict(density=0.0), "density=0.0"), (dict(density=1.5), "density=1.5"),
    (dict(density=0.5, pruner="random"), "pruner='random'"),
    (dict(density=0.5, aggregator="fed_prox", mu=0.0), "mu=0.0"),
    (dict(density=0.5, payload="delta"), "payload='delta'"),
    (dict(density=0.5, compensation="yes"), "compensation='yes'"),
])
def test_bad_input(kw, match):
    with pytest.raises(ConfigError, match=match):
        fs.algorithms.safari(**kw)


def test_fedspa_anneals_over_the_runs_own_rounds():
    # T is the run's: a 6-round run ends (a separate rounds=3 stopped it at round 4), and
    # the builder has no rounds of its own that could disagree with it
    problem, data = _mlp(), _mlp_data()
    algo = fs.algorithms.safari(density=0.5, pruner="fedspa", optimizer="sgd", step_size=0.05,
                                batch_size=8, local_steps=2)
    h = fs.simulate(algo, problem, data, rounds=6, seed=0)
    assert len(h.records) == 6
    with pytest.raises(TypeError, match="rounds"):
        fs.algorithms.safari(density=0.5, pruner="fedspa", rounds=3)
    # the drop fraction alpha_t = alpha0/2 (1 + cos(pi t / T)) is read from the context:
    # at t = T it is 0 and no entry moves; with a longer run the same round swaps entries
    kw = dict(density=0.5, pruner="fedspa", optimizer="sgd", step_size=0.05, batch_size=8,
              compensation=False)
    moved = {}
    for T in (4, 40):
        algo, *_, new_state, _ = _one_round(fs.algorithms.safari(**kw), problem, data,
                                            round=4, total_rounds=T)
        old = algo.init_clients(problem, torch.arange(6))["mask"]
        moved[T] = int((old != new_state["mask"]).sum())
    assert moved[4] == 0 and moved[40] > 0


def test_fedspa_without_the_runs_length_is_a_clear_error():
    problem, data = _mlp(), _mlp_data()
    algo = fs.algorithms.safari(density=0.5, pruner="fedspa", compensation=False).bind(
        problem, data)
    state = algo.init(problem)
    clients = torch.arange(6)
    ctx = ClientContext(problem, data.train, clients, 0, 0, config=algo.client_config(state),
                        state=algo.init_clients(problem, clients))
    with pytest.raises(ConfigError, match="total_rounds"):
        algo.client_update(algo.broadcast(state, clients), ctx)


def test_synflow_needs_a_network():
    data = fs.data.shifted_gaussian(num_clients=3, samples_per_client=10, dim=8, sparsity=2)
    with pytest.raises(ConfigError, match="pruner='synflow'"):
        fs.simulate(fs.algorithms.safari(density=0.5, pruner="synflow"),
                    fs.problems.least_squares(), data, rounds=1)


def test_fedspa_regrows_by_the_gradient_at_the_trained_model():
    # Huang et al. 2022 (FedSpa, as SAFARI's pruner): after training, regrowth picks the
    # largest |grad f_i(x_{i,tau}; one more batch)|, at the trained parameters, not at x^t
    from fedsparse.algorithms.local import local_train
    from fedsparse.sparsity.fedspa import fedspa_update

    problem, data = _mlp(), _mlp_data()
    algo, state, payload, _, new_state, _ = _one_round(
        fs.algorithms.safari(density=0.5, pruner="fedspa", optimizer="sgd", step_size=0.05,
                             batch_size=8, compensation=False), problem, data)
    clients = torch.arange(6)
    old = algo.init_clients(problem, clients, 0)["mask"]
    ctx = ClientContext(problem, data.train, clients, 0, 0,
                        config={**algo.client_config(state), "total_rounds": 10})
    start = payload.expand(6, -1)
    trained = local_train(algo.local, start, ctx, anchor=payload, mask=old)
    batch = ctx.batch(algo.local.local_steps, algo.local.batch_size)

    def regrown(at):
        return fedspa_update(old, trained, problem.grad(at, *batch), algo.layout, 0, 10,
                             algo.alpha0)

    assert not torch.equal(regrown(trained), regrown(start))  # the two readings differ here
    assert torch.equal(new_state["mask"], regrown(trained))
