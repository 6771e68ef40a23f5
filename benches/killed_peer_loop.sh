#!/bin/bash
# A rank killed with large messages in flight, in a loop: 4 rank processes run an all-reduce of
# SZ (default 64M) over TRANSPORT (default `--transport shm`); 0.1–1.5 s into the sweep a random
# rank gets SIGKILL. Each run must end on its own with every survivor reporting
# NRT_NETWORK_PROXY_FAILURE and no crash. Prints one line per run; N runs (default 8), each
# bounded by `timeout` (90 s). Needs a release build with libfabric (`cargo build --release -p
# proxy-perf --features libfabric`).
set -u
cd "$(dirname "$0")/.."
PP=target/release/proxy-perf
[ -x "$PP" ] || { echo "killed_peer_loop.sh: $PP is missing (see the header)" >&2; exit 2; }
SZ=${SZ:-64M}
N=${N:-8}
TRANSPORT=${TRANSPORT:---transport shm}
OUT=target/killed_peer; mkdir -p "$OUT"
bad=0
for i in $(seq 1 "$N"); do
    # shellcheck disable=SC2086 # TRANSPORT is a list of arguments
    NEURON_RT_EXEC_TIMEOUT=30 timeout 90 "$PP" all-reduce $TRANSPORT --ranks 4 -b "$SZ" -e "$SZ" \
        -w 1 -n 100000 -c 0 > "$OUT/out" 2> "$OUT/err" &
    t=$!
    launcher=""
    for _ in $(seq 1 50); do
        launcher=$(pgrep -P "$t" | head -1)
        [ -n "$launcher" ] && [ "$(pgrep -P "$launcher" | wc -l)" -eq 4 ] && break
        sleep 0.1
    done
    sleep 2
    mapfile -t ranks < <(pgrep -P "$launcher")
    delay=$(python3 -c "import random; print(round(random.uniform(0.1, 1.5), 2))")
    sleep "$delay"
    victim=${ranks[$((RANDOM % ${#ranks[@]}))]}
    kill -9 "$victim"
    wait "$t"; rc=$?
    named=$(grep -c 'ended NRT_NETWORK_PROXY_FAILURE' "$OUT/err")
    crashes=$(grep -ci 'signal: 11\|signal: 6\|panicked' "$OUT/err")
    echo "run $i: $SZ, pid $victim killed at +${delay} s: exit $rc, $named survivors failed" \
        "NRT_NETWORK_PROXY_FAILURE, $crashes crashes"
    [ "$rc" -eq 2 ] && [ "$named" -eq 3 ] && [ "$crashes" -eq 0 ] || bad=$((bad + 1))
done
left=$(find /dev/shm -maxdepth 1 -name 'proxy-shm.*' | wc -l)
echo "# $bad of $N runs not as expected; left in /dev/shm: $left"
[ "$bad" -eq 0 ]
