#!/usr/bin/env bash
# device_final.sh: engine GPU tests after the last C++ edits, the whole Python suite, a
# torch.compile graph-break count, and an Nsight Compute profile of the L1-68 igemm kernel.
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}
mkdir -p "$OUT"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export CONVT3D_CACHE="$OUT/cache.sqlite" PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
build/tests/test_gpu --gtest_brief=1 --gtest_filter='Engine.*:Gpu/Level1.*' 2>&1 | tail -2
build/tests/test_c_api --gtest_brief=1 2>&1 | tail -2
echo "== python"
timeout 300 python3 python/tests/run_tests.py >"$OUT/py_tests.log" 2>&1
echo "python rc=$?"; grep -E "passed|failed" "$OUT/py_tests.log" | tail -3
grep -E "^(FAILED|ERROR)|^SKIPPED" "$OUT/py_tests.log" | head
echo "== torch.compile graph breaks"
python3 - <<'PY' 2>&1 | tail -4
import torch, torch.nn as nn, convt3d.torch as ct
m = nn.Sequential(ct.ConvTranspose3d(8, 4, 3, stride=2, padding=1, output_padding=1), nn.GELU(),
                  ct.ConvTranspose3d(4, 4, (1, 3, 3), padding=(0, 1, 1))).cuda()
x = torch.randn(2, 8, 5, 6, 7, device="cuda")
e = torch._dynamo.explain(m)(x)
print("torch", torch.__version__, "graphs:", e.graph_count, "graph breaks:", e.graph_break_count,
      "ops:", e.op_count)
PY
echo "== ncu (L1-68, heuristic igemm candidate)"
timeout 200 ncu --clock-control none -k regex:igemm -c 1 --section SpeedOfLight \
  --section Occupancy --section LaunchStats --section WarpStateStats \
  --section ComputeWorkloadAnalysis --section InstructionStats \
  build/convt3d tune --problems problems/kernelbench_l1.json --only L1-68 --max-candidates 1 \
  --cache "$OUT/ncu_cache.sqlite" >"$OUT/ncu.txt" 2>&1
echo "ncu rc=$?"; grep -vE "^==PROF==|^convt3d" "$OUT/ncu.txt" | grep -E "[0-9]" | head -70
