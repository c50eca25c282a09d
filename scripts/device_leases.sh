#!/usr/bin/env bash
# device_leases.sh: issue 24's single-flight targets on a GPU with the real engine. 16 `convt3d
# tune --policy if-missing` processes on one cache file, 8 on one missing shape and 8 on 8 other
# shapes: one tuning run per shape, every process finishes, no error, every row stored. Then
# kill -9 of a process while it tunes: another, started with --wait, tunes the shape once the
# dead holder's lease expires (30 s). Logs under $OUT, a table last.
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}
mkdir -p "$OUT"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
C="$OUT/leases.sqlite"
rm -f "$C" "$C-wal" "$C-shm"
common="--kernel-size 3 --stride 2 --padding 1 --policy if-missing --cache $C --max-candidates 12"
same="--input 4,32,16,16,16 --out-channels 32"
pids=()
for i in ${ONLY_KILL:+none} 0 1 2 3 4 5 6 7; do
  [ "$i" = none ] && break
  timeout 300 build/convt3d tune $same $common >"$OUT/same_$i.txt" 2>&1 &
  pids+=($!)
  timeout 300 build/convt3d tune --input 2,$((8 + 8 * i)),8,8,8 --out-channels 16 $common \
    >"$OUT/other_$i.txt" 2>&1 &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
# The "source" column of tune's table: tuned, cache or heuristic (a stand-in while another tunes).
source_of() { grep -oE "  (tuned|cache|heuristic)  " "$1" | head -1 | tr -d ' '; }
same_sources=$(for i in 0 1 2 3 4 5 6 7; do source_of "$OUT/same_$i.txt"; done | sort | uniq -c | tr '\n' ' ')
other_sources=$(for i in 0 1 2 3 4 5 6 7; do source_of "$OUT/other_$i.txt"; done | sort | uniq -c | tr '\n' ' ')
errors=$(cat "$OUT"/same_*.txt "$OUT"/other_*.txt | grep -ciE "error|warning|locked" || true)
entries=$(build/convt3d cache list --cache "$C" --json 2>/dev/null |
  python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d if isinstance(d, list) else d.get("entries", [])))')

if [ -n "${ONLY_KILL:-}" ]; then failed=-; same_sources=-; other_sources=-; entries=-; errors=-; fi
echo "== kill -9 of a tuning owner"
K="$OUT/kill.sqlite"
rm -f "$K" "$K-wal" "$K-shm"
# A shape that takes ~10 s to tune (level-1's L1-70 in tf32: ~60 candidates, 3.7 ms each).
shape="--problems kernelbench-l1 --only L1-70 --precision tf32"
build/convt3d tune $shape --policy if-missing --cache "$K" >"$OUT/kill_a.txt" 2>&1 &
a=$!
sleep "${KILL_AFTER:-4}"
kill -9 "$a"
wait "$a" 2>/dev/null
start=$(date +%s.%N)
timeout 240 build/convt3d tune $shape --policy if-missing --cache "$K" --wait 120 \
  >"$OUT/kill_b.txt" 2>&1
b_rc=$?
b_s=$(python3 -c "import time; print(f'{time.time() - $start:.1f}')")
b_source=$(source_of "$OUT/kill_b.txt")
k_entries=$(build/convt3d cache list --cache "$K" --json 2>/dev/null |
  python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d if isinstance(d, list) else d.get("entries", [])))')

echo
echo "measure                                                   value   target"
printf "%-56s  %-7s %s\n" "16 processes: failed" "$failed" "0"
printf "%-56s  %-7s %s\n" "same shape (8): sources" "$same_sources" "1 tuned, 7 heuristic or cache"
printf "%-56s  %-7s %s\n" "8 other shapes: sources" "$other_sources" "8 tuned"
printf "%-56s  %-7s %s\n" "cache rows" "$entries" "9"
printf "%-56s  %-7s %s\n" "error or warning lines" "$errors" "0"
printf "%-56s  %-7s %s\n" "killed owner: waiter rc / seconds / source" "$b_rc / $b_s / $b_source" "0 / ~30-60 / tuned"
printf "%-56s  %-7s %s\n" "killed owner: cache rows" "$k_entries" "1"
