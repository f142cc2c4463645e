# A/B of the host path: .ab_new (HEAD), .ab_new with WGJIT_PRERECORD=0, .ab_old (before the session), alternating processes
source .gl/env.sh && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl2/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PYTHONPATH WGJIT_MINILM_DIR=$PWD/.model
root=$PWD
one() {  # case variant round [env]
  local c=$1 v=$2 r=$3 dir=$root/.ab_new; [ $v = old ] && dir=$root/.ab_old
  local env=""; [ $v = norec ] && env="WGJIT_PRERECORD=0"; [ $v = chunk8 ] && env="WGJIT_SUBMIT_CHUNK=8"
  (cd $dir && env $env PYTHONPATH=$dir:$PYTHONPATH timeout 90 python3 -m benchmarks.device.critical_path --cases $c --calls 300 > $OUT/ab_${c}_${v}_$r.txt 2>&1)
  echo "$c $v $r: $(grep 'wall' $OUT/ab_${c}_${v}_$r.txt | sed 's/ per call (unwrapped)//') | 1st submit $(grep '  j 1st' $OUT/ab_${c}_${v}_$r.txt | head -1 | awk '{print $NF}') | read copy $(grep '  l read' $OUT/ab_${c}_${v}_$r.txt | head -1 | awk '{print $NF}')"
}
for r in 1 2 3; do for v in new norec old chunk8; do one 12L $v $r; done; done
for r in 1 2; do for v in new norec old; do one minilm $v $r; done; done
for v in new norec; do one 1B $v 1; done
