import warnings

import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.channels import BernoulliChannel


def _no_time(records):
    return [{k: v for k, v in r.items() if k not in ("seconds", "elapsed")} for r in records]


@pytest.fixture(scope="module")
def data():
    return fs.data.fedht_simulation("regression", num_clients=12, samples_per_client=30, dim=60,
                                    support_size=10, seed=1)


def _algo():
    return fs.algorithms.fed_iter_ht(sparsity=10, step_size=0.002, local_steps=3, batch_size=8)


def test_same_seed_same_history_whatever_the_client_grouping(data):
    ls = fs.problems.least_squares()
    a = fs.simulate(_algo(), ls, data, rounds=6, seed=4, clients_per_round=7)
    b = fs.simulate(_algo(), ls, data, rounds=6, seed=4, clients_per_round=7, client_batch=2)
    assert _no_time(a.records) == _no_time(b.records)
    assert torch.equal(a.model, b.model)
    c = fs.simulate(_algo(), ls, data, rounds=6, seed=5, clients_per_round=7)
    assert not torch.equal(a.model, c.model)


def test_partial_participation_samples_without_replacement(data):
    seen = []
    fs.simulate(_algo(), fs.problems.least_squares(), data, rounds=3, clients_per_round=5,
                callback=lambda record, state: seen.append(record["clients_sampled"]))
    assert seen == [5, 5, 5]
    ids = fs.simulate.__globals__["sample_clients"](0, 2, 12, 5)
    assert len(set(ids.tolist())) == 5


def test_checkpoint_and_resume_give_the_uninterrupted_history(data, tmp_path):
    ls = fs.problems.least_squares()
    full = fs.simulate(_algo(), ls, data, rounds=8, seed=2)
    ckpt = tmp_path / "run.pt"
    fs.simulate(_algo(), ls, data, rounds=5, seed=2, checkpoint=ckpt, checkpoint_every=5)
    resumed = fs.simulate(_algo(), ls, data, rounds=8, seed=2, checkpoint=ckpt, resume=True)
    assert _no_time(resumed.records) == _no_time(full.records)
    assert torch.equal(resumed.model, full.model)
    with pytest.raises(ConfigError, match="belongs to another run"):
        fs.simulate(_algo(), ls, data, rounds=8, seed=3, checkpoint=ckpt, resume=True)


def test_divergence_stops_with_the_round_and_keeps_the_last_finite_model(data, tmp_path):
    algo = fs.algorithms.fed_ht(sparsity=10, step_size=5.0, local_steps=5)
    with pytest.raises(fs.DivergenceError, match=r"round \d+: the model became non-finite") as e:
        fs.simulate(algo, fs.problems.least_squares(), data, rounds=200, checkpoint=tmp_path / "c")
    err = e.value
    assert len(err.history.records) == err.round - 1
    assert torch.isfinite(err.history.model).all()
    saved = torch.load(tmp_path / "c", weights_only=True)
    assert saved["round"] == err.round - 1


def test_bytes_are_counted_exactly(data):
    h = fs.simulate(_algo(), fs.problems.least_squares(), data, rounds=2)
    r = h.records[-1]
    # d = 60 -> 1-byte indices; float32 values: 10 non-zeros x (1 + 4) bytes per client
    assert r["bytes_up"] == 12 * 10 * 5
    assert r["bytes_down"] == 12 * 10 * 5
    # round 1 broadcasts x0 = 0, which costs no bytes as (index, value) pairs
    assert h.records[0]["bytes_down"] == 0
    assert h.records[-1]["bytes_total"] == 2 * 600 + 600
    dense = fs.simulate(fs.algorithms.fed_ht(sparsity=10, step_size=0.002),
                        fs.problems.least_squares(), data, rounds=1)
    assert dense.records[0]["bytes_up"] == 12 * 60 * 4


def test_comm_encodings():
    x = torch.zeros(2, 300)
    x[0, :5] = 1.0
    assert fs.comm.payload_bytes(x, "dense").tolist() == [1200, 1200]
    assert fs.comm.payload_bytes(x, "sparse").tolist() == [5 * (2 + 4), 0]
    assert fs.comm.payload_bytes(x, "bitmap").tolist() == [38 + 20, 38]
    assert fs.comm.index_bytes(256) == 1 and fs.comm.index_bytes(257) == 2


def test_lost_uploads_and_a_round_with_none(data):
    ls = fs.problems.least_squares()
    h = fs.simulate(_algo(), ls, data, rounds=4, channel=BernoulliChannel(0.5))
    assert any(r["delivered"] < r["clients_sampled"] for r in h.records)
    with pytest.warns(RuntimeWarning, match="no upload was delivered; the model is kept"):
        h = fs.simulate(_algo(), ls, data, rounds=2, channel=BernoulliChannel(0.0))
    assert h.model.abs().sum() == 0
    with pytest.raises(ConfigError, match="one value for each of the data set's clients"):
        fs.simulate(_algo(), ls, data, rounds=1, channel=BernoulliChannel([0.5, 0.5]))


@pytest.mark.parametrize("kwargs,match", [
    ({"rounds": 0}, "rounds=0"),
    ({"rounds": 2, "clients_per_round": 13}, "clients_per_round=13 is invalid: must be at most "
                                             "the number of clients 12"),
    ({"rounds": 2, "clients_per_round": 0}, "clients_per_round=0"),
    ({"rounds": 2, "resume": True}, "needs a checkpoint"),
])
def test_simulate_argument_errors(data, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        fs.simulate(_algo(), fs.problems.least_squares(), data, **kwargs)


def test_history_files_round_trip(data, tmp_path):
    h = fs.simulate(_algo(), fs.problems.least_squares(), data, rounds=3)
    h.save(tmp_path)
    back = fs.History.load(tmp_path)
    assert [r["objective"] for r in back.records] == [r["objective"] for r in h.records]
    assert torch.equal(back.model, h.model)
    header = (tmp_path / "history.csv").read_text().splitlines()[0].split(",")
    assert {"round", "objective", "bytes_up", "bytes_down", "seconds", "density"} <= set(header)


def test_progress_is_quiet_off_a_terminal(data, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fs.simulate(_algo(), fs.problems.least_squares(), data, rounds=2)
    assert capsys.readouterr().err == ""
