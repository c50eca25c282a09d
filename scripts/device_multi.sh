#!/usr/bin/env bash
# device_multi.sh: `convt3d tune --devices` on a 2-GPU machine: the level-1 list in every mode on
# GPU 0 alone, then on GPUs 0,1, each into a fresh cache; the throughput ratio (target >= 1.7x);
# then a fresh process serves every pair from the merged cache with 0 NVRTC compiles.
#
# Run from the repository root on the device machine (kind nvidia-h100-x2) with build/convt3d
# carried (it links the library statically). Logs and JSON under $OUT; a short table last.
# Knobs: PREC (modes, default all five), TUNE_ARGS (e.g. "--max-candidates 8"), STAGE (any of
# one,two,check; default all three; caches stay in $WORK between calls on a warm machine, so a
# long run can be split over calls), T_ONE / T_TWO (timeouts in seconds).
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}
WORK=${WORK:-/tmp/convt3d_multi}
PREC=${PREC:-fp32,fp32x3,tf32,bf16,f16}
STAGE=${STAGE:-one,two,check}
T_ONE=${T_ONE:-330}
T_TWO=${T_TWO:-200}
mkdir -p "$OUT" "$WORK"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
cli=build/convt3d
[ -x "$cli" ] || { echo "no $cli: build it here and carry it"; exit 2; }
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
nproc | sed 's/^/cores: /' | tee -a "$OUT/gpu.txt"
has() { [[ ",$STAGE," == *",$1,"* ]]; }

# tune_on NAME DEVICES TIMEOUT: a fresh cache $WORK/NAME.sqlite, JSON and logs under $OUT.
tune_on() {
  local name=$1 devices=$2 limit=$3
  rm -f "$WORK/$name.sqlite"*
  echo "== tune --devices $devices (fresh cache $WORK/$name.sqlite, timeout ${limit}s)"
  local t0=$SECONDS
  timeout "$limit" "$cli" tune --problems problems/kernelbench_l1.json --precision "$PREC" --devices "$devices" \
    --cache "$WORK/$name.sqlite" --json "$OUT/$name.json" ${TUNE_ARGS:-} \
    >"$OUT/$name.table.txt" 2>"$OUT/$name.progress.log"
  local rc=$?
  echo "rc=$rc ($((SECONDS - t0)) s)"
  [ $rc -eq 124 ] && echo "TIMED OUT after ${limit}s"
  tail -4 "$OUT/$name.table.txt"
  grep -E "^convt3d: " "$OUT/$name.progress.log" | grep -v "compiled " | head -10
  cp "$OUT/$name.json" "$WORK/$name.json" 2>/dev/null
  return 0
}

has one && tune_on one 0 "$T_ONE"
has two && tune_on two 0,1 "$T_TWO"

if has check; then
  echo "== a fresh process on the merged cache (policy if-missing): expect every pair from it"
  timeout 120 "$cli" tune --problems problems/kernelbench_l1.json --precision "$PREC" --policy if-missing \
    --cache "$WORK/two.sqlite" --json "$OUT/check.json" >"$OUT/check.table.txt" \
    2>"$OUT/check.progress.log"
  echo "rc=$?"
  tail -2 "$OUT/check.table.txt"
  timeout 60 "$cli" cache check --cache "$WORK/two.sqlite" >"$OUT/cache_check.txt" 2>&1
  echo "cache check rc=$?"; tail -2 "$OUT/cache_check.txt"
  timeout 60 "$cli" cache list --cache "$WORK/two.sqlite" >"$OUT/cache_list_two.txt" 2>&1
  timeout 60 "$cli" cache list --cache "$WORK/one.sqlite" >"$OUT/cache_list_one.txt" 2>&1
fi

echo "== summary"
python3 - "$WORK" "$OUT" <<'EOF'
import json, os, sys
work, out = sys.argv[1], sys.argv[2]
def load(name):
    for d in (out, work):
        try:
            return json.load(open(os.path.join(d, name + ".json")))
        except Exception:
            pass
    return None
rows, rate = [], {}
for name, label in (("one", "--devices 0"), ("two", "--devices 0,1")):
    j = load(name)
    if not j:
        rows.append((label, "-", "-", "-", "-", "missing (timed out or not run)"))
        continue
    res = j.get("results", [])
    ok = sum(r.get("status") == "ok" for r in res)
    wall = j.get("wall_seconds", 0)
    per = {}
    for r in res:
        per[r.get("device", "-")] = per.get(r.get("device", "-"), 0) + 1
    rate[name] = ok / wall if wall else 0
    rows.append((label, len(res), ok, "%.1f" % wall, "%.3f" % rate[name],
                 " ".join("gpu%s:%d" % kv for kv in sorted(per.items(), key=str))))
print("%-14s %6s %4s %8s %8s  %s" % ("run", "pairs", "ok", "wall s", "pairs/s", "per GPU"))
for r in rows:
    print("%-14s %6s %4s %8s %8s  %s" % r)
if rate.get("one") and rate.get("two"):
    ratio = rate["two"] / rate["one"]
    print("throughput ratio 2 GPUs / 1 GPU: %.2fx (target >= 1.7x): %s"
          % (ratio, "MET" if ratio >= 1.7 else "MISSED"))
c = load("check")
if c:
    res = c.get("results", [])
    cached = sum(r.get("source") == "cache" for r in res)
    compiles = c.get("engine", {}).get("nvrtc_compiles", -1)
    two = load("two")
    want = len(two.get("results", [])) if two else len(res)
    print("merged cache: %d/%d pairs served from it, %d NVRTC compiles: %s"
          % (cached, want, compiles, "PASS" if cached == want == len(res) and compiles == 0
             else "FAIL"))
EOF
