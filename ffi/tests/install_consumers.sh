#!/usr/bin/env bash
# The install as a runtime author meets it (ci.sh step `install`): ffi/install.sh into a fresh
# prefix, then two consumers built from that prefix only and run with no LD_LIBRARY_PATH and no
# proxy environment variable:
#   * C with pkg-config: ffi/driver/tests/c/ring_allreduce.c, a 4-rank ring all-reduce with
#     every word checked, in worker-thread and caller-driven mode;
#   * C++17 with CMake (find_package(nrt_proxy)): ffi/driver/examples/raii_exchange.cpp, a
#     2-rank send-recv with every word checked.
# The prefix also must hold the versioned files, the SONAME links and both package files.
set -euo pipefail
cd "$(dirname "$0")/../.."
for tool in cc c++ pkg-config cmake; do
  command -v "$tool" >/dev/null || { echo "error: $tool is missing (apt-get install cmake pkg-config g++)"; exit 1; }
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PREFIX="$TMP/prefix"
ffi/install.sh "$PREFIX"

fail() { echo "install: FAILED: $*"; exit 1; }
for f in include/nrt_proxy.h include/nccom_proxy.h lib/libnrt_proxy.so.1 lib/libnrt_proxy.so \
  lib/libnccom_proxy.so.1 lib/libnccom_proxy.so lib/pkgconfig/nrt_proxy.pc \
  lib/pkgconfig/nccom_proxy.pc lib/cmake/nrt_proxy/nrt_proxyConfig.cmake \
  lib/cmake/nrt_proxy/nrt_proxyConfigVersion.cmake; do
  [ -e "$PREFIX/$f" ] || fail "$f is not installed"
done
for l in nrt_proxy nccom_proxy; do
  soname=$(objdump -p "$PREFIX/lib/lib$l.so" | awk '/SONAME/ { print $2 }')
  [ "$soname" = "lib$l.so.1" ] || fail "lib$l.so has SONAME '$soname', expected lib$l.so.1"
done
echo "install: files, versioned names and SONAMEs as expected"

# No variable of ours and no library path: what the consumers find, they find by themselves.
clean_env=(env -u LD_LIBRARY_PATH -u NEURON_RT_PROXY_PROGRESS_LIB -u PKG_CONFIG_PATH)

# C, pkg-config.
flags=$(PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" pkg-config --cflags --libs nrt_proxy)
cc -std=c11 -Wall -Wextra -Werror ffi/driver/tests/c/ring_allreduce.c $flags -pthread \
  -o "$TMP/ring_allreduce"
for mode in thread caller; do
  timeout 120 "${clean_env[@]}" "$TMP/ring_allreduce" - "$mode" ||
    fail "ring_allreduce ($mode) from the installed prefix"
  echo "install: C consumer (pkg-config), 4-rank ring all-reduce, $mode mode: passed"
done

# C++17, CMake.
cmake -S ffi/driver/examples -B "$TMP/build" -DCMAKE_PREFIX_PATH="$PREFIX" >"$TMP/cmake.log" ||
  { cat "$TMP/cmake.log"; fail "cmake configure against the prefix"; }
cmake --build "$TMP/build" >>"$TMP/cmake.log" 2>&1 ||
  { cat "$TMP/cmake.log"; fail "cmake build"; }
timeout 120 "${clean_env[@]}" "$TMP/build/raii_exchange" ||
  fail "raii_exchange (CMake) from the installed prefix"
echo "install: C++ consumer (CMake find_package(nrt_proxy)), 2-rank send-recv: passed"
echo "install: passed"
