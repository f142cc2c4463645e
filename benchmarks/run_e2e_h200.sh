#!/usr/bin/env bash
# The H200 run of `wgjit bench --suite e2e` (issue 12). On the device machine, from the checkout:
#   source .gl/env.sh && WGJIT_MINILM_DIR=$PWD/.model bash benchmarks/run_e2e_h200.sh OUTDIR
# (.gl/ and .whl/ from ../shared/hooks/device-setup.sh; .model/ holds all-MiniLM-L6-v2 with its
# weights stored as float16 to fit the transfer limit: wgjit and torch both run them in float32.)
# Three processes, one per part (MiniLM, the 12-layer decoder, the ~1B decoder), each under its
# own time limit, so a part cut short still leaves the others' figures. About 5 minutes in all;
# at most 10 (the limits below). The merged table comes last; OUTDIR gets e2e.json, e2e.md, logs.
set -u
out=${1:?usage: run_e2e_h200.sh OUTDIR}
mkdir -p "$out"
python3 -c "from backend_wgpu import get_device; c = get_device().caps; print(c.name, c.backend)" >&2
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader >&2 2>/dev/null || true
part() {  # name, seconds
  echo "== e2e $1 (at most $2 s)" >&2
  WGJIT_E2E_PARTS=$1 timeout "$2" python3 -m tracer.cli bench --suite e2e --sizes full \
    --json "$out/e2e_$1.json" > "$out/e2e_$1.txt" 2> "$out/e2e_$1.log"
  echo "   exit $? after ${SECONDS}s; last lines:" >&2
  tail -n 4 "$out/e2e_$1.log" >&2
}
export WGJIT_E2E_TORCH_COMPILE=${WGJIT_E2E_TORCH_COMPILE:-1}  # MiniLM 32x128 beside torch.compile of BertModel (a minute or two to compile; 0: not)
part minilm 330
part 12L 130
part 1B 200
python3 -m benchmarks.e2e.table "$out"/e2e_minilm.json "$out"/e2e_12L.json "$out"/e2e_1B.json \
  --md "$out/e2e.md" --json "$out/e2e.json"
