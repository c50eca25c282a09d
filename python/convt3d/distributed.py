"""convt3d.distributed: tune a problem list on many machines with Ray, merged into one cache.

    python -m convt3d.distributed tune PROBLEMS [--precision fp32,tf32] [--address auto]
        [--cache PATH] [--compile-only] [--max-candidates N] [--resource NAME] [--cli PATH]

Each (problem, mode) pair is one Ray task holding one GPU (``num_gpus=1``; ``--resource NAME``
asks for one unit of a custom resource instead). A task runs the ``convt3d`` CLI in a
subprocess: ``convt3d tune`` into its own temporary cache file, then ``convt3d cache export``
of that file, and returns the export. The driver imports every export into the target cache
(``convt3d cache import``) and prints one row per pair. With ``--compile-only`` the tasks only
NVRTC-compile the candidates (no GPU needed) and return the counts; nothing is merged.

Ray is optional (``pip install convt3d[distributed]``): it is imported by ``main`` only.
The CLI is looked up at ``--cli``, ``$CONVT3D_CLI``, beside ``$CONVT3D_LIBRARY``, in
``<repo>/build`` (a source checkout) and on ``PATH``, on the driver and on each worker.
"""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

PACKAGE = Path(__file__).resolve().parent
REPO = PACKAGE.parents[1]  # a source checkout: python/convt3d -> the repository root
NO_RAY = "convt3d.distributed needs Ray: pip install convt3d[distributed]"


def find_cli(explicit: Optional[str] = None) -> str:
    """The convt3d CLI's path; raises FileNotFoundError naming every place looked at."""
    candidates = [explicit, os.environ.get("CONVT3D_CLI")]
    lib = os.environ.get("CONVT3D_LIBRARY")
    if lib:
        candidates.append(str(Path(lib).parent / "convt3d"))
    candidates += [str(PACKAGE / "convt3d"), str(REPO / "build" / "convt3d"),
                   shutil.which("convt3d")]
    looked = [c for c in candidates if c]
    for c in looked:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
        if c == explicit:
            break  # an explicit --cli that is not there is an error, not a hint
    raise FileNotFoundError("convt3d CLI not found (looked at: " + ", ".join(looked) +
                            "); pass --cli PATH or set CONVT3D_CLI")


def problem_list_path(entry: str, cli: str) -> Path:
    """A problem list's file: a JSON path, or a name (kernelbench-l1, models, bench) looked up
    like the CLI does: <cli dir>/../share/convt3d/problems, then <repo>/problems."""
    if entry.endswith(".json") or "/" in entry:
        return Path(entry)
    name = entry.replace("-", "_") + ".json"
    dirs = [Path(cli).resolve().parent.parent / "share" / "convt3d" / "problems", REPO / "problems"]
    for d in dirs:
        if (d / name).is_file():
            return d / name
    raise FileNotFoundError(f"problem list {entry!r}: no {name} in " + ", ".join(map(str, dirs)))


def load_pairs(problems: str, only: str, precision: str, cli: str) -> List[Tuple[Dict, str]]:
    """The (problem JSON object, mode) pairs to tune, problems in file order, modes inner."""
    path = problem_list_path(problems, cli)
    doc = json.loads(path.read_text())
    listed = doc["problems"] if isinstance(doc, dict) else doc
    names = [n for n in only.split(",") if n]
    missing = [n for n in names if n not in [p.get("name") for p in listed]]
    if missing:
        raise ValueError(f"--only: no problem named {missing[0]!r} in {path}")
    kept = [p for p in listed if not names or p.get("name") in names]
    modes = [m for m in precision.split(",") if m]
    return [(p, m) for p in kept for m in modes]


def run_pair(problem: Dict, mode: str, compile_only: bool, max_candidates: int,
             cli_hint: Optional[str]) -> Dict[str, Any]:
    """One pair, on whichever machine runs it: tune (or compile) into a fresh cache file and
    return the tune result, the export (None in compile-only mode) and where it ran."""
    t0 = time.time()
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    out: Dict[str, Any] = {"name": problem.get("name", "?"), "mode": mode,
                           "where": socket.gethostname() + (f":gpu{gpus}" if gpus else ""),
                           "export": None, "error": ""}
    try:
        cli = find_cli(cli_hint)
    except FileNotFoundError as e:
        out.update(error=str(e), seconds=time.time() - t0)
        return out
    with tempfile.TemporaryDirectory(prefix="convt3d-pair-") as tmp:
        plist, cache = os.path.join(tmp, "problem.json"), os.path.join(tmp, "cache.sqlite")
        Path(plist).write_text(json.dumps({"problems": [problem]}))
        cmd = [cli, "tune", "--problems", plist, "--precision", mode, "--cache", cache,
               "--json", "-", "--max-candidates", str(max_candidates)]
        cmd += ["--compile-only"] if compile_only else ["--require-gpu"]
        tune = subprocess.run(cmd, capture_output=True, text=True)
        try:
            out["result"] = json.loads(tune.stdout)["results"][0]
        except (ValueError, KeyError, IndexError):
            out["result"] = {}
        if tune.returncode != 0:
            out["error"] = f"convt3d tune exited {tune.returncode}: " + _tail(tune.stderr)
        elif not compile_only:
            export = subprocess.run([cli, "cache", "export", "-", "--cache", cache],
                                    capture_output=True, text=True)
            if export.returncode != 0:
                out["error"] = f"convt3d cache export exited {export.returncode}: " + \
                    _tail(export.stderr)
            else:
                out["export"] = export.stdout
    out["seconds"] = time.time() - t0
    return out


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(text.strip().splitlines()[-lines:]) or "(no output)"


def merge_exports(cli: str, exports: List[str], cache: Optional[str]) -> Tuple[int, int, List[str]]:
    """Imports each export into `cache` (None: the CLI's default cache) with `convt3d cache
    import`; returns (imported, skipped, problems), problems naming each failed import or
    skipped entry."""
    imported = skipped = 0
    problems: List[str] = []
    with tempfile.TemporaryDirectory(prefix="convt3d-merge-") as tmp:
        for i, text in enumerate(exports):
            path = os.path.join(tmp, f"export-{i}.json")
            Path(path).write_text(text)
            cmd = [cli, "cache", "import", path] + (["--cache", cache] if cache else [])
            r = subprocess.run(cmd, capture_output=True, text=True)
            m = re.search(r"imported (\d+), skipped (\d+)", r.stdout)
            if not m:
                problems.append(f"convt3d cache import of export {i} exited {r.returncode}: " +
                                _tail(r.stderr + r.stdout))
                continue
            imported += int(m.group(1))
            skipped += int(m.group(2))
            problems += [line.strip() for line in r.stdout.splitlines()
                         if line.startswith("  skipped")]
    return imported, skipped, problems


def summary_table(results: List[Dict[str, Any]], compile_only: bool) -> str:
    """One row per pair: kernel and ms (tuned) or candidates and compiled counts."""
    head = ["pair", "candidates", "compiled"] if compile_only else ["pair", "kernel", "ms"]
    rows = [head + ["where", "seconds", "status"]]
    for r in results:
        res = r.get("result", {})
        pair = res.get("name") or (r["name"] + ("" if r["mode"] == "fp32" else "/" + r["mode"]))
        if compile_only:
            cols = [str(res.get("candidates", "-")), str(res.get("compiled", "-"))]
        else:
            ms = res.get("ms")
            cols = [str(res.get("kernel", "-")), f"{ms:.4f}" if isinstance(ms, float) else "-"]
        status = "ok" if not r["error"] else "failed"
        rows.append([pair] + cols + [r["where"], f"{r['seconds']:.1f}", status])
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows)


def tune(args: argparse.Namespace, ray: Any) -> int:
    """Fans the pairs out as Ray tasks, merges what they return and prints the summary."""
    cli = find_cli(args.cli)
    pairs = load_pairs(args.problems, args.only, args.precision, cli)
    if not pairs:
        print("convt3d.distributed: no (problem, mode) pair to tune", file=sys.stderr)
        return 2
    if not ray.is_initialized():
        ray.init(address=args.address, include_dashboard=False)
    need = args.resource or "GPU"
    if ray.cluster_resources().get(need, 0) < 1:
        print(f"convt3d.distributed: the Ray cluster has no {need} resource "
              f"(have: {', '.join(sorted(ray.cluster_resources()))})", file=sys.stderr)
        return 2
    resources = {"num_gpus": 0, "resources": {args.resource: 1}} if args.resource \
        else {"num_gpus": 1}
    task = ray.remote(run_pair).options(num_cpus=1, **resources)
    print(f"convt3d.distributed: {len(pairs)} pairs on Ray "
          f"({'1 ' + args.resource if args.resource else '1 GPU'} each)", file=sys.stderr)
    refs = [task.remote(p, m, args.compile_only, args.max_candidates, args.cli) for p, m in pairs]
    results = ray.get(refs)
    print(summary_table(results, args.compile_only))
    failed = [r for r in results if r["error"]]
    for r in failed:
        print(f"failed: {r['name']} {r['mode']} on {r['where']}: {r['error']}")
    if args.compile_only:
        compiled = sum(r.get("result", {}).get("compiled", 0) for r in results)
        print(f"compile-only: {len(results)} pairs, {compiled} candidates compiled; "
              "nothing to merge")
    else:
        exports = [r["export"] for r in results if r["export"]]
        imported, skipped, problems = merge_exports(cli, exports, args.cache)
        print(f"merged {len(exports)} exports: imported {imported}, skipped {skipped} into "
              f"{args.cache or 'the default cache'}")
        for p in problems:
            print("  " + p)
        if problems:
            return 1
    return 1 if failed else 0


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m convt3d.distributed",
                                 description="Tune a problem list on a Ray cluster's GPUs.")
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tune", help="tune every (problem, mode) pair, one Ray task each")
    t.add_argument("problems", help="a problem list: kernelbench-l1, models, bench or a JSON file")
    t.add_argument("--only", default="", help="only these problem names, comma-separated")
    t.add_argument("--precision", default="fp32", help="modes, comma-separated (as convt3d tune)")
    t.add_argument("--address", default=None, help="Ray cluster address (auto: the running one; "
                   "default: start a local instance)")
    t.add_argument("--cache", default=None, help="cache file to merge into (default: the CLI's)")
    t.add_argument("--compile-only", action="store_true",
                   help="only NVRTC-compile the candidates (no GPU); nothing is merged")
    t.add_argument("--max-candidates", type=int, default=0, help="per pair, best first (0: all)")
    t.add_argument("--resource", default="", help="give each task one unit of this custom Ray "
                   "resource instead of a GPU (for compile-only runs and tests: Ray may "
                   "hide GPUs from a task that holds none)")
    t.add_argument("--cli", default=None, help="path of the convt3d CLI (driver and workers)")
    return ap.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    try:
        import ray
    except ImportError:
        print(NO_RAY, file=sys.stderr)
        return 2
    try:
        return tune(args, ray)
    except (FileNotFoundError, ValueError, KeyError) as e:
        print(f"convt3d.distributed: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
