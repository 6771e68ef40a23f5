#!/usr/bin/env bash
# shm without CMA (docs/design.md §5, "shm without CMA"; the ci.sh step `shm_nocma`).
#
# All-reduce over libfabric shm with FI_SHM_DISABLE_CMA=1, 2 and 3 ranks (one process each),
# 4 MiB to 64 MiB (-b 4M -e 64M -f 4), every byte checked: each run must exit 0, print
# `# Out of bounds values : 0 OK`, name the path its large messages took in the header
# (`large messages: mmap (CMA unavailable: FI_SHM_DISABLE_CMA=1)`), and leave no shm file of its
# own behind in /dev/shm (mmap's per-message files, the endpoints' regions). Before the fix
# (shm's SAR protocol) the 2-rank run ended NRT_TIMEOUT at 4 MiB.
#
# Bounded: each run under `timeout` (RUN_LIMIT s), with a 20 s exec timeout inside the tool.
# Uses the debug build of the test step (nothing else to build there).
set -euo pipefail
cd "$(dirname "$0")/../../.."

RUN_LIMIT=${SHM_NOCMA_RUN_LIMIT:-90}
ITERS=${SHM_NOCMA_ITERS:-1}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

cargo build -q -p proxy-perf --features libfabric
BIN="$PWD/target/debug/proxy-perf"

shm_files() { ls /dev/shm 2>/dev/null | grep '^pxyshm_' | sort || true; }
shm_files >"$TMP/before"

for ranks in 2 3; do
  log="$TMP/ranks$ranks.log"
  t0=$(date +%s)
  rc=0
  FI_SHM_DISABLE_CMA=1 NEURON_RT_EXEC_TIMEOUT=20 timeout -k 5 "$RUN_LIMIT" "$BIN" all-reduce \
    --transport libfabric --provider shm --ranks "$ranks" -b 4M -e 64M -f 4 -n "$ITERS" -w 1 \
    >"$log" 2>&1 || rc=$?
  dt=$(( $(date +%s) - t0 ))
  grep -v proxy_dump "$log" | grep -E '^ +[0-9]+ |Out of bounds' || true
  fail=
  [ "$rc" = 0 ] || fail="exit status $rc (124: stopped after ${RUN_LIMIT}s)"
  [ -n "$fail" ] || grep -q '^# Out of bounds values : 0 OK' "$log" || fail="values not checked OK"
  [ -n "$fail" ] || grep -q 'large messages: mmap (CMA unavailable: FI_SHM_DISABLE_CMA=1)' "$log" \
    || fail="the header does not name the mmap path"
  if [ -n "$fail" ]; then
    echo "shm_nocma: $ranks ranks: FAILED: $fail; its log:"
    grep -v proxy_dump "$log" | tail -40
    exit 1
  fi
  echo "shm_nocma: $ranks ranks: ok in ${dt}s"
done

shm_files >"$TMP/after"
if ! diff -q "$TMP/before" "$TMP/after" >/dev/null; then
  echo "shm_nocma: FAILED: shm files left in /dev/shm:"
  comm -13 "$TMP/before" "$TMP/after"
  exit 1
fi
echo "shm_nocma: passed"
