"""The Flower server's checkpoints: a stopped run continues to the uninterrupted history.

A resumed run is a new Flower run: :class:`FakeGrid` (tests/flower/conftest.py) gives
fresh node contexts, as new SuperNode runs would.
"""

import json

import numpy as np
import pytest
import torch

flwr = pytest.importorskip("flwr")

from flwr.app import Context, RecordDict  # noqa: E402

from fedsparse import ConfigError  # noqa: E402
from fedsparse.flower import codec, job_from_config, make_server_app  # noqa: E402
from fedsparse.flower.server_app import run_on_grid  # noqa: E402
from fedsparse.flower.server_checkpoint import CHECKPOINT, checkpoint_to_continue  # noqa: E402
from fedsparse.rounds import DivergenceError  # noqa: E402

pytestmark = pytest.mark.flower

JOB = {"rounds": 6, "seed": 2, "clients_per_round": 3, "checkpoint_every": 2,
       "data": {"kind": "fedht_simulation", "num_clients": 4, "samples_per_client": 16,
                "dim": 30, "support_size": 4},
       "problem": {"kind": "least_squares"},
       "algorithm": {"kind": "fed_iter_ht", "sparsity": 4, "local_steps": 2, "batch_size": 5,
                     "step_size": 0.003},
       "flower": {"round_timeout": 0.5, "wait_timeout": 0.0, "poll_interval": 0.05,
                  "evaluate_every": 2}}
#: What differs between two runs of one job: the clock.
TIMES = ("seconds", "elapsed")


def _job(out_dir=None, **flower):
    config = {**JOB, "flower": {**JOB["flower"], **flower}}
    if out_dir is not None:
        config["flower"]["out_dir"] = str(out_dir)
    return job_from_config(config)


def _rows(history) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMES}
            for r in [history.initial, *history.records]]


class Stop(Exception):
    pass


def _stop_after(round_):
    def callback(record, state):
        if record["round"] == round_:
            raise Stop
    return callback


def test_a_stopped_run_resumes_to_the_uninterrupted_history(fake_grid, tmp_path):
    job = _job()
    whole = run_on_grid(fake_grid(job, range(4)), job)
    checkpoint = tmp_path / CHECKPOINT
    with pytest.raises(Stop):  # stopped in round 5: the checkpoint holds rounds 1-4
        run_on_grid(fake_grid(job, range(4)), job, checkpoint=checkpoint,
                    callback=_stop_after(5))
    grid = fake_grid(job, range(4))  # a new Flower run: fresh node contexts
    resumed = run_on_grid(grid, job, checkpoint=checkpoint, resume_from=checkpoint)
    assert torch.equal(resumed.model, whole.model)
    assert _rows(resumed) == _rows(whole)
    # only rounds 5 and 6 were trained again; no round-0 evaluation was asked for
    assert {group for kind, group, _ in grid.sent if kind == "train"} == {"5", "6"}
    assert {group for kind, group, _ in grid.sent if kind == "evaluate"} == {"eval-6"}


def test_a_resume_may_extend_the_run_but_not_change_it(fake_grid, tmp_path):
    checkpoint = tmp_path / CHECKPOINT
    job = _job()
    run_on_grid(fake_grid(job, range(4)), job, checkpoint=checkpoint)
    longer = job_from_config({**job.to_dict(), "rounds": 8})
    history = run_on_grid(fake_grid(longer, range(4)), longer, checkpoint=checkpoint,
                          resume_from=checkpoint)
    assert [r["round"] for r in history.records] == list(range(1, 9))
    other = job_from_config({**job.to_dict(), "seed": 3})
    with pytest.raises(ConfigError, match=r"belongs to another run; .*job"):
        run_on_grid(fake_grid(other, range(4)), other, resume_from=checkpoint)
    shorter = job_from_config({**job.to_dict(), "rounds": 4})
    with pytest.raises(ConfigError, match=r"already holds 8 rounds, but the resumed run asks "
                       r"for 4: ask for at least 8 rounds \(--run-config 'rounds=8'\), or "
                       r"start over in another flower\.out_dir"):
        run_on_grid(fake_grid(shorter, range(4)), shorter, resume_from=checkpoint)
    stricter = _job(max_update_ratio=10.0)
    with pytest.raises(ConfigError, match="round_rules"):
        run_on_grid(fake_grid(stricter, range(4)), stricter, resume_from=checkpoint)


def test_a_resume_whose_nodes_report_other_data_is_refused(fake_grid, tmp_path):
    checkpoint = tmp_path / CHECKPOINT
    job = _job()
    run_on_grid(fake_grid(job, range(4)), job, checkpoint=checkpoint)
    def halve_weight(content):
        content[codec.NODE][codec.WEIGHT] = content[codec.NODE][codec.WEIGHT] / 2

    # client 2's node now weighs it otherwise
    grid = fake_grid(job, range(4), fate=lambda kind, group, pid:
                     halve_weight if (kind, pid) == ("query", 2) else "ok")
    with pytest.raises(ConfigError, match=r"flower\.resume=True.*holding clients \[2\] report "
                       "other data"):
        run_on_grid(grid, job, resume_from=checkpoint)


def test_the_out_dir_rules_before_any_node_is_asked(tmp_path):
    out = tmp_path / "run"
    assert checkpoint_to_continue(out, resume=True, stateful_clients=False,
                                  algorithm="fed_iter_ht") is None  # none yet: round 0
    out.mkdir()
    (out / "model.npy").write_bytes(b"x")
    with pytest.raises(ConfigError, match=r"flower\.out_dir=.*already holds a run's "
                       r"model\.npy; give another folder"):
        checkpoint_to_continue(out, resume=False, stateful_clients=False, algorithm="a")
    (out / "model.npy").unlink()
    (out / CHECKPOINT).write_bytes(b"x")
    with pytest.raises(ConfigError, match=r"flower\.out_dir=.*holds the checkpoint\.pt of a "
                       r"stopped run; continue it with flower\.resume = true"):
        checkpoint_to_continue(out, resume=False, stateful_clients=False, algorithm="a")
    assert checkpoint_to_continue(out, resume=True, stateful_clients=False,
                                  algorithm="a") == out / CHECKPOINT
    with pytest.raises(ConfigError, match=r"flower\.resume=True is invalid: fedmac's clients "
                       "keep state between rounds on the nodes"):
        checkpoint_to_continue(out, resume=True, stateful_clients=True, algorithm="fedmac")
    (out / "history.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match=r"already holds a finished run's history\.jsonl"):
        checkpoint_to_continue(out, resume=True, stateful_clients=False, algorithm="a")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        checkpoint_to_continue(tmp_path / "file", resume=False, stateful_clients=False,
                               algorithm="a")


def test_resume_needs_an_out_dir_and_a_bool():
    with pytest.raises(ConfigError, match=r"flower\.resume=True is invalid: needs "
                       r"flower\.out_dir"):
        _job(resume=True)
    with pytest.raises(ConfigError, match=r"flower\.resume='yes' is invalid: must be true or "
                       "false"):
        _job(out_dir="x", resume="yes")
    with pytest.raises(ConfigError, match="checkpoint_every=0 is invalid"):
        job_from_config({**JOB, "checkpoint_every": 0})


def _serve(app, grid):
    app._main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                            run_config={}))


def test_the_server_app_saves_and_resumes_in_its_out_dir(fake_grid, tmp_path):
    job = _job(tmp_path / "out")
    stopped = make_server_app(job, callback=_stop_after(3))
    with pytest.raises(Stop):
        _serve(stopped, fake_grid(job, range(4)))
    assert (tmp_path / "out" / CHECKPOINT).exists()
    assert not (tmp_path / "out" / "history.jsonl").exists()
    with pytest.raises(ConfigError, match="holds the checkpoint.pt of a stopped run"):
        _serve(make_server_app(job), fake_grid(job, range(4)))
    finished = []
    resumed = _job(tmp_path / "out", resume=True)
    _serve(make_server_app(resumed, on_finish=finished.append), fake_grid(job, range(4)))
    saved = [json.loads(line) for line in
             (tmp_path / "out" / "history.jsonl").read_text().splitlines()]
    assert [r["round"] for r in saved] == list(range(7))
    whole = run_on_grid(fake_grid(job, range(4)), _job())
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "model.npy"), whole.model.numpy())


def test_a_diverging_run_saves_its_last_finite_model(fake_grid, tmp_path):
    # every upload finite (a non-finite one is a failed upload on Flower), the server's
    # step 1e30 times theirs: the aggregate overflows within a few rounds
    job = job_from_config({**JOB, "algorithm": {"kind": "fed_mid", "sparsity": 4,
                                                "server_lr": 1e30, "local_steps": 2},
                           "flower": {**JOB["flower"], "evaluate_every": -1,
                                      "max_update_ratio": 0.0,
                                      "out_dir": str(tmp_path / "out")}})
    with pytest.raises(DivergenceError, match="non-finite") as caught:
        _serve(make_server_app(job), fake_grid(job, range(4)))
    last = caught.value.round - 1
    assert 0 < last < job.rounds
    rows = (tmp_path / "out" / "history.jsonl").read_text().splitlines()
    assert json.loads(rows[-1])["round"] == last
    model = np.load(tmp_path / "out" / "model.npy")
    assert np.isfinite(model).all() and np.abs(model).max() > 0


def test_a_resumed_run_keeps_the_nodes_it_refused(fake_grid, tmp_path):
    """The nodes refused before the stop stay in ``refused_nodes`` and are not asked
    again, as in the uninterrupted run."""
    def heavy(content):  # a weight above its example count: refused in the handshake
        content[codec.NODE][codec.WEIGHT] = 1e9

    job = _job()
    hostile = {77: (3, lambda kind, group: heavy if kind == "query" else "ok")}
    whole = run_on_grid(fake_grid(job, range(3), nodes=hostile), job)
    checkpoint = tmp_path / CHECKPOINT
    with pytest.raises(Stop):
        run_on_grid(fake_grid(job, range(3), nodes=hostile), job, checkpoint=checkpoint,
                    callback=_stop_after(5))
    grid = fake_grid(job, range(3), nodes=hostile)
    resumed = run_on_grid(grid, job, checkpoint=checkpoint, resume_from=checkpoint)
    assert resumed.config["refused_nodes"] == whole.config["refused_nodes"]
    assert list(resumed.config["refused_nodes"]) == [77]
    assert 77 not in {node for _, _, node in grid.sent}  # never asked again
    assert _rows(resumed) == _rows(whole)
    # and kept when the refused node is gone by the time the run resumes
    gone = run_on_grid(fake_grid(job, range(3)), job, resume_from=checkpoint)
    assert list(gone.config["refused_nodes"]) == [77]


def test_a_damaged_checkpoint_is_refused_before_any_node_is_asked(fake_grid, tmp_path):
    checkpoint = tmp_path / CHECKPOINT
    job = _job()
    run_on_grid(fake_grid(job, range(4)), job, checkpoint=checkpoint)
    data = checkpoint.read_bytes()
    checkpoint.write_bytes(data[:len(data) // 2])
    grid = fake_grid(job, range(4))
    with pytest.raises(ConfigError, match=r"checkpoint '.*checkpoint\.pt' has no fedsparse "
                       "checksum at its end: it is truncated") as refused:
        run_on_grid(grid, job, resume_from=checkpoint)
    assert grid.sent == []
    # the simulator's --resume is not an option of a Flower run
    assert "in another flower.out_dir" in str(refused.value)
    assert "--resume" not in str(refused.value)


class _LateNode:
    """Client 3's node connects only after the handshake (``late`` calls of
    ``get_node_ids``: 2 = in time for round 1)."""

    def __init__(self, grid, late=2):
        self.grid, self.node, self.late, self.calls = grid, grid.nodes.pop(1003), late, 0
        grid.get_node_ids = self

    def __call__(self):
        self.calls += 1
        if self.calls == self.late:
            self.grid.nodes[1003] = self.node
        return list(self.grid.nodes)


def _halve_weight_of(pid):
    def halve(content):
        content[codec.NODE][codec.WEIGHT] = content[codec.NODE][codec.WEIGHT] / 2

    return lambda kind, group, p: halve if (kind, p) == ("query", pid) else "ok"


def test_a_client_whose_node_joined_late_is_held_to_its_data_on_resume(fake_grid, tmp_path):
    """A node that joined after the handshake (``add_joined``) is in the checkpoint's
    node reports: on resume its client must report the same data, whether its node is
    there at the handshake or joins later."""
    checkpoint = tmp_path / CHECKPOINT
    job = _job()
    grid = fake_grid(job, range(4))
    _LateNode(grid, late=4)  # client 3 joins in round 2
    with pytest.raises(Stop):
        run_on_grid(grid, job, checkpoint=checkpoint, callback=_stop_after(5))
    assert 1003 in {node for kind, _, node in grid.sent if kind == "train"}
    # its node is there at the resume's handshake, with other data
    with pytest.raises(ConfigError, match=r"holding clients \[3\] report other data"):
        run_on_grid(fake_grid(job, range(4), fate=_halve_weight_of(3)), job,
                    resume_from=checkpoint)
    # its node joins after the resume's handshake, with other data: refused
    grid = fake_grid(job, range(4), fate=_halve_weight_of(3))
    _LateNode(grid)
    resumed = run_on_grid(grid, job, checkpoint=checkpoint, resume_from=checkpoint)
    assert "client 3" in resumed.config["refused_nodes"][1003]
    assert not any(kind == "train" and node == 1003 for kind, _, node in grid.sent)
    assert all(3 not in r["delivered_clients"] for r in resumed.records[4:])


def test_an_out_dir_under_home_is_saved_there(fake_grid, tmp_path, monkeypatch):
    """``flower.out_dir = "~/result"`` is the home folder's ``result``, as in the
    simulator's ``--out``, not a folder named ``~`` in the ServerApp's working folder."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    job = _job("~/result")
    stopped = make_server_app(job, callback=_stop_after(3))
    with pytest.raises(Stop):
        _serve(stopped, fake_grid(job, range(4)))
    assert (home / "result" / CHECKPOINT).exists()
    _serve(make_server_app(_job("~/result", resume=True)), fake_grid(job, range(4)))
    assert (home / "result" / "model.npy").exists()
    assert list(cwd.iterdir()) == []
