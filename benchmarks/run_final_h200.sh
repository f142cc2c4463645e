#!/usr/bin/env bash
# A session's closing H200 run in one device call: the fuzz survey, the e2e suite, the decode
# weight formats. Each step is archived into OUTDIR as soon as it ends, so a call cut short by
# its time limit still returns the steps before. On the device machine, from the checkout:
#   source .gl/env.sh && WGJIT_MINILM_DIR=$PWD/.model bash benchmarks/run_final_h200.sh OUTDIR [FUZZ_SECONDS]
# (.whl2/ holds gguf and its needs, for the quantized parts.) About 7 minutes with the defaults.
set -u
out=${1:?usage: run_final_h200.sh OUTDIR [FUZZ_SECONDS]}
fuzz_seconds=${2:-105}
mkdir -p "$out"
work=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl2/*.whl >/dev/null 2>&1 || true

echo "== fuzz: 14 processes x ${fuzz_seconds} s" >&2
mkdir -p "$work/fuzz"
bash tests/fuzz_device.sh "$work/fuzz" 14 "$fuzz_seconds" > "$work/fuzz/summary.txt" 2>&1
tar czf "$out/fuzz.tgz" -C "$work" fuzz
grep "all jobs" "$work/fuzz/summary.txt" >&2

echo "== e2e" >&2
WGJIT_E2E_TORCH_COMPILE=${WGJIT_E2E_TORCH_COMPILE:-0} bash benchmarks/run_e2e_h200.sh "$work/e2e" > "$work/e2e_stdout.txt" 2>&1
mv "$work/e2e_stdout.txt" "$work/e2e/"
tar czf "$out/e2e.tgz" -C "$work" e2e
cat "$work/e2e/e2e.md" >&2

echo "== decode weight formats (1B)" >&2
mkdir -p "$work/formats"
timeout "${FORMATS_SECONDS:-150}" python3 -m benchmarks.device.decode_formats --config 1B --formats "${FORMATS:-f32,f16,q8_0,q4_0}" \
  --blocks 4 --per-block 12 --json "$work/formats/decode_formats.json" > "$work/formats/decode_formats.txt" 2>&1
tar czf "$out/formats.tgz" -C "$work" formats
tail -n 7 "$work/formats/decode_formats.txt" >&2
