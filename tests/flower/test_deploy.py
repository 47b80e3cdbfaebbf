"""Real deployments on loopback: a SuperLink and SuperNodes as separate processes.

Each test starts its processes through the ``cluster`` fixture (own process groups,
FLWR_HOME in tmp, free ports on 127.0.0.1), runs a short job with ``flwr run`` and
compares the saved model with :func:`fedsparse.simulate` on the same data. The
fixture stops every process when the test ends, failed or not.
"""

import json
import os
import re
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch

flwr = pytest.importorskip("flwr")

import fedsparse as fs  # noqa: E402
from fedsparse.flower import job_from_config, write_app_project  # noqa: E402

pytestmark = pytest.mark.flower

RUN_TIMEOUT = 240.0


def _job(out_dir, *, rounds=2, round_timeout=60.0) -> dict:
    return {"rounds": rounds, "seed": 5,
            "data": {"kind": "fedht_simulation", "num_clients": 2, "samples_per_client": 30,
                     "dim": 40, "support_size": 5},
            "problem": {"kind": "least_squares"},
            "algorithm": {"kind": "fed_iter_ht", "sparsity": 5, "local_steps": 3,
                          "batch_size": 10, "step_size": "auto"},
            # No evaluation round: each message round costs a ClientApp process per node.
            "flower": {"round_timeout": round_timeout, "wait_timeout": 60.0,
                       "evaluate_every": -1, "out_dir": str(out_dir)}}


class _Replay:
    """A channel that delivers exactly the uploads Flower delivered, round by round."""

    def __init__(self, delivered_clients):
        self.delivered_clients = delivered_clients

    def delivered(self, seed, round, clients):
        ok = set(self.delivered_clients[round])
        return torch.tensor([int(c) in ok for c in clients])


def _simulated(job_dict, delivered_clients=None):
    job = job_from_config(job_dict)
    channel = None if delivered_clients is None else _Replay(delivered_clients)
    return fs.simulate(job.build_algorithm(), job.build_problem(), job.build_data(),
                       rounds=job.rounds, seed=job.seed, clients_per_round=job.clients_per_round,
                       channel=channel)


def _history(out_dir) -> list[dict]:
    rows = [json.loads(line) for line in (out_dir / "history.jsonl").read_text().splitlines()]
    return [r for r in rows if r["round"] > 0]


def _nodes_active(cluster, n):
    text = cluster.procs[0].text()
    return len(set(re.findall(r"Activated node_id=(\d+)", text))) >= n


def _check_against_simulator(out_dir, job, delivered_clients=None):
    model = torch.from_numpy(np.load(out_dir / "model.npy"))
    reference = _simulated(job, delivered_clients)
    torch.testing.assert_close(model, reference.model, rtol=1e-4, atol=1e-6)
    assert torch.equal(model != 0, reference.model != 0)
    return reference


def test_a_tls_deployment_with_node_auth_outlives_a_killed_supernode(cluster, tmp_path,
                                                                     tls_files):
    """One deployment (each costs about a minute of process starts and Flower's polls):
    TLS and SuperNode authentication, a rogue node refused, then a job of three rounds
    whose node 1 is killed once round 2 is done: the job goes on without it and gives the
    simulator's model on exactly that delivery pattern."""
    tls = tls_files(("node0", "node1", "rogue"))
    out = tmp_path / "out"
    # round 3 waits out the 20 s timeout for the killed node (shorter could drop a live
    # node's first ClientApp on a loaded machine)
    job = _job(out, rounds=3, round_timeout=20.0)
    project = write_app_project(job, tmp_path / "app", address=cluster.address,
                                root_certificates=str(tls["ca"]), flwr_home=cluster.home)
    cluster.superlink("--ssl-ca-certfile", str(tls["ca"]), "--ssl-certfile", str(tls["cert"]),
                      "--ssl-keyfile", str(tls["key"]), "--enable-supernode-auth")
    for name in ("node0", "node1"):
        done = cluster.flwr("supernode", "register", str(tls[name][1]), "fedsparse-tls")
        assert done.returncode == 0 and "registered successfully" in done.stdout, done.stdout
    tls_args = ("--root-certificates", str(tls["ca"]))
    nodes = [cluster.supernode(f"node{i}", f"partition-id={i} num-partitions=2", *tls_args,
                               "--auth-supernode-private-key", str(tls[f"node{i}"][0]))
             for i in range(2)]
    cluster.wait_for(lambda: _nodes_active(cluster, 2), 60, "2 authenticated SuperNodes to connect")
    # A SuperNode whose key was never registered is refused and exits.
    rogue = cluster.supernode("rogue", "partition-id=1 num-partitions=2", *tls_args,
                              "--auth-supernode-private-key", str(tls["rogue"][0]))
    cluster.wait_for(lambda: not rogue.alive(), 60, "the unregistered SuperNode to be refused")
    assert rogue.popen.returncode != 0
    assert "Failed to activate SuperNode" in rogue.text()
    # A plain-text client cannot talk to the TLS SuperLink either.
    listing = cluster.flwr("supernode", "list", "fedsparse-tls")
    assert listing.returncode == 0 and listing.stdout.count("online") == 2, listing.stdout
    killed = []

    def kill_after_round_two(line):
        if not killed and "round 2/3" in line:
            nodes[1].signal_group(signal.SIGKILL)  # the node and its ClientApp processes
            killed.append(line)

    log = cluster.run_job(project, "fedsparse-tls", timeout=RUN_TIMEOUT,
                          on_line=kill_after_round_two)
    assert killed, "the run never reached round 2:\n" + log + cluster.dump()
    assert (out / "model.npy").exists(), log + cluster.dump()
    history = _history(out)
    assert len(history) == 3
    delivered = [r["delivered_clients"] for r in history]
    # node 1 took part before it was killed (on a loaded machine a node's first
    # ClientApp can start too late for one of those rounds), and is gone for good after
    assert any(1 in d for d in delivered[:2]), delivered
    assert delivered[-1] == [0], delivered
    assert all(0 in d for d in delivered)
    # Its uploads count as not delivered: the simulator with exactly that delivery
    # pattern gives the same model and the same downlink bytes. The simulator counts the
    # bytes of every upload sent, lost or not (two equal ones a round); the deployment
    # counts those that arrived, and a killed node sends none.
    reference = _check_against_simulator(out, job, delivered)
    assert [r["bytes_down"] for r in history] == reference.column("bytes_down")
    sent = reference.column("bytes_up")
    assert [r["bytes_up"] for r in history] == [sent[k] // 2 * len(d)
                                                for k, d in enumerate(delivered)]


def test_a_run_whose_superlink_is_lost_resumes_from_its_checkpoint(cluster, tmp_path,
                                                                   request):
    """The server machine is lost once round 2 of 4 is logged (the SuperLink and the
    ServerApp it started are killed); a new SuperLink and new SuperNodes run the job
    again with ``flower.resume``: it goes on from the last checkpoint (round 2, or round 1
    if the kill came before its save) and ends with the simulator's history and model.
    The job is SAFARI with FedSpa's masks, which each client keeps between rounds: the
    nodes keep them on their disks (node config ``state-dir``) and the new nodes train
    from the masks their clients had at the checkpoint."""
    from fedsparse.flower.demo import Cluster

    out = tmp_path / "out"
    job = {**_job(out, rounds=4), "checkpoint_every": 1,
           "algorithm": {"kind": "safari", "density": 0.5, "local_steps": 3,
                         "batch_size": 10, "step_size": 0.01, "pruner": "fedspa"}}
    project = _two_insecure_nodes(cluster, job, tmp_path / "app", tmp_path)
    lost = []

    def lose_the_server_in_round_three(line):
        if not lost and "round 2/4" in line:
            cluster.procs[0].signal_group(signal.SIGKILL)
            lost.append(line)

    log = cluster.run_job(project, "fedsparse-local", timeout=RUN_TIMEOUT,
                          on_line=lose_the_server_in_round_three)
    assert lost, "the run never reached round 2:\n" + log + cluster.dump()
    assert (out / "checkpoint.pt").exists() and not (out / "model.npy").exists(), log
    cluster.stop_all()

    again = Cluster(tmp_path / "again")
    request.addfinalizer(again.stop_all)
    resumed = {**job, "flower": {**job["flower"], "resume": True}}
    project = _two_insecure_nodes(again, resumed, tmp_path / "app-again", tmp_path)
    log = again.run_job(project, "fedsparse-local", timeout=RUN_TIMEOUT)
    assert re.search(r"resuming at round [12] of 4", log), log + again.dump()
    assert (out / "model.npy").exists(), log + again.dump()
    history = _history(out)
    assert [r["round"] for r in history] == [1, 2, 3, 4]
    assert all(r["delivered_clients"] == [0, 1] for r in history), history
    _check_against_simulator(out, job)
    assert list((tmp_path / "node1-state").glob("job-*/client-1/after-round-*.pt"))


def _two_insecure_nodes(cluster, job: dict, app, disks):
    """``job``'s app project for ``cluster``, whose SuperLink and two SuperNodes (without
    TLS; node ``i`` keeps its client's state in ``disks / node<i>-state``) are started and
    connected."""
    project = write_app_project(job, app, address=cluster.address, flwr_home=cluster.home)
    cluster.superlink("--insecure")
    for i in range(2):
        cluster.supernode(f"node{i}", f"partition-id={i} num-partitions=2 "
                          f'state-dir="{disks / f"node{i}-state"}"', "--insecure")
    cluster.wait_for(lambda: _nodes_active(cluster, 2), 60, "2 SuperNodes to connect")
    return project


def test_a_refused_out_dir_fails_the_run_with_its_message_as_deploy_md_says(cluster, tmp_path):
    """What docs/deploy.md tells a script to read: ``flwr run --stream`` exits 0 whatever
    the outcome (Flower's command reads none), and the SuperLink records the run as
    ``finished:failed`` with fedsparse's message in ``status-details``, in one line. A
    later Flower that changes either fails here, so that the page is updated with it."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "history.jsonl").write_text('{"round": 0}\n')  # a finished run's files
    project = write_app_project(_job(out), tmp_path / "app", address=cluster.address,
                                flwr_home=cluster.home)
    cluster.superlink("--insecure")  # the folder is refused before any node is waited for
    log = cluster.run_job(project, "fedsparse-local", timeout=RUN_TIMEOUT)
    message = (f"flower.out_dir={str(out)!r} is invalid: already holds a run's "
               "history.jsonl")
    assert cluster.returncode == 0 and "Exit Code: 201" in log and message in log, log
    run_id = re.search(r"Successfully started run (\d+)", log).group(1)
    listed = cluster.flwr("ls", "fedsparse-local", "--run-id", run_id, "--format", "json")
    run = json.loads(listed.stdout[listed.stdout.index("{"):])["runs"][0]
    assert run["status"] == "finished:failed", run
    assert run["status-details"].startswith(f"ServerApp failed with exception: {message}")
    assert "\n" not in run["status-details"]


def test_a_superlink_starts_from_an_environment_not_activated(tmp_path, monkeypatch,
                                                               request):
    """The SuperLink starts flower-superexec by name: with this environment's commands
    off PATH (its Python run by full path, not activated) it exited at once."""
    from fedsparse.flower.processes import BIN, Cluster

    path = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and Path(d).resolve() != BIN.resolve()]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    cluster = Cluster(tmp_path)
    request.addfinalizer(cluster.stop_all)
    link = cluster.superlink("--insecure")
    cluster.wait_for(lambda: "Starting the SuperLink Control" in link.text(), 30,
                     "the SuperLink to start", link)
    time.sleep(2)  # a SuperExec that cannot start takes the SuperLink down at once
    assert link.alive(), link.text()[-3000:]
