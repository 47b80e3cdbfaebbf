"""docs/gpu.md and the round times in docs/results/gpu-runs.md say what the logs of the
GPU runs they quote (docs/results/runs/gpu-check-h100*/) say."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "docs" / "results" / "runs"
FIRST, SECOND, THIRD = (RUNS / name for name in
                        ("gpu-check-h100", "gpu-check-h100-2", "gpu-check-h100-3"))
PAGE = (ROOT / "docs" / "gpu.md").read_text(encoding="utf-8")
RUNS_PAGE = (ROOT / "docs" / "results" / "gpu-runs.md").read_text(encoding="utf-8")
#: The page with every run of white space one space (its prose wraps anywhere).
PROSE = " ".join(PAGE.split())


def _log(run: Path, name: str) -> str:
    return (run / name).read_text(encoding="utf-8")


def _row(label: str) -> str:
    """The page's table row that starts with ``label``."""
    rows = [line for line in PAGE.splitlines() if line.startswith(f"| {label}")]
    assert len(rows) == 1, f"{len(rows)} rows start with {label!r}"
    return rows[0]


def _counts(run: Path) -> dict[str, int]:
    """The battery's passed, failed and skipped counts (0 where none)."""
    last = _log(run, "battery.log").splitlines()[-1]
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (failed|passed|skipped)", last)}
    return {k: counts.get(k, 0) for k in ("passed", "failed", "skipped")}


def test_the_runs_table_gives_each_run_its_logs_and_time():
    for run, label in ((FIRST, "first"), (SECOND, "second")):
        total = re.search(r"^total (\d+)s", _log(run, "SUMMARY.txt"), flags=re.M).group(1)
        assert f"all ({total} s) | [`{run.name}/`](results/runs/{run.name}/) |" in \
            _row(label)
    assert f"[`{THIRD.name}/`](results/runs/{THIRD.name}/) |" in _row("third")
    for run in (FIRST, SECOND, THIRD):
        assert "NVIDIA H100 80GB HBM3" in _log(run, "environment.txt")


def test_the_battery_passes_on_the_second_and_third_runs():
    second, third = _counts(SECOND), _counts(THIRD)
    assert second == third and second["failed"] == 0
    assert f"**{second['passed']} passed, 0 failed** both times " \
           f"({second['skipped']} skipped" in PROSE


def test_the_first_battery_counts_and_failures():
    log = _log(FIRST, "battery.log")
    counts = _counts(FIRST)
    assert f"The first run gave {counts['passed']} passed and {counts['failed']} failed" \
        in PROSE
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
BIG = re.compile(r"MLP, 10,000 clients \(client_batch=(\d+)\): (\d+) ms")


def _timings(text: str) -> dict[str, tuple]:
    """Each benchmark's (fedsparse, loop, speed-up, bound, ratio), by its SPEED_ROWS key."""
    found, heading = {}, ""
    for line in text.splitlines():
        if not line.startswith(" "):
            heading = line
        times = TIMES.match(line)
        if times:
            (name,) = [k for k in SPEED_ROWS if heading.startswith(k)]
            found[name] = times.groups()
    return found


def _cells(label: str) -> list[str]:
    return [c.strip() for c in _row(label).split("|")[2:-1]]


def test_the_speed_table():
    text = _log(THIRD, "bench-models.log") + _log(SECOND, "bench-fedmac.log")
    now, vmap = _timings(text), _timings(_log(SECOND, "bench-models.log"))
    assert set(now) == set(SPEED_ROWS) and set(vmap) == set(SPEED_ROWS) - {"FedMac round"}
    for name, (ours, loop, speedup, bound, ratio) in now.items():
        cells = _cells(SPEED_ROWS[name])
        assert cells[0] == f"{ours} ms" and cells[3] == f"{bound} ms", name
        assert cells[4] == ratio, name
        if loop:
            assert cells[1] == f"{loop} ms", name
            assert cells[2] == f"{float(speedup):.1f}", name
        assert cells[6] == (f"{vmap[name][0]} ms" if name in vmap else ""), name
    chunk, big = BIG.search(text).groups()
    cells = _cells(f"MLP, 10,000 clients (in chunks of {int(chunk):,})")
    assert cells[0] == f"{big} ms"
    assert cells[6] == f"{BIG.search(_log(SECOND, 'bench-models.log')).group(2)} ms"
    missed = len(re.findall(r"^\s+MISSED ", text, flags=re.M))
    targets = missed + len(re.findall(r"^\s+met ", text, flags=re.M))
    words = {5: "Five", 10: "ten"}
    assert f"{words[missed]} of the {words[targets]} targets were missed" in PAGE
    mlp = "MLP 784-100-10"
    assert f"its {vmap[mlp][0]} against {now[mlp][0]} ms is the spread" in PROSE
    convolutional = [float(now[k][0]) / float(vmap[k][0]) for k in
                     ("small CNN", "ResNet-20 (batch norm)", "ResNet-20 (group norm)",
                      "SAFARI's round")]
    assert f"the stacked path took {min(convolutional):.2f} to {max(convolutional):.2f} " \
           "of vmap's time" in PROSE


PATHS = re.compile(r"^(.+?)\s+S=(\d+)\s+b=(\d+)\s+vmap\s+([\d.]+) ms\s+loop\s+([\d.]+) ms"
                   r"(?:\s+stacked\s+([\d.]+) ms)?\s+loop/vmap\s+([\d.]+)\s+fastest: (\w+)"
                   r"\s+rule: (\w+)$", flags=re.M)


def test_the_paths_and_the_rule_that_follows():
    rows = PATHS.findall(_log(THIRD, "bench-paths.log"))
    stacks = [r for r in rows if r[5]]
    assert f"one gradient call of each path in {len(rows)} shapes" in PROSE
    assert f"In all {len(stacks)} where the network stacks" in PROSE
    assert all(r[7] == "stacked" == r[8] for r in stacks)  # the fastest, and the rule's
    ratios = [float(r[5]) / float(r[3]) for r in stacks]
    assert f"at {min(ratios):.2f} to {max(ratios):.2f} of vmap's time" in PROSE
    loop = [r[6] for r in rows]
    assert f"the per-client loop was {min(loop, key=float)} to " \
           f"{float(max(loop, key=float)):.0f} times slower than vmap" in PROSE
    (small,) = [r for r in stacks if r[0].startswith("ResNet-20 BN, 1 x 8 x 8")
                and (r[1], r[2]) == ("20", "4")]
    assert f"(8 x 8, 20 clients of 4: stacked {small[5]} ms, vmap {small[3]} ms)" in PROSE
    side = dict(re.findall(r"^\s+(small CNN|ResNet-20 \(\w+ norm\)), (?:100 clients, )?"
                           r"fedsparse paths: vmap ([\d.]+ ms, stacked [\d.]+) ms",
                           _log(SECOND, "bench-models.log"), flags=re.M))
    assert f"small CNN vmap {side['small CNN']} ms" in PROSE
    for norm in ("batch", "group"):
        vmap, stacked = side[f"ResNet-20 ({norm} norm)"].split(" ms, stacked ")
        assert f"{norm} norm {vmap} and {stacked} ms" in PROSE
    safari = _safari_paths(SECOND)
    assert f"SAFARI's round {safari['vmap']} and {safari['stacked']} ms" in PROSE
    rounds = float(safari["stacked"]) / float(safari["vmap"])
    assert f"SAFARI's benchmark round took {rounds:.2f} of its vmap time" in PROSE


def _safari_paths(run: Path) -> dict[str, str]:
    line = re.search(r"SAFARI's round, fedsparse's paths.*$", _log(run, "bench-models.log"),
                     flags=re.M).group(0)
    return dict((k, v) for k, v in re.findall(r"(?:: |, )((?:vmap|stacked)(?:, TF32)?) "
                                             r"([\d.]+) ms", line))


def _profile(run: Path, name: str) -> tuple[int, str, int]:
    """(operators, device busy in ms, busy % of the wall clock) of the first profile."""
    ops, busy, share = re.search(r"profiled call: .*?, ([\d,]+) aten operators, device busy "
                                 r"([\d.]+) ms \((\d+)% of the wall clock\)",
                                 _log(run, name)).groups()
    return int(ops.replace(",", "")), busy, int(share)


def test_where_the_time_goes():
    ops, _, share = _profile(THIRD, "bench-models.log")
    before, _, _ = _profile(SECOND, "bench-models.log")
    assert f"busy for {share}% of the wall clock under the profiler ({ops:,} operators; " \
           f"{before:,} on vmap)" in PROSE
    backward = re.search(r"aten::convolution_backward(?:\s+\S+){5}\s+\S+\s+([\d.]+)%",
                         _log(THIRD, "bench-models.log")).group(1)
    assert f"convolution backward is {float(backward):.0f}% of the GPU's time" in PROSE
    tuned = _safari_paths(THIRD)
    assert f"({tuned['stacked']} ms without, {tuned['stacked, TF32']} ms with)" in PROSE
    bound = _timings(_log(THIRD, "bench-models.log"))["SAFARI's round"][3]
    assert f"the bound itself, {float(bound):.0f} ms in float32" in PROSE
    ops, busy, share = _profile(SECOND, "bench-fedmac.log")
    assert f"busy {share}% of the wall clock ({ops:,} operators for {busy} ms of GPU " \
           "time)" in PROSE
    ours, loop = (float(t) for t in _timings(_log(SECOND, "bench-fedmac.log"))
                  ["FedMac round"][:2])
    assert f"the 20x target needs about {loop / 20:.1f} ms" in PROSE
    assert f"about {100 * (1 - loop / 20 / ours):.0f}% fewer operators" in PROSE


def test_the_scale_table():
    rows = re.findall(r"^(\S+)\s+N=\s*([\d,]+) S=\s*([\d,]+)\s+([\d.]+) s/round\s+([\d.]+) "
                      r"ms/client\s+peak\s+([\d.]+) GiB \(GPU ([\d.]+) GiB\)",
                      _log(SECOND, "bench-scale.log"), flags=re.M)
    labels = {"fedavg-linear": "FedAvg, linear", "fediterht-linear": "FedIter-HT, linear",
              "fedavg-mlp": "FedAvg, 1,430-parameter MLP"}
    assert len(rows) == 9
    for case, n, s, seconds, per_client, peak, gpu in rows:
        power = {"10,000": "10^4", "100,000": "10^5", "1,000,000": "10^6"}[n]
        row = f"| {labels[case]} | {power} | {s} | {seconds} | {per_client} | {peak} GiB | " \
              f"{gpu} GiB |"
        assert row in PAGE


def _medians(runs: dict) -> dict[str, float]:
    """Each run's median round time over rounds 2-6 (round 1 carries the start-up)."""
    return {name: statistics.median(times[1:]) for name, times in runs.items()}


@pytest.fixture(scope="module")
def round_times():
    return json.loads((FIRST / "round-times.json").read_text())["experiments"]


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
    scale = _log(SECOND, "bench-scale.log")
    ratios = [float(r) for r in re.findall(r"at N=1,000,000 / at N=10,000 = ([\d.]+) "
                                           r"\(target <= 2\): met", scale)]
    assert len(ratios) == 3
    assert f"is {min(ratios):.2f} to {max(ratios):.2f} times that at 10^4" in PROSE
    peaks = [float(p) for p in re.findall(r"peak memory at N=1,000,000 ([\d.]+) GiB "
                                          r"\(target < 4 GiB\): met", scale)]
    assert len(peaks) == 3
    assert f"the peak at 10^6 is {min(peaks):.2f} to {max(peaks):.2f} GiB" in PROSE
    # scale.md quotes the same figures beside the CPU's
    gpu = max(float(g) for g in re.findall(r"N=1,000,000 .* \(GPU ([\d.]+) GiB\)", scale))
    scale_page = " ".join((ROOT / "docs" / "scale.md").read_text(encoding="utf-8").split())
    assert f"the time per sampled client at 10^6 is {min(ratios):.2f} to " \
           f"{max(ratios):.2f} times that at 10^4, the peak {min(peaks):.2f} to " \
           f"{max(peaks):.2f} GiB of host memory and at most {gpu:.2f} GiB of the GPU's" \
           in scale_page
    state = _log(SECOND, "bench-scale-state.log")
    at = {f"{case} {where}".strip(): seconds for case, where, seconds in re.findall(
        r"^(fedavg-mlp|fedmac-mlp) N=\s*100,000 S=\s*1,000\s+(in memory|on disk)?\s*"
        r"([\d.]+) s/round", state, flags=re.M)}
    assert f"FedAvg {at['fedavg-mlp']} s a round" in PROSE
    assert f"FedMac with the models in memory {at['fedmac-mlp in memory']} s, on disk " \
           f"{at['fedmac-mlp on disk']} s" in PROSE
    assert "the same records in memory and on disk: yes" in state
    memory, disk = re.search(r"adds ([\d.]+) GiB in memory, ([\d.]+) GiB on disk",
                             state).groups()
    assert f"adds {memory} GiB to FedAvg's peak in memory and {disk} GiB on disk" in PROSE


def _differences(run: Path, name: str) -> list[tuple[str, str]]:
    """The (CPU, GPU) pairs of printed numbers that differ, in order, the output folder's
    lines and timings aside."""
    cpu, gpu = ([line for line in _log(run, f"{name}-{device}.log").splitlines()
                 if "/tmp/" not in line and " rounds in " not in line]
                for device in ("cpu", "cuda"))
    assert len(cpu) == len(gpu)
    number = re.compile(r"\d+\.\d+")
    return [(x, y) for a, b in zip(cpu, gpu, strict=True) if a != b
            for x, y in zip(number.findall(a), number.findall(b), strict=True) if x != y]


def test_the_quick_runs_on_both_devices():
    for run in (SECOND, THIRD):
        for name in ("fedmac-table1-fmnist", "safari-fmnist"):
            lines = re.search(r"(\d+) lines compared", _log(run, f"{name}-compare.log"))
            assert f"`{name}`: {lines.group(1)} lines" in PAGE
        assert _differences(run, "fedmac-table1-fmnist") == []
        assert _differences(run, "safari-fmnist") == [
            ("0.5761", "0.5762"), ("0.5733", "0.5732"), ("2.19", "2.20")]
    assert "accuracy 0.5761 on the CPU and 0.5762 on the GPU, accuracy 0.5733 and 0.5732, " \
           "and the jitter (the mean change of test accuracy from round to round) 2.19 " \
           "and 2.20" in PROSE
    # the first run's records: the jitter's difference was one round's test accuracy,
    # one test example of 2,000
    cpu, gpu = ([json.loads(line)["test_accuracy"] for line in
                 _log(FIRST, f"safari-fmnist-{d}-p06-no-compensation.jsonl").splitlines()]
                for d in ("cpu", "cuda"))
    differ = [r for r, (a, b) in enumerate(zip(cpu, gpu, strict=True)) if abs(a - b) > 1e-9]
    assert len(differ) == 1 and abs(cpu[differ[0]] - gpu[differ[0]]) == pytest.approx(1 / 2000)
    assert "came from a single round whose test accuracies were one test example of 2,000 " \
           "apart" in PROSE


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
