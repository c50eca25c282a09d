"""test_distributed.py: the Ray driver (convt3d.distributed): its pieces without Ray or a GPU,
and a compile-only run on a local Ray instance when Ray is installed."""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from helpers import REPO

import convt3d
from convt3d import distributed

CLI = Path(os.environ.get("CONVT3D_LIBRARY", REPO / "build" / "libconvt3d.so")).parent / "convt3d"
NO_CLI = "" if CLI.is_file() else f"the convt3d CLI is not built ({CLI})"
PACKAGE_ROOT = str(Path(convt3d.__file__).resolve().parents[1])
TMP = Path()  # a fresh folder per run of this module (setup_module)


def setup_module() -> None:
    global TMP
    TMP = Path(tempfile.mkdtemp(prefix="convt3d-test-distributed-"))


def teardown_module() -> None:
    shutil.rmtree(TMP, ignore_errors=True)


def tiny(name: str, kernel: int) -> dict:
    return {"name": name, "input": [1, 4, 4, 4, 4], "in_channels": 4, "out_channels": 4,
            "kernel": [kernel] * 3, "stride": [2, 2, 2], "padding": [0, 0, 0],
            "output_padding": [0, 0, 0], "dilation": [1, 1, 1], "groups": 1, "bias": False}


def problem_file(tmp: Path) -> Path:
    path = tmp / "tiny.json"
    path.write_text(json.dumps({"problems": [tiny("tiny-k2", 2), tiny("tiny-k3", 3)]}))
    return path


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True)


def test_without_ray_one_line_error_and_exit_2() -> None:
    code = ("import sys; sys.modules['ray'] = None; import convt3d, convt3d.distributed as d; "
            "sys.exit(d.main(['tune', 'kernelbench-l1']))")
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [distributed.NO_RAY]
    assert "pip install convt3d[distributed]" in distributed.NO_RAY


def test_load_pairs_orders_problems_then_modes() -> None:
    path = problem_file(TMP)
    pairs = distributed.load_pairs(str(path), "", "fp32,tf32", "convt3d")
    assert [(p["name"], m) for p, m in pairs] == [
        ("tiny-k2", "fp32"), ("tiny-k2", "tf32"), ("tiny-k3", "fp32"), ("tiny-k3", "tf32")]
    assert len(distributed.load_pairs(str(path), "tiny-k3", "fp32", "convt3d")) == 1
    with pytest.raises(ValueError, match="no problem named 'nope'"):
        distributed.load_pairs(str(path), "nope", "fp32", "convt3d")
    named = distributed.load_pairs("kernelbench-l1", "", "fp32", "convt3d")
    assert len(named) == 7


def test_find_cli_names_every_place_looked_at() -> None:
    with pytest.raises(FileNotFoundError, match="/no/such/convt3d"):
        distributed.find_cli("/no/such/convt3d")


def test_summary_table_rows() -> None:
    results = [
        {"name": "a", "mode": "fp32", "where": "h1:gpu0", "seconds": 1.25, "error": "",
         "result": {"name": "a", "kernel": "direct_x", "ms": 0.5}},
        {"name": "b", "mode": "tf32", "where": "h2:gpu1", "seconds": 2.0, "error": "boom",
         "result": {}},
    ]
    lines = distributed.summary_table(results, compile_only=False).splitlines()
    assert lines[0].split() == ["pair", "kernel", "ms", "where", "seconds", "status"]
    assert lines[1].split() == ["a", "direct_x", "0.5000", "h1:gpu0", "1.2", "ok"]
    assert lines[2].split() == ["b/tf32", "-", "-", "h2:gpu1", "2.0", "failed"]


def test_merge_imports_each_export_and_counts() -> None:
    if NO_CLI:
        pytest.skip(NO_CLI)
    empty, target = TMP / "empty.sqlite", TMP / "merged.sqlite"
    assert cli("cache", "prune", "--force", "--cache", str(empty)).returncode == 0
    export = cli("cache", "export", "-", "--cache", str(empty))
    assert export.returncode == 0, export.stderr
    assert json.loads(export.stdout)["entries"] == []
    imported, skipped, problems = distributed.merge_exports(
        str(CLI), [export.stdout, export.stdout], str(target))
    assert (imported, skipped, problems) == (0, 0, [])
    assert target.is_file()
    # A document that is not an export is named, and the good one still counts.
    imported, skipped, problems = distributed.merge_exports(
        str(CLI), [export.stdout, "not json"], str(target))
    assert (imported, skipped) == (0, 0)
    assert len(problems) == 1 and "export 1" in problems[0], problems


def test_ray_compile_only_on_a_local_instance() -> None:
    if NO_CLI:
        pytest.skip(NO_CLI)
    try:
        import ray
    except ImportError:
        pytest.skip("Ray is not installed (pip install convt3d[distributed])")
    path = problem_file(TMP)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = PACKAGE_ROOT  # the workers import convt3d.distributed.run_pair
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, resources={"fake_gpu": 2}, include_dashboard=False,
             object_store_memory=80 * 1024 * 1024, log_to_driver=False)
    try:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = distributed.main(["tune", str(path), "--compile-only", "--resource", "fake_gpu",
                                   "--max-candidates", "1", "--cli", str(CLI)])
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = old
    text = out.getvalue()
    assert rc == 0, text
    rows = {line.split()[0]: line.split() for line in text.splitlines()[1:] if line.strip()}
    for name in ("tiny-k2", "tiny-k3"):
        assert name in rows, text
        assert int(rows[name][2]) >= 1 and rows[name][-1] == "ok", text
    assert "compile-only: 2 pairs" in text, text
