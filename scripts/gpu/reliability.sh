#!/usr/bin/env bash
# Issues 15 and 22's H200 step: compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over every kernel of
# ours, forward and backward, at ragged shapes and at L1/40, the racecheck experiment on the minimal TMA rings (kernels/sanitize/tma_ring.cu),
# GPU fuzzing against torch bit for bit, and a soak of 10,000 calls (training calls among them); one run directory named "reliability".
# Expected: about 200-240 s on the H200 (every sanitizer invocation has its own timeout; what does not finish in
# the budget is recorded as not finished). Env (scripts/h200_pass.sh sets them): LABKIT_RUNS_ROOT, STEP_OUT.
# Rerun alone: LABKIT_RUNS_ROOT=build/runs STEP_OUT=build/reliability bash scripts/gpu/reliability.sh
set -uo pipefail
export PYTHONPATH=${PYTHONPATH:-$PWD}
python3 scripts/gpu/reliability.py --budget-s "${RELIABILITY_BUDGET_S:-235}" "$@"
