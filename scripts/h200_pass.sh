#!/usr/bin/env bash
# The GPU evidence pass: the GPU tests, every notebook live in full mode, then the extra GPU steps
# (scripts/gpu/*.sh: evidence that is not a notebook, e.g. sanitizer reports, fuzzing, dispatch measurements).
# Run from the repository root on the GPU machine; results go under $OUT (default build/gpu-pass): the test log,
# nvidia-smi's view of the card, the book's log, each step's log and a tarball of the executed book with its run
# directories (steps write their runs into the book's runs/ folder, so one `labkit curate` takes them all).
# Back on the CPU machine: tar xzf book.tgz -C build/book-gpu && labkit curate build/book-gpu --attach gpu_tests.log
# Wheels for papermill/nbconvert/ipykernel (not on the GPU image) may be carried in .whl/ (scripts/gpu_wheels.sh
# fetches them on a machine that reaches PyPI; CONTRIBUTING.md: "GPU runs").
# LABKIT_PASS selects parts (default "tests book steps"): one device command is limited to 10 minutes, so a long
# pass is split into calls, e.g. LABKIT_PASS="tests steps" then LABKIT_PASS=book (later parts reuse build/book-gpu).
set -uo pipefail
# The GPU machine gets a copy of the tree whose .git may be stale: the commit that runs must come from the caller.
if [ -z "${LABKIT_GIT_COMMIT:-}" ] || [ -z "${LABKIT_GIT_DIRTY:-}" ]; then
    echo "set LABKIT_GIT_COMMIT (git rev-parse HEAD where you launch) and LABKIT_GIT_DIRTY (true/false)" >&2
    exit 2
fi
PARTS=${LABKIT_PASS:-tests book steps}
OUT=${OUT:-build/gpu-pass}
BOOK=build/book-gpu
mkdir -p "$OUT" build
source scripts/gpu_env.sh  # the carried notebook wheels and the import path
export PYTHONUNBUFFERED=1 LABKIT_CACHE_DIR=${LABKIT_CACHE_DIR:-/tmp/labkit-cubin}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/nvidia-smi.csv"
if [[ " $PARTS " == *" tests "* ]]; then
    python3 -m pytest -q -m gpu -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log"
fi
if [[ " $PARTS " == *" book "* ]]; then
    # --keep-going: one failing notebook must not cost the others' evidence (a failed build stays in $BOOK.failed)
    python3 -m labkit.cli book --device cuda --mode full --out "$BOOK" --keep-going "$@" 2>&1 | tee "$OUT/book.log"
fi
if [[ " $PARTS " == *" steps "* ]]; then
    mkdir -p "$BOOK/runs" "$OUT/steps"
    for step in scripts/gpu/*.sh; do
        [ -e "$step" ] || continue
        name=$(basename "$step" .sh)
        echo "[pass] step $name" | tee -a "$OUT/steps.log"
        LABKIT_RUNS_ROOT="$BOOK/runs" STEP_OUT="$OUT/steps/$name" bash "$step" 2>&1 | tee "$OUT/steps/$name.log"
        echo "[pass] step $name exit ${PIPESTATUS[0]}" | tee -a "$OUT/steps.log"
    done
fi
for b in "$BOOK" "$BOOK.failed"; do
    [ -d "$b" ] && tar czf "$OUT/$(basename "$b").tgz" -C "$b" .
done
