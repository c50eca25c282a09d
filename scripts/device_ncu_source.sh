#!/usr/bin/env bash
# device_ncu_source.sh: per-SASS-instruction executed counts and stall samples of tuned kernels
# (ncu source page, CSV). PROFILES="regex$,problem,precision,tag;..."; summarise with
# scripts/ncu_source_summary.py $OUT/src_TAG.csv.
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}
mkdir -p "$OUT"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
IFS=';' read -ra items <<<"${PROFILES:?PROFILES=regex,problem,precision,tag;...}"
for it in "${items[@]}"; do
  IFS=',' read -r re prob prec tag <<<"$it"
  timeout 250 ncu --clock-control none -k "regex:$re" -c 1 --section SourceCounters \
    --section InstructionStats --section SpeedOfLight --section Occupancy --page source \
    --print-source sass --csv build/convt3d tune --problems ${FILE:-problems/bench.json} --only "$prob" \
    --precision "$prec" --cache "$OUT/c_$tag.sqlite" >"$OUT/src_$tag.csv" 2>"$OUT/src_$tag.err"
  echo "== $tag rc=$? lines=$(wc -l <"$OUT/src_$tag.csv")"
  python3 scripts/ncu_source_summary.py "$OUT/src_$tag.csv" | head -${LINES_PER:-45}
done
