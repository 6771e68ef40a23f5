#!/usr/bin/env bash
# Builds the two C libraries (release) and installs them under a prefix, as a C or C++ runtime
# expects to find them:
#
#   PREFIX/include/nccom_proxy.h, nrt_proxy.h
#   PREFIX/lib/libnccom_proxy.so.M.m.0   + libnccom_proxy.so.M (the SONAME) + libnccom_proxy.so
#   PREFIX/lib/libnrt_proxy.so.M.m.0     + libnrt_proxy.so.M   + libnrt_proxy.so
#   PREFIX/lib/pkgconfig/nccom_proxy.pc, nrt_proxy.pc          (pkg-config)
#   PREFIX/lib/cmake/nrt_proxy/nrt_proxyConfig.cmake, ...Version.cmake
#                                   (find_package(nrt_proxy): nrt_proxy::nrt_proxy and
#                                    nrt_proxy::nccom_proxy, imported targets)
#   PREFIX/share/nrt_proxy/examples/ (the C all-reduce on host devices, the C++17 RAII
#                                   exchange and their CMakeLists.txt: ffi/driver/examples)
#
# M.m is each library's C ABI version (the headers' *_ABI_VERSION_MAJOR / _MINOR). Both
# libraries go to one lib/ directory: libnrt_proxy.so finds its progress half there by itself
# (no environment variable, no LD_LIBRARY_PATH: ffi/driver/src/locate.rs).
#
# Usage: ffi/install.sh PREFIX [--libfabric] [--no-build]
#   --libfabric  build libnccom_proxy with the libfabric transport (needs libfabric-dev >= 1.17,
#                libclang-dev, pkg-config)
#   --no-build   install what target/release already holds
set -euo pipefail

usage() { echo "usage: $0 PREFIX [--libfabric] [--no-build]" >&2; exit 2; }
[ $# -ge 1 ] || usage
PREFIX=$1
shift
FEATURES=()
BUILD=1
for a in "$@"; do
  case "$a" in
    --libfabric) FEATURES=(--features proxy-ffi/libfabric) ;;
    --no-build) BUILD=0 ;;
    *) usage ;;
  esac
done
case "$PREFIX" in
  /*) ;;
  *) PREFIX="$PWD/$PREFIX" ;;
esac

cd "$(dirname "$0")/.."
if [ "$BUILD" = 1 ]; then
  cargo build --release --locked -p proxy-ffi -p proxy-driver-ffi "${FEATURES[@]}"
fi
REL=target/release

# abi HEADER PREFIX_MACRO -> "major minor"
abi() {
  local h=$1 m=$2 major minor
  major=$(sed -n "s/^#define ${m}_ABI_VERSION_MAJOR \([0-9]*\).*/\1/p" "$h")
  minor=$(sed -n "s/^#define ${m}_ABI_VERSION_MINOR \([0-9]*\).*/\1/p" "$h")
  if [ -z "$major" ] || [ -z "$minor" ]; then
    echo "error: no ${m}_ABI_VERSION_MAJOR/MINOR in $h" >&2
    exit 1
  fi
  echo "$major $minor"
}

LIB="$PREFIX/lib"
EXAMPLES="$PREFIX/share/nrt_proxy/examples"
install -d "$PREFIX/include" "$LIB/pkgconfig" "$LIB/cmake/nrt_proxy" "$EXAMPLES"
install -m 0644 ffi/include/nccom_proxy.h ffi/driver/include/nrt_proxy.h "$PREFIX/include/"
install -m 0644 ffi/driver/examples/allreduce.c ffi/driver/examples/raii_exchange.cpp \
  ffi/driver/examples/CMakeLists.txt "$EXAMPLES/"

# install_lib NAME HEADER MACRO: the versioned file, the SONAME link and the link-time link.
install_lib() {
  local name=$1 header=$2 macro=$3 major minor
  read -r major minor < <(abi "$header" "$macro")
  [ -f "$REL/lib$name.so" ] || { echo "error: $REL/lib$name.so not built" >&2; exit 1; }
  install -m 0755 "$REL/lib$name.so" "$LIB/lib$name.so.$major.$minor.0"
  ln -sfn "lib$name.so.$major.$minor.0" "$LIB/lib$name.so.$major"
  ln -sfn "lib$name.so.$major" "$LIB/lib$name.so"
  # The template's comment lines (how to fill it in) stay out of the installed file.
  sed -e '/^#/d' -e "s|@PREFIX@|$PREFIX|g" -e "s|@LIBDIR@|$LIB|g" \
    -e "s|@VERSION@|$major.$minor.0|g" "$(dirname "$header")/../$name.pc.in" \
    >"$LIB/pkgconfig/$name.pc"
  echo "$major.$minor.0"
}
NCCOM_VERSION=$(install_lib nccom_proxy ffi/include/nccom_proxy.h NCCOM_PROXY)
NRT_VERSION=$(install_lib nrt_proxy ffi/driver/include/nrt_proxy.h NRT_PROXY)

# cmake_target NAME VERSION: the imported target nrt_proxy::NAME of lib/libNAME.so.VERSION.
cmake_target() {
  cat <<EOF
if(NOT TARGET nrt_proxy::$1)
  add_library(nrt_proxy::$1 SHARED IMPORTED)
  set_target_properties(nrt_proxy::$1 PROPERTIES
    IMPORTED_LOCATION "\${_nrt_proxy_prefix}/lib/lib$1.so.$2"
    IMPORTED_SONAME "lib$1.so.${2%%.*}"
    INTERFACE_INCLUDE_DIRECTORIES "\${_nrt_proxy_prefix}/include")
endif()
EOF
}

{
  cat <<EOF
# CMake package of the proxy & progress engine's C libraries (written by ffi/install.sh).
#   find_package(nrt_proxy $NRT_VERSION REQUIRED)
#   target_link_libraries(app PRIVATE nrt_proxy::nrt_proxy)  # the driver half (loads the
#                                                            # progress half beside itself)
#   target_link_libraries(app PRIVATE nrt_proxy::nccom_proxy) # the progress half, linked directly
get_filename_component(_nrt_proxy_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
EOF
  cmake_target nccom_proxy "$NCCOM_VERSION"
  cmake_target nrt_proxy "$NRT_VERSION"
  cat <<EOF
set(nrt_proxy_VERSION $NRT_VERSION)
set(nrt_proxy_FOUND TRUE)
unset(_nrt_proxy_prefix)
EOF
} >"$LIB/cmake/nrt_proxy/nrt_proxyConfig.cmake"

cat >"$LIB/cmake/nrt_proxy/nrt_proxyConfigVersion.cmake" <<EOF
# Same major, and at least the minor asked for (ffi/README.md, "ABI versions").
set(PACKAGE_VERSION $NRT_VERSION)
if(NOT PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
elseif(PACKAGE_FIND_VERSION_MAJOR EQUAL ${NRT_VERSION%%.*}
       AND NOT PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
else()
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
endif()
EOF

echo "installed under $PREFIX: libnrt_proxy $NRT_VERSION, libnccom_proxy $NCCOM_VERSION" \
  "(headers, pkg-config files, CMake package nrt_proxy, examples in share/nrt_proxy/examples)"
