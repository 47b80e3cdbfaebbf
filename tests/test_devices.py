"""Where a run computes: ``--device`` on the command line, ``device`` in configs, the
device and GPU in summary.json, ``list``/``show`` on experiments that want a GPU, and
checkpoints that are read on any machine."""

from __future__ import annotations

import json

import pytest
import torch

import fedsparse as fs
from fedsparse import ConfigError
from fedsparse.cli import build_parser, main
from fedsparse.devices import (
    DEFAULT_DEVICE,
    check_device_spec,
    device_info,
    devices_info,
    resolve_device,
)
from fedsparse.experiments import runner
from fedsparse.experiments.config import resolve_runs
from fedsparse.experiments.run_selection import apply_overrides

NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")


def _config(tiny, **top) -> dict:
    import tomllib

    config = tomllib.loads(tiny.read_text())
    config.update(top)
    return config


@pytest.fixture
def tiny(tmp_path, tiny_toml):
    path = tmp_path / "tiny.toml"
    path.write_text(tiny_toml(seed=0, samples=10, dim=12, sparsity=2))
    return path


# ----------------------------------------------------------------- the command line


@pytest.mark.parametrize("command", [["run", "x"], ["sweep", "x"], ["tune", "x"]])
def test_run_sweep_and_tune_take_device(command):
    args = build_parser(only=command[0]).parse_args([*command, "--device", "cuda:1"])
    assert args.device == "cuda:1"
    assert build_parser(only=command[0]).parse_args(command).device is None


@NO_GPU
@pytest.mark.parametrize("command", [["run"], ["sweep", "fedht-default", "--grid",
                                               "algorithm.step_size=[0.1]"]])
def test_cuda_without_a_gpu_exits_2_naming_device(command, tmp_path, capsys):
    assert main([*command, "--device", "cuda", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--device='cuda'" in err and "needs a CUDA GPU" in err
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_an_unknown_device_exits_2_naming_the_choices(capsys):
    assert main(["run", "--device", "tpu"]) == 2
    err = capsys.readouterr().err
    assert "--device='tpu'" in err and '"auto"' in err


def test_summary_records_the_device_and_gpu(tiny, tmp_path):
    out = tmp_path / "o"
    assert main(["run", str(tiny), "--out", str(out), "--quiet", "--device", "auto"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    want = device_info(resolve_device("auto"))
    assert (summary["device"], summary["gpu"]) == (want["device"], want["gpu"])
    assert all((r["device"], r["gpu"]) == (want["device"], want["gpu"])
               for r in summary["runs"])
    assert 'device = "auto"' in (out / "config.toml").read_text()  # as the user wrote it


def test_device_flag_wins_over_the_config(tiny):
    config = apply_overrides(_config(tiny, device="cpu"), [("Fed-HT:device", "cpu")])
    from fedsparse.cli import _apply_overrides

    runs = resolve_runs(_apply_overrides(config, [], None, "auto"))
    assert [r["device"] for r in runs] == ["auto", "auto"]


def test_runner_passes_the_device_to_simulate(tiny, monkeypatch):
    seen = []
    real = runner.simulate

    def spy(*args, **kwargs):
        seen.append(kwargs["device"])
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "simulate", spy)
    run = resolve_runs(_config(tiny, device="auto"))[0]
    runner.execute_run(run, None, data_cache={}, progress=False)
    assert seen == [resolve_device("auto")]


# ------------------------------------------------------------------------ configs


def test_device_defaults_to_the_cpu_and_a_run_wins_over_the_top_level(tiny):
    assert DEFAULT_DEVICE == "cpu"
    assert [r["device"] for r in resolve_runs(_config(tiny))] == ["cpu", "cpu"]
    config = _config(tiny, device=" AUTO ")
    config["runs"][1]["device"] = "cpu"
    assert [r["device"] for r in resolve_runs(config)] == ["auto", "cpu"]


@pytest.mark.parametrize("where, value, message", [
    ("top", "tpu", "device='tpu' is invalid: must be one of"),
    ("top", 3, "device=3 is invalid: must be a string"),
    ("run", "gpu", "runs[1].device='gpu' is invalid"),
    ("defaults", ["cpu"], "runs[0].device=['cpu'] is invalid: must be a string"),
])
def test_a_bad_device_in_a_config_is_named(tiny, where, value, message):
    config = _config(tiny)
    if where == "top":
        config["device"] = value
    elif where == "run":
        config["runs"][1]["device"] = value
    else:
        config["defaults"]["device"] = value
    with pytest.raises(ConfigError) as err:
        resolve_runs(config)
    assert message in str(err.value)


@NO_GPU
def test_a_config_asking_for_cuda_without_a_gpu_is_refused(tiny):
    with pytest.raises(ConfigError, match=r"^device='cuda'.*needs a CUDA GPU"):
        resolve_runs(_config(tiny, device="cuda"))
    config = _config(tiny)
    config["defaults"]["device"] = "cuda:0"
    with pytest.raises(ConfigError, match=r"runs\[0\]\.device='cuda:0'.*needs a CUDA GPU"):
        resolve_runs(config)


def test_a_flower_job_accepts_a_run_with_a_device(tiny):
    pytest.importorskip("flwr")
    from fedsparse.flower.job import job_from_config

    job = job_from_config(_config(tiny, device="cpu"), run="FedIter-HT")
    assert job.rounds == 2


def test_devices_helpers():
    assert check_device_spec("x", " CPU ") == "cpu"
    assert devices_info([torch.device("cpu"), torch.device("cpu")]) == \
        {"device": "cpu", "gpu": None}
    with pytest.raises(ConfigError, match="--device=None is invalid"):
        check_device_spec("--device", None)


def test_a_gpu_run_records_whether_it_may_round_through_tf32(monkeypatch):
    # on a GPU float32 products and convolutions may use TF32 (PyTorch's defaults: off for
    # products, on for cuDNN convolutions); the summary says which, read from the process
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Some GPU")
    gpu = torch.device("cuda:0")
    # torch.backends' flags are module proxies that monkeypatch cannot restore: by hand
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True
        assert device_info(gpu) == {"device": "cuda:0", "gpu": "Some GPU",
                                    "tf32": {"matmul": False, "convolutions": True}}
        assert devices_info([torch.device("cpu"), gpu]) == {
            "device": "cpu, cuda:0", "gpu": "Some GPU",
            "tf32": {"matmul": False, "convolutions": True}}
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = True, False
        assert device_info(gpu)["tf32"] == {"matmul": True, "convolutions": False}
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    assert "tf32" not in device_info(torch.device("cpu"))


# ------------------------------------------------------------------- list and show


def test_list_and_show_say_which_experiments_want_a_gpu(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "GPU" in out.splitlines()[1]
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("safari-fmnist "))
    assert "wanted" in line
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("fedht-default "))
    assert "wanted" not in line
    assert main(["show", "fedmac-table1-fmnist"]) == 0
    out = capsys.readouterr().out
    assert "# Device: wants a GPU (--device cuda): full run about 70 min (3 seeds) on the CPU, " \
           "not measured yet on a GPU." in out
    assert main(["show", "fedht-fig1"]) == 0
    assert "# Device: the CPU is enough" in capsys.readouterr().out


# --------------------------------------------------------------------- checkpoints


def test_checkpoints_are_read_onto_the_cpu_and_placed_like_the_run(monkeypatch, tmp_path):
    """A checkpoint written on a GPU holds CUDA tensors: it is loaded with
    map_location="cpu" (readable without a GPU) and copied onto the run's device."""
    from fedsparse import checkpoints

    data = fs.data.shifted_gaussian(num_clients=4, samples_per_client=10, dim=12,
                                    sparsity=2, seed=0)
    algo = fs.algorithms.fed_iter_ht(sparsity=2, step_size=0.01, local_steps=2)
    ckpt = tmp_path / "run.pt"
    fs.simulate(algo, fs.problems.least_squares(), data, rounds=2, checkpoint=ckpt)
    locations = []
    real = torch.load

    def spy(*args, **kwargs):
        locations.append(kwargs.get("map_location"))
        return real(*args, **kwargs)

    monkeypatch.setattr(checkpoints.torch, "load", spy)
    resumed = fs.simulate(algo, fs.problems.least_squares(), data, rounds=3,
                          checkpoint=ckpt, resume=True, device="cpu")
    assert locations == ["cpu"]
    assert resumed.model.device.type == "cpu" and len(resumed.records) == 3


def test_a_python_experiment_gets_the_device_and_its_summary_records_it(monkeypatch,
                                                                        tmp_path):
    from fedsparse.experiments import registry

    registry.python_experiments()  # the real ones first, so the fake one is not replaced
    seen = []

    def fake(out, *, quick=False, device=None):
        seen.append(device)
        (out / "summary.json").write_text(json.dumps({"title": "fake"}))
        return {}

    monkeypatch.setitem(registry._PYTHON, "fake-device-exp",
                        registry.PythonExperiment("fake-device-exp", fake, "a fake", ""))
    assert main(["run", "fake-device-exp", "--out", str(tmp_path / "a"), "--device",
                 "auto"]) == 0
    assert main(["run", "fake-device-exp", "--out", str(tmp_path / "b")]) == 0
    assert seen == ["auto", None]
    auto = device_info(resolve_device("auto"))
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert (summary["device"], summary["gpu"]) == (auto["device"], auto["gpu"])
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert (summary["device"], summary["gpu"], summary["title"]) == ("cpu", None, "fake")


# ------------------------------------------------------------ device-correct code


@pytest.mark.parametrize("encoding", ["dense", "sparse", "bitmap", "auto"])
def test_payload_sizes_lie_on_the_payload_device(encoding):
    """Counted where the payload is (a CPU count of a GPU payload stopped every SAFARI and
    FedMac round on a GPU); torch's meta device stands in for a GPU here: mixing it with
    a CPU tensor fails as a GPU does."""
    from fedsparse.comm import payload_bytes

    assert payload_bytes(torch.zeros(3, 5, device="meta"), encoding).device.type == "meta"
    cpu = payload_bytes(torch.tensor([[0.0, 1.0, 0.0, 2.0]]), encoding)
    assert cpu.device.type == "cpu" and cpu.dtype == torch.int64


def test_a_dictionary_is_copied_once_per_device():
    from fedsparse.sparsity.dictionaries import Dictionary

    D = Dictionary(torch.eye(4, dtype=torch.float64))
    assert D.matrix_on(torch.device("cpu")) is D.matrix
    meta = D.matrix_on(torch.device("meta"))
    assert meta.device.type == "meta" and D.matrix_on(torch.device("meta")) is meta
    assert D.norms_on(torch.device("meta")).shape == (4,)


def test_a_sweep_over_devices_checks_every_value_before_running(tiny, tmp_path, capsys):
    assert main(["sweep", str(tiny), "--grid", 'device=["cpu", "tpu"]', "--out",
                 str(tmp_path / "s")]) == 2
    assert "at device='tpu': --grid device='tpu' is invalid" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_simulate_takes_auto_and_names_a_bad_device():
    data = fs.data.shifted_gaussian(num_clients=3, samples_per_client=5, dim=6, sparsity=2)
    algo, problem = fs.algorithms.fed_avg(step_size=0.1), fs.problems.least_squares()
    history = fs.simulate(algo, problem, data, rounds=1, device="auto")
    assert history.model.device.type == resolve_device("auto").type
    with pytest.raises(ConfigError, match="device='tpu' is invalid: must be one of"):
        fs.simulate(algo, problem, data, rounds=1, device="tpu")
