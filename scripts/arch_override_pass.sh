#!/usr/bin/env bash
# The H200 as an sm_80 GPU (issue 25 item 4), on the GPU machine from the repository root; results under $OUT.
#   LABKIT_PASS="tests run"   the GPU tests under LABKIT_ARCH=compute_80, then scripts/arch_override.py (the fuzz,
#                             `labkit tune`, what the drop-in serves before and after), into $OUT/runs
#   LABKIT_PASS=book          notebooks live under the same override and the tuned table ($LABKIT_BOOK_ONLY picks
#                             them), quick mode; the executed book goes to $OUT/book-override.tgz (not curated:
#                             its runs are the override's, the committed runs stay the H200's own)
# Wheels for papermill/nbconvert/ipykernel may be carried in .whl/ (CONTRIBUTING.md "GPU runs").
set -uo pipefail
if [ -z "${LABKIT_GIT_COMMIT:-}" ] || [ -z "${LABKIT_GIT_DIRTY:-}" ]; then
    echo "set LABKIT_GIT_COMMIT and LABKIT_GIT_DIRTY" >&2
    exit 2
fi
PARTS=${LABKIT_PASS:-tests run}
OUT=${OUT:-build/override-pass}
mkdir -p "$OUT" build
source scripts/gpu_env.sh  # the carried notebook wheels and the import path
export PYTHONUNBUFFERED=1 LABKIT_ARCH=${LABKIT_ARCH:-compute_80} LABKIT_CACHE_DIR=/tmp/labkit-ptx \
    LABKIT_TABLE_DIR=${LABKIT_TABLE_DIR:-/tmp/labkit-tables}
if [[ " $PARTS " == *" tests "* ]]; then
    python3 -m pytest -q -m gpu -p no:cacheprovider -rs 2>&1 | tee "$OUT/override_tests.log"
fi
if [[ " $PARTS " == *" run "* ]]; then
    LABKIT_RUNS_ROOT="$OUT/runs" python3 scripts/arch_override.py --attach "$OUT/override_tests.log" 2>&1 \
        | tee "$OUT/override_run.log"
fi
if [[ " $PARTS " == *" book "* ]]; then
    python3 -m labkit.cli book --device cuda --mode quick --out build/book-override --keep-going \
        --only ${LABKIT_BOOK_ONLY:-00 01 03 06 07 08 10} 2>&1 | tee "$OUT/book.log"
    for b in build/book-override build/book-override.failed; do
        [ -d "$b" ] && tar czf "$OUT/$(basename "$b").tgz" -C "$b" .
    done
fi
