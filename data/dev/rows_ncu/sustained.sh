#!/usr/bin/env bash
# Dev: rows_counted and Liger at 8192 x 1024 as they run back to back (pairs.py: 19.34 against 17.98 us a call, where
# ncu's cold launches are 17.54 against 17.09). The 12th of 16 calls of each kernel (loop_call.py: no sync between
# calls), with --cache-control none and --replay-mode application, so that every pass reruns the program and profiles
# a launch that met the L2 its predecessor left (kernel replay would restore memory between passes). Filters name
# each kernel alone (Liger's Triton kernel is _layer_norm_forward_kernel). Metrics only, so few passes: the first
# version (commit 6b7240d, four sections) needed 33 application passes of about 12 s each and ran out of time after
# rows_counted's (sustained/). Run on the GPU machine from the repository root; files go to $OUT.
set -uo pipefail
OUT=${OUT:-.}
for spec in "rows_counted ^rows_fused_warp2_counted$" "liger _layer_norm_forward_kernel"; do
    set -- $spec
    ncu --clock-control none --cache-control none --replay-mode application --kernel-name "regex:$2" \
        --launch-skip 11 --launch-count 1 \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_write.sum \
        python3 data/dev/rows_ncu/loop_call.py "$1" 16 > "$OUT/sustained_$1.txt" 2>&1
done
grep -H -E "gpu__time|dram__bytes|lts__t_sectors_op" "$OUT"/sustained_*.txt
