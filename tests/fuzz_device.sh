#!/usr/bin/env bash
# Differential fuzzing in parallel on one GPU for a fixed time: JOBS processes of
# tests/fuzz_run.py, each with its own random seeds, then one archive of logs and failures.
#   bash tests/fuzz_device.sh OUTDIR [JOBS] [SECONDS]
set -u
out=${1:?usage: fuzz_device.sh OUTDIR [JOBS] [SECONDS]}
jobs=${2:-8}
seconds=${3:-420}
work=$(mktemp -d)
for j in $(seq 1 "$jobs"); do
  python3 -W ignore tests/fuzz_run.py 1000000 "$work/job$j" --seconds "$seconds" > "$work/job$j.log" 2>&1 &
done
wait
(cd "$work" && tar czf "$out/fuzz.tgz" .)
grep -h "^done:" "$work"/job*.log | awk '{n += $2; f += $4} END {print "all jobs: " n " programs, " f " failed"}'
tail -n 3 "$work"/job*.log
