#!/usr/bin/env bash
# device_tests.sh: every GPU test tier on the device (C++ GPU tests, C API, bench, Python).
set -uo pipefail
OUT=${OUT:-/tmp/convt3d_out}
mkdir -p "$OUT"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export CONVT3D_CACHE="$OUT/test_cache.sqlite"
export CONVT3D_CUDNN="$(python3 -c 'import os,nvidia.cudnn as c;print(os.path.join(list(c.__path__)[0],"lib"))' 2>/dev/null)"
# test_gpu takes longer than one timeout in one process: run it in parts (PARTS selects some).
declare -A parts=(
  [strict]='Gpu/Level1.*:Gpu/RandomConfig.*:Engine.*'
  [tensor]='Gpu/Level1TensorCore.*:Gpu/RandomTensorCore.*'
  [half]='Gpu/Level1Half.*:Gpu/RandomHalf.*'
  [wgmma]='Gpu/RandomWgmma.*'
  [tile]='Gpu/RandomDirectTile.*:Gpu/RandomDirectTileMma.*'
  [wino]='Gpu/RandomWinograd.*'
  [lattice]='Gpu/RandomLattice.*:Gpu/RandomSubpixel.*'
  [fft]='Gpu/RandomFft.*'
  [gemm]='Gpu/RandomGemmWgmma.*:Gpu/RandomGemmWgmmaCm.*:Gpu/RandomGemmWgmmaHalo.*:Gpu/GemmWgmmaHaloPaths.*:Gpu/GemmWgmmaEpiloguePaths.*'
  [shuffle]='Gpu/RandomShuffleWgmma.*:Gpu/ShuffleWgmmaPaths.*'
  [shufflesimt]='Gpu/RandomShuffleSimt.*:Gpu/RandomShuffleSimtOverlap.*:Gpu/ShuffleSimtPaths.*'
  [simt]='Gpu/RandomGemmSimt.*'
  [narrow]='Gpu/RandomNarrowGemm.*'
  [overlap]='Gpu/RandomOverlapWgmma.*:OverlapWgmmaPaths.*'
  [cell]='Gpu/RandomCellSimt.*')
source scripts/gpu_shards.sh
for part in ${PARTS-strict tensor half wgmma tile wino lattice fft gemm shuffle shufflesimt simt narrow overlap cell}; do  # PARTS="" runs none
  echo "test_gpu[$part] $(TEST_TIMEOUT=${PART_TIMEOUT:-420} run_gpu_tests "$OUT/test_gpu_$part.log" "${parts[$part]}")"
  cat "$OUT/test_gpu_$part.log".* | grep -E "Failure|failed" -A3 | head -10
done
[[ ${SKIP_OTHERS:-0} == 1 ]] && exit 0
# OTHERS selects the other tiers: "cpp" (C API, bench, runtime tests) and "python".
[[ ${OTHERS-cpp python} == *cpp* ]] && for t in test_c_api test_bench test_runtime; do
  timeout 300 build/tests/$t --gtest_brief=1 >"$OUT/$t.log" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$OUT/$t.log" | tr '\n' ' ')"
done
[[ ${OTHERS-cpp python} == *python* ]] || exit 0
echo "== python"
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
timeout 420 python3 python/tests/run_tests.py >"$OUT/py_tests.log" 2>&1
echo "python rc=$?"; tail -25 "$OUT/py_tests.log"
