#!/usr/bin/env bash
# The H200 run behind benchmarks/RESULTS.md. On the device machine, from the checkout:
#   source .gl/env.sh && WGJIT_MINILM_DIR=$PWD/.model bash benchmarks/run_h200.sh OUTDIR
# (.gl/ from ../shared/hooks/device-setup.sh; .model/ holds all-MiniLM-L6-v2 with its weights
# stored as float16 to fit the transfer limit: both wgjit and torch run them in float32.)
# Every step saves what it has into OUTDIR/results.tgz, so a run cut short still reports.
set -u
out=${1:?usage: run_h200.sh OUTDIR}
work=$(mktemp -d)
pack() { (cd "$work" && tar czf "$out/results.tgz" .); }
step() { local name=$1; shift; echo "== $name: $*" >&2; "$@" > "$work/$name.log" 2>&1; echo "   exit $?" >&2; pack; }

python3 -c "from backend_wgpu import get_device; c = get_device().caps; print(c.name, c.backend)" >&2
step bench python3 -m tracer.cli bench --sizes full --quiet --json "$work/bench.json" --md "$work/bench.md" --plots "$work"
step unfused env WGJIT_FUSION=0 python3 -m tracer.cli bench --sizes full --quiet --suite elementwise --suite model \
  --json "$work/unfused.json" --md "$work/unfused.md"
step replay python3 -m benchmarks.bench_replay
step memory python3 -m benchmarks.bench_memory
cp "$work"/bench.md "$work"/unfused.md "$work"/replay.log "$work"/memory.log "$out"/ 2>/dev/null
tail -n 30 "$work/replay.log" "$work/memory.log"
