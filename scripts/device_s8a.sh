#!/usr/bin/env bash
# device_s8a.sh: session 8 first run: write-bandwidth probe, strict tuning of the dense shapes
# with direct_tile candidates offered, ncu of the WB-64 and L1-68 strict winners.
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}; mkdir -p "$OUT"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
python3 scripts/bw_probe.py 2>&1 | tee "$OUT/bw_probe.txt"
STAGE=tune PRECISIONS=fp32 ONLY=${ONLY:-L1-58,L1-61,L1-68,L1-70} TUNE_TIMEOUT=200 CONVT3D_CACHE=$OUT/cache.sqlite bash scripts/device_issue4.sh
CONVT3D_CACHE=$OUT/cache.sqlite build/convt3d cache export "$OUT/cache_export.json" >/dev/null 2>&1
python3 scripts/trials.py "$OUT/cache_export.json" > "$OUT/trials.txt"; head -c 6000 "$OUT/trials.txt"
LINES_PER=90 PROFILES=${PROFILES:-"direct_tile_f32_x8y4z4_v8_c8_k4_pa$,WB-64,fp32,wb64;igemm_simt_f32_q1x8x16_t4x8_n8_k1$,L1-68,fp32,simt68"} bash scripts/device_ncu.sh
