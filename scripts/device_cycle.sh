#!/usr/bin/env bash
# device_cycle.sh: one device cycle for a kernel family: its GPU suite (FILTER), tuning trials of
# problems ONLY in TRIAL_MODES (trial lines of FAMILIES), then a bench of ONLY in BP's modes.
#   FILTER='*RandomGemmWgmma*' ONLY=GAN-3 FAMILIES=gemm_wgmma scripts/device_cycle.sh
set -uo pipefail
OUT=${OUT:-/tmp/o}; mkdir -p $OUT
export CONVT3D_CUDNN="$(python3 -c 'import os,nvidia.cudnn as c;print(os.path.join(list(c.__path__)[0],"lib"))' 2>/dev/null)"
nvidia-smi --query-gpu=name --format=csv,noheader
trc=skipped
if [ -n "${FILTER:-}" ]; then
  timeout ${TEST_TIMEOUT:-240} build/tests/test_gpu --gtest_brief=1 --gtest_filter="$FILTER" >$OUT/tests.log 2>&1
  trc=$?
fi
for P in ${TRIAL_MODES-fp32 tf32 bf16}; do
  ONLY=${ONLY:?names} PREC=$P LINES_PER=${LINES_PER:-10} TRIALS_TIMEOUT=${TRIALS_TIMEOUT:-150} \
    scripts/device_family_trials.sh
done
summary() { echo "== tests rc=$trc"; grep -E "^\[  FAILED|PASSED|tests ran|SKIPPED \]" $OUT/tests.log 2>/dev/null | head -20; }
[ -n "${SKIP_BENCH:-}" ] && { summary; exit 0; }
export CONVT3D_CACHE=$OUT/bench.sqlite
timeout ${BT:-300} build/convt3d bench --problems models --only $ONLY --precision ${BP:-fp32,fp32x3,tf32,bf16,f16} --json $OUT/b.json --csv '' --svg '' >$OUT/bench.log 2>&1
echo "== bench rc=$?"
python3 scripts/bench_table.py $OUT/b.json 2>&1 | grep -E "^\|" | cut -d'|' -f2-10
summary
