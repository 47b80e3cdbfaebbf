#!/usr/bin/env bash
# Run one benchmark script RUNS times back to back and keep what it printed, for the CPU
# timings the docs quote (benchmarks/logs/cpu/; tests/test_speed_logs.py checks the pages
# against these logs).
#
#   bash benchmarks/cpu_logs.sh LOG RUNS SCRIPT [ARGS...]
#   bash benchmarks/cpu_logs.sh benchmarks/logs/cpu/bench_fedht.txt 3 benchmarks/bench_fedht.py
#
# from the repository root; the script runs as `PYTHONPATH=src python SCRIPT ARGS` (the
# checkout's fedsparse; $PYTHON if set, else the python on PATH). LOG is written afresh:
# a header with the command, the date, the commit, the torch version and the CPU count,
# then per run its start time and 1-minute load average (the machine may be shared: the
# load says how busy it was), the script's output and its exit status. Run it without
# `nice`: the numbers are timings.

set -u
if [ $# -lt 3 ]; then
    echo "usage: bash benchmarks/cpu_logs.sh LOG RUNS SCRIPT [ARGS...]" >&2
    exit 2
fi
LOG=$1 RUNS=$2
shift 2
case $RUNS in
    ''|*[!0-9]*|0) echo "cpu_logs.sh: RUNS must be a whole number >= 1, got '$RUNS'" >&2
                   exit 2 ;;
esac
PYTHON=${PYTHON:-$(command -v python || command -v python3)}
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$(dirname "$LOG")"

load() { cut -d' ' -f1 /proc/loadavg; }

{
    echo "# command: PYTHONPATH=src python $*"
    echo "# runs: $RUNS, back to back"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    # (the logs themselves are left out: this one is being rewritten)
    echo "# commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src benchmarks \
        ':!benchmarks/logs' || echo ' (with uncommitted changes under src/ or benchmarks/)')"
    echo "# torch: $("$PYTHON" -c 'import torch; print(torch.__version__)')"
    echo "# cpus: $(nproc)"
} > "$LOG"
status=0
for i in $(seq 1 "$RUNS"); do
    echo "## run $i of $RUNS: started $(date -u +%H:%M:%SZ), load average (1 min) $(load)" \
        >> "$LOG"
    tic=$(date +%s)
    "$PYTHON" "$@" >> "$LOG" 2>&1
    rc=$?
    [ $rc -ne 0 ] && status=$rc
    echo "## run $i of $RUNS: exit $rc after $(($(date +%s) - tic)) s, load average (1 min)" \
         "$(load)" >> "$LOG"
done
exit $status
