"""docs/gpu.md and the round times in docs/results/gpu-runs.md say what the logs of the
GPU run they quote (docs/results/runs/gpu-check-h100/) say."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "docs" / "results" / "runs" / "gpu-check-h100"
PAGE = (ROOT / "docs" / "gpu.md").read_text(encoding="utf-8")
RUNS_PAGE = (ROOT / "docs" / "results" / "gpu-runs.md").read_text(encoding="utf-8")
#: The page with every run of white space one space (its prose wraps anywhere).
PROSE = " ".join(PAGE.split())


def _log(name: str) -> str:
    return (RUN / name).read_text(encoding="utf-8")


def _row(label: str) -> str:
    """The page's table row that starts with ``label``."""
    rows = [line for line in PAGE.splitlines() if line.startswith(f"| {label}")]
    assert len(rows) == 1, f"{len(rows)} rows start with {label!r}"
    return rows[0]


def test_the_battery_counts_and_failures():
    log = _log("battery.log")
    counts = dict((k, int(n)) for n, k in re.findall(r"(\d+) (failed|passed|skipped)",
                                                      log.splitlines()[-1]))
    assert f"**{counts['passed']} passed, {counts['failed']} failed**" in PAGE
    assert f"({counts['skipped']} skipped" in PAGE
    failed = re.findall(r"^_+ test_every_case_gives_the_same_result_on_the_gpu"
                        r"\[cpu-cuda-(.+?)\] _+$", log, flags=re.M)
    assert len(failed) == counts["failed"]
    resnet = [f for f in failed if "resnet20_batch" in f]
    solve = [f for f in failed if f.startswith("fed_grad_mp-") and
             f.split("-")[1] in ("logistic", "softmax")]
    fit = [f for f in failed if f.startswith("fed_grad_mp-least_squares")]
    assert len(resnet) + len(solve) + len(fit) == len(failed)
    gaps = dict(zip(failed, (_gap(block) for block in re.split(
        r"^_+ test_every_case_gives_the_same_result_on_the_gpu.*$", log, flags=re.M)[1:]),
        strict=True))
    row = _row(f"{len(resnet)}: ")
    assert "ResNet-20 with batch norm" in row
    low, high = min(gaps[f][0] for f in resnet), max(gaps[f][0] for f in resnet)
    assert f"apart by a relative {low:.2g} to {high:.2g} (Per-FedAvg)" in row
    assert max(resnet, key=lambda f: gaps[f][0]).startswith("per_fedavg-")
    first, second = (f"{100 * gaps[f][0]:.0f}%" for f in sorted(solve))  # logistic, softmax
    assert f"models {first} and {second} apart" in _row(f"{len(solve)}: FedGradMP on logistic")
    row = _row(f"{len(fit)}: FedGradMP on least squares")
    assert all(gaps[f][1] < 2e-32 for f in fit) and "objectives below 2e-32" in row
    assert f"apart by up to {100 * max(gaps[f][0] for f in fit):.0f}% of themselves" in row


def _gap(block: str) -> tuple[float, float]:
    """(relative difference, larger magnitude) of the first comparison a failure reports:
    a model's relative difference (magnitude: inf), or two floats of a record."""
    model = re.search(r"AssertionError: final model: relative difference (\S+) >", block)
    if model:
        return float(model.group(1)), float("inf")
    a, b = map(float, re.search(r"AssertionError: round \d+, \w+: (\S+) vs (\S+)$", block,
                                flags=re.M).groups())
    return abs(a - b) / max(abs(a), abs(b)), max(abs(a), abs(b))


#: The page's row label of the benchmark whose heading in the logs starts with the key.
SPEED_ROWS = {"MLP 784-100-10": "MLP 784-100-10, 100 clients", "small CNN": "small CNN",
              "ResNet-20 (batch norm)": "ResNet-20 batch norm",
              "ResNet-20 (group norm)": "ResNet-20 group norm",
              "SAFARI's round": "SAFARI's round", "FedMac round": "FedMac"}
TIMES = re.compile(r"^\s+fedsparse\s+([\d.]+) ms(?: \| per-client loop\s+([\d.]+) ms "
                   r"\(\s*([\d.]+)x faster\))? \| merged-batch bound\s+([\d.]+) ms "
                   r"\(\s*([\d.]+)x the bound\)")


def test_the_speed_table():
    text = _log("bench-models.log") + _log("bench-fedmac.log")
    seen, heading = set(), ""
    for line in text.splitlines():
        if not line.startswith(" "):
            heading = line
        times = TIMES.match(line)
        if not times:
            continue
        (name,) = [k for k in SPEED_ROWS if heading.startswith(k)]
        seen.add(name)
        ours, loop, speedup, bound, ratio = times.groups()
        cells = [c.strip() for c in _row(SPEED_ROWS[name]).split("|")[2:7]]
        assert cells[0] == f"{ours} ms" and cells[3] == f"{bound} ms", name
        assert cells[4] == ratio, name
        if loop:
            assert cells[1] == f"{loop} ms", name
            assert cells[2] == f"{float(speedup):.1f}", name
    assert seen == set(SPEED_ROWS)
    chunk, big = re.search(r"MLP, 10,000 clients \(client_batch=(\d+)\): (\d+) ms",
                           text).groups()
    assert _row(f"MLP, 10,000 clients (in chunks of {int(chunk):,})").startswith(
        f"| MLP, 10,000 clients (in chunks of {int(chunk):,}) | {big} ms |")
    missed = len(re.findall(r"^\s+MISSED ", text, flags=re.M))
    targets = missed + len(re.findall(r"^\s+met ", text, flags=re.M))
    words = {5: "five", 10: "ten"}
    assert f"{words[missed]} of the {words[targets]} targets were missed" in PAGE


def test_the_scale_table():
    rows = re.findall(r"^(\S+)\s+N=\s*([\d,]+) S=\s*([\d,]+)\s+([\d.]+) s/round\s+([\d.]+) "
                      r"ms/client\s+peak\s+([\d.]+) GiB \(GPU ([\d.]+) GiB\)",
                      _log("bench-scale.log"), flags=re.M)
    labels = {"fedavg-linear": "FedAvg, linear", "fediterht-linear": "FedIter-HT, linear",
              "fedavg-mlp": "FedAvg, 1,430-parameter MLP"}
    assert len(rows) == 6
    for case, n, s, seconds, per_client, peak, gpu in rows:
        power = {"10,000": "10^4", "100,000": "10^5"}[n]
        row = f"| {labels[case]} | {power} | {s} | {seconds} | {per_client} | {peak} GiB | " \
              f"{gpu} GiB |"
        assert row in PAGE


def _medians(runs: dict) -> dict[str, float]:
    """Each run's median round time over rounds 2-6 (round 1 carries the start-up)."""
    return {name: statistics.median(times[1:]) for name, times in runs.items()}


@pytest.fixture(scope="module")
def round_times():
    return json.loads((RUN / "round-times.json").read_text())["experiments"]


def test_the_safari_round_time(round_times):
    runs = round_times["safari-paper-fig2"]
    later = [t for times in runs.values() for t in times[1:]]
    median = statistics.median(later)
    quoted = f"median {median:.3f} s a round ({min(later):.2f} to {max(later):.2f} s"
    assert quoted in RUNS_PAGE
    assert f"median {median:.3f} s a round" in PAGE
    # each figure's time: its rounds times that median, in minutes
    for runs_x_seeds_x_rounds, minutes in re.findall(
            r"`fedsparse run safari-paper-\S+ --device cuda` \| (\d+ x \d+ x \d+) \| "
            r"(\d+) min \|", RUNS_PAGE):
        rounds = eval(runs_x_seeds_x_rounds.replace("x", "*"))  # "5 x 3 x 300"
        assert int(minutes) == round(rounds * median / 60)


def test_the_vgg_round_time(round_times):
    medians = _medians(round_times["fedmac-table1-vgg"])
    together = sum(medians.values())
    assert f"{together:.2f} s for the six together" in RUNS_PAGE
    assert f"{together:.2f} s a round" in PAGE
    assert f"median {min(medians.values()):.2f} (HeurFedAMP) to " \
           f"{max(medians.values()):.2f} s (Per-FedAvg)" in RUNS_PAGE
    assert f"waits for a GPU: {round(3 * 800 * together / 60)} min" in RUNS_PAGE


def test_the_scale_ratios_and_the_client_state():
    ratios = [float(r) for r in re.findall(r"at N=10,000 = ([\d.]+) \(target <= 2\)",
                                           _log("bench-scale.log"))]
    assert f"is {min(ratios):.2f} to {max(ratios):.2f} times that at 10^4" in PROSE
    state = _log("bench-scale-state.log")
    at = {f"{case} {where}".strip(): seconds for case, where, seconds in re.findall(
        r"^(fedavg-mlp|fedmac-mlp) N=\s*100,000 S=\s*1,000\s+(in memory|on disk)?\s*"
        r"([\d.]+) s/round", state, flags=re.M)}
    assert f"FedAvg {at['fedavg-mlp']} s a round" in PROSE
    assert f"FedMac with the models in memory {at['fedmac-mlp in memory']} s, on disk " \
           f"{at['fedmac-mlp on disk']} s" in PROSE
    memory, disk = re.search(r"adds ([\d.]+) GiB in memory, ([\d.]+) GiB on disk",
                             state).groups()
    assert f"adds {memory} GiB to FedAvg's peak in memory and {disk} GiB on disk" in PROSE


def test_the_small_cnn_paths():
    vmap, stacked = re.search(r"fedsparse paths: vmap ([\d.]+) ms, stacked ([\d.]+) ms",
                              _log("bench-models.log")).groups()
    assert f"vmap {vmap} ms, stacked {stacked} ms" in PROSE
    assert f"stacked would be {float(vmap) / float(stacked):.1f} times faster" in PROSE


def test_the_quick_runs_on_both_devices():
    for name in ("fedmac-table1-fmnist", "safari-fmnist"):
        lines = re.search(r"(\d+) lines compared", _log(f"{name}-compare.log")).group(1)
        assert f"`{name}`: {lines} lines" in PAGE
    cpu, gpu = ([json.loads(line)["test_accuracy"] for line in
                 _log(f"safari-fmnist-{d}-p06-no-compensation.jsonl").splitlines()]
                for d in ("cpu", "cuda"))
    differ = [r for r, (a, b) in enumerate(zip(cpu, gpu, strict=True)) if abs(a - b) > 1e-9]
    assert len(differ) == 1
    r = differ[0]
    assert f"{100 * cpu[r]:.2f}% and {100 * gpu[r]:.2f}% in round {r}" in PROSE
    assert "2.19 on the CPU and 2.20 on the GPU" in PROSE
    assert "no compensation: 54.03 ± 0.00 (n=1) / 48.25 ± 0.00 (n=1) / 2.19" in \
        _log("safari-fmnist-cpu.log")


def test_fedsparse_list_says_the_same_gpu_times():
    """``fedsparse list`` and ``show`` give each paper-scale run the time gpu-runs.md
    computes from the timed rounds."""
    from fedsparse.experiments.registry import INFO

    quoted = dict(re.findall(r"`fedsparse run (\S+) --device cuda` \| [\dx ]+ \| "
                             r"(?:waits for a GPU: )?(\d+) min \|", RUNS_PAGE))
    assert len(quoted) == 6
    for name, minutes in quoted.items():
        assert INFO[name].gpu_runtime == f"{minutes} min on an H100, estimated", name
    safari = [int(m) for n, m in quoted.items() if n.startswith("safari-")]
    page = " ".join((ROOT / "docs" / "results" / "safari.md").read_text().split())
    assert f"({min(safari)} to {max(safari)} minutes, from timed rounds)" in page
