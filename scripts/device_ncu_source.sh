#!/usr/bin/env bash
# per-SASS-instruction executed counts of one kernel (source page, CSV)
OUT=${OUT:-/tmp/o}; mkdir -p $OUT
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
src() { # regex problem precision tag
  timeout 250 ncu --clock-control none -k "regex:$1" -c 1 --section SourceCounters --section InstructionStats \
    --page source --print-source sass --csv \
    build/convt3d tune --problems problems/bench.json --only "$2" --precision "$3" \
    --cache "$OUT/c_$4.sqlite" > "$OUT/src_$4.csv" 2> "$OUT/src_$4.err"
  echo "== $4 rc=$? lines=$(wc -l < $OUT/src_$4.csv)"; head -c 600 $OUT/src_$4.csv; tail -3 $OUT/src_$4.err
}
src 'igemm_mma_tf32_q1x8x16_w4x1_m2n4_k32_pa_st$' L1-73 tf32 t73
src 'igemm_mma_tf32_q1x1x64_w1x2_m4n4_k8_pa$' L1-77 tf32 t77
