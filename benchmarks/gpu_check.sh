#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run (about 7.5 minutes on an H100 before the
# bf16 step was added; that step is untimed).
#
#   PYTHONPATH=src bash benchmarks/gpu_check.sh
#
# from the repository root. Everything goes under "$OUT" if set, else ./gpu-check-out:
# one log per step, the run folders, and SUMMARY.txt (each step's status and time).
# Fashion-MNIST is read where fedsparse looks for it: $FEDSPARSE_DATA/fashion-mnist, or
# /usr/share/datasets/fashion-mnist. A GPU machine without a network needs the four IDX
# files (30 MB) brought along, e.g. copied to gpu-data/fashion-mnist/ in the working
# tree and FEDSPARSE_DATA=$PWD/gpu-data. A machine whose Python lacks one of fedsparse's
# dependencies (tomli-w, say) without pip access needs its wheel brought along too,
# installed with pip install --no-index --target DIR and DIR added to PYTHONPATH.
#
# Steps, most important first; each has its own time limit and the whole script stops
# starting new steps after BUDGET seconds (default 540). STEPS, an extended regular
# expression, runs only the steps whose names it matches (STEPS='battery|bench-models').
#   1. the CPU/GPU battery: python -m pytest -m gpu tests/gpu -q; then (step "syncs") its
#      tests that a round's host-device synchronisations grow neither with the clients
#      nor with their local steps, each case's count and sites printed
#   2. safari-fmnist --quick and fedmac-table1-fmnist --quick, on the GPU and on the CPU,
#      and their printed tables compared (numbers to a relative 1e-3 or one unit of
#      their last printed digit: these runs are float32, where the two devices round
#      differently)
#   3. benchmarks/bench_models.py --device cuda and benchmarks/bench_fedmac.py --device cuda,
#      both with --profile (host- or device-bound: benchmarks/profile_round.py), then
#      bench_models.py --bf16 --quick (every target with the opt-in bfloat16 forward), and
#      benchmarks/bench_models_grad.py --device cuda (the neural paths side by side)
#   4. benchmarks/bench_scale.py --device cuda: the scale cases at 10^4, 10^5 and 10^6 clients,
#      then FedMac's personal models in memory and on disk (--client-state)

set -u
ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu-check-out}
BUDGET=${BUDGET:-540}
STEPS=${STEPS:-.}
PYTHON=${PYTHON:-$(command -v python || command -v python3)}
mkdir -p "$OUT"
SUMMARY="$OUT/SUMMARY.txt"
: > "$SUMMARY"
START=$(date +%s)

note() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME LIMIT COMMAND...: run COMMAND with at most LIMIT seconds (less if the budget
# is nearly spent), its output in $OUT/NAME.log
step() {
    local name=$1 limit=$2
    shift 2
    echo "$name" | grep -Eq -- "$STEPS" || return 0
    local left=$((BUDGET - ($(date +%s) - START)))
    if [ "$left" -lt 20 ]; then
        note "SKIPPED  $name (the ${BUDGET}s budget is spent)"
        return 0
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    local tic=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    local secs=$(($(date +%s) - tic))
    if [ $rc -eq 0 ]; then
        note "ok       $name (${secs}s)"
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        note "TIMEOUT  $name (limit ${limit}s; see $name.log)"
    else
        note "FAILED   $name (exit $rc after ${secs}s; see $name.log)"
    fi
    return 0
}

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || true
    "$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'available', torch.cuda.is_available(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
} > "$OUT/environment.txt" 2>&1
note "$(tail -n 1 "$OUT/environment.txt")"
# fedsparse must import (PYTHONPATH=src, and its dependencies, e.g. tomli-w, installed or
# carried as wheels); otherwise every step below would fail the same way
if ! "$PYTHON" -c "import fedsparse" >> "$OUT/environment.txt" 2>&1; then
    note "FAILED   import fedsparse (see environment.txt): nothing else was run"
    exit 1
fi

# 1. the battery, then its census of a round's synchronisations (printed: -s)
step battery 300 "$PYTHON" -m pytest -m gpu tests/gpu -q -p no:cacheprovider -rs \
    --durations=10 -k "not synchronisation"
step syncs 150 "$PYTHON" -m pytest -m gpu tests/gpu/test_cuda_battery.py -q -s \
    -p no:cacheprovider -k synchronisation

# 2. the two quick experiments on both devices, then their tables compared
for exp in safari-fmnist fedmac-table1-fmnist; do
    for dev in cuda cpu; do
        step "$exp-$dev" 90 "$PYTHON" -m fedsparse run "$exp" --quick --device "$dev" \
            --quiet --out "$OUT/runs/$exp-$dev"
    done
    if [ -s "$OUT/$exp-cuda.log" ] && [ -s "$OUT/$exp-cpu.log" ]; then
        step "$exp-compare" 30 "$PYTHON" - "$OUT/$exp-cpu.log" "$OUT/$exp-cuda.log" <<'EOF'
"""Compare two printed outputs of one experiment: the same lines, the same words, the
numbers within a relative 1e-3 or one unit of their last printed decimal (float32 runs
round differently on the two devices: an accuracy one test example apart can print
2.19 on one and 2.20 on the other); timings and output folders are not compared."""
import re
import sys

NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
SKIP = re.compile(r"seconds|elapsed|->|wrote |\b\d+(?:\.\d+)?\s*(?:s|ms|min)\b")
RTOL = 1e-3


def last_digit(number):
    """One unit of the last decimal printed in ``number`` (0 for an integer)."""
    mantissa, _, exponent = number.lower().partition("e")
    if "." not in mantissa:
        return 0.0
    return 10.0 ** (int(exponent or 0) - len(mantissa.split(".")[1]))


def lines(path):
    return [l.rstrip() for l in open(path, encoding="utf-8", errors="replace")
            if l.strip() and not SKIP.search(l)]


cpu, gpu = lines(sys.argv[1]), lines(sys.argv[2])
bad, worst = [], 0.0
if len(cpu) != len(gpu):
    bad.append(f"{len(cpu)} lines on the CPU, {len(gpu)} on the GPU")
for a, b in zip(cpu, gpu):
    na, nb = NUMBER.findall(a), NUMBER.findall(b)
    if NUMBER.sub("#", a) != NUMBER.sub("#", b) or len(na) != len(nb):
        bad.append(f"cpu: {a}\ngpu: {b}")
        continue
    for x, y in zip(na, nb):
        unit = max(last_digit(x), last_digit(y))
        x, y = float(x), float(y)
        gap = abs(x - y) / max(abs(x), abs(y), 1e-12)
        worst = max(worst, gap)
        if gap > RTOL and abs(x - y) > unit * (1 + 1e-9):
            bad.append(f"cpu: {a}\ngpu: {b}\n  ({x} vs {y}: relative {gap:.2g})")
            break
print(f"{len(cpu)} lines compared; largest relative difference {worst:.3g}")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
EOF
    fi
done

# 3. the speed benchmarks on the GPU (they print their targets as met / MISSED)
step bench-models 150 "$PYTHON" benchmarks/bench_models.py --device cuda --profile
step bench-fedmac 90 "$PYTHON" benchmarks/bench_fedmac.py --device cuda --profile
step bench-models-bf16 120 "$PYTHON" benchmarks/bench_models.py --device cuda --bf16 --quick
step bench-paths 120 "$PYTHON" benchmarks/bench_models_grad.py --device cuda
step bench-scale 200 "$PYTHON" benchmarks/bench_scale.py --device cuda --sizes 10000 100000 1000000
step bench-scale-state 90 "$PYTHON" benchmarks/bench_scale.py --device cuda --client-state

note "total $(($(date +%s) - START))s; logs in $OUT"
grep -h "met\|MISSED" "$OUT"/bench-*.log 2>/dev/null | tee -a "$SUMMARY" || true
