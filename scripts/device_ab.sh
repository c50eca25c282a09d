#!/usr/bin/env bash
# device_ab.sh: the GPU suite (FILTER) of the new build, then `convt3d bench` of the problems ONLY
# of the list LIST (default problems/models.json) in the modes BP with two builds in turn
# (OLD=path of the other convt3d, then build/convt3d), each from an empty cache, so that both are
# timed on one machine; a short table of both last.
#   FILTER='*RandomGemmWgmma*' OLD=old/convt3d ONLY=GAN-2,GAN-4 BP=bf16,tf32 scripts/device_ab.sh
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}
mkdir -p "$OUT"
export CONVT3D_CUDNN="$(python3 -c 'import os,nvidia.cudnn as c;print(os.path.join(list(c.__path__)[0],"lib"))' 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
trc=skipped
if [ -n "${FILTER:-}" ]; then
  source scripts/gpu_shards.sh
  trc=$(TEST_TIMEOUT=${TEST_TIMEOUT:-240} run_gpu_tests "$OUT/tests.log" "$FILTER")
fi
run() {  # tag binary
  export CONVT3D_CACHE="$OUT/cache_$1.sqlite"
  rm -f "$CONVT3D_CACHE"
  timeout ${BT:-300} "$2" bench --problems "${LIST:-problems/models.json}" --only "${ONLY:?names}" --precision "${BP:?modes}" \
    --json "$OUT/b_$1.json" --csv '' --svg '' >"$OUT/bench_$1.log" 2>&1
  echo "== bench $1 rc=$?"
}
[ -n "${OLD:-}" ] && run old "$OLD"
run new build/convt3d
[ -n "${OLD:-}" ] && python3 scripts/bench_table.py "$OUT/b_old.json" 2>&1 | grep -E "^\|" | cut -d'|' -f2-7
python3 scripts/bench_table.py "$OUT/b_new.json" 2>&1 | grep -E "^\|" | cut -d'|' -f2-7
echo "== tests $trc"
cat $OUT/tests.log.* 2>/dev/null | grep -E "^\[  FAILED" | head -20
# One archive instead of a file per log, JSON and cache (a device call brings back a limited
# number of files): tar xzf ab.tgz to read them.
(cd "$OUT" && tar czf ab.tgz --exclude=ab.tgz --remove-files ./*) 2>/dev/null || true
