#!/usr/bin/env bash
# device_bench_modes.sh: `convt3d bench` of problem lists (LISTS, default "models") in the modes
# PREC, each list from an empty cache (ours tuned, cuDNN searched in the same process); the
# geomean table of each list last.  LISTS="models kernelbench-l1" PREC=tf32 scripts/device_bench_modes.sh
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}
mkdir -p "$OUT"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export CONVT3D_CUDNN="$(python3 -c 'import os,nvidia.cudnn as c;print(os.path.join(list(c.__path__)[0],"lib"))' 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
PREC=${PREC:?modes, e.g. tf32 or bf16,f16}
for list in ${LISTS:-models}; do
  name=$(basename "$list" .json)  # a list name or a JSON file's path
  tag="${name}_${PREC//,/_}"
  export CONVT3D_CACHE="/tmp/cache_$tag.sqlite"  # not under $OUT: few files come back
  rm -f "$CONVT3D_CACHE"  # a warm machine keeps /tmp between calls
  start=$(date +%s)
  timeout ${BENCH_TIMEOUT:-500} build/convt3d bench --problems "$list" --precision "$PREC" \
    --json "$OUT/bench_$tag.json" --csv "$OUT/bench_$tag.csv" >"$OUT/bench_$tag.log" 2>&1
  echo "== bench $list $PREC rc=$? $(( $(date +%s) - start )) s"
  sed -n '/^Roofline geomeans/,/^roofline, min/p' "$OUT/bench_$tag.log" | sed '$d'
done
