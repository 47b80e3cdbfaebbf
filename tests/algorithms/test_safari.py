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


def _one_round(algo, problem, data, seed=0):
    algo = algo.bind(problem, data)
    state = algo.init(problem, seed)
    clients = torch.arange(data.num_clients)
    ctx = ClientContext(problem, data.train, clients, 0, seed, config=algo.client_config(state),
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
        fs.algorithms.safari(density=0.5, pruner="fedspa", rounds=10, optimizer="sgd",
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


def test_aggregation_renormalises_over_what_arrived():
    problem, data = _mlp(), _mlp_data()
    algo, state, _, uploads, _, _ = _one_round(
        fs.algorithms.safari(density=0.5, step_size=0.01, compensation=False), problem, data)
    delivered = torch.tensor([True, False, False, True, False, False])
    new = algo.aggregate(state, uploads, Cohort(0, torch.arange(6), data.weights, delivered))
    torch.testing.assert_close(new["model"], (uploads[0] + uploads[3]) / 2)


@pytest.mark.parametrize("kw,match", [
    (dict(density=0.0), "density=0.0"), (dict(density=1.5), "density=1.5"),
    (dict(density=0.5, pruner="random"), "pruner='random'"),
    (dict(density=0.5, pruner="fedspa"), "rounds=None"),
    (dict(density=0.5, aggregator="fed_prox", mu=0.0), "mu=0.0"),
    (dict(density=0.5, payload="delta"), "payload='delta'"),
    (dict(density=0.5, compensation="yes"), "compensation='yes'"),
])
def test_bad_input(kw, match):
    with pytest.raises(ConfigError, match=match):
        fs.algorithms.safari(**kw)


def test_synflow_needs_a_network():
    data = fs.data.shifted_gaussian(num_clients=3, samples_per_client=10, dim=8, sparsity=2)
    with pytest.raises(ConfigError, match="pruner='synflow'"):
        fs.simulate(fs.algorithms.safari(density=0.5, pruner="synflow"),
                    fs.problems.least_squares(), data, rounds=1)
