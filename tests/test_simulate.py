import logging
import math
import subprocess
import sys
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
    # the float32 loss overflows (a finite model, an infinite objective) before the model
    with pytest.raises(fs.DivergenceError, match=r"round \d+: the model's evaluated loss is "
                       r"not finite \(objective=inf\)") as e:
        fs.simulate(algo, fs.problems.least_squares(), data, rounds=200, checkpoint=tmp_path / "c")
    err = e.value
    assert len(err.history.records) == err.round - 1
    assert torch.isfinite(err.history.model).all()
    assert all(math.isfinite(r["objective"]) for r in err.history.records)
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
    assert fs.comm.index_bytes(2**32) == 4 and fs.comm.index_bytes(2**32 + 1) == 8
    # at the width's edge: position 256 of 257 needs 2 bytes, position 255 of 256 one
    for length, pair in ((256, 1 + 4), (257, 2 + 4)):
        one = torch.zeros(1, length)
        one[0, -1] = 1.0
        assert fs.comm.payload_bytes(one, "sparse").tolist() == [pair]
    # "auto" takes the cheapest: 16 values, 8 non-zero: dense 64, sparse 8 (1 + 4) = 40,
    # bitmap 2 + 8 x 4 = 34
    half = torch.zeros(1, 16)
    half[0, ::2] = 1.0
    assert fs.comm.payload_bytes(half, "auto").tolist() == [34]


_SILENT_CHANNEL = """
import warnings
import fedsparse as fs
data = fs.data.shifted_gaussian(num_clients=3, samples_per_client=10, dim=8, sparsity=2)
fs.simulate(fs.algorithms.fed_avg(step_size=0.01), fs.problems.least_squares(), data,
            rounds=2, channel=fs.channels.BernoulliChannel(0.0), progress=False)
"""


def test_a_round_with_no_upload_is_said_once_and_logged_where_logging_is_set_up(data, caplog):
    # a plain process (no logging set up): one line a round, the warning; logging's last
    # resort would print each a second time
    err = subprocess.run([sys.executable, "-c", _SILENT_CHANNEL], capture_output=True,
                         text=True, check=True).stderr
    assert err.count("no upload was delivered") == 2, err
    with caplog.at_level(logging.WARNING, logger="fedsparse"), pytest.warns(RuntimeWarning):
        fs.simulate(_algo(), fs.problems.least_squares(), data, rounds=1,
                    channel=BernoulliChannel(0.0))
    assert "round 1: no upload was delivered" in caplog.text  # an operator's log keeps it


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


def test_scheduled_channel_replays_a_known_loss_pattern(data):
    schedule = torch.zeros(3, 12, dtype=torch.bool)
    schedule[0, :6] = True
    schedule[1] = True
    schedule[2, [1, 4]] = True
    h = fs.simulate(_algo(), fs.problems.least_squares(), data, rounds=3,
                    channel=fs.channels.ScheduledChannel(schedule))
    assert h.column("delivered_clients") == [list(range(6)), list(range(12)), [1, 4]]
    # refused before the first round, not when round 4 comes
    with pytest.raises(ConfigError, match=r"delivered='3 rows' .*the run's 4 rounds"):
        fs.simulate(_algo(), fs.problems.least_squares(), data, rounds=4,
                    channel=fs.channels.ScheduledChannel(schedule))
    for bad, match in ((torch.ones(3), "delivered shape"),
                       (torch.full((2, 12), 0.5), "delivered dtype")):
        with pytest.raises(ConfigError, match=match):
            fs.channels.ScheduledChannel(bad)


def test_channel_probabilities_are_checked_where_they_enter(data):
    for bad in ("0.5", [0.1, 1.2], float("nan")):
        with pytest.raises(ConfigError, match="probability="):
            BernoulliChannel(bad)
    ls = fs.problems.least_squares()
    for fn, match in ((lambda t, c: torch.full((c.shape[0],), 2.0), "must lie in"),
                      (lambda t, c: torch.full((3,), 0.5), "shape"),
                      (lambda t, c: torch.full((c.shape[0],), float("nan")), "must lie in")):
        with pytest.raises(ConfigError, match=match):
            fs.simulate(_algo(), ls, data, rounds=1, channel=BernoulliChannel(fn))


def test_eval_every_skips_the_evaluation_of_other_rounds(data):
    h = fs.simulate(_algo(), fs.problems.least_squares(), data, rounds=5, eval_every=2)
    assert ["objective" in r for r in h.records] == [False, True, False, True, True]
    full = fs.simulate(_algo(), fs.problems.least_squares(), data, rounds=5)
    assert h.records[3]["objective"] == full.records[3]["objective"]


def test_max_update_norm_rejects_far_uploads_in_the_simulator_too(data):
    with pytest.warns(RuntimeWarning, match="no upload was delivered"):
        h = fs.simulate(_algo(), fs.problems.least_squares(), data, rounds=2,
                        max_update_norm=1e-12)
    assert h.column("rejected") == [12, 12] and h.column("delivered") == [0, 0]
    assert torch.count_nonzero(h.model) == 0


def test_simulate_arguments_are_checked(data):
    ls = fs.problems.least_squares()
    cases = [(dict(problem=None), "problem=None"), (dict(channel="x"), "channel='x'"),
             (dict(dtype=torch.int32), "dtype="), (dict(eval_every=0), "eval_every=0"),
             (dict(max_update_norm=-1.0), "max_update_norm=-1.0"),
             (dict(device="tpu-ish"), "device=")]
    if not torch.cuda.is_available():
        cases.append((dict(device="cuda"), "needs a CUDA GPU"))
    for kw, match in cases:
        args = {"problem": ls, **kw}
        with pytest.raises(ConfigError, match=match):
            fs.simulate(_algo(), args.pop("problem"), data, rounds=1, **args)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_round_on_the_gpu_matches_the_cpu(data):
    algo = fs.algorithms.fed_avg(step_size=0.002, local_steps=3, batch_size=8)
    cpu = fs.simulate(algo, fs.problems.least_squares(), data, rounds=3, dtype=torch.float64)
    gpu = fs.simulate(algo, fs.problems.least_squares(), data, rounds=3, dtype=torch.float64,
                      device="cuda")
    assert gpu.model.device.type == "cuda"
    torch.testing.assert_close(gpu.model.cpu(), cpu.model)


def test_a_test_label_outside_the_classes_is_refused_before_training():
    xs = [torch.randn(5, 3)] * 2
    ys = [torch.tensor([0.0, 1, 2, 0, 1])] * 2
    bad = torch.tensor([0.0, 1, 12, 0, 1])
    data = fs.data.from_arrays(xs, ys, test_xs=xs, test_ys=[ys[0], bad])
    with pytest.raises(ConfigError, match=r"labels \[12"):
        fs.simulate(fs.algorithms.fed_avg(), fs.problems.softmax(num_classes=3), data, rounds=1)
