#!/usr/bin/env bash
# resources.sh: registers, stack and SASS opcode counts of every candidate of one problem and mode
# (NVRTC compile-only, no GPU needed; HGMMA: wgmma). Compare two builds' outputs to catch register changes that
# no test sees (session 5: a refactor took L1-70's winner from 124 to 96 registers, 14% slower).
#   scripts/resources.sh L1-70 tf32 [build]    # problem name in problems/bench.json, mode
set -euo pipefail
prob=${1:?problem name, e.g. L1-70} mode=${2:?mode: fp32, fp32x3, tf32, bf16 or f16} build=${3:-build}
CUOBJDUMP=${CUOBJDUMP:-$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null ||
  python3 -c 'import nvidia.cu13,os;print(os.path.join(list(nvidia.cu13.__path__)[0],"bin","cuobjdump"))')}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$build/convt3d" tune --problems problems/bench.json --only "$prob" --precision "$mode" \
  --compile-only --emit "$dir" >/dev/null
printf '%-52s %5s %6s %6s %6s %6s %6s\n' kernel regs stack HMMA HGMMA FFMA LDS
for f in "$dir"/*/*.cubin; do
  k=$(basename "$f" .cubin)
  res=$("$CUOBJDUMP" -res-usage "$f" | grep -A1 "Function $k:" | tail -1)
  sass=$("$CUOBJDUMP" -sass -fun "$k" "$f")
  printf '%-52s %5s %6s %6s %6s %6s %6s\n' "$k" "$(grep -o 'REG:[0-9]*' <<<"$res" | cut -d: -f2)" \
    "$(grep -o 'STACK:[0-9]*' <<<"$res" | cut -d: -f2)" "$(grep -c ' HMMA' <<<"$sass" || true)" \
    "$(grep -c 'HGMMA' <<<"$sass" || true)" \
    "$(grep -c 'FFMA' <<<"$sass" || true)" "$(grep -c 'LDS' <<<"$sass" || true)"
done
