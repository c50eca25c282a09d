#!/usr/bin/env bash
# install_consumer.sh BUILD_DIR SOURCE_DIR: installs the build into a temporary prefix, builds
# tests/consumer against it with find_package and with pkg-config, runs both (a plan with a GPU,
# a clear "no GPU" status without), and runs the installed CLI from another folder.
set -euo pipefail
build=$(realpath "$1")
src=$(realpath "$2")
work=$(mktemp -d /tmp/convt3d_consumer_XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

fail() { echo "install_consumer: FAILED: $*" >&2; exit 1; }
# A consumer either plans (exit 0) or says that there is no GPU (exit 3), naming the status.
check_run() {
  local rc=0 out
  out=$("$1" 2>&1) || rc=$?
  echo "$out"
  [ "$rc" = 0 ] && return 0
  [ "$rc" = 3 ] && grep -q "^no GPU: FAILED_PRECONDITION: " <<<"$out" && return 0
  fail "$1 exited $rc"
}

cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/convt3d include/convt3d/convt3d.h include/convt3d/convt3d_c.h lib/libconvt3d.a \
  lib/libconvt3d.so.0 lib/cmake/convt3d/convt3dConfig.cmake lib/pkgconfig/convt3d.pc \
  share/convt3d/problems/kernelbench_l1.json share/convt3d/problems/models.json; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done

echo "== find_package(convt3d), convt3d::convt3d"
cmake -S "$src/tests/consumer" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake" >/dev/null
# Whole outputs first: with pipefail, `cmd | grep -q` fails when grep exits at its first match
# and cmd dies of SIGPIPE (it did under a loaded ctest -j).
libs=$(ldd "$work/cmake/consumer")
grep -q "$prefix/lib/libconvt3d.so.0" <<<"$libs" || fail "not linked to $prefix: $libs"
check_run "$work/cmake/consumer"

echo "== pkg-config --cflags --libs convt3d"
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs convt3d)
# shellcheck disable=SC2086  # the flags are words
c++ -std=c++17 "$src/tests/consumer/main.cpp" $flags -Wl,-rpath,"$prefix/lib" -o "$work/pc"
check_run "$work/pc"

echo "== the installed CLI from another folder"
cd "$work"
"$prefix/bin/convt3d" bench --help >/dev/null
"$prefix/bin/convt3d" tune --problems kernelbench-l1 --only L1-72 --compile-only \
  --max-candidates 1 --json - 2>/dev/null >"$work/tune.json"
grep -q '"compiled": 1' "$work/tune.json" || fail "tune from $work"
"$prefix/bin/convt3d" cache list --cache "$work/absent/a/b.sqlite" >/dev/null
[ ! -e "$work/absent" ] || fail "cache list created $work/absent"
echo "install_consumer: ok"
