#!/usr/bin/env bash
# Every GPU measurement of the project in one run of at most SESSION_SECONDS (540: a device run is cut at 600 s, and
# there may be one try) on a GPU machine (an H200 with 16 cores was the model), the most wanted figures first:
#   1. bench_gpu_augment.py: train.py at steady state on the default cache (pages stored resized, each crop warped at
#      read time) under the baseline's augmentation, everything on, and a team's albumentations recipe (also read by
#      12 workers), raw and JPEG pages: samples/s, the wait's share against the 2% goal, the busy cores;
#   2. bench_time_to_accuracy.py, cache vs on the fly (the slow baseline arm left out: its minutes would buy no figure
#      issue 46 asks for): the hmean curves, the ratio at equal sample counts, the time to the same hmean;
#   3. bench_fusion.py: two fold models, east-predict --fuse maps vs --fuse quads vs east-cache ensemble;
#   4. bench_gpu.py: reading (nvJPEG among the readers), train.py's steady state with its profile, prediction.
# Each script runs under a timeout (its budget, cut to what is left of the session; SIGINT, then SIGKILL 15 s later),
# its output is recorded into benchmarks/results/NAME.json, docs/performance.md and the README (run_all.py --record)
# even when it was cut short, and with OUT set the four results, docs/performance.md and the session's log are copied
# into $OUT (6 files, no folder). A --quick dry run (every script at its --quick sizes, --device cpu) records into
# $OUT/dry-run (or benchmarks/results/session/dry-run) instead, leaving the results alone. The last lines are a summary.
#
#   WHEELS=.whl OUT=/some/dir bash benchmarks/gpu_session.sh   # on the GPU machine, from the repository root
#   bash benchmarks/gpu_session.sh --quick                     # the dry run, on a CPU
#
# Sizes: AUG_ARGS, TTA_ARGS, FUSION_ARGS and GPU_ARGS replace each script's arguments; AUG_TIMEOUT, TTA_TIMEOUT,
# FUSION_TIMEOUT and GPU_TIMEOUT (s) bound each one, SESSION_SECONDS all of them. PYTHON names the interpreter
# (default python3: a GPU image need not have `python`); RECORD=DIR records a full run into DIR/results instead.
#
# WHEELS=DIR: a GPU machine without network (Python 3.12 with torch, torchvision, numpy, opencv-python-headless,
# joblib, tqdm, pyyaml, pillow, scipy and matplotlib) gets the packages the session imports and it lacks from the
# wheels in DIR (.whl/ is git-ignored: carry it), installed into /tmp/site, put on PYTHONPATH:
#   zarr 3.1.6 (east_cache.store.formats imports it) and what it requires: numcodecs 0.16.6, donfig 0.8.1.post1,
#     google-crc32c 1.9.0, packaging 26.4 (zarr needs >= 22; matplotlib's may be older);
#   simplejpeg 1.9.0: JPEG tiles decoded straight into the batch slot (without it the JPEG arms would time OpenCV's
#     fallback, not what a user installs);
#   albumentations 2.0.8 (the recipe arm; the .[augment] extra) and what it requires: albucore 0.0.24, stringzilla
#     5.3.2, simsimd 6.5.16, pydantic 2.14.4, pydantic-core 2.50.5, annotated-types 0.8.0, typing-inspection 0.4.5,
#     typing_extensions 4.16.0 (pydantic's floor, above what torch may have brought);
# each wheel's Requires-Dist is in this list or installed there. Fetched (cp312, manylinux x86_64) with
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl NAME==VERSION
set -u
cd "$(dirname "$0")/.."
START=$SECONDS
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1   # a part killed after its grace still leaves every line it printed in the log
QUICK=
if [ "${1:-}" = "--quick" ]; then
    QUICK=1
fi
OUTDIR=${OUT:-benchmarks/results/session}
mkdir -p "$OUTDIR"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/east-gpu-session.XXXXXX")   # each part's printed output, recorded from here

session() {
if [ -n "${WHEELS:-}" ]; then
    SITE=${SITE:-/tmp/site}
    echo "installing $(ls "$WHEELS"/*.whl | wc -l) wheels from $WHEELS into $SITE"
    if ! $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
            "$WHEELS"/*.whl; then
        # no pip in that interpreter: a wheel unpacked onto the path imports as an installed one does
        echo "pip failed: unpacking the wheels into $SITE instead"
        $PY -c "import glob, sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in
                glob.glob(sys.argv[2] + '/*.whl')]" "$SITE" "$WHEELS"
    fi
    export PYTHONPATH="$SITE"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -n "$QUICK" ]; then
    RECORD=$OUTDIR/dry-run   # a dry run's figures stay out of the project's results
    SESSION_SECONDS=${SESSION_SECONDS:-3600}
    AUG_ARGS=${AUG_ARGS:---quick --device cpu --recipe-workers 1}
    TTA_ARGS=${TTA_ARGS:---quick --device cpu --arms cache,fly}
    FUSION_ARGS=${FUSION_ARGS:---quick --device cpu}
    GPU_ARGS=${GPU_ARGS:---quick --device cpu}
    AUG_TIMEOUT=${AUG_TIMEOUT:-900} TTA_TIMEOUT=${TTA_TIMEOUT:-900} FUSION_TIMEOUT=${FUSION_TIMEOUT:-900}
    GPU_TIMEOUT=${GPU_TIMEOUT:-900}
else
    # run_all.py --record writes RECORD/results/NAME.json (and, for benchmarks/, docs/performance.md and the README)
    RECORD=${RECORD:-benchmarks}
    SESSION_SECONDS=${SESSION_SECONDS:-540}
    # 240 crops of 1024 px per epoch (20 steps), the first of 3 epochs start-up: 16 runs of a few seconds each on an
    # H200 (the recipe's with 4 workers longer); bench_gpu's caches of the same sizes are these, built once
    AUG_ARGS=${AUG_ARGS:---images 240 --distinct 48 --epochs 3 --batch-size 12 --recipe-workers 12 --jobs 14}
    TTA_ARGS=${TTA_ARGS:---arms cache,fly --train-images 960 --distinct 48 --val-images 16 --epochs 32 --eval-every 4 --time-limit 40 --jobs 14}
    FUSION_ARGS=${FUSION_ARGS:---train-images 48 --val-images 16 --time-limit 40 --jobs 14}
    GPU_ARGS=${GPU_ARGS:---images 240 --distinct 48 --epochs 3 --batch-size 12 --profile-steps 5 --read-epochs 1 --predict-pages 8 --repeat 1 --jobs 14}
    # the budgets add up to 510 s; with the wheels, the machine line and the records the session stays under 540 (each
    # limit is also cut to what is left of SESSION_SECONDS, so a part that overran shortens the last one, bench_gpu).
    # Expected on an H200 with 16 cores (sized from the CPU dry run and the H200 run that benchmarks/results/gpu.json
    # held before this session): augment arms about 120 s (48 pages generated and two caches built first), time to
    # accuracy about 120 s (2 x 40 s of training, evaluations, a build), fusion about 120 s (2 x 40 s of training,
    # 5 predictions), bench_gpu about 60 s; about 450 s in all
    AUG_TIMEOUT=${AUG_TIMEOUT:-145} TTA_TIMEOUT=${TTA_TIMEOUT:-130} FUSION_TIMEOUT=${FUSION_TIMEOUT:-135}
    GPU_TIMEOUT=${GPU_TIMEOUT:-100}
fi
GRACE=15     # s a part has after its SIGINT to print its tables, before SIGKILL
RESERVE=10   # s kept at the end for the last record and the summary
echo "machine: $(uname -m), $(nproc) cores; $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
describe=$($PY -c "import sys; sys.path.insert(0, 'benchmarks'); import torch; from common import machine; print(
    f'{torch.cuda.get_device_name()} device, ' if torch.cuda.is_available() else 'no GPU, ', end=''); print(
    f'{machine()}, torch {torch.__version__}')")
echo "measured on: $describe"
STATUS=()

run() {   # NAME BUDGET ARGS...: run benchmarks/bench_NAME.py, record its output (also when cut short)
    local name=$1 budget=$2
    shift 2
    local left=$((SESSION_SECONDS - (SECONDS - START) - GRACE - RESERVE))
    local limit=$((budget < left ? budget : left))
    if [ "$limit" -lt 20 ]; then
        STATUS+=("bench_$name: not run, $((left > 0 ? left : 0)) s left of the session")
        echo "${STATUS[-1]}"
        return
    fi
    echo "== bench_$name, at most $limit s: $PY benchmarks/bench_$name.py $*"
    local t0=$SECONDS
    timeout --signal=INT --kill-after=$GRACE "$limit" $PY "benchmarks/bench_$name.py" "$@" | tee "$WORK/$name.txt"
    local status=${PIPESTATUS[0]}
    STATUS+=("bench_$name: exit status $status after $((SECONDS - t0)) s (limit $limit s)$(
        [ "$status" = 124 ] || [ "$status" = 137 ] && echo ', cut short: its tables hold what it did before')")
    echo "${STATUS[-1]}"
    $PY benchmarks/run_all.py --record "$name" "$WORK/$name.txt" --command "python benchmarks/bench_$name.py $*" \
        --machine "$describe" --out "$RECORD" || true
}

# shellcheck disable=SC2086  # the arguments are meant to split
run gpu_augment "$AUG_TIMEOUT" $AUG_ARGS
# shellcheck disable=SC2086
run time_to_accuracy "$TTA_TIMEOUT" $TTA_ARGS
# shellcheck disable=SC2086
run fusion "$FUSION_TIMEOUT" $FUSION_ARGS
# shellcheck disable=SC2086
run gpu "$GPU_TIMEOUT" $GPU_ARGS
if [ -z "$QUICK" ] && [ -n "${OUT:-}" ]; then
    for name in gpu_augment time_to_accuracy fusion gpu; do
        cp "$RECORD/results/$name.json" "$OUTDIR/" 2>/dev/null || true
    done
    cp docs/performance.md "$OUTDIR/" 2>/dev/null || true
fi
echo
echo "== summary: $((SECONDS - START)) s of the session's $SESSION_SECONDS; recorded in $RECORD/results"
printf '%s\n' "${STATUS[@]}"
$PY benchmarks/gpu_summary.py "$RECORD/results" || true
[ -n "${OUT:-}" ] && echo "in $OUTDIR: $(ls "$OUTDIR" | tr '\n' ' ')"
}

session "$@" 2>&1 | tee "$OUTDIR/session.log"
rm -rf "$WORK"
