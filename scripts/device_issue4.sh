#!/usr/bin/env bash
# device_issue4.sh: one device call for issue 4: tensor-core GPU tests, then tuning in every
# precision (its table is the last thing printed). Logs go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}
mkdir -p "$OUT"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export CONVT3D_CACHE=${CONVT3D_CACHE:-/tmp/convt3d_issue4_cache.sqlite}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
STAGE=${STAGE:-tests,tune}
if [[ $STAGE == *tests* ]]; then
  echo "== gpu tests: ${GTEST_FILTER:=Gpu/Level1TensorCore.*:Gpu/RandomTensorCore.*:Engine.*}"
  timeout ${TEST_TIMEOUT:-240} build/tests/test_gpu --gtest_filter="$GTEST_FILTER" >"$OUT/test_gpu.log" 2>&1
  echo "test_gpu rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) \]|tests ran" "$OUT/test_gpu.log" | tail -4
  grep -E "Failure|rel_l2|FAILED  \]" "$OUT/test_gpu.log" | head -20
fi
if [[ $STAGE == *tune* ]]; then
  echo "== tune ${PRECISIONS:=tf32,fp32x3,fp32}"
  timeout ${TUNE_TIMEOUT:-300} build/convt3d tune --problems problems/bench.json --precision "$PRECISIONS" \
    ${ONLY:+--only $ONLY} --json "$OUT/tune.json" 2>"$OUT/tune_progress.log" | tee "$OUT/tune_table.txt"
  echo "tune rc=$?"
fi
if [[ $STAGE == *bench* ]]; then
  export CONVT3D_CUDNN="$(python3 -c 'import os,nvidia.cudnn as c;print(os.path.join(list(c.__path__)[0],"lib"))' 2>/dev/null)"
  echo "== bench"
  timeout ${BENCH_TIMEOUT:-300} build/convt3d bench --problems problems/bench.json ${ONLY:+--only $ONLY} --json "$OUT/bench.json" \
    --csv "$OUT/bench.csv" --svg "$OUT/bench.svg" >"$OUT/bench.log" 2>&1
  echo "bench rc=$?"; tail -60 "$OUT/bench.log"
fi
if [[ $STAGE == *export* ]]; then
  # Every tuning trial (ranked candidate order), for the heuristic-vs-winner comparison.
  build/convt3d cache export "$OUT/cache_export.json" 2>"$OUT/cache_export.err"
  echo "cache export rc=$?"
  # One line per trial, best first per problem (a run folder keeps this, not the cubins).
  python3 scripts/trials.py "$OUT/cache_export.json" >"$OUT/trials.txt"
fi
