#!/usr/bin/env bash
# device_ncu.sh: Nsight Compute profiles of tuned candidates: PROFILES="regex,problem,precision,tag;..."
# of problem list FILE (default problems/bench.json); COUNT launches of each regex (default 1).
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}
mkdir -p "$OUT"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
# Per-issue stall cycles by reason (STALLS=1): where the warps wait, not only how much.
stall_metrics() {
  local m="" r
  for r in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle not_selected \
    wait dispatch_stall lg_throttle drain branch_resolving no_instruction selected; do
    m+="smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio,"
  done
  echo "${m%,}"
}
# Extra metrics: the stall reasons (STALLS=1) and any in MORE_METRICS (comma-separated).
METRICS="${STALLS:+$(stall_metrics)}"
[ -n "${MORE_METRICS:-}" ] && METRICS="${METRICS:+$METRICS,}$MORE_METRICS"
profile() {  # $1 regex, $2 problem, $3 precision, $4 tag
  timeout 200 ncu --clock-control none -k "regex:$1" -c ${COUNT:-1} --section SpeedOfLight \
    --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats \
    ${METRICS:+--metrics "$METRICS"} \
    build/convt3d tune --problems ${FILE:-problems/bench.json} --only "$2" --precision "$3" \
    --cache "$OUT/ncu_cache_$4.sqlite" >"$OUT/ncu_$4.txt" 2>&1
  echo "== ncu $4 rc=$?"
  grep -vE "^==PROF==|^convt3d|^\[|^ *$" "$OUT/ncu_$4.txt" | grep -E "[0-9]" | grep -vE "^-" | head -${LINES_PER:-75}
}
# PROFILES="regex,problem,precision,tag;..." (default: the two profiled in session 3)
PROFILES=${PROFILES:-"igemm_mma_tf32_q1x8x32_w4x1_m4n8_k8,L1-68,tf32,mma68;igemm_simt_f32_q1x8x32_t4x8_n1_k4,WB-64,fp32,wb64"}
IFS=';' read -ra items <<<"$PROFILES"
for it in "${items[@]}"; do
  IFS=',' read -r re prob prec tag <<<"$it"
  profile "$re" "$prob" "$prec" "$tag"
done
