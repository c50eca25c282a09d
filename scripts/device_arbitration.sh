#!/usr/bin/env bash
# device_arbitration.sh: vendor arbitration on the device: the Arbitration GPU tests, then
# `convt3d bench --arbitration` of problem lists (LISTS, default "models kernelbench-l1") in each
# mode of MODES (default "fp32 fp32x3 tf32 bf16 f16"), one bench per (list, mode); last, one line
# per (problem, mode): ours alone, arbitrated, cuDNN's matching row, the arbitrated plan's kernel.
#   scripts/device_arbitration.sh                       # from the carried build/ folder
#   CACHE_IN=cache.sqlite MODES="fp32 tf32" LISTS=models scripts/device_arbitration.sh
# Every step is bounded by `timeout` (TEST_TIMEOUT, BENCH_TIMEOUT seconds) and the whole run by
# DEADLINE seconds (default 450): a bench that would start after it is skipped and says so. Both
# engines tune into one cache file ($OUT/cache_arbitration.sqlite; CACHE_IN seeds it, e.g. with an
# earlier run's, so that only the arbitrated keys need tuning).
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}
mkdir -p "$OUT"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export CONVT3D_CUDNN="$(python3 -c 'import os,nvidia.cudnn as c;print(os.path.join(list(c.__path__)[0],"lib"))' 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
start=$(date +%s)
DEADLINE=${DEADLINE:-450}
export CONVT3D_CACHE="$OUT/cache_arbitration.sqlite"
rm -f "$CONVT3D_CACHE"*
[ -n "${CACHE_IN:-}" ] && cp "$CACHE_IN" "$CONVT3D_CACHE"
build/convt3d info 2>&1 | grep -E "^(GPU|cuDNN)" || true

echo "== GPU tests (Arbitration.*)"
timeout ${TEST_TIMEOUT:-150} build/tests/test_gpu --gtest_brief=1 --gtest_filter='Arbitration.*' \
  >"$OUT/test_gpu_arbitration.log" 2>&1
echo "test_gpu[arbitration] rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$OUT/test_gpu_arbitration.log" | tr '\n' ' ')"
grep -E "Failure|Skipped|no cuDNN|winner " -A3 "$OUT/test_gpu_arbitration.log" | head -20

jsons=()
for list in ${LISTS:-models kernelbench-l1}; do
  for mode in ${MODES:-fp32 fp32x3 tf32 bf16 f16}; do
    tag="${list}_${mode}"
    if (( $(date +%s) - start > DEADLINE )); then
      echo "== bench $list $mode skipped: past DEADLINE=${DEADLINE}s"
      continue
    fi
    t0=$(date +%s)
    timeout ${BENCH_TIMEOUT:-240} build/convt3d bench --problems "$list" --precision "$mode" \
      --arbitration --json "$OUT/arb_$tag.json" --csv "$OUT/arb_$tag.csv" --svg "" \
      >"$OUT/arb_$tag.log" 2>&1
    echo "== bench $list $mode rc=$? $(( $(date +%s) - t0 )) s"
    [ -s "$OUT/arb_$tag.json" ] && jsons+=("$OUT/arb_$tag.json")
  done
done

# The table: per problem and mode, ours alone, arbitrated and cuDNN (matching mode) in ms, the
# arbitrated plan's kernel and its speed-up over cuDNN; then the worst of those per mode (the
# issue's target: no problem below 0.98x with arbitration on).
python3 - "${jsons[@]}" <<'EOF'
import json, sys
worst = {}
print(f"{'problem':<22} {'mode':<7} {'ours ms':>9} {'arb ms':>9} {'cuDNN ms':>9} {'arb/cuDNN':>9}  arbitrated kernel")
for path in sys.argv[1:]:
    for p in json.load(open(path))["problems"]:
        rows = {(r["impl"], r["mode"]): r for r in p["rows"]}
        for (impl, mode), r in rows.items():
            if impl != "convt3d":
                continue
            a = rows.get(("arbitrated", mode), {})
            c = rows.get(("cudnn", r.get("match_mode", mode)), {})
            ms = lambda x: x.get("ms") if x.get("ok") else None
            f = lambda v: "-" if v is None else f"{v:.4f}"
            s = a.get("speedup_vs_cudnn_match") if a.get("ok") else None
            if s is not None and (mode not in worst or s < worst[mode][0]):
                worst[mode] = (s, p["name"])
            print(f"{p['name']:<22} {mode:<7} {f(ms(r)):>9} {f(ms(a)):>9} {f(ms(c)):>9} "
                  f"{'-' if s is None else f'{s:.2f}x':>9}  {a.get('detail', '-')}")
for mode, (s, name) in worst.items():
    print(f"worst arbitrated vs cuDNN in {mode}: {s:.2f}x ({name}){'' if s >= 0.98 else '  BELOW 0.98x'}")
EOF
echo "total $(( $(date +%s) - start )) s"
