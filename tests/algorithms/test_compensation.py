"""Similarity compensation (Mao et al. 2022, Alg. 3) against hand-worked schedules."""

import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.algorithms import Algorithm
from fedsparse.algorithms.base import weighted_mean
from fedsparse.algorithms.compensation import dense_record
from fedsparse.channels import GroupChannel, ScheduledChannel, safari_channel


class Fixed(Algorithm):
    """Client i always uploads ROWS[i]: distances and substitutes can be worked by hand."""

    name = "fixed"

    def __init__(self, rows):
        self.rows = torch.tensor(rows, dtype=torch.float64)

    def init(self, problem, seed=0):
        return {"model": torch.zeros(self.rows.shape[1], dtype=torch.float64)}

    def client_update(self, payload, ctx):
        return self.rows[ctx.clients], None, {}

    def aggregate(self, state, uploads, cohort):
        return {**state, "model": weighted_mean(uploads, cohort)}


def _data(n):
    # four equal-sized clients: p_i = 1/4; the problem is never evaluated on the uploads
    return fs.data.from_arrays([torch.ones(2, 2)] * n, [torch.zeros(2)] * n,
                               dtype=torch.float64)


def _run(rows, schedule):
    wrapped = fs.algorithms.similarity_compensation(Fixed(rows))
    models = []
    h = fs.simulate(wrapped, fs.problems.least_squares(), _data(len(rows)),
                    rounds=len(schedule), channel=ScheduledChannel(torch.tensor(schedule)),
                    callback=lambda record, state: models.append(
                        state["inner"]["model"].tolist()))
    return h, models


def test_each_lost_client_takes_the_closest_received_upload():
    rows = [[0.0, 0], [1, 0], [10, 0], [11, 0]]
    # round 1: all arrive, so the record learns d01 = 1, d02 = 10, d03 = 11, d12 = 9,
    # d13 = 10, d23 = 1. Round 2: 1 and 3 are lost; 1 is closest to 0 (1 < 9), 3 to 2
    # (1 < 11): the model is (0 + 0 + 10 + 10) / 4 = 5.
    h, models = _run(rows, [[1, 1, 1, 1], [1, 0, 1, 0]])
    assert models == [[5.5, 0.0], [5.0, 0.0]]
    assert h.column("compensated") == [0, 2] and h.column("dropped") == [0, 0]


def test_the_substitute_is_the_closest_client_in_an_asymmetric_layout():
    # Uploads 0, 1, 3, 10 on a line. A symmetric layout (0, 1, 10, 11 losing 1 and 3)
    # gives the same model whichever received client stands in; here the closest, the
    # farthest and any other choice give different models.
    rows = [[0.0, 0], [1, 0], [3, 0], [10, 0]]
    # round 2 loses client 1: d10 = 1 < d12 = 2 < d13 = 9, so client 0 stands in:
    # (0 + 0 + 3 + 10) / 4; the farthest (3) would give 23 / 4, the next (2) 16 / 4.
    # round 3 loses 1 and 2, with 0 and 3 received: d10 = 1 < d13 = 9, d20 = 3 < d23 = 7,
    # so 0 stands in for both: (0 + 0 + 0 + 10) / 4; the farthest would give 30 / 4.
    h, models = _run(rows, [[1, 1, 1, 1], [1, 0, 1, 1], [1, 0, 0, 1]])
    assert models[1] == pytest.approx([13 / 4, 0.0])
    assert models[2] == pytest.approx([10 / 4, 0.0])
    assert h.column("compensated") == [0, 1, 2]


def test_a_client_never_compared_is_dropped_and_the_weights_renormalised():
    rows = [[0.0, 0], [1, 0], [10, 0], [11, 0]]
    # round 1: 2 and 3 have never been received together with anyone: dropped, the mean
    # is over 0 and 1 only. Round 2: 0, 1, 2 arrive; 3 is still unknown to all: dropped.
    # Round 3: 0 lost, closest received to it is 1 (d01 = 1 < d02 = 10).
    h, models = _run(rows, [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1]])
    assert models[0] == [0.5, 0.0]
    assert models[1] == pytest.approx([11 / 3, 0.0])
    assert models[2] == pytest.approx([(1 + 1 + 10 + 11) / 4, 0.0])
    assert h.column("dropped") == [2, 1, 0]
    assert h.column("compensated") == [0, 0, 1]


def test_ties_go_to_the_lowest_client_id():
    rows = [[0.0, 0], [5, 0], [10, 0]]
    # d10 = d12 = 5: client 1 is replaced by client 0, not 2
    _, models = _run(rows, [[1, 1, 1], [1, 0, 1]])
    assert models[1] == pytest.approx([(0 + 0 + 10) / 3, 0.0])


def test_a_substitute_carries_the_weight_of_the_client_it_stands_in_for():
    # Mao et al. 2022, Alg. 3: x^{t+1} = sum_received w_i x_i + sum_lost w_j x_{j'}, the
    # lost client's own weight w_j. Sizes 1, 2, 3, 4: w = (0.1, 0.2, 0.3, 0.4). Round 2
    # loses 1 and 3, replaced by 0 and 2: 0.1 * 0 + 0.2 * 0 + 0.3 * 10 + 0.4 * 10 = 7
    # (the substitutes' weights, renormalised, would give (0.3 + 0.3) * 10 / 0.8 = 7.5).
    rows = [[0.0, 0], [1, 0], [10, 0], [11, 0]]
    sizes = (1, 2, 3, 4)
    data = fs.data.from_arrays([torch.ones(n, 2) for n in sizes],
                               [torch.zeros(n) for n in sizes], dtype=torch.float64)
    models = []
    fs.simulate(fs.algorithms.similarity_compensation(Fixed(rows)),
                fs.problems.least_squares(), data, rounds=2,
                channel=ScheduledChannel(torch.tensor([[1, 1, 1, 1], [1, 0, 1, 0]])),
                callback=lambda record, state: models.append(
                    state["inner"]["model"].tolist()))
    assert models[0] == pytest.approx([0.2 + 3.0 + 4.4, 0.0])
    assert models[1] == pytest.approx([7.0, 0.0])


def test_the_record_is_updated_every_round_and_checkpointed(tmp_path):
    # client 1 moves: its upload depends on the round through the model it receives
    data = fs.data.shifted_gaussian(num_clients=6, samples_per_client=20, dim=10, sparsity=3,
                                    seed=0, dtype=torch.float64)
    algo = fs.algorithms.similarity_compensation(fs.algorithms.fed_avg(step_size=0.05,
                                                                       local_steps=2))
    records = []
    kw = dict(rounds=4, seed=0, channel=fs.channels.BernoulliChannel(0.7))
    h = fs.simulate(algo, fs.problems.least_squares(), data, **kw,
                    callback=lambda r, s: records.append(dense_record(s["similarity"], 6)))
    assert not torch.equal(records[0], records[-1])
    assert torch.equal(records[-1], records[-1].T)
    ckpt = tmp_path / "c.pt"
    fs.simulate(algo, fs.problems.least_squares(), data, **{**kw, "rounds": 2},
                checkpoint=ckpt)
    resumed = fs.simulate(algo, fs.problems.least_squares(), data, **kw, checkpoint=ckpt,
                          resume=True)
    assert torch.equal(resumed.model, h.model)


def test_a_compensated_algorithm_keeps_its_own_round_metrics():
    # FedMac records its bits and the global model's density every round; wrapped, it
    # still does, beside the compensation's counts
    gen = torch.Generator().manual_seed(0)
    data = fs.data.from_arrays([torch.randn(6, 3, generator=gen) for _ in range(4)],
                               [torch.tensor([0.0, 1.0] * 3) for _ in range(4)],
                               dtype=torch.float64)
    fedmac = fs.algorithms.fedmac(lam=0.1, step_size=2.0, personal_step_size=0.1,
                                  local_steps=2, batch_size=None, clients_per_round=2)
    kw = dict(rounds=3, seed=0, channel=fs.channels.BernoulliChannel(0.5))
    alone = fs.simulate(fedmac, fs.problems.softmax(2), data, **kw)
    wrapped = fs.simulate(fs.algorithms.similarity_compensation(fedmac),
                          fs.problems.softmax(2), data, **kw)
    for name in ("model_density", "averaged", "fedmac_bits", "fedmac_bits_total"):
        assert all(name in r for r in alone.records), name
        assert all(name in r for r in wrapped.records), name
    assert all("compensated" in r and "dropped" in r for r in wrapped.records)


def test_compensation_needs_uploads_that_are_models():
    class Gradients(Fixed):
        uploads_are_models = False

    with pytest.raises(ConfigError, match="algorithm='fixed'"):
        fs.algorithms.similarity_compensation(Gradients([[0.0]]))
    with pytest.raises(ConfigError, match="algorithm="):
        fs.algorithms.similarity_compensation("fed_avg")


def test_compensation_refuses_an_algorithm_already_compensated():
    with pytest.raises(ConfigError, match="already wrapped with similarity compensation"):
        fs.algorithms.similarity_compensation(fs.algorithms.safari(density=0.5))


def test_group_channel_forces_one_arrival_per_group_and_a_full_first_round():
    groups = [0] * 5 + [1] * 5
    channel = GroupChannel(fs.channels.BernoulliChannel(0.0), groups)
    clients = torch.arange(10)
    assert channel.delivered(0, 0, clients).all()
    for t in range(1, 6):
        got = channel.delivered(3, t, clients)
        assert got[:5].sum() == 1 and got[5:].sum() == 1
    picks = {int(torch.nonzero(channel.delivered(3, t, clients)[:5])) for t in range(1, 40)}
    assert len(picks) > 1  # the forced member is drawn, not always the same one
    asym = safari_channel("asymmetric", groups, full_first_round=False,
                          at_least_one_per_group=False)
    rates = torch.stack([asym.delivered(1, t, clients) for t in range(2000)]).double().mean(0)
    assert abs(float(rates[:5].mean()) - 0.18) < 0.02
    assert abs(float(rates[5:].mean()) - 0.6) < 0.02
    for bad, match in ((1.5, "must lie in"), ("always", "probability='always'")):
        with pytest.raises(ConfigError, match=match):
            safari_channel(bad, groups)
    with pytest.raises(ConfigError, match="groups"):
        GroupChannel(fs.channels.PerfectChannel(), [0.5, 1.5])


def test_the_wrapped_state_is_nested_and_the_attributes_are_the_inner_ones():
    inner = fs.algorithms.fed_iter_ht(sparsity=1, step_size=0.1)  # thresholds locally
    problem, data = fs.problems.least_squares(), _data(4)
    wrapped = fs.algorithms.similarity_compensation(inner).bind(problem, data)
    state = wrapped.init(problem)
    assert set(state) == {"inner", "similarity", "compensated", "dropped"}
    assert set(state["inner"]) == set(wrapped.inner.init(problem))
    for name in ("name", "requires", "upload_encoding", "broadcast_encoding",
                 "stateful_clients", "clients_per_round", "client_metrics"):
        assert getattr(wrapped, name) == getattr(wrapped.inner, name), name
    assert wrapped.upload_encoding == "sparse"  # set by the inner algorithm's builder
    model = torch.arange(2, dtype=torch.float64)
    moved = wrapped.with_global_model(state, model)
    assert torch.equal(wrapped.model(moved), model)
    assert moved["similarity"] is state["similarity"]
    assert not torch.equal(wrapped.model(state), model)  # the input is left as it was
