set -x
export LABKIT_GIT_COMMIT=$1 LABKIT_GIT_DIRTY=false
source scripts/gpu_env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
(python3 -m pytest -q -m gpu tests/test_gpu_host.py -p no:cacheprovider 2>&1 | tail -15) > $OUT/gpu_host_tests.log
tail -3 $OUT/gpu_host_tests.log
python3 build/probe/gap.py 2>&1 | tail -150 > $OUT/gap.log
ncu --clock-control none --section WarpStateStats --section SchedulerStats --section SpeedOfLight --section Occupancy -k regex:grad_chain_sums --launch-skip 1 --launch-count 1 python3 build/probe/chainsums.py > $OUT/ncu_chainsums.txt 2>&1
tail -80 $OUT/ncu_chainsums.txt
cd $OUT && tar czf probe.tgz *.log *.json *.txt && ls -la
