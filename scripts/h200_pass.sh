#!/usr/bin/env bash
# The GPU evidence pass, in one call: the GPU tests, then every notebook live in full mode.
# Run from the repository root on the GPU machine; results go under $OUT (default build/gpu-pass): the test log,
# nvidia-smi's view of the card, the book's log and a tarball of the executed book with its run directories.
# Back on the CPU machine: tar xzf book.tgz -C build/book-gpu && labkit curate build/book-gpu --attach gpu_tests.log
# Wheels for papermill/nbconvert/ipykernel (not on the GPU image) may be carried in .whl/ (README: "On a GPU").
set -uo pipefail
# The GPU machine gets a copy of the tree whose .git may be stale: the commit that runs must come from the caller.
if [ -z "${LABKIT_GIT_COMMIT:-}" ] || [ -z "${LABKIT_GIT_DIRTY:-}" ]; then
    echo "set LABKIT_GIT_COMMIT (git rev-parse HEAD where you launch) and LABKIT_GIT_DIRTY (true/false)" >&2
    exit 2
fi
OUT=${OUT:-build/gpu-pass}
mkdir -p "$OUT" build
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PATH=/tmp/site/bin:$PATH JUPYTER_PATH=/tmp/site/share/jupyter PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 LABKIT_CACHE_DIR=${LABKIT_CACHE_DIR:-/tmp/labkit-cubin}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/nvidia-smi.csv"
python3 -m pytest -q -m gpu -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log"
rm -rf build/book-gpu
python3 -m labkit.cli book --device cuda --mode full --out build/book-gpu "$@" 2>&1 | tee "$OUT/book.log"
tar czf "$OUT/book.tgz" -C build/book-gpu .
