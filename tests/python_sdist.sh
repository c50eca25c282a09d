#!/usr/bin/env bash
# python_sdist.sh SOURCE_DIR: builds the Python sdist (scikit-build-core's PEP 517 hook), installs
# it with pip into a fresh venv from an empty folder (which compiles libconvt3d.so once), then
# imports it: the bundled library loads, the wheel is py3-none-<platform>, and convt3d.torch
# without PyTorch says to install it.
set -euo pipefail
src=$(realpath "$1")
work=$(mktemp -d /tmp/convt3d_sdist_XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "python_sdist: FAILED: $*" >&2; exit 1; }

python3 -m venv "$work/tools"
"$work/tools/bin/pip" install -q "scikit-build-core>=0.10"
(cd "$src" && "$work/tools/bin/python" -c \
  "import sys, scikit_build_core.build as b; print(b.build_sdist(sys.argv[1]))" "$work/dist")
sdist=$(ls "$work"/dist/convt3d-*.tar.gz)
tar tzf "$sdist" >"$work/sdist.txt"
grep -q "/src/engine.cpp$" "$work/sdist.txt" || fail "the sdist has no C++ sources"

python3 -m venv "$work/venv"
mkdir "$work/empty"
cd "$work/empty"
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} "$work/venv/bin/pip" install -q "$sdist"
grep -qx "Tag: py3-none-linux_$(uname -m)" "$work"/venv/lib/python3*/site-packages/convt3d-*.dist-info/WHEEL ||
  fail "wheel tag: $(grep Tag: "$work"/venv/lib/python3*/site-packages/convt3d-*.dist-info/WHEEL)"
"$work/venv/bin/python" - <<'PY'
import sys
import convt3d
path = convt3d.library_path()
assert path.startswith(sys.prefix), path  # the copy bundled in the wheel
print("convt3d", convt3d.__version__, "library", convt3d.library_version(), path)
sys.modules.setdefault("torch", None)  # as if PyTorch were absent, when it is not
try:
    import convt3d.torch
except ImportError as e:
    assert "pip install torch" in str(e), e
else:
    raise AssertionError("convt3d.torch imported without PyTorch")
PY
echo "python_sdist: ok"
