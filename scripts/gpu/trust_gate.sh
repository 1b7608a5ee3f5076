#!/usr/bin/env bash
# The trust gate's GPU step (scripts/gpu/trust_gate.py): one run named "trust_gate" with the check and the gate's
# behaviour; about 10-20 s. Env (scripts/h200_pass.sh sets them): LABKIT_RUNS_ROOT.
# Rerun alone: LABKIT_RUNS_ROOT=build/runs bash scripts/gpu/trust_gate.sh
set -uo pipefail
export PYTHONPATH=${PYTHONPATH:-$PWD}
python3 scripts/gpu/trust_gate.py "$@"
