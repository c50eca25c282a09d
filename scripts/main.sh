#!/usr/bin/env bash
# main.sh: the main job: build, then tune the seven KernelBench level-1 problems into the cache.
# Without a GPU, `convt3d tune` compiles only: by default the heuristic pick and the next
# best-ranked candidates (3 per problem and mode: a few minutes on 2 cores); --all-candidates
# compiles every candidate (about 30 minutes on 2 cores). Other arguments go to `convt3d tune`.
set -euo pipefail
cd "$(dirname "$0")/.."
CONVT3D_TARGET=convt3d_cli scripts/setup.sh
build=${BUILD_DIR:-build}
cli=$build/convt3d

args=()
all=0
for a in "$@"; do
  if [ "$a" = --all-candidates ]; then all=1; else args+=("$a"); fi
done
gpu=1
# The whole output first: under pipefail, `info | grep -q` can fail by SIGPIPE on a match.
info=$("$cli" info)
grep -q '^GPU *none' <<<"$info" && gpu=0
if [ "$gpu" = 0 ] && [ "$all" = 0 ] && [[ " ${args[*]-} " != *" --max-candidates"* ]]; then
  args+=(--max-candidates 3)
fi
rc=0
"$cli" tune --problems kernelbench-l1 --precision fp32,fp32x3,tf32,bf16 ${args[@]+"${args[@]}"} || rc=$?
if [ "$gpu" = 0 ]; then
  echo
  echo "No GPU here: nothing was timed or cached; the table shows NVRTC compiles for sm_90."
  [ "$all" = 0 ] && echo "These were the heuristic pick and the next best-ranked candidates of each" \
    "problem and mode; scripts/main.sh --all-candidates compiles all of them."
  echo "On a machine with an NVIDIA GPU (H100/H200) the same command compiles every candidate,"
  echo "checks each against the fp64 reference under its mode's error contract, times the"
  echo "survivors (median, L2 flushed) and caches each winner with its cubin in"
  echo "$("$cli" cache path); then '$cli bench' compares them with cuDNN in one process."
fi
exit "$rc"
