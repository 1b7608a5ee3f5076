set -x
export PYTHONPATH=$PWD LABKIT_CACHE_DIR=/tmp/lc
nvidia-smi --query-gpu=name,driver_version --format=csv
python3 -m pytest -q -m gpu -p no:cacheprovider 2>&1 | tail -30

for t in racecheck memcheck; do for s in 2,64,64,64 16,64,256,256; do
  /usr/bin/time -f "%e s $t $s" timeout 120 compute-sanitizer --tool $t --kernel-name kns=chain python3 probe/race.py $s chain > $OUT/san_${t}_${s//,/x}.txt 2>&1; tail -4 $OUT/san_${t}_${s//,/x}.txt
done; done
grep -c "" $OUT/*.txt
