#!/usr/bin/env bash
# device_plan_kernels.sh: where a tuned plan's time goes: bench ONLY in PREC (tuning into a cache),
# list the winners, then replay the bench from that cache under ncu and print each of our
# kernels' duration, grid, registers, issue and FMA use beside the bench's median.
set -uo pipefail
OUT=${OUT:-/tmp/o}; mkdir -p $OUT
export CONVT3D_CUDNN="$(python3 -c 'import os,nvidia.cudnn as c;print(os.path.join(list(c.__path__)[0],"lib"))' 2>/dev/null)"
nvidia-smi --query-gpu=name --format=csv,noheader
C=$OUT/plans.sqlite
timeout ${BT:-300} build/convt3d bench --problems ${FILE:-models} --only ${ONLY:?} --precision ${PREC:-fp32} \
  --cache $C --json $OUT/b.json --csv '' --svg '' >$OUT/bench.log 2>&1
echo "== bench rc=$?"
python3 scripts/bench_table.py $OUT/b.json 2>&1 | grep -E "^\|" | cut -d'|' -f2-8
build/convt3d cache list --wide --cache $C 2>&1 | cut -c1-220 | head -${SHOW_LINES:-40}
M=gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread
M+=,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
M+=,sm__warps_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,dram__bytes_write.sum,sm__cycles_active.avg
M+=,sm__cycles_active.max,gpc__cycles_elapsed.max,gpc__cycles_elapsed.avg.per_second
timeout ${NT:-300} ncu --clock-control none -k "regex:${KRE:-^(shuffle|gemm|narrow|direct|igemm|fft|lattice|winograd)}" \
  --metrics "$M" --csv build/convt3d bench --problems ${FILE:-models} --only $ONLY --precision ${PREC:-fp32} \
  --cache $C --repeats 20 --warmup 0 --json '' --csv '' --svg '' >$OUT/ncu.csv 2>$OUT/ncu.err
echo "== ncu rc=$?"
python3 - $OUT/ncu.csv <<'PY'
import sys
sys.path.insert(0, "scripts")
from ncu_csv import sums_by
agg = sums_by(sys.argv[1], lambda kernel: kernel)
if not agg: sys.exit(print("no rows"))
print(f"{'kernel':58} {'n':>2} {'us':>7} {'grid':>5} {'blk':>4} {'regs':>4} {'issue%':>6} {'fma%':>5} {'warps%':>6} {'DRAM MB':>8} {'act%':>5} {'max%':>5} {'MHz':>5}")
for k, a in agg.items():
    n = a["n"]; g = lambda key: a[key] / n
    print(f"{k[:58]:58} {int(n):2} {g('gpu__time_duration.sum')/1e3:7.1f} {g('launch__grid_size'):5.0f} {g('launch__block_size'):4.0f} "
          f"{g('launch__registers_per_thread'):4.0f} {g('smsp__issue_active.avg.pct_of_peak_sustained_active'):6.1f} "
          f"{g('sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active'):5.1f} {g('sm__warps_active.avg.pct_of_peak_sustained_active'):6.1f} "
          f"{(g('dram__bytes_read.sum')+g('dram__bytes_write.sum'))/1e6:8.1f} "
          f"{100*g('sm__cycles_active.avg')/max(g('gpc__cycles_elapsed.max'),1):5.1f} {100*g('sm__cycles_active.max')/max(g('gpc__cycles_elapsed.max'),1):5.1f} "
          f"{g('gpc__cycles_elapsed.avg.per_second')/1e6:5.0f}")
PY
