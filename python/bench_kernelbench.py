#!/usr/bin/env python3
"""bench_kernelbench.py: KernelBench-style side-by-side of nn.ConvTranspose3d and convt3d.

For each problem of problems/kernelbench_l1.json: a reference Model (nn.ConvTranspose3d) and a
ModelNew (convt3d.torch.ConvTranspose3d) with the same weights; fp32 input; both checked with
torch.allclose(atol=1e-4, rtol=1e-4) against the fp64 result of the reference; each timed with
CUDA events (median of --repeats runs after --warmup) on PyTorch's current stream. The first
convt3d call (cache hit or tuning) is timed separately as "plan s".

    python python/bench_kernelbench.py                  # full sizes, PyTorch defaults (TF32 on)
    python python/bench_kernelbench.py --strict-fp32    # also nn with cuDNN TF32 off
    python python/bench_kernelbench.py --scale 4 --only L1-72,L1-73 --json out.json

Tune offline first (`build/convt3d tune --problems problems/kernelbench_l1.json`) so that the
first call is a cache hit; with the default policy a missing shape is tuned on first use.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

REPO = Path(__file__).resolve().parent.parent


def _import_convt3d():
    """convt3d.torch and convt3d.kernelbench (this checkout's when the package is not installed)."""
    try:
        import convt3d.kernelbench as kb
    except ImportError:  # running from a checkout without `pip install .`
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import convt3d.kernelbench as kb
    import convt3d.torch as ct

    return ct, kb


def time_ms(fn: Callable[[], object], warmup: int, repeats: int) -> float:
    """Median milliseconds of fn() over `repeats` runs, each between its own CUDA events."""
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", default=str(REPO / "problems" / "kernelbench_l1.json"))
    ap.add_argument("--only", default="", help="comma-separated names, e.g. L1-72,L1-73")
    ap.add_argument("--scale", type=int, default=1,
                    help="divide every spatial input size by this (batch kept)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--policy", default=None,
                    help="convt3d plan policy (default: $CONVT3D_POLICY or tune_if_missing)")
    ap.add_argument("--cache", default=None, help="SQLite cache (default: $CONVT3D_CACHE)")
    ap.add_argument("--max-candidates", type=int, default=None)
    ap.add_argument("--strict-fp32", action="store_true",
                    help="also time nn.ConvTranspose3d with cuDNN TF32 disabled")
    ap.add_argument("--verbose", action="store_true", help="tuning progress on stderr")
    ap.add_argument("--json", default="", help="write the rows as JSON here")
    args = ap.parse_args(argv)

    import torch

    ct, kb = _import_convt3d()
    Model, ModelNew = kb.Model, kb.ModelNew
    if not torch.cuda.is_available():
        print("bench_kernelbench: no CUDA device visible to PyTorch; nothing to time")
        return 2
    ct.configure(policy=args.policy, cache_path=args.cache, verbose=args.verbose,
                 max_candidates=args.max_candidates)

    doc = json.loads(Path(args.problems).read_text())
    only = {s for s in args.only.split(",") if s}
    rows: List[Dict[str, object]] = []
    tf32_default = torch.backends.cudnn.allow_tf32
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"cudnn.allow_tf32={tf32_default}", flush=True)

    def bench_one(p: Dict[str, object], shape: List[int]) -> Dict[str, object]:
        """One problem: allclose against fp64, then the timings (locals freed on return)."""
        kw = dict(in_channels=p["in_channels"], out_channels=p["out_channels"],
                  kernel_size=tuple(p["kernel"]), stride=tuple(p["stride"]),
                  padding=tuple(p["padding"]), output_padding=tuple(p["output_padding"]),
                  groups=p["groups"], bias=p["bias"], dilation=tuple(p["dilation"]))
        torch.manual_seed(0)
        model = Model(**kw).cuda()
        new = ModelNew(**kw).cuda()
        new.load_state_dict(model.state_dict())
        x = torch.randn(*shape, device="cuda")
        with torch.no_grad():
            ref64 = Model(**kw).cuda().double()
            ref64.load_state_dict(model.state_dict())
            expected = ref64(x.double())
            del ref64
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            y = new(x)  # plans: a cache hit, or tuning per the policy
            torch.cuda.synchronize()
            plan_s = time.perf_counter() - t0
            y_nn = model(x)
            ok = torch.allclose(y.double(), expected, atol=1e-4, rtol=1e-4)
            ok_nn = torch.allclose(y_nn.double(), expected, atol=1e-4, rtol=1e-4)
            err = (y.double() - expected).abs().max().item()
            err_nn = (y_nn.double() - expected).abs().max().item()
            del expected, y, y_nn
            ms_nn = time_ms(lambda: model(x), args.warmup, args.repeats)
            ms_new = time_ms(lambda: new(x), args.warmup, args.repeats)
            ms_strict = None
            if args.strict_fp32:
                torch.backends.cudnn.allow_tf32 = False
                try:
                    ms_strict = time_ms(lambda: model(x), args.warmup, args.repeats)
                finally:
                    torch.backends.cudnn.allow_tf32 = tf32_default
        plan = [q for q in ct.plans()
                if q["problem"].n == shape[0] and q["problem"].c_in == shape[1]
                and q["problem"].c_out == p["out_channels"]
                and q["problem"].in_size == tuple(shape[2:])
                and q["problem"].kernel == tuple(p["kernel"])
                and q["problem"].stride == tuple(p["stride"])]
        return {
            "problem": p["name"],
            "input": shape,
            "allclose": ok,
            "max_err": err,
            "nn_allclose": ok_nn,
            "nn_max_err": err_nn,
            "ms_nn": ms_nn,
            "ms_nn_strict_fp32": ms_strict,
            "ms_convt3d": ms_new,
            "speedup": ms_nn / ms_new,
            "plan_s": plan_s,
            "kernel": plan[-1]["kernel"] if plan else "",
            "plan_source": plan[-1]["source"] if plan else "",
        }

    for p in doc["problems"]:
        if only and p["name"] not in only:
            continue
        shape = list(p["input"])
        if args.scale > 1:
            shape = shape[:2] + [max(3, s // args.scale) for s in shape[2:]]
        row = bench_one(p, shape)
        rows.append(row)
        print(f"  {p['name']}: done ({row['plan_source']}, plan {row['plan_s']:.2f} s)",
              flush=True)
        torch.cuda.empty_cache()

    head = (f"{'problem':<8} {'allclose':>8} {'max err':>9} {'ms nn.ConvTranspose3d':>21} "
            f"{'ms convt3d':>10} {'speed-up':>8}")
    if args.strict_fp32:
        head += f" {'ms nn strict':>12} {'vs strict':>9}"
    head += f" {'nn max err':>10} {'plan s':>7}  kernel (source)"
    print(head)
    for r in rows:
        line = (f"{r['problem']:<8} {str(r['allclose']):>8} {r['max_err']:>9.2e} "
                f"{r['ms_nn']:>21.3f} {r['ms_convt3d']:>10.3f} {r['speedup']:>7.2f}x")
        if args.strict_fp32:
            line += f" {r['ms_nn_strict_fp32']:>12.3f} "
            line += f"{r['ms_nn_strict_fp32'] / r['ms_convt3d']:>8.2f}x"
        line += f" {r['nn_max_err']:>10.2e} {r['plan_s']:>7.2f}  {r['kernel']} ({r['plan_source']})"
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["allclose"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
