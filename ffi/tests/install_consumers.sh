#!/usr/bin/env bash
# The install as a runtime author meets it (ci.sh step `install`): ffi/install.sh into a fresh
# prefix, then two consumers built from that prefix only and run with no LD_LIBRARY_PATH and no
# proxy environment variable:
#   * C with pkg-config: ffi/driver/examples/allreduce.c, an all-reduce on the library's host
#     devices (no device code), 2 and 4 ranks, caller and thread mode; and
#     ffi/driver/tests/c/ring_allreduce.c, a 4-rank ring all-reduce with its own device, every
#     word checked, in worker-thread and caller-driven mode;
#   * C++17 with CMake (find_package(nrt_proxy)): the installed copy of the examples
#     (PREFIX/share/nrt_proxy/examples), raii_exchange.cpp, a 2-rank send-recv with every word
#     checked, and the C example again.
# The prefix also must hold the versioned files, the SONAME links and both package files (no
# template comment left in them, the version the headers' C ABI version).
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
  lib/cmake/nrt_proxy/nrt_proxyConfigVersion.cmake share/nrt_proxy/examples/allreduce.c \
  share/nrt_proxy/examples/raii_exchange.cpp share/nrt_proxy/examples/CMakeLists.txt; do
  [ -e "$PREFIX/$f" ] || fail "$f is not installed"
done
for l in nrt_proxy:ffi/driver/include/nrt_proxy.h:NRT_PROXY \
  nccom_proxy:ffi/include/nccom_proxy.h:NCCOM_PROXY; do
  IFS=: read -r name header macro <<<"$l"
  major=$(sed -n "s/^#define ${macro}_ABI_VERSION_MAJOR \([0-9]*\).*/\1/p" "$header")
  minor=$(sed -n "s/^#define ${macro}_ABI_VERSION_MINOR \([0-9]*\).*/\1/p" "$header")
  got=$(PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" pkg-config --modversion "$name")
  [ "$got" = "$major.$minor.0" ] || fail "$name.pc says version '$got', the header $major.$minor"
  [ -e "$PREFIX/lib/lib$name.so.$major.$minor.0" ] || fail "lib$name.so.$major.$minor.0 missing"
  ! grep -q '^#' "$PREFIX/lib/pkgconfig/$name.pc" || fail "$name.pc keeps the template's comments"
done
for l in nrt_proxy nccom_proxy; do
  soname=$(objdump -p "$PREFIX/lib/lib$l.so" | awk '/SONAME/ { print $2 }')
  [ "$soname" = "lib$l.so.1" ] || fail "lib$l.so has SONAME '$soname', expected lib$l.so.1"
done
echo "install: files, versioned names and SONAMEs as expected"

# No variable of ours and no library path: what the consumers find, they find by themselves.
clean_env=(env -u LD_LIBRARY_PATH -u NEURON_RT_PROXY_PROGRESS_LIB -u PKG_CONFIG_PATH)

# C, pkg-config: the example all-reduce on the library's host device (no device code), 2 and 4
# ranks, both modes.
flags=$(PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" pkg-config --cflags --libs nrt_proxy)
cc -std=c11 -Wall -Wextra -Werror ffi/driver/examples/allreduce.c $flags -pthread \
  -o "$TMP/allreduce"
for mode in caller thread; do
  for n in 2 4; do
    timeout 120 "${clean_env[@]}" "$TMP/allreduce" "$mode" "$n" ||
      fail "allreduce ($mode, $n ranks) from the installed prefix"
  done
  echo "install: C consumer (pkg-config), example all-reduce on host devices, $mode mode, 2 and 4 ranks: passed"
done
# C, pkg-config: the ring all-reduce with its own device.
cc -std=c11 -Wall -Wextra -Werror ffi/driver/tests/c/ring_allreduce.c $flags -pthread \
  -o "$TMP/ring_allreduce"
for mode in thread caller; do
  timeout 120 "${clean_env[@]}" "$TMP/ring_allreduce" - "$mode" ||
    fail "ring_allreduce ($mode) from the installed prefix"
  echo "install: C consumer (pkg-config), 4-rank ring all-reduce, $mode mode: passed"
done

# The same C consumers under AddressSanitizer (with LeakSanitizer at exit) and
# UndefinedBehaviorSanitizer: the programs are instrumented, the libraries are not (Rust; Miri
# and the loom models cover their own code), so this checks what a C runtime can get wrong at
# the boundary and any leak at exit. (ThreadSanitizer needs every library instrumented: not run.)
san=(-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g)
cc -std=c11 "${san[@]}" ffi/driver/examples/allreduce.c $flags -pthread -o "$TMP/allreduce_san"
cc -std=c11 "${san[@]}" ffi/driver/tests/c/ring_allreduce.c $flags -pthread -o "$TMP/ring_san"
for mode in caller thread; do
  timeout 300 "${clean_env[@]}" ASAN_OPTIONS=detect_leaks=1 "$TMP/allreduce_san" "$mode" 4 ||
    fail "allreduce ($mode) under ASan/UBSan"
  timeout 300 "${clean_env[@]}" ASAN_OPTIONS=detect_leaks=1 "$TMP/ring_san" - "$mode" ||
    fail "ring_allreduce ($mode) under ASan/UBSan"
done
echo "install: both C consumers under ASan (leaks at exit) and UBSan, caller and thread mode: passed"

# C++17, CMake.
cmake -S "$PREFIX/share/nrt_proxy/examples" -B "$TMP/build" -DCMAKE_PREFIX_PATH="$PREFIX" \
  >"$TMP/cmake.log" ||
  { cat "$TMP/cmake.log"; fail "cmake configure against the prefix"; }
cmake --build "$TMP/build" >>"$TMP/cmake.log" 2>&1 ||
  { cat "$TMP/cmake.log"; fail "cmake build"; }
timeout 120 "${clean_env[@]}" "$TMP/build/raii_exchange" ||
  fail "raii_exchange (CMake) from the installed prefix"
timeout 120 "${clean_env[@]}" "$TMP/build/raii_exchange" --host-device ||
  fail "raii_exchange --host-device (CMake) from the installed prefix"
echo "install: C++ consumer (CMake find_package(nrt_proxy)), 2-rank send-recv, own device and host devices: passed"
timeout 120 "${clean_env[@]}" "$TMP/build/allreduce" thread 4 ||
  fail "allreduce (CMake) from the installed prefix"
echo "install: C consumer (CMake), example all-reduce, thread mode, 4 ranks: passed"
echo "install: passed"
