#!/usr/bin/env bash
# Dev: ncu of the forward's chain_stats_tma at L1/40 and of the backward's grad_chain_sums_split8 at 1 x 2^24
# (data/dev/grad_ncu/one_backward.py), speed-of-light and warp-state sections plus stall sampling per SASS line.
# Run on the GPU machine from the repository root; files go to $OUT.
set -uo pipefail
OUT=${OUT:-.}
ncu --clock-control none --kernel-name regex:chain_stats --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
    python3 data/dev/chain_ncu/one_forward.py > "$OUT/ncu_forward.txt" 2>&1
ncu --clock-control none --kernel-name regex:chain_stats --launch-skip 1 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --page source --csv --print-source sass \
    python3 data/dev/chain_ncu/one_forward.py > "$OUT/ncu_forward_source.csv" 2>&1
ncu --clock-control none --kernel-name regex:grad_chain --launch-skip 1 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --page source --csv --print-source sass \
    python3 data/dev/grad_ncu/one_backward.py > "$OUT/ncu_backward_source.csv" 2>&1
ncu --clock-control none --kernel-name regex:grad_chain --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    python3 data/dev/grad_ncu/one_backward.py > "$OUT/ncu_backward.txt" 2>&1
ls -la "$OUT"
