#!/usr/bin/env bash
# device_narrow.sh: device_cycle.sh for narrow_gemm (its GPU suite, GAN-5 and MUN-4).
FILTER=${FILTER-*RandomNarrowGemm*} ONLY=${ONLY:-GAN-5,MUN-4} FAMILIES=${FAMILIES:-narrow} \
  exec "$(dirname "$0")/device_cycle.sh"
