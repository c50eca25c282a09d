#!/usr/bin/env bash
# device_s8final.sh: session 8's final run: WB-64 tuned in every fp32-output mode (tuning
# seconds), then the same-process bench of every problem and mode, trials exported.
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}; mkdir -p "$OUT"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export CONVT3D_CACHE=$OUT/cache.sqlite
STAGE=tune ONLY=WB-64 PRECISIONS=fp32,fp32x3,tf32 TUNE_TIMEOUT=60 bash scripts/device_issue4.sh | grep -E "^WB|tune rc"
STAGE=bench,export BENCH_TIMEOUT=420 bash scripts/device_issue4.sh | grep -E "rc=|geomean|copy"
grep -E "^(L1|WB)" "$OUT/bench.log" | grep convt3d | awk '{printf "%-6s %-7s %8s %-8s %s\n", $1, $3, $4, $11, $NF}' | head -40
python3 scripts/trials.py "$OUT/cache_export.json" > "$OUT/trials.txt" 2>/dev/null
rm -f "$OUT/cache.sqlite"
