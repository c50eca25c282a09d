#!/usr/bin/env bash
# device_models.sh: one model-layer cycle on the device: the GPU suites named by PARTS (default:
# gemm), then tuning of ONLY (problems/models.json names) in PREC modes with every candidate's
# time in tune.log, then the cuDNN bench of the same rows from that cache.
#   ONLY=GAN-3,NNU-5 PREC=tf32,bf16 scripts/device_models.sh
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}
mkdir -p "$OUT"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export CONVT3D_CUDNN="$(python3 -c 'import os,nvidia.cudnn as c;print(os.path.join(list(c.__path__)[0],"lib"))' 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
if [[ -n ${PARTS-gemm} ]]; then
  PARTS=${PARTS-gemm} SKIP_OTHERS=1 OUT="$OUT" PART_TIMEOUT=${PART_TIMEOUT:-240} scripts/device_tests.sh
fi
export CONVT3D_CACHE="$OUT/cache.sqlite"
ONLY=${ONLY:?problem names of problems/models.json} PREC=${PREC:-tf32,bf16}
echo "== tune $ONLY ($PREC)"
timeout ${TUNE_TIMEOUT:-240} build/convt3d tune --problems problems/models.json --only "$ONLY" \
  --precision "$PREC" --json "$OUT/tune.json" 2>"$OUT/tune.log" >"$OUT/tune_table.txt"
echo "tune rc=$?"
grep -E "probe|done:" "$OUT/tune.log" | sed -E 's/, rel_err.*//' | sort -t: -k3 | head -${TUNE_LINES:-60}
echo "== bench"
timeout ${BENCH_TIMEOUT:-240} build/convt3d bench --problems models --only "$ONLY" \
  --precision "$PREC" --json "$OUT/bench.json" --csv "$OUT/bench.csv" --svg "$OUT/bench.svg" \
  >"$OUT/bench.log" 2>&1
echo "bench rc=$?"
tail -${BENCH_LINES:-30} "$OUT/bench.log"
