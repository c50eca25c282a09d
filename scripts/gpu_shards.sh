#!/usr/bin/env bash
# gpu_shards.sh: sourced by the device scripts. run_gpu_tests LOG FILTER runs build/tests/test_gpu
# on FILTER as $SHARDS gtest shards at once (default 4: the tests' time is mostly NVRTC compiles
# on the host's cores, so one GPU takes several processes; in one process the gemm suites ran
# past 230 s, in four 128 s), each bounded by $TEST_TIMEOUT seconds, one log per shard (LOG.N);
# prints one line: passed, failed and skipped counts over the shards and the worst exit status.
run_gpu_tests() {
  local log=$1 filter=$2 n=${SHARDS:-4} i rc=0 r pass=0 fail=0 skip=0
  local pids=()
  for ((i = 0; i < n; ++i)); do
    GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i timeout ${TEST_TIMEOUT:-420} build/tests/test_gpu \
      --gtest_brief=1 --gtest_filter="$filter" >"$log.$i" 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < n; ++i)); do
    wait "${pids[$i]}"; r=$?; ((r > rc)) && rc=$r
    pass=$((pass + $(sed -nE 's/^\[  PASSED  \] ([0-9]+) tests?\./\1/p' "$log.$i" | head -1 | grep . || echo 0)))
    skip=$((skip + $(sed -nE 's/^\[  SKIPPED \] ([0-9]+) tests?, listed below:|^\[  SKIPPED \] ([0-9]+) tests?\./\1\2/p' "$log.$i" | head -1 | grep . || echo 0)))
    fail=$((fail + $(sed -nE 's/^\[  FAILED  \] ([0-9]+) tests?, listed below:/\1/p' "$log.$i" | head -1 | grep . || echo 0)))
  done
  echo "rc=$rc passed=$pass failed=$fail skipped=$skip shards=$n (124: a shard timed out, its counts missing)"
  return $rc
}
