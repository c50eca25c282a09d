#!/usr/bin/env bash
# sanitize.sh: builds the CPU tests with ASan+UBSan into build-asan and runs them; any report fails.
# Left out, because their time goes to NVRTC and ptxas (uninstrumented libraries) compiling every
# candidate of a list, while the host code they drive (generator, sources, CompileAll) runs under
# the sanitizers in the golden, family, hostile and first-candidate compile tests:
#   Compile.EveryLevel1*, Compile.{Wgmma,GemmWgmma,ShuffleWgmma,DirectTile,Winograd,Fft,StagedMma}Candidates*,
#   HostileCompile.RandomValidProblemsCompileEveryCandidate, CliTest.CompileOnlyTinyProblem.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ASAN_BUILD_DIR:-build-asan}
# The package tests (label package: an install and a pip build of their own) run in test.sh.
# -O0 -g1: a third of -O1 -g's compile time; the sanitizers check the same.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O0 -g1" \
  -DCONVT3D_SANITIZE=ON -DCUDAToolkit_ROOT="${CUDA_HOME:-/usr/local/cuda}" >/dev/null
cmake --build "$build" -j "$(nproc)" --target cpu_tests
skip='^(Compile\.(EveryLevel1|Wgmma|GemmWgmma|ShuffleWgmma|DirectTile|Winograd|Fft|StagedMma)'
skip+='|HostileCompile\.RandomValidProblemsCompileEveryCandidate|CliTest\.CompileOnlyTinyProblem)'
# Leak checking is off in the CLI processes that tests start (tests/cli_helpers.h says why).
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$build" --output-on-failure -j "$(nproc)" -L nogpu -LE package -E "$skip" "$@"
