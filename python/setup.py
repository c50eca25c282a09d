"""setup.py: builds libconvt3d.so with CMake (or takes a prebuilt one) and bundles it.

Where the library comes from, in order:
  1. $CONVT3D_LIBRARY: that file is copied, nothing is built.
  2. Unless $CONVT3D_SKIP_BUILD is set: `cmake -S <repo> -B <build> && cmake --build <build>
     --target convt3d_shared`, with <repo> the parent of this folder (or $CONVT3D_SOURCE_DIR)
     and <build> $CONVT3D_BUILD_DIR or <repo>/build (incremental when it exists).
  3. A library already at <build>/libconvt3d.so (used with a warning if the build failed).
Otherwise the install stops with a message that says what to do.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

LIB = "libconvt3d.so"
HERE = Path(__file__).resolve().parent


def _log(msg: str) -> None:
    print(f"convt3d setup: {msg}", file=sys.stderr, flush=True)


def _repo() -> Path:
    root = Path(os.environ.get("CONVT3D_SOURCE_DIR", HERE.parent)).resolve()
    return root


def _is_repo(root: Path) -> bool:
    return (root / "CMakeLists.txt").is_file() and (root / "include/convt3d/convt3d_c.h").is_file()


def _cmake_build(root: Path, build: Path) -> str:
    """Runs CMake; returns "" on success, else the tail of its output."""
    cmake = shutil.which("cmake")
    if cmake is None:
        return "cmake was not found on PATH"
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    steps = [
        [cmake, "-S", str(root), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"],
        [cmake, "--build", str(build), "--target", "convt3d_shared", "-j", jobs],
    ]
    for cmd in steps:
        _log("running " + " ".join(cmd))
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            return f"`{' '.join(cmd)}` failed (exit {proc.returncode}):\n" + proc.stdout[-4000:]
    return ""


def obtain_library() -> Path:
    """Returns the path of the libconvt3d.so to bundle (building it if needed)."""
    env = os.environ.get("CONVT3D_LIBRARY")
    if env:
        path = Path(env)
        if not path.is_file():
            raise SystemExit(f"convt3d setup: CONVT3D_LIBRARY={env} does not exist")
        return path
    root = _repo()
    build = Path(os.environ.get("CONVT3D_BUILD_DIR", root / "build")).resolve()
    built = build / LIB
    error = ""
    if os.environ.get("CONVT3D_SKIP_BUILD"):
        error = "CONVT3D_SKIP_BUILD is set"
    elif not _is_repo(root):
        error = (f"{root} is not the convt3d repository (set CONVT3D_SOURCE_DIR, or install "
                 "from the repository's python/ folder with a pip that builds in place)")
    else:
        error = _cmake_build(root, build)
        if not error and built.is_file():
            return built
    if built.is_file():
        _log(f"warning: using the existing {built} ({error})")
        return built
    raise SystemExit(
        f"convt3d setup: could not obtain libconvt3d.so (no {built}).\n"
        f"  reason: {error}\n"
        "  fix: install the build dependencies (scripts/setup.sh: cmake, g++, the CUDA toolkit "
        "headers, libsqlite3-dev, nlohmann-json3-dev) and retry, or build it yourself with\n"
        "    cmake -S <repo> -B <repo>/build && cmake --build <repo>/build --target "
        "convt3d_shared\n"
        "  and install with CONVT3D_LIBRARY=<repo>/build/libconvt3d.so pip install <repo>/python"
    )


class BuildPyWithLibrary(build_py):
    """build_py that also places libconvt3d.so inside the package."""

    def run(self) -> None:
        super().run()
        src = obtain_library()
        dest = Path(self.build_lib) / "convt3d" / LIB
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)
        _log(f"bundled {src} as {dest}")


class BinaryDistribution(Distribution):
    """The wheel holds a native library, so it is platform-specific."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=BinaryDistribution)
