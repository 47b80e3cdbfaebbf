"""The ClientApp computes on the device its node config names (``device``), and refuses
a misspelt node config key, over the in-process grid of conftest.py."""

import logging

import pytest
import torch

flwr = pytest.importorskip("flwr")

import fedsparse as fs  # noqa: E402
from fedsparse import _resources  # noqa: E402
from fedsparse._validation import ConfigError  # noqa: E402
from fedsparse.data.federated import ClientSplit  # noqa: E402
from fedsparse.flower import client_app, job_from_config  # noqa: E402
from fedsparse.flower.server_app import run_on_grid  # noqa: E402

pytestmark = pytest.mark.flower
CUDA = torch.cuda.is_available()

JOB = {"rounds": 3, "seed": 4,
       "data": {"kind": "fedht_simulation", "num_clients": 3, "samples_per_client": 16,
                "dim": 20, "support_size": 3},
       "problem": {"kind": "least_squares"},
       "algorithm": {"kind": "fed_iter_ht", "sparsity": 3, "local_steps": 2, "batch_size": 5,
                     "step_size": 0.003},
       "flower": {"round_timeout": 0.5, "wait_timeout": 0.0, "poll_interval": 0.02,
                  "evaluate_every": 1}}


def _grid(fake_grid, job, devices):
    grid = fake_grid(job, range(len(devices)))
    for node, device in zip(grid.nodes.values(), devices, strict=True):
        if device is not None:
            node.node_config["device"] = device
    return grid


def _runtimes(job):
    return [rt for rt in client_app._RUNTIMES.values() if rt.job == job]


@pytest.mark.parametrize("device", [
    "cpu", "auto", pytest.param("cuda", marks=pytest.mark.skipif(not CUDA, reason="no GPU")),
    pytest.param("cuda:0", marks=pytest.mark.skipif(not CUDA, reason="no GPU"))])
def test_a_node_trains_and_evaluates_on_its_configured_device(fake_grid, device, monkeypatch):
    """The data move to the device once per node (not per round), and the run is the
    simulator's."""
    client_app._RUNTIMES.clear()
    moves = []
    to_device = ClientSplit.to_device
    monkeypatch.setattr(ClientSplit, "to_device",
                        lambda self, d: moves.append(str(d)) or to_device(self, d))
    job = job_from_config({**JOB, "seed": 4 + len(device)})
    history = run_on_grid(_grid(fake_grid, job, [device] * 3), job)
    want = torch.device("cuda" if CUDA else "cpu") if device == "auto" else torch.device(device)
    runtimes = _runtimes(job)
    assert len(runtimes) == 3
    for rt in runtimes:
        assert rt.device == want and rt.node.train.X.device.type == want.type
    # one move per node of its training data (there is no test split), whatever the rounds
    assert len(moves) == (3 if want.type == "cuda" else 0)
    reference = fs.simulate(job.build_algorithm(), job.build_problem(), job.build_data(),
                            rounds=job.rounds, seed=job.seed)
    torch.testing.assert_close(history.model, reference.model, rtol=1e-5, atol=1e-6)
    assert history.records[-1]["objective"] == pytest.approx(reference.records[-1]["objective"],
                                                             rel=1e-5)


@pytest.mark.parametrize("device,why", [
    pytest.param("cuda", "needs a CUDA GPU", marks=pytest.mark.skipif(CUDA, reason="a GPU")),
    ("tpu", "must be one of"), ("cuda:99", "GPU")])
def test_a_node_that_cannot_use_its_device_is_refused_with_the_reason(fake_grid, device, why):
    """A clear error on the node's first message, which the server logs when it refuses
    the node; the other nodes run."""
    client_app._RUNTIMES.clear()
    with pytest.raises(ConfigError, match=f"node config device='{device}'.*{why}"):
        client_app._node_device({"device": device})
    job = job_from_config({**JOB, "seed": 9})
    history = run_on_grid(_grid(fake_grid, job, ["cpu", device, None]), job)
    refused = history.config["refused_nodes"]
    assert list(refused) == [1001]
    assert f"device='{device}'" in refused[1001] and why in refused[1001]
    assert history.column("delivered_clients") == [[0, 2]] * 3


def test_the_client_app_imports_neither_the_runner_nor_matplotlib():
    # A SuperNode starts a ClientApp process for every message: the experiment runner and
    # its plots would add about a second to each
    import subprocess
    import sys

    code = ("import sys, fedsparse.flower.client_app; "
            "print(sorted(m for m in ('matplotlib', 'fedsparse.experiments.runner', "
            "'fedsparse.report') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("key,meant", [("state_dir", "state-dir"), ("data_path", "data-path"),
                                       ("Device", "device"), ("partition_id", "partition-id"),
                                       ("statedir", "state-dir"), ("datapath", "data-path")])
def test_a_near_miss_of_a_node_config_key_is_an_error_naming_it(key, meant):
    """``state_dir`` would otherwise leave the node's state in memory only, without a
    word (a resume then refuses the node); ``data_path`` would leave it without its file."""
    with pytest.raises(ConfigError, match=rf"node config {key}='/x' is an unknown key "
                       rf"\(did you mean '{meant}'\?\); known keys: partition-id, "
                       "num-partitions, data-path, state-dir, device"):
        client_app.check_node_config({"partition-id": 0, key: "/x"})


def test_other_unknown_node_config_keys_are_named_and_flowers_own_pass():
    # the keys a node reads, Flower's simulation's two among them
    assert client_app.check_node_config({"partition-id": 0, "num-partitions": 3,
                                         "data-path": "/d.npz", "state-dir": "/s",
                                         "device": "cpu"}) == []
    assert client_app.check_node_config({"partition-id": 0, "gpu-memory": 4}) == [
        "node config gpu-memory=4 is an unknown key, ignored; known keys: partition-id, "
        "num-partitions, data-path, state-dir, device"]


def test_a_node_with_a_misspelt_node_config_key_is_refused_with_it(fake_grid, caplog):
    """The error reaches the server, which refuses that node with it; a node with a key
    unlike every one runs (with a warning), and so does the run."""
    client_app._RUNTIMES.clear()
    job = job_from_config({**JOB, "seed": 11})
    grid = fake_grid(job, range(3))
    grid.nodes[1001].node_config["state_dir"] = "/var/lib/fedsparse"
    grid.nodes[1002].node_config["site"] = "lab-2"
    with caplog.at_level(logging.WARNING):
        history = run_on_grid(grid, job)
    refused = history.config["refused_nodes"]
    assert list(refused) == [1001]
    # Flower's wrapping of the exception is left out, so that the cut keeps the node's words
    assert refused[1001] == ("error reply to the handshake: ConfigError: node config "
                             "state_dir='/var/lib/fedsparse' is an unknown key (did you mean "
                             "'state-dir'?); known keys: partition-id, num-partitions, "
                             "data-path, state-dir, device")
    assert "node config site='lab-2' is an unknown key, ignored" in caplog.text
    assert history.column("delivered_clients") == [[0, 2]] * 3


def test_a_nodes_error_reply_is_shown_in_its_own_words():
    """Flower's wrapping of a ClientApp's exception (a SuperNode's, the simulation
    runtime's) is left out of the reasons the server gives, so their cut keeps the
    node's message; any other reason is shown as it is, cut."""
    from flwr.app import Error

    from fedsparse.flower.replies import error_reason

    message = "node config device='tpu' is invalid: must be one of"
    supernode = f"<class 'fedsparse._validation.ConfigError'>:<'{message}'>"
    assert error_reason(Error(code=2, reason=supernode)) == f"ConfigError: {message}"
    simulation = ("<class 'flwr.clientapp.client_app.ClientAppException'>:<'\nException "
                  f"ClientAppException occurred. Message: {message}'>")
    assert error_reason(Error(code=2, reason=simulation)) == message
    assert error_reason(Error(code=0, reason="node crashed")) == "node crashed"
    assert error_reason(Error(code=0, reason="x" * 300)).endswith("...(300 chars)")


def test_a_state_dir_on_a_node_whose_algorithm_keeps_no_client_state_is_named(fake_grid,
                                                                               caplog, tmp_path):
    """A node given state-dir for an algorithm without client state is told it is not used,
    once per node and run, and nothing is written there; an algorithm with client state
    keeps it there without a word."""
    client_app._RUNTIMES.clear()
    disk = tmp_path / "state"
    job = job_from_config({**JOB, "seed": 13})
    grid = fake_grid(job, range(3), node_config={"state-dir": str(disk)})
    with caplog.at_level(logging.WARNING):
        history = run_on_grid(grid, job)
    said = (f"node config state-dir={str(disk)!r} is ignored: algorithm 'fed_iter_ht' keeps "
            "no client state between rounds, so nothing is written there")
    assert caplog.text.count(said) == 3, caplog.text
    assert not disk.exists()
    assert history.column("delivered_clients") == [[0, 1, 2]] * 3
    caplog.clear()
    personal = job_from_config({
        **JOB, "seed": 13, "data": {"kind": "fedprox_synthetic", "num_clients": 3, "dim": 12,
                                    "num_classes": 3},
        "problem": {"kind": "softmax", "num_classes": 3},
        "algorithm": {"kind": "per_fedavg", "step_size": 0.05, "inner_step_size": 0.05,
                      "local_steps": 2, "batch_size": 5}})
    with caplog.at_level(logging.WARNING):
        run_on_grid(fake_grid(personal, range(3), node_config={"state-dir": str(disk)}),
                    personal)
    assert "state-dir" not in caplog.text
    assert disk.is_dir()


def _new_process_per_message(app):
    """``app`` as a SuperNode runs it: a new process per message, which finds no
    runtime built (the node's Context is what the SuperNode keeps)."""
    def run(message, context):
        client_app._RUNTIMES.clear()
        return app(message, context)
    return run


def test_a_node_config_warning_is_logged_once_per_node_and_run(fake_grid, caplog, tmp_path):
    """A SuperNode starts a ClientApp process for every message: each message here finds
    the runtimes gone, as a new process would, and the node's Context kept, as the
    SuperNode keeps it. The warnings come on each node's first message of the run only;
    another run (a fresh Context) in the same process is told again."""
    job = job_from_config({**JOB, "seed": 17})
    config = {"state-dir": str(tmp_path / "state"), "site": "lab-2"}
    said = ["node config site='lab-2' is an unknown key, ignored",
            f"node config state-dir={str(tmp_path / 'state')!r} is ignored"]

    client_app._RUNTIMES.clear()
    grid = fake_grid(job, range(3), node_config=config)
    grid.app = _new_process_per_message(grid.app)
    with caplog.at_level(logging.WARNING):
        history = run_on_grid(grid, job)
    assert len(grid.sent) > 3 * job.rounds  # a handshake, the rounds and evaluations
    for text in said:
        assert caplog.text.count(text) == 3, caplog.text  # one per node
    assert history.column("delivered_clients") == [[0, 1, 2]] * 3
    contexts = list(grid.nodes.values())
    # a message more, in a new process, on a node's kept Context: not a word
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        client_app._RUNTIMES.clear()
        client_app._runtime(job, job.to_dict(), contexts[0])
    assert caplog.text == ""
    # another run in this process (its runtimes kept) on fresh Contexts: told again
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        run_on_grid(fake_grid(job, range(3), node_config=config, run_id=2), job)
    for text in said:
        assert caplog.text.count(text) == 3, caplog.text


def test_a_warning_while_building_the_job_is_logged_once_per_node_and_run(
        fake_grid, caplog, monkeypatch):
    """A warning raised while a node builds its job (check_steps: a job of days, made one
    of 2 steps here by lowering the bound) came with every message's new process; it is
    logged as the node config's warnings are, once per node and run."""
    monkeypatch.setattr(_resources, "WARN_SECONDS", 1e-9)
    with pytest.warns(RuntimeWarning, match="2 sequential steps"):  # as the server says
        job = job_from_config({**JOB, "seed": 18})
    said = "local_steps=2 is 2 sequential steps in every round"

    client_app._RUNTIMES.clear()
    grid = fake_grid(job, range(3))
    grid.app = _new_process_per_message(grid.app)
    # pytest.warns shows every warning, as each new process would (none seen before)
    with caplog.at_level(logging.WARNING), pytest.warns(RuntimeWarning, match=said) as raised:
        run_on_grid(grid, job)
    assert len(grid.sent) > 3 * job.rounds
    assert caplog.text.count(said) == 3, caplog.text  # one per node
    assert len(raised) == 1  # the server's own; the nodes' are in their log
