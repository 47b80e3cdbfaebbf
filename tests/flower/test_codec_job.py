"""Codec byte counts, job configs, app projects and the CLI command (no Flower processes)."""

import argparse
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

flwr = pytest.importorskip("flwr")

try:  # Python >= 3.11
    import tomllib
except ImportError:  # Python 3.10: flwr depends on tomli
    import tomli as tomllib

from fedsparse import ConfigError  # noqa: E402
from fedsparse.comm import payload_bytes  # noqa: E402
from fedsparse.flower import codec, job_from_config, write_app_project  # noqa: E402
from fedsparse.flower.cli import add_flower_parser  # noqa: E402
from fedsparse.flower.job import flatten, job_to_run_config  # noqa: E402
from fedsparse.flower.node_data import load_node_data  # noqa: E402

pytestmark = pytest.mark.flower

JOB = {"rounds": 2, "seed": 1,
       "data": {"kind": "fedht_simulation", "num_clients": 3, "samples_per_client": 10,
                "dim": 12, "support_size": 3},
       "problem": {"kind": "least_squares"},
       "algorithm": {"kind": "fed_iter_ht", "sparsity": 3, "local_steps": 2}}


@pytest.mark.parametrize("length", [1, 7, 256, 257, 65536, 65537])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("encoding", ["dense", "sparse", "bitmap", "auto"])
def test_codec_round_trip_and_exact_bytes(length, dtype, encoding):
    g = torch.Generator().manual_seed(length)
    x = torch.randn(length, generator=g, dtype=dtype)
    x[torch.rand(length, generator=g) < 0.8] = 0.0
    arrays, meta = codec.encode(x, encoding)
    assert torch.equal(codec.decode(arrays, meta), x)
    assert codec.encoded_bytes(arrays) == int(payload_bytes(x, encoding))


def test_codec_index_dtype_is_the_smallest_unsigned():
    for length, dtype in [(256, "uint8"), (257, "uint16"), (65536, "uint16"), (65537, "uint32")]:
        x = torch.zeros(length)
        x[-1] = 1.0
        arrays, _ = codec.encode(x, "sparse")
        assert arrays["index"].dtype == dtype


def test_codec_auto_picks_the_smallest_and_batches_rows():
    x = torch.zeros(3, 1000)
    x[:, :5] = 1.0
    assert codec.choose_encoding(x[0]) == "sparse"
    assert codec.choose_encoding(torch.ones(1000)) == "dense"
    y = torch.zeros(1000)
    y[::4] = 1.0
    assert codec.choose_encoding(y) == "bitmap"
    arrays, meta = codec.encode(x, "sparse")
    assert torch.equal(codec.decode(arrays, meta), x)
    assert codec.encoded_bytes(arrays) == int(payload_bytes(x, "sparse").sum())


def test_codec_rejects_bad_input():
    with pytest.raises(ConfigError, match="encoding"):
        codec.encode(torch.zeros(3), "zip")
    with pytest.raises(ConfigError, match="dtype"):
        codec.encode(torch.zeros(3, dtype=torch.int64))


@pytest.mark.parametrize("shape", [[1, 10**12], [10**6, 10**6], [-1, 3]])
def test_a_claimed_shape_is_bounded_before_anything_is_allocated(shape):
    arrays, meta = codec.encode(torch.tensor([0.0, 1.5, 0.0, 2.0]), "sparse")
    meta["shape"] = shape
    with pytest.raises(codec.MalformedPayload, match="shape"):
        codec.decode(arrays, meta)


def test_job_config_forms_and_errors():
    job = job_from_config(JOB)
    assert job.num_clients == 3 and job.clients_per_round is None
    flat = {"rounds": 2, "data.kind": "fedht_simulation", "data.num_clients": 3,
            "data.dim": 12, "data.support_size": 3, "data.samples_per_client": 10,
            "problem.kind": "least_squares", "algorithm.kind": "fed_iter_ht",
            "algorithm.sparsity": 3}
    assert job_from_config(flat).algorithm == {"kind": "fed_iter_ht", "sparsity": 3}
    experiment = {"defaults": {k: v for k, v in JOB.items() if k != "algorithm"},
                  "runs": [{"label": "a", "algorithm": {"kind": "fed_ht", "sparsity": 3}},
                           {"label": "b", "algorithm": {"kind": "fed_iter_ht", "sparsity": 2}}]}
    assert job_from_config(experiment, "b").algorithm["sparsity"] == 2
    with pytest.raises(ConfigError, match="run='c'"):
        job_from_config(experiment, "c")
    with pytest.raises(ConfigError, match="sparsity"):
        job_from_config({**JOB, "algorithm": {"kind": "fed_ht", "sparsity": 0}})
    # a channel applies on top of the network's own losses, as in the simulator
    lossy = job_from_config({**JOB, "channel": {"kind": "bernoulli", "probability": 0.5}})
    assert repr(lossy.build_channel()).startswith("BernoulliChannel")
    with pytest.raises(ConfigError, match="channel.kind"):
        job_from_config({**JOB, "channel": {"kind": "lossy"}})
    with pytest.raises(ConfigError, match="unknown"):
        job_from_config({**JOB, "flower": {"timeout": 3}})


def test_the_checkpoint_period_travels_with_the_job():
    # an experiment config's runs carry checkpoint_every; the Flower server honours it
    job = job_from_config({**JOB, "checkpoint_every": 5})
    assert job.checkpoint_every == 5
    assert job_from_config(flatten(job_to_run_config(job))).checkpoint_every == 5
    assert job_from_config(JOB).checkpoint_every == 10  # the simulator's default


def test_the_update_bound_is_on_by_default_and_checked():
    assert job_from_config(JOB).flower["max_update_ratio"] == 100.0
    assert job_from_config({**JOB, "flower": {"max_update_ratio": 0}}).flower[
        "max_update_ratio"] == 0
    for bad in (0.5, -1.0, "high", float("nan")):
        with pytest.raises(ConfigError, match="flower.max_update_ratio"):
            job_from_config({**JOB, "flower": {"max_update_ratio": bad}})


def test_the_round_timeout_bounds_are_allowed_and_the_longest_gives_valid_messages():
    """Both bounds are allowed; the longest wait still gives its messages an expiry Flower
    accepts (1e12 s did not: past the year 9999)."""
    import time

    from flwr.app import Metadata
    from flwr.supercore.corestate.utils import validate_message_metadata

    from fedsparse.experiments.config import ROUND_TIMEOUT_RANGE
    from fedsparse.flower.messaging import message_ttl

    low, high = ROUND_TIMEOUT_RANGE
    for value in (low, high):
        job = job_from_config({**JOB, "flower": {"round_timeout": value,
                                                 "poll_interval": 0.05}})
        assert job.flower["round_timeout"] == value

    def errors(timeout):
        return validate_message_metadata(Metadata(
            run_id=1, message_id="m", src_node_id=1, dst_node_id=2, reply_to_message_id="",
            group_id="", created_at=time.time(), ttl=message_ttl(timeout),
            message_type="train"))

    assert errors(high) == []
    assert errors(1e12) == ["Message expiration is outside the supported timestamp range"]


def test_the_wait_timeout_bounds_are_allowed():
    # no wait (the nodes connected at the start) and a week, as long as round_timeout
    from fedsparse.experiments.config import WAIT_TIMEOUT_RANGE

    assert WAIT_TIMEOUT_RANGE == (0.0, 7 * 24 * 3600.0)
    for value in WAIT_TIMEOUT_RANGE:
        assert job_from_config({**JOB, "flower": {"wait_timeout": value}}).flower[
            "wait_timeout"] == value


def test_node_data_is_the_simulators_row(tmp_path):
    job = job_from_config(JOB)
    data = job.build_data()
    node = load_node_data(job, {"partition-id": 2, "num-partitions": 3})
    assert torch.equal(node.train.X, data.train.X[2:3])
    assert node.weight == float(data.weights[2])
    with pytest.raises(ConfigError, match="partition-id"):
        load_node_data(job, {})
    with pytest.raises(ConfigError, match="num-partitions"):
        load_node_data(job, {"partition-id": 0, "num-partitions": 4})
    import numpy as np

    np.savez(tmp_path / "d.npz", X=np.ones((4, 12)), y=np.zeros(4))
    # a file on a node of a generated job would train on other data with another weight
    with pytest.raises(ConfigError, match=r"data-path=.*applies to data.kind = \"node\""):
        load_node_data(job, {"partition-id": 1, "data-path": str(tmp_path / "d.npz")})
    own = job_from_config({**JOB, "data": {"kind": "node", "num_clients": 3}})
    node = load_node_data(own, {"partition-id": 1, "data-path": str(tmp_path / "d.npz")})
    assert node.train.counts.tolist() == [4] and node.weight == 4.0
    for bad in (2.9, True, float("inf"), "two"):  # Flower parses node config as TOML
        with pytest.raises(ConfigError, match=r"node config partition-id=.*whole number"):
            load_node_data(job, {"partition-id": bad})


@pytest.mark.parametrize("arrays, match", [
    ({"X": np.ones((4, 12)), "y": np.zeros(3)},
     r"data-path '.*d\.npz': y\.shape=\(3,\) is invalid: must be 1-D with 4 entries, one per "
     r"row of X"),
    ({"X": np.full((4, 12), np.nan), "y": np.zeros(4)}, r"d\.npz': X or y='NaN/inf'"),
    ({"X": np.ones((4, 12)), "y": np.zeros(4), "X_test": np.ones((2, 11)),
      "y_test": np.zeros(2)}, r"X_test\.shape\[1\]=11 is invalid: .* dimension 12 of X$"),
    ({"X": np.ones((4, 12)), "y": np.zeros(4), "X_test": np.ones((2, 12))},
     "X_test and y_test must be given together"),
    # a misspelt test array would leave the node without the test data it was given
    ({"X": np.ones((4, 12)), "y": np.zeros(4), "Xtest": np.ones((2, 12)),
      "ytest": np.zeros(2)}, r"may only be X, y, X_test, y_test \(unknown: \['Xtest', 'ytest'\]\)"),
])
def test_a_nodes_file_is_named_with_its_own_arrays(tmp_path, arrays, match):
    np.savez(tmp_path / "d.npz", **arrays)
    job = job_from_config({**JOB, "data": {"kind": "node", "num_clients": 3}})
    with pytest.raises(ConfigError, match=match) as info:
        load_node_data(job, {"partition-id": 2, "data-path": str(tmp_path / "d.npz")})
    # the file is one client's: from_arrays' names of a data set's lists never show
    assert "train_" not in str(info.value) and "client 0" not in str(info.value)


def test_app_project_builds_with_flwr(tmp_path):
    out = write_app_project(JOB, tmp_path / "app", flwr_home=tmp_path / "home")
    with open(out / "pyproject.toml", "rb") as fh:
        project = tomllib.load(fh)
    app = project["tool"]["flwr"]["app"]
    assert app["components"]["serverapp"].endswith(":app")
    assert app["config"]["algorithm"]["kind"] == "fed_iter_ht"
    with open(tmp_path / "home" / "config.toml", "rb") as fh:
        assert "fedsparse-local" in tomllib.load(fh)["superlink"]
    flwr_bin = [sys.executable, "-m", "flwr.cli.app"]
    env_home = {"FLWR_HOME": str(tmp_path / "home"), "FLWR_TELEMETRY_ENABLED": "0"}
    done = subprocess.run([*flwr_bin, "build"], cwd=out, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env_home})
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(out.glob("*.fab"))
    with pytest.raises(ConfigError, match="not empty"):
        write_app_project(JOB, out)


def test_an_app_name_flower_cannot_take_is_said_as_it_is_written(tmp_path):
    said = []
    out = write_app_project(JOB, tmp_path / "app", name="../My Job!", log=said.append)
    with open(out / "pyproject.toml", "rb") as fh:
        assert tomllib.load(fh)["project"]["name"] == "my-job"
    assert "the project name '../My Job!' is written 'my-job'" in " ".join(said)
    said.clear()
    write_app_project(JOB, tmp_path / "app2", name="my-job", log=said.append)
    assert not any("is written" in line for line in said)
    with pytest.raises(ConfigError, match="name='' is invalid: must be a non-empty"):
        write_app_project(JOB, tmp_path / "app3", name="")
    assert not (tmp_path / "app3").exists()


def test_cli_flower_app(tmp_path, capsys):
    config = tmp_path / "job.toml"
    config.write_text('rounds = 3\n[data]\nkind = "fedht_simulation"\nnum_clients = 2\n'
                      '[problem]\nkind = "least_squares"\n'
                      '[algorithm]\nkind = "fed_ht"\nsparsity = 4\n')
    parser = argparse.ArgumentParser(prog="fedsparse")
    add_flower_parser(parser.add_subparsers())
    args = parser.parse_args(["flower", "app", str(config), "--out", str(tmp_path / "p"),
                              "--set", "algorithm.sparsity=2", "--set", "flower.out_dir=/x/y",
                              "--set", "algorithm.step_size=.5"])
    assert args.func(args) == 0
    with open(tmp_path / "p" / "pyproject.toml", "rb") as fh:
        cfg = tomllib.load(fh)["tool"]["flwr"]["app"]["config"]
    assert cfg["algorithm"]["sparsity"] == 2 and cfg["flower"]["out_dir"] == "/x/y"
    # a value is read as `fedsparse run --set` reads it (".5" is a number, not text)
    assert cfg["algorithm"]["step_size"] == 0.5
    args = parser.parse_args(["flower", "app", str(tmp_path / "missing.toml"), "--out",
                              str(tmp_path / "q")])
    assert args.func(args) == 2
    assert "does not exist" in capsys.readouterr().err


def test_import_without_flwr_names_the_extra():
    # A fresh interpreter where "import flwr" fails, as on an install without the extra.
    code = ("import sys; sys.modules['flwr'] = None\n"
            "try:\n    import fedsparse.flower\nexcept ImportError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert "pip install 'fedsparse[flower]'" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("change, match", [
    ({"data": {"kind": "node", "num_clients": -2}}, r"data\.num_clients=-2 .*at least 1"),
    ({"data": {"kind": "node", "num_clients": 2.5}}, r"data\.num_clients=2\.5 .*integer"),
    ({"data": {"kind": "node", "num_clients": "two"}}, r"data\.num_clients='two'"),
    ({"data": {**JOB["data"], "dimm": 30}}, r"unknown key 'dimm'.*did you mean 'dim'"),
    ({"data": {"kind": "federated_real", "dataset": "digits", "partition": "iid",
               "alpha": 0.5}}, r"\[data\] of kind 'federated_real' has an unknown key 'alpha'"),
    ({"flower": 5}, r"flower=5 is invalid: must be a table"),
    ({"data": {"kind": "ondisk", "path": "/data/fed"}}, r"data\.kind='ondisk' is invalid: is "
     r"the simulator's: a Flower node holds its own client's data.*data\.kind = \"node\""),
    ({"data": {"kind": "ondisk", "path": "/data/fed", "num_clients": 3}},
     r"data\.kind='ondisk' is invalid"),
    ({"flower": {"round_timeout": 2, "poll_interval": 4}},
     r"flower\.poll_interval=4 .*at most 2"),
    ({"flower": {"round_timeout": 1e-9}}, r"flower\.round_timeout=1e-09 is invalid: must be "
     r"from 0\.1 to 604800 seconds \(a tenth of a second to a week"),
    ({"flower": {"round_timeout": 1e12}}, r"flower\.round_timeout=1000000000000\.0 is "
     r"invalid: must be from 0\.1 to 604800 seconds"),
    ({"flower": {"round_timeout": 0.09}}, r"flower\.round_timeout=0\.09 is invalid"),
    ({"flower": {"round_timeout": 604801}}, r"flower\.round_timeout=604801 is invalid"),
    ({"flower": {"wait_timeout": 1e12}}, r"flower\.wait_timeout=1000000000000\.0 is "
     r"invalid: must be from 0 to 604800 seconds \(no wait to a week"),
    ({"flower": {"wait_timeout": 604801}}, r"flower\.wait_timeout=604801 is invalid"),
    ({"flower": {"wait_timeout": -1}}, r"flower\.wait_timeout=-1 is invalid"),
    ({"flower": {"out_dir": 3}}, r"flower\.out_dir=3 .*string"),
    ({"dtype": "float64", "problem": {"kind": "neural", "autocast": "bf16", "model": {
        "kind": "mlp", "in_features": 30, "hidden": [4], "num_classes": 2}}},
     r"autocast='bf16' is invalid: .*torch\.float64"),
])
def test_a_job_is_checked_at_the_server_before_any_node_starts(change, match):
    with pytest.raises(ConfigError, match=match):
        job_from_config({**JOB, **change})


def test_an_app_project_refuses_values_flower_cannot_carry(tmp_path):
    scheduled = {**JOB, "channel": {"kind": "scheduled",
                                    "delivered": [[1] * 3, [1, 0, 1], [1, 1, 0]]}}
    with pytest.raises(ConfigError, match=r"channel\.delivered=.*Flower run config"):
        write_app_project(scheduled, tmp_path / "app")
    assert not (tmp_path / "app").exists()


def _client_reply(job, kind, content):
    from flwr.app import Context, Message, RecordDict

    from fedsparse.flower import make_client_app

    app = make_client_app(job)
    ctx = Context(run_id=1, node_id=5, state=RecordDict(), node_config={"partition-id": 1},
                  run_config={})
    msg = Message(content, 5, kind, group_id="1")
    msg.metadata.__dict__["_message_id"] = "m1"
    return app(msg, ctx)


def _train_content(P=12, step_size=0.01, dtype=torch.float32, arrays=None, **task):
    from flwr.app import ConfigRecord, RecordDict

    content = RecordDict()
    codec.put(content, codec.PAYLOAD, torch.zeros(P, dtype=dtype), "dense")
    content[codec.CONFIG] = ConfigRecord({"step_size": step_size})
    if arrays is not None:
        content[codec.CONFIG_ARRAYS] = codec.tensors_to_record(arrays)
    task = {codec.ROUND: 0, codec.PARTITION_ID: 1, codec.UPLOAD_ENCODING: "auto", **task}
    content[codec.TASK] = ConfigRecord({k: v for k, v in task.items() if v is not None})
    return content


@pytest.mark.parametrize("content, match", [
    (lambda: _train_content(P=13), r"server payload shape=\(13,\) .*12 parameters"),
    (lambda: _train_content(round=-5), r"server task round=-5 .*whole number"),
    (lambda: _train_content(partition_id=1.9), r"server task partition_id=1\.9"),
    (lambda: _train_content(step_size="x"), r"server config step_size='x' .*positive"),
    (lambda: _train_content(step_size=float("nan")), r"server config step_size=nan"),
    (lambda: _train_content(dtype=torch.float64),
     r"server payload dtype='float64' is invalid: must be float32"),
    (lambda: _train_content(dtype=torch.bfloat16), r"server payload dtype='bfloat16'"),
    (lambda: _train_content(upload_encoding=None),
     r"server task upload_encoding=None is invalid: must be one of dense, sparse, bitmap"),
    (lambda: _train_content(upload_encoding="zip"), r"server task upload_encoding='zip'"),
    (lambda: _train_content(arrays={"step_size": torch.tensor([float("nan")])}),
     r"server config step_size=\[nan\] is invalid: must hold finite numbers"),
    (lambda: _train_content(arrays={"step_size": torch.tensor([0.1, 0.2, 0.3])}),
     r"server config step_size=\[0\.1.* must be one positive number"),
    (lambda: _train_content(arrays={"step_size": torch.tensor([-0.1])}),
     r"must be one positive number"),
])
def test_the_client_app_names_what_the_server_sent_wrong(content, match, task_identity):
    from flwr.app import MessageType

    job = job_from_config(JOB)
    assert not _client_reply(job, MessageType.TRAIN, _train_content()).has_error()
    # a step size the server resolved as a tensor travels as an array, and so do a custom
    # algorithm's indices and masks
    steps = _train_content(arrays={"step_size": torch.tensor([0.01]),
                                   "support": torch.tensor([0, 3, 5]),
                                   "mask": torch.ones(12, dtype=torch.bool)})
    assert not _client_reply(job, MessageType.TRAIN, steps).has_error()
    with pytest.raises(ConfigError, match=match):
        _client_reply(job, MessageType.TRAIN, content())


def test_the_client_app_evaluates_only_a_model_of_its_job_s_dtype(task_identity):
    from flwr.app import MessageType, RecordDict

    job = job_from_config(JOB)
    for dtype, ok in [(torch.float32, True), (torch.float64, False)]:
        content = RecordDict()
        codec.put(content, codec.MODEL, torch.zeros(12, dtype=dtype), "dense")
        if ok:
            assert not _client_reply(job, MessageType.EVALUATE, content).has_error()
        else:
            with pytest.raises(ConfigError, match=r"server model dtype='float64' is invalid"):
                _client_reply(job, MessageType.EVALUATE, content)
