#!/usr/bin/env bash
# Every GPU measurement of the project in one run sized for about 9 minutes of a GPU machine (an H200 with 16
# cores was the model): bench_gpu.py's arms (reading with nvJPEG and the CPU workers, train.py at steady state with
# where its data wait goes, prediction at steady state with its stages), then bench_time_to_accuracy.py (cache,
# on the fly, baseline; each arm stopped after --time-limit s of training). Each script runs under a timeout, its
# output is recorded into benchmarks/results/NAME.json and docs/performance.md (run_all.py --record) even when it
# was cut short, and copied into $OUT when that is set (the device machine's folder that comes back). A --quick
# dry run records into $OUT/dry-run (or benchmarks/results/session/dry-run) instead, leaving the results alone.
#
#   bash benchmarks/gpu_session.sh            # on the GPU machine, from the repository root
#   bash benchmarks/gpu_session.sh --quick    # the same steps at the scripts' --quick sizes, --device cpu: a dry run
#
# Sizes: GPU_ARGS and TTA_ARGS replace each script's arguments; GPU_TIMEOUT and TTA_TIMEOUT (s) bound each one.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python}
RECORD=benchmarks   # run_all.py --record writes RECORD/results/NAME.json (and, for benchmarks/, the reports)
if [ "${1:-}" = "--quick" ]; then
    RECORD=${OUT:-benchmarks/results/session}/dry-run   # a dry run's figures stay out of the project's results
    GPU_ARGS=${GPU_ARGS:---quick --device cpu}
    TTA_ARGS=${TTA_ARGS:---quick --device cpu}
else
    GPU_ARGS=${GPU_ARGS:---images 1000 --distinct 48 --epochs 3 --batch-size 12 --profile-steps 10 --read-epochs 2 --predict-pages 12 --repeat 2 --jobs 14}
    TTA_ARGS=${TTA_ARGS:---train-images 480 --distinct 48 --val-images 16 --epochs 40 --eval-every 8 --time-limit 50 --jobs 14}
fi
GPU_TIMEOUT=${GPU_TIMEOUT:-300}   # the two add up to 9 minutes: a device run's limit is 10
TTA_TIMEOUT=${TTA_TIMEOUT:-240}
LOGS=${OUT:-benchmarks/results/session}
mkdir -p "$LOGS"
echo "machine: $(uname -m), $(nproc) cores; $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
describe=$($PY -c "import sys; sys.path.insert(0, 'benchmarks'); import torch; from common import machine; print(
    f'{torch.cuda.get_device_name()} device, ' if torch.cuda.is_available() else 'no GPU, ', end=''); print(
    f'{machine()}, torch {torch.__version__}')")

run() {   # NAME TIMEOUT ARGS...: run benchmarks/bench_NAME.py, record its output (also when cut short)
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout --signal=INT --kill-after=20 "$limit" $PY "benchmarks/bench_$name.py" "$@" 2> >(tee "$LOGS/$name.err" >&2) \
        | tee "$LOGS/$name.txt"
    local status=${PIPESTATUS[0]}
    echo "bench_$name: exit status $status after $((SECONDS - t0)) s" >&2
    $PY benchmarks/run_all.py --record "$name" "$LOGS/$name.txt" --command "python benchmarks/bench_$name.py $*" \
        --machine "$describe" --out "$RECORD" || true
    cp "$RECORD/results/$name.json" "$LOGS/" 2>/dev/null || true
}

# shellcheck disable=SC2086  # the arguments are meant to split
run gpu "$GPU_TIMEOUT" $GPU_ARGS
# shellcheck disable=SC2086
run time_to_accuracy "$TTA_TIMEOUT" $TTA_ARGS
cp docs/performance.md "$LOGS/" 2>/dev/null || true
