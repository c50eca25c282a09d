#!/usr/bin/env bash
# device_family_trials.sh: tune problems of a list in one mode from an empty cache and print the
# trial log lines of the families FAMILIES (a grep -E pattern) for each: how a family's
# candidates rank on the GPU beside the winner.
#   ONLY=GAN-2,GAN-3 PREC=fp32 FAMILIES=gemm_simt scripts/device_family_trials.sh
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}
mkdir -p "$OUT"
export CONVT3D_CACHE="$OUT/cache_trials_${PREC:?mode}.sqlite"
rm -f "$CONVT3D_CACHE"
timeout ${TRIALS_TIMEOUT:-300} build/convt3d tune --problems "${LIST:-models}" --only "${ONLY:?names}" \
  --precision "$PREC" >"$OUT/trials_$PREC.log" 2>&1
echo "== tune $ONLY $PREC rc=$?"
sed -n '/^problem /,$p' "$OUT/trials_$PREC.log" | head -20
build/convt3d cache list --json >"$OUT/trials_list.json" 2>/dev/null
for sig in $(python3 -c 'import json,sys; [print(e["problem"]) for e in json.load(open(sys.argv[1]))["entries"]]' \
    "$OUT/trials_list.json"); do
  build/convt3d cache show --problem "$sig" >"$OUT/trials_show.txt" 2>&1
  echo "-- $sig"
  grep -E "^winner|${FAMILIES:-.}" "$OUT/trials_show.txt" | head -${LINES_PER:-14} | cut -c1-90
done
