#!/usr/bin/env python3
"""torch_host_time.py: host microseconds per call of convt3d.torch.conv_transpose3d on a small
layer, through the direct eager path, through the custom op, and of F.conv_transpose3d (cuDNN).

Each timing is --calls calls under torch.no_grad() without a synchronisation, divided by the
calls: the host time a call costs while the GPU keeps up (a layer this small runs shorter on the
device than its host time). "sync" adds the final torch.cuda.synchronize (if it is much above
"host", the device was the bound). The modes are interleaved over --repeats rounds; the table
gives the median and the minimum. Default layer: NNU-2 (nnU-Net decoder 320 -> 256, 8^3 ->
16^3: input [2, 320, 8, 8, 8], weight [320, 256, 2, 2, 2], stride 2), float32, precision tf32.

    CONVT3D_LIBRARY=$PWD/build/libconvt3d.so.0.1.0 PYTHONPATH=$PWD/python \\
        python3 scripts/torch_host_time.py [--calls 2000] [--repeats 5] [--precision tf32]
        [--dtype float32] [--cprofile]

--cprofile also prints the 12 largest cProfile entries (tottime) of the direct and op paths.
The first call of each mode plans (a cache hit, or tuning per $CONVT3D_POLICY); it is not timed.
"""

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

try:
    import convt3d.torch as ct
except ImportError:  # running from a checkout without PYTHONPATH=python
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
    import convt3d.torch as ct

MODES = ("direct", "op", "cudnn")


def layer_call(mode: str, x, w, precision: str):
    """A zero-argument call of the layer in the given mode (setting convt3d's path for it)."""
    if mode == "cudnn":
        return lambda: F.conv_transpose3d(x, w, None, stride=2)
    # configure() forgets the plans: the caller warms the call up after this.
    ct.configure(direct_eager=(mode == "direct"))
    return lambda: ct.conv_transpose3d(x, w, None, stride=2, precision=precision)


def host_us(fn, calls: int, sync):
    """(host us per call without a sync, us per call including the final sync)."""
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    sync()
    t2 = time.perf_counter()
    return (t1 - t0) / calls * 1e6, (t2 - t0) / calls * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--precision", default="tf32", help="fp32, fp32x3 or tf32 (float32 only)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of this script only")
    ap.add_argument("--cprofile", action="store_true")
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("torch_host_time.py: no CUDA device (torch.cuda.is_available() is False)",
              file=sys.stderr)
        return 1
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    dtype = getattr(torch, args.dtype)
    # TF32 for cuDNN where convt3d runs tf32, strict otherwise: each side in its matching mode.
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    torch.manual_seed(0)
    x = torch.randn(2, 320, 8, 8, 8, device=args.device, dtype=dtype)
    w = torch.randn(320, 256, 2, 2, 2, device=args.device, dtype=dtype)
    name = torch.cuda.get_device_name(x.device) if x.is_cuda else args.device
    print(f"torch {torch.__version__}, {name}, NNU-2 {args.dtype} precision={args.precision}, "
          f"{args.calls} calls x {args.repeats} rounds, no_grad")
    results = {m: [] for m in MODES}
    with torch.no_grad():
        ct.configure(direct_eager=True)
        print(f"direct path allowed here: {ct._direct_allowed(x, w, None)} "
              f"(HAS_CUSTOM_OP={ct.HAS_CUSTOM_OP})")
        for _ in range(args.repeats):
            for mode in MODES:
                fn = layer_call(mode, x, w, args.precision)
                for _ in range(20):  # plan (first call) and warm up
                    fn()
                results[mode].append(host_us(fn, args.calls, sync))
        if args.cprofile:
            for mode in ("direct", "op"):
                fn = layer_call(mode, x, w, args.precision)
                fn()
                sync()
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(args.calls):
                    fn()
                prof.disable()
                sync()
                print(f"\ncProfile, {mode} ({args.calls} calls), by tottime:")
                pstats.Stats(prof).sort_stats("tottime").print_stats(12)
    ct.configure(direct_eager=True)

    print(f"\n{'mode':<8} {'host us/call (median)':>22} {'min':>8} {'sync us/call (median)':>22}")
    for mode in MODES:
        host = [h for h, _ in results[mode]]
        synced = [s for _, s in results[mode]]
        print(f"{mode:<8} {statistics.median(host):>22.1f} {min(host):>8.1f} "
              f"{statistics.median(synced):>22.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
