#!/usr/bin/env python3
"""run_tests.py: runs python/tests with pytest, or with a tiny built-in runner when pytest is
missing (e.g. on a GPU machine without network access).

    python python/tests/run_tests.py [-k SUBSTRING] [-x] [--mini] [-v]

The built-in runner supports what these tests use: pytest.raises(match=), pytest.skip
(allow_module_level=), pytest.importorskip, pytest.mark.parametrize and setup_module /
teardown_module. It ends with pytest's kind of summary line: "N passed, N failed, N skipped".
"""

import argparse
import importlib
import itertools
import re
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

TESTS = Path(__file__).resolve().parent


# ---- A minimal `pytest` module --------------------------------------------------------------
class Skipped(Exception):
    """Raised by pytest.skip()."""


class _ExcInfo:
    def __init__(self) -> None:
        self.value: Optional[BaseException] = None
        self.type: Optional[type] = None


class _Raises:
    def __init__(self, expected, match: Optional[str] = None) -> None:
        self.expected, self.match, self.info = expected, match, _ExcInfo()

    def __enter__(self) -> _ExcInfo:
        return self.info

    def __exit__(self, etype, value, tb) -> bool:
        if etype is None:
            raise AssertionError(f"DID NOT RAISE {self.expected}")
        if not issubclass(etype, self.expected):
            return False
        if self.match is not None and not re.search(self.match, str(value)):
            raise AssertionError(f"regex {self.match!r} does not match {str(value)!r}")
        self.info.value, self.info.type = value, etype
        return True


def _skip(reason: str = "", allow_module_level: bool = False) -> None:
    raise Skipped(reason)


def _importorskip(name: str, minversion: Optional[str] = None, reason: Optional[str] = None):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise Skipped(reason or f"could not import {name!r}: {e}")


class _Mark:
    @staticmethod
    def parametrize(argnames, argvalues, ids=None) -> Callable:
        names = [n.strip() for n in argnames.split(",")] if isinstance(argnames, str) \
            else list(argnames)

        def deco(fn):
            fn.__dict__.setdefault("_params", []).insert(0, (names, list(argvalues)))
            return fn

        return deco

    @staticmethod
    def skipif(condition, reason: str = "") -> Callable:
        def deco(fn):
            if condition:
                fn.__dict__["_skip_reason"] = reason
            return fn

        return deco


def make_shim() -> types.ModuleType:
    mod = types.ModuleType("pytest")
    mod.raises = _Raises  # type: ignore[attr-defined]
    mod.skip = _skip  # type: ignore[attr-defined]
    mod.skip.Exception = Skipped  # type: ignore[attr-defined]
    mod.importorskip = _importorskip  # type: ignore[attr-defined]
    mod.mark = _Mark()  # type: ignore[attr-defined]
    mod.__convt3d_shim__ = True  # type: ignore[attr-defined]
    return mod


# ---- The runner -----------------------------------------------------------------------------
def _cases(fn) -> List[Tuple[str, Dict[str, Any]]]:
    params = fn.__dict__.get("_params", [])
    if not params:
        return [("", {})]
    out = []
    for combo in itertools.product(*[values for _, values in params]):
        kwargs: Dict[str, Any] = {}
        ids = []
        for (names, _), value in zip(params, combo):
            vals = value if len(names) > 1 else (value,)
            kwargs.update(zip(names, vals))
            ids.append("-".join(str(v) for v in vals))
        out.append(("[" + "-".join(ids) + "]", kwargs))
    return out


def run_mini(keyword: str, exitfirst: bool, verbose: bool) -> int:
    sys.modules["pytest"] = make_shim()
    sys.path.insert(0, str(TESTS))
    importlib.import_module("conftest")
    passed = failed = skipped = 0
    t0 = time.time()
    for path in sorted(TESTS.glob("test_*.py")):
        try:
            module = importlib.import_module(path.stem)
        except Skipped as e:
            print(f"{path.name}: SKIPPED (module): {e}")
            skipped += 1
            continue
        tests = [(n, f) for n, f in vars(module).items()
                 if n.startswith("test") and callable(f) and getattr(f, "__module__", "")
                 == module.__name__]
        tests.sort(key=lambda item: item[1].__code__.co_firstlineno)
        setup = getattr(module, "setup_module", None)
        teardown = getattr(module, "teardown_module", None)
        try:
            if setup:
                setup()
        except Skipped as e:
            print(f"{path.name}: SKIPPED (setup_module): {e}")
            skipped += len(tests)
            continue
        try:
            for name, fn in tests:
                for suffix, kwargs in _cases(fn):
                    test_id = f"{path.name}::{name}{suffix}"
                    if keyword and keyword not in test_id:
                        continue
                    if "_skip_reason" in fn.__dict__:
                        skipped += 1
                        print(f"{test_id} SKIPPED: {fn._skip_reason}")
                        continue
                    try:
                        fn(**kwargs)
                    except Skipped as e:
                        skipped += 1
                        print(f"{test_id} SKIPPED: {e}")
                    except Exception:  # noqa: BLE001 (report every failure)
                        failed += 1
                        print(f"{test_id} FAILED\n{traceback.format_exc()}")
                        if exitfirst:
                            raise SystemExit(1)
                    else:
                        passed += 1
                        if verbose:
                            print(f"{test_id} PASSED")
        finally:
            if teardown:
                teardown()
    print(f"{passed} passed, {failed} failed, {skipped} skipped in {time.time() - t0:.1f}s")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description="Run convt3d's Python tests.")
    ap.add_argument("-k", default="", help="only tests whose id contains this (mini runner: "
                    "a plain substring; pytest: its -k expression)")
    ap.add_argument("-x", action="store_true", help="stop at the first failure")
    ap.add_argument("-v", action="store_true")
    ap.add_argument("--mini", action="store_true", help="use the built-in runner")
    args = ap.parse_args()
    if not args.mini:
        try:
            import pytest
        except ImportError:
            print("pytest is not installed: using the built-in runner", flush=True)
        else:
            argv = [str(TESTS), "-rs"]
            argv += ["-k", args.k] if args.k else []
            argv += ["-x"] if args.x else []
            argv += ["-v"] if args.v else ["-q"]
            return pytest.main(argv)
    return run_mini(args.k, args.x, args.v)


if __name__ == "__main__":
    sys.exit(main())
