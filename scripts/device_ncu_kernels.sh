#!/usr/bin/env bash
# device_ncu_kernels.sh: per-kernel time, DRAM bytes and pipe use of every launch of one
# candidate (all of its kernels: prep, prepx, main, post) during tuning.
# KERNELS="name,problem,precision,launches;..." (name: a candidate's full name).
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}
mkdir -p "$OUT"
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum
M+=,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed
M+=,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,smsp__inst_executed.sum
IFS=';' read -ra items <<<"${KERNELS:?}"
for it in "${items[@]}"; do
  IFS=',' read -r name prob prec count <<<"$it"
  timeout 300 ncu --clock-control none -k "regex:^${name}" -c "${count:-13}" --metrics "$M" --csv \
    build/convt3d tune --problems ${FILE:-problems/bench.json} --only "$prob" --precision "$prec" \
    --cache "$OUT/ncuk_$prob.sqlite" >"$OUT/ncuk_${prob}_$prec.csv" 2>"$OUT/ncuk_${prob}_$prec.err"
  echo "== $name $prob $prec rc=$?"
  python3 - "$OUT/ncuk_${prob}_$prec.csv" <<'PY'
import sys
sys.path.insert(0, "scripts")
from ncu_csv import kind_of, sums_by
agg = sums_by(sys.argv[1], kind_of)
if not agg: sys.exit(print("no rows"))
print(f"{'kernel':6} {'n':>3} {'ms/launch':>9} {'DRAM GB':>8} {'L2 GB':>7} {'fma%':>5} {'sm%':>5} {'warps%':>6} {'regs':>4} {'Ginst':>6}")
for kind, a in agg.items():
    n = a["n"]
    print(f"{kind:6} {int(n):3} {a['gpu__time_duration.sum']/n/1e6:9.4f} "
          f"{(a['dram__bytes_read.sum']+a['dram__bytes_write.sum'])/n/1e9:8.3f} {a['lts__t_bytes.sum']/n/1e9:7.3f} "
          f"{a['sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active']/n:5.1f} "
          f"{a['sm__throughput.avg.pct_of_peak_sustained_elapsed']/n:5.1f} "
          f"{a['sm__warps_active.avg.pct_of_peak_sustained_active']/n:6.1f} {a['launch__registers_per_thread']/n:4.0f} "
          f"{a['smsp__inst_executed.sum']/n/1e9:6.3f}")
PY
done
