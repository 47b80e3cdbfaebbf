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
from fedsparse.flower.server_app import FlowerRunError, run_on_grid  # noqa: E402
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
    assert resumed.config == whole.config
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
    assert checkpoint_to_continue(out, resume=True) is None  # none yet: round 0
    out.mkdir()
    (out / "model.npy").write_bytes(b"x")
    with pytest.raises(ConfigError, match=r"flower\.out_dir=.*already holds a run's "
                       r"model\.npy; give another folder"):
        checkpoint_to_continue(out, resume=False)
    (out / "model.npy").unlink()
    (out / CHECKPOINT).write_bytes(b"x")
    with pytest.raises(ConfigError, match=r"flower\.out_dir=.*holds the checkpoint\.pt of a "
                       r"stopped run; continue it with flower\.resume = true"):
        checkpoint_to_continue(out, resume=False)
    assert checkpoint_to_continue(out, resume=True) == out / CHECKPOINT
    (out / "history.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match=r"already holds a finished run's history\.jsonl"):
        checkpoint_to_continue(out, resume=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        checkpoint_to_continue(tmp_path / "file", resume=False)


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


def test_the_nodes_non_finite_objective_never_stops_a_run(fake_grid, monkeypatch):
    """The simulator stops a run whose evaluated loss overflows; on Flower the losses are
    the nodes' reports (each screened: a non-finite one is left out), so even an inf
    reaching the round loop leaves the run going to its last round."""
    from fedsparse.flower import server_app

    real = server_app.evaluate_on_nodes

    def overflowing(*args, **kwargs):
        metrics, dropped = real(*args, **kwargs)
        return {**metrics, "objective": float("inf")}, dropped

    monkeypatch.setattr(server_app, "evaluate_on_nodes", overflowing)
    job = _job()
    history = run_on_grid(fake_grid(job, range(4)), job)
    assert [r["round"] for r in history.records] == list(range(1, job.rounds + 1))
    assert torch.isfinite(history.model).all()


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


def test_a_resumed_run_counts_the_runs_nodes_as_the_uninterrupted_run(fake_grid, tmp_path):
    """``history.config["nodes"]``: the clients a node held at some point of the run,
    late joiners included, whichever nodes answer the resume's handshake."""
    job = _job()
    grid = fake_grid(job, range(4))
    _LateNode(grid, late=4)  # client 3's node joins in round 2
    whole = run_on_grid(grid, job)
    assert whole.config["nodes"] == 4
    checkpoint = tmp_path / CHECKPOINT
    grid = fake_grid(job, range(4))
    _LateNode(grid, late=4)
    with pytest.raises(Stop):
        run_on_grid(grid, job, checkpoint=checkpoint, callback=_stop_after(5))
    # all four nodes answer the resume's handshake
    resumed = run_on_grid(fake_grid(job, range(4)), job, resume_from=checkpoint)
    assert resumed.config == whole.config
    # client 3's node is back only after the resume's handshake
    grid = fake_grid(job, range(4))
    _LateNode(grid)
    assert run_on_grid(grid, job, resume_from=checkpoint).config == whole.config
    # client 3's node never comes back: it held client 3 before the stop
    assert run_on_grid(fake_grid(job, range(3)), job,
                       resume_from=checkpoint).config["nodes"] == 4


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


#: Jobs whose clients keep state between rounds, and the rounds in which client 1's node
#: is unreachable: FedMac (averaging 2 of the 4 clients) and Per-FedAvg (2 trained a
#: round), whose state is the personalised model evaluated at round 6 (client 1 misses
#: rounds 5 and 6, so its round-4 model is evaluated); SAFARI with FedSpa's masks, which
#: client 1 trains from again in round 6 after missing round 5.
STATEFUL = {
    "fedmac": ({"kind": "fedmac", "lam": 0.5, "step_size": 0.05, "personal_step_size": 0.05,
                "gamma": 0.05, "gamma_w": 0.05, "rho": 0.01, "local_steps": 3,
                "batch_size": 5, "clients_per_round": 2}, None, ("5", "6")),
    "per_fedavg": ({"kind": "per_fedavg", "step_size": 0.05, "inner_step_size": 0.05,
                    "local_steps": 2, "batch_size": 5}, 2, ("5", "6")),
    "safari_fedspa": ({"kind": "safari", "density": 0.5, "local_steps": 2, "batch_size": 5,
                       "step_size": 0.01, "pruner": "fedspa"}, None, ("5",)),
}


def _stateful_job(kind):
    algorithm, per_round, _ = STATEFUL[kind]
    return job_from_config({
        **JOB, "clients_per_round": per_round, "algorithm": algorithm,
        "data": {"kind": "fedprox_synthetic", "num_clients": 4, "dim": 12, "num_classes": 3},
        "problem": {"kind": "softmax", "num_classes": 3}})


@pytest.mark.parametrize("kind", sorted(STATEFUL))
def test_clients_that_keep_state_on_disk_resume_with_the_checkpoints_state(fake_grid, tmp_path,
                                                                          kind):
    """The stopped run's nodes trained past the checkpoint (round 5 of 6, checkpoint at
    4); the resumed run's nodes (new contexts, the same disks) go on with each client's
    state as of round 4 and end where the uninterrupted run ends, personalised models
    included. In both, client 1's node is unreachable in round 5 (:data:`STATEFUL`), so
    its state after round 4 is read back, not the one the stopped run left on its disk
    after round 5."""
    offline = STATEFUL[kind][2]

    def client_1_offline(kind, group, pid):
        return "error" if kind == "train" and group in offline and pid == 1 else "ok"

    job = _stateful_job(kind)
    whole = run_on_grid(fake_grid(job, range(4), client_1_offline), job)
    disks = {"state-dir": str(tmp_path / "nodes")}
    checkpoint = tmp_path / CHECKPOINT
    with pytest.raises(Stop):
        run_on_grid(fake_grid(job, range(4), node_config=disks, run_id=7), job,
                    checkpoint=checkpoint, callback=_stop_after(5))
    resumed = run_on_grid(fake_grid(job, range(4), client_1_offline, node_config=disks,
                                    run_id=8), job, checkpoint=checkpoint,
                          resume_from=checkpoint)
    assert torch.equal(resumed.model, whole.model)
    assert _rows(resumed) == _rows(whole)
    # a node deletes, as it trains, its states older than the newest one at or before
    # the checkpoint it was told of: a few are left of the 6 rounds
    clients = list((tmp_path / "nodes").glob("job-*/client-*"))
    assert len(clients) == 4
    for client in clients:
        rounds = sorted(int(p.stem.removeprefix("after-round-")) for p in client.glob("*.pt"))
        assert 1 <= len(rounds) <= 3 and max(rounds) <= 6, rounds


def test_a_resume_refuses_the_nodes_that_kept_their_clients_state_in_memory(fake_grid,
                                                                           tmp_path):
    job = _stateful_job("fedmac")
    checkpoint = tmp_path / CHECKPOINT
    with pytest.raises(Stop):
        run_on_grid(fake_grid(job, range(4)), job, checkpoint=checkpoint,
                    callback=_stop_after(3))
    with pytest.raises(FlowerRunError, match=r"no node can continue the run of .*: it keeps "
                       r"client \d's state in memory only \(no node config state-dir\)"):
        run_on_grid(fake_grid(job, range(4), run_id=2), job, resume_from=checkpoint)
    # two of the four nodes kept it: the others are refused, and their clients' uploads
    # fail, as for clients without a node
    grid = fake_grid(job, [0, 1], node_config={"state-dir": str(tmp_path / "nodes")}, run_id=3)
    for pid in (2, 3):
        grid.nodes[1000 + pid] = type(grid)(job, [pid], run_id=3).nodes[1000 + pid]
    history = run_on_grid(grid, job, resume_from=checkpoint)
    assert sorted(history.config["refused_nodes"]) == [1002, 1003]
    assert all(set(r["delivered_clients"]) <= {0, 1} for r in history.records[3:])


def test_a_node_keeps_only_the_states_of_the_runs_history(tmp_path):
    from fedsparse.flower.node_state import NodeStateStore

    job = _stateful_job("fedmac")
    store = NodeStateStore(tmp_path, job, 3)
    fresh = {"w": torch.zeros(1, 5), "steps": torch.zeros(1, dtype=torch.int64)}

    def state(value):
        return {"w": torch.full((1, 5), float(value)), "steps": torch.tensor([value])}

    store.begin(run_id=1, start=0)
    for done in (1, 2, 4, 5):  # trained in rounds 1, 2, 4 and 5; checkpoint at round 4
        store.save(done, state(done))
    store.prune(saved_round=4)
    assert sorted(p.name for p in store.folder.glob("*.pt")) == [
        "after-round-00000004.pt", "after-round-00000005.pt"]
    assert store.load(fresh, before=5)["w"][0, 0] == 5
    # the run stopped in round 6; a new run resumes from round 4: round 5's state is of
    # the stopped run's lost rounds, and goes
    store.begin(run_id=2, start=4)
    assert store.load(fresh, before=6)["w"][0, 0] == 4
    store.save(5, state(50))
    store.begin(run_id=2, start=4)  # the node restarted within the run: its state stays
    assert store.load(fresh, before=6)["w"][0, 0] == 50
    assert store.load(fresh, before=3) is None  # nothing kept before round 4
    # a file that is not this algorithm's client state is named
    store.save(6, {"w": torch.zeros(2, 5), "steps": torch.zeros(1, dtype=torch.int64)})
    with pytest.raises(ConfigError, match=r"client state file '.*after-round-00000006\.pt': "
                       r"w is not a NaN-free torch\.float32 tensor of shape \(1, 5\)"):
        store.load(fresh, before=6)
    (store.folder / "after-round-00000006.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="after-round-00000006"):
        store.load(fresh, before=6)


def test_two_server_apps_never_write_one_out_dir(fake_grid, tmp_path):
    """A second ServerApp on the folder of a running one (another process holds it) is
    refused before it asks any node, naming flower.out_dir; the folder is free again
    once the first ends."""
    import subprocess
    import sys

    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], "
         "os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); "
         "time.sleep(60)", str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        job = _job(out)
        grid = fake_grid(job, range(4))
        with pytest.raises(ConfigError, match=r"flower\.out_dir=.* is in use: .* or choose "
                           r"another flower\.out_dir"):
            _serve(make_server_app(job), grid)
        assert grid.sent == []
    finally:
        holder.kill()
        holder.wait()
    _serve(make_server_app(job), fake_grid(job, range(4)))
    assert (out / "model.npy").exists()
