#!/usr/bin/env bash
# device_bench.sh: level-1 tuning, warm-start proof, cuDNN side-by-side bench, PyTorch table.
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}
mkdir -p "$OUT"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export CONVT3D_CACHE="$OUT/cache.sqlite" PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
export CONVT3D_CUDNN="$(python3 -c 'import os,nvidia.cudnn as c;print(os.path.join(list(c.__path__)[0],"lib"))' 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "== tune"
timeout 240 build/convt3d tune --problems problems/kernelbench_l1.json --json "$OUT/tune.json" \
  2>"$OUT/tune_progress.log" | tee "$OUT/tune_table.txt"
echo "== warm start"
build/warm_start problems/kernelbench_l1.json "$CONVT3D_CACHE" | tee "$OUT/warm_start.log"
echo "== python re-run of the 4 earlier failures"
timeout 60 python3 python/tests/run_tests.py -k "dtypes or cuda_graph" 2>&1 | tail -3
echo "== bench"
timeout 250 build/convt3d bench --problems kernelbench_l1 --json "$OUT/bench.json" --csv "$OUT/bench.csv" \
  --svg "$OUT/bench.svg" >"$OUT/bench.log" 2>&1
echo "bench rc=$?"; tail -40 "$OUT/bench.log"
echo "== kernelbench (PyTorch)"
timeout 120 python3 python/bench_kernelbench.py --policy cache_or_heuristic --json "$OUT/kb.json" \
  2>&1 | tail -14
