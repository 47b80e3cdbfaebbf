"""``fedsparse flower demo`` and the command line of ``fedsparse flower app``.

The demo test starts real processes (SuperLink, two SuperNodes, ``flwr run``) on
127.0.0.1 and checks that the history is written and that nothing the demo started
is left running, also when the demo is interrupted.
"""

import json
import signal
import tomllib

import pytest

flwr = pytest.importorskip("flwr")

from fedsparse._validation import ConfigError  # noqa: E402
from fedsparse.cli import main  # noqa: E402
from fedsparse.flower.demo import (  # noqa: E402
    DEMO_JOB,
    demo_job,
    port_open,
    processes_using,
    run_demo,
)


def _leftovers(out):
    return processes_using(out / "flower" / "flwr-home")


def _running(pid: int) -> bool:
    """Not exited yet (an exited child of init that it has not reaped is a zombie: state Z)."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


# --- the demo's job: no Flower processes --------------------------------------------------


def test_demo_job_gives_one_client_per_node_and_saves_to_out(tmp_path):
    config = {**DEMO_JOB, "data": {**DEMO_JOB["data"], "num_clients": 10},
              "clients_per_round": 5, "flower": {"round_timeout": 900.0}}
    job, notes = demo_job(config, nodes=2, rounds=3, out=tmp_path / "o")
    assert job.num_clients == 2 and job.clients_per_round is None and job.rounds == 3
    assert job.flower["round_timeout"] == 120.0
    assert job.flower["out_dir"] == str((tmp_path / "o").resolve())
    assert any("num_clients = 2 (was 10)" in n for n in notes)
    assert any("clients_per_round" in n for n in notes)
    # The default job already fits: nothing to report.
    assert demo_job(None, out=tmp_path)[1] == []


def test_demo_refuses_data_on_the_nodes(tmp_path):
    config = {**DEMO_JOB, "data": {"kind": "node", "num_clients": 2}}
    with pytest.raises(ConfigError, match="data.kind"):
        demo_job(config)
    with pytest.raises(ConfigError, match="nodes"):
        demo_job(None, nodes=0)


def test_demo_command_line_errors(tmp_path, capsys):
    out = str(tmp_path / "o")
    assert main(["flower", "demo", "fedht-default", "--out", out]) == 2
    assert "--run" in capsys.readouterr().err  # 6 runs: which one?
    assert main(["flower", "demo", "--run", "1", "--out", out]) == 2
    assert "needs a CONFIG" in capsys.readouterr().err
    assert main(["flower", "demo", "no-such-experiment", "--out", out]) == 2
    assert "no-such-experiment" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine")
    assert main(["flower", "demo", "--out", str(tmp_path / "full")]) == 2
    err = capsys.readouterr().err
    assert "not empty" in err and "--force" in err and "overwrite=True" not in err
    assert (tmp_path / "full" / "x").read_text() == "mine"
    assert not (tmp_path / "o").exists()


# --- fedsparse flower app: named experiments, the connections it prints -------------------


def test_flower_app_takes_a_named_experiment_and_prints_insecure_first(tmp_path, capsys):
    out = tmp_path / "app"
    assert main(["flower", "app", "fedht-default", "--run", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    lines = [line.split() for line in printed.splitlines() if "fedsparse-" in line]
    assert lines[0][:3] == ["fedsparse-local", "127.0.0.1:9093", "insecure"]
    assert "no --root-certificates" in printed
    assert "flwr run" in printed and "fedsparse-local --stream" in printed
    config = (out / "pyproject.toml").read_text()
    assert 'kind = "fed_iter_ht"' in config  # run 2 of fedht-default is FedIter-HT


def test_flower_app_prints_tls_with_the_given_ca(tmp_path, capsys, monkeypatch):
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    out = tmp_path / "app"
    monkeypatch.chdir(tmp_path)  # a relative CA path is written absolute
    assert main(["flower", "app", "fedht-default", "--run", "0", "--out", str(out),
                 "--address", "10.0.0.5:9443", "--root-certificates", "ca.crt",
                 "--flwr-home", str(tmp_path / "home")]) == 0
    home = tomllib.loads((tmp_path / "home" / "config.toml").read_text())
    assert home["superlink"]["fedsparse-tls"]["root-certificates"] == str(ca)
    printed = capsys.readouterr().out
    first = next(line for line in printed.splitlines() if "fedsparse-" in line).split()
    assert first[:4] == ["fedsparse-tls", "10.0.0.5:9443", "TLS,", "CA"]
    assert first[4] == str(ca)  # (absolute, as Flower's configuration holds it)
    assert "fedsparse-tls --stream" in printed
    assert str(tmp_path / "home" / "config.toml") in printed


def test_flower_app_refuses_a_python_experiment(tmp_path, capsys):
    assert main(["flower", "app", "fedgradmp-fig2-video", "--out", str(tmp_path / "a")]) == 2
    assert "Python experiment" in capsys.readouterr().err


# --- real processes -----------------------------------------------------------------------


@pytest.mark.flower
def test_demo_runs_and_stops_every_process(tmp_path, capsys):
    # one round (each takes about 20 s of Flower's polling and process starts here); the
    # deployment tests run several
    out = tmp_path / "demo"
    code = main(["flower", "demo", "--rounds", "1", "--out", str(out), "--timeout", "400"])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    history = out / "history.jsonl"
    assert str(history) in printed.out
    rows = [json.loads(line) for line in history.read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 1]
    assert [r["delivered"] for r in rows[1:]] == [2]
    assert rows[-1]["objective"] > 0  # evaluated on the nodes at the end
    assert (out / "model.npy").exists()
    assert "round 1/1: 2/2 delivered" in printed.out
    # the results come back with load_run, and a later --force knows the demo's files
    import fedsparse as fs
    from fedsparse.manifest import read_manifest

    assert [r["round"] for r in fs.load_run(out)["demo"].records] == [1]
    assert {"history.jsonl", "model.npy"} <= set(read_manifest(out).files)
    assert f"fedsparse.load_run({str(out)!r})" in printed.out
    # Nothing carrying the demo's FLWR_HOME is left, and the SuperLink's port is closed.
    assert _leftovers(out) == []
    port = int(printed.out.split("SuperLink on 127.0.0.1:")[1].split()[0])
    assert not port_open(port)


@pytest.mark.flower
def test_interrupted_demo_stops_its_processes(tmp_path):
    out = tmp_path / "demo"
    started = []

    def interrupt(line):
        if "SuperNodes connected" in line:
            started.extend(_leftovers(out))
            raise KeyboardInterrupt

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        run_demo(None, out, rounds=2, echo=interrupt)
    assert len(started) >= 3, started  # the SuperLink and two SuperNodes were running
    assert _leftovers(out) == []
    assert not any(_running(pid) for pid in started)
    assert not (out / "history.jsonl").exists()
    # While it ran, SIGTERM meant "stop and clean up"; afterwards the old handler is back.
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("args, expected", [
    (["--set", "algorithm=3"], "[algorithm] is a table"),
    (["--root-certificates", "/nonexistent/ca.pem"],
     "--root-certificates='/nonexistent/ca.pem' is invalid: no such file"),
    (["--root-certificates", "EMPTY"], "is not a PEM certificate (no -----BEGIN CERTIFICATE"
                                       "----- line in an empty file)"),
    (["--address", ":9093"], "--address=':9093' is invalid: names no host"),
    (["--address", "[]:9093"], "--address='[]:9093' is invalid: names no host"),
    (["--sim-address", "127.0.0.1:0"], "--sim-address port=0 is invalid"),
    (["--sim-address", "localhost"], "--sim-address='localhost' is invalid: must be host:port"),
])
def test_flower_app_refuses_what_it_would_drop_or_defer(tmp_path, capsys, args, expected):
    (tmp_path / "empty.pem").write_text("")
    args = [str(tmp_path / "empty.pem") if a == "EMPTY" else a for a in args]
    out = tmp_path / "app"
    assert main(["flower", "app", "fedht-default", "--run", "0", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedsparse flower app: error:") and expected in err
    assert not (out / "pyproject.toml").exists()


def test_demo_force_replaces_only_the_earlier_demos_own_files(tmp_path):
    import torch

    from fedsparse.flower.demo import _prepare_out, _record_demo_files
    from fedsparse.history import History

    out = tmp_path / "demo"
    workdir = _prepare_out(out, False, "--force")
    (workdir / "logs").mkdir()
    (workdir / "logs" / "superlink.log").write_text("log")
    History(records=[{"round": 1}], initial={"round": 0}, model=torch.zeros(2)).save(out)
    _record_demo_files(out, workdir)  # what run_demo does when it ends
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="--force"):
        _prepare_out(out, False, "--force")
    (out / "history.csv").write_text("my edit\n")
    with pytest.raises(ConfigError, match="history.csv"):  # changed: not overwritten
        _prepare_out(out, True, "--force")
    assert (out / "history.csv").read_text() == "my edit\n"
    (out / "history.csv").unlink()
    _prepare_out(out, True, "--force")
    assert (out / "notes.txt").read_text() == "mine"
    assert not (out / "history.jsonl").exists() and not (workdir / "logs").exists()
