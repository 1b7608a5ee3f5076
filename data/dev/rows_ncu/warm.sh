#!/usr/bin/env bash
# Dev: the 8192 x 1024 kernels as a replay sees them. ncu flushes and invalidates the caches before a profiled
# launch by default (run.sh: rows_counted 17.38 us, Liger 17.15, 1.3% apart, where graph replay has them 5-7% apart);
# here --cache-control none, so the profiled (second) launch finds what the first left in L2, as a replay does.
# Duration, DRAM bytes each way and the L2 hit rate. Run on the GPU machine from the repository root; files to $OUT.
set -uo pipefail
OUT=${OUT:-.}
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_sector_op_read_hit_rate.pct,sm__warps_active.avg.pct_of_peak_sustained_active
for spec in "rows_counted rows_fused_warp2_counted" "rows_fused ^rows_fused_warp2$" "liger layer_norm"; do
    set -- $spec
    for cc in none all; do
        ncu --clock-control none --cache-control $cc --kernel-name "regex:$2" --launch-skip 1 --launch-count 1 \
            --metrics $M python3 data/dev/rows_ncu/one_call.py "$1" 8192 1024 > "$OUT/warm_$1_$cc.txt" 2>&1
    done
done
grep -H -E "gpu__time|dram__bytes|hit_rate|warps_active" "$OUT"/warm_*.txt
