#!/usr/bin/env bash
# Dev: rows_staged at 1024 x 65536 under ncu, as a replay sees it (--cache-control none: the profiled second launch
# finds what the first left in L2): duration, DRAM bytes each way (do the re-read chunks come from DRAM?), and stall
# samples per SASS line (which group waits on what). Run on the GPU machine from the repository root; files to $OUT.
set -uo pipefail
OUT=${OUT:-.}
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_op_read_hit_rate.pct
ncu --clock-control none --cache-control none --kernel-name "regex:^rows_staged$" --launch-skip 1 --launch-count 1 \
    --metrics $M python3 data/dev/rows_ncu/one_call.py rows_staged 1024 65536 > "$OUT/staged_warm.txt" 2>&1
ncu --clock-control none --cache-control none --kernel-name "regex:^rows_staged$" --launch-skip 1 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --page source --csv --print-source sass \
    python3 data/dev/rows_ncu/one_call.py rows_staged 1024 65536 > "$OUT/staged_source.csv" 2>&1
grep -E "gpu__time|dram__bytes|hit_rate" "$OUT/staged_warm.txt"
