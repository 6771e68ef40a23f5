#!/usr/bin/env bash
# Multi-host tests in network namespaces (docs/design.md §9 "Liveness"; the ci.sh step `netns`).
#
# Four "hosts": network namespaces joined by veth pairs to a bridge that lives in a fifth
# namespace (the switch), addresses 10.99.0.1-4/24 assigned inside them; nothing is added to the
# machine's own namespace. Each rank runs `proxy-perf` (libfabric tcp, FI_TCP_IFACE=eth0) with
# `ip netns exec`, in a UTS namespace of its own whose host name is its host's, so the bootstrap
# sees four hosts (the host barrier: shared memory per host, the host leaders over the bootstrap).
# Ranks per host: 2, 1, 2, 1 (6 ranks); the bootstrap root (rank 0) is on host 0.
#
#   1. all-reduce across the four hosts, every byte checked: every rank exits 0, no value wrong;
#   2. host 2's link taken down mid-collective: every rank exits non-zero, its log naming the
#      failure (a lost rank, NRT_NETWORK_PROXY_FAILURE), before the exec timeout (the deadline
#      fails the test); each rank's time from the link going down to its exit is printed.
#   3. two more hosts joined by one veth pair (no switch), one rank each, 16 MiB all-reduces in
#      flight, the link taken down, LINK_DOWN_RUNS times (5; the link comes back up between
#      runs): every rank must exit with the tool's error status 2 (not 0, not a signal, not the
#      1 that a provider's crash handler turns a SIGSEGV into), name the failure, leave no
#      `*.btr` crash report in its working directory, and end before the exec timeout. The
#      rank's teardown quarantines what libfabric could not finish (docs/design.md §5,
#      "Teardown with requests the provider never finished"; over tcp its endpoint goes to the
#      lease pool when only sends are left); its log says so.
#
# Needs root and `ip` (iproute2) and `unshare` (util-linux). A missing capability fails the test
# unless PROXY_ALLOW_SKIP_NETNS=1. The namespaces are removed at the end, also on failure.
set -euo pipefail
cd "$(dirname "$0")/../../.."

PREFIX="pxnt$$"
SW="${PREFIX}sw"
HOST_RANKS=(2 1 2 1)
NRANKS=6
PORT=29500
EXEC_TIMEOUT=20
TMP=$(mktemp -d)
PIDS=()

skip_or_fail() {
  if [ "${PROXY_ALLOW_SKIP_NETNS:-0}" = 1 ]; then
    echo "netns tests NOT RUN: $1 (PROXY_ALLOW_SKIP_NETNS=1)"
    exit 0
  fi
  echo "error: netns tests: $1 (set PROXY_ALLOW_SKIP_NETNS=1 to skip them)"
  exit 1
}

namespaces() {
  echo "$SW"
  for h in "${!HOST_RANKS[@]}"; do echo "${PREFIX}h$h"; done
  echo "${PREFIX}p0"
  echo "${PREFIX}p1"
}

cleanup() {
  local p ns
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for ns in $(namespaces); do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
# A stop by ci.sh's budget (SIGTERM) or ^C still removes the namespaces.
trap 'exit 143' TERM
trap 'exit 130' INT

[ "$(id -u)" = 0 ] || skip_or_fail "not root"
command -v ip >/dev/null || skip_or_fail "no 'ip' (apt-get install iproute2)"
command -v unshare >/dev/null || skip_or_fail "no 'unshare' (util-linux)"
ip netns add "$SW" 2>/dev/null || skip_or_fail "cannot create a network namespace"

cargo build -q -p proxy-perf --features libfabric
BIN="$PWD/target/debug/proxy-perf"

# The switch: a bridge in its own namespace; one veth pair per host, "eth0" inside the host.
ip -n "$SW" link set lo up
ip -n "$SW" link add br0 type bridge
ip -n "$SW" link set br0 up
for h in "${!HOST_RANKS[@]}"; do
  ns="${PREFIX}h$h"
  ip netns add "$ns"
  ip -n "$SW" link add "vh$h" type veth peer name eth0 netns "$ns"
  ip -n "$SW" link set "vh$h" master br0 up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "10.99.0.$((h + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
done
# Every host's eth0 carrying before a rank opens libfabric (its tcp offers only lo until then,
# which the transport refuses for ranks on several hosts): at most 10 s.
for h in "${!HOST_RANKS[@]}"; do
  for _ in $(seq 1 200); do
    ip -n "${PREFIX}h$h" link show eth0 | grep -q LOWER_UP && break
    sleep 0.05
  done
done
ROOT="10.99.0.1:$PORT"

host_of() { # rank -> host
  local r=$1 h
  for h in "${!HOST_RANKS[@]}"; do
    if [ "$r" -lt "${HOST_RANKS[$h]}" ]; then echo "$h"; return; fi
    r=$((r - HOST_RANKS[h]))
  done
}

now() { date +%s.%N; }

# start_ranks TAG ARGS...: every rank in its host's namespace; pids in PIDS (by rank).
start_ranks() {
  local tag=$1 r h
  shift
  PIDS=()
  for ((r = 0; r < NRANKS; r++)); do
    h=$(host_of "$r")
    ip netns exec "${PREFIX}h$h" unshare --uts sh -c 'hostname "$0" && exec "$@"' "pxhost$h" \
      env PROXY_RANK="$r" PROXY_NRANKS="$NRANKS" NEURON_RT_ROOT_COMM_ID="$ROOT" \
      NEURON_RT_BOOTSTRAP_TIMEOUT=60 NEURON_RT_EXEC_TIMEOUT="$EXEC_TIMEOUT" \
      NEURON_RT_LOG_LEVEL="${LOG_LEVEL:-WARN}" FI_TCP_IFACE=eth0 FI_PROVIDER=tcp \
      "$BIN" all-reduce --transport libfabric --provider tcp --ranks "$NRANKS" "$@" \
      >"$TMP/$tag.$r.out" 2>"$TMP/$tag.$r.err" &
    PIDS+=($!)
  done
}

# wait_ranks TAG DEADLINE(epoch s): waits for every rank (killing the rest at the deadline);
# sets CODES (by rank; "killed" at the deadline) and ENDED (epoch s, by rank).
wait_ranks() {
  local tag=$1 deadline=$2 r left
  CODES=()
  ENDED=()
  while :; do
    left=0
    for ((r = 0; r < NRANKS; r++)); do
      [ -n "${CODES[$r]:-}" ] && continue
      if ! kill -0 "${PIDS[$r]}" 2>/dev/null; then
        local c=0
        wait "${PIDS[$r]}" || c=$?
        CODES[$r]=$c
        ENDED[$r]=$(now)
      else
        left=$((left + 1))
      fi
    done
    [ "$left" = 0 ] && return 0
    if awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n > d) }'; then
      for ((r = 0; r < NRANKS; r++)); do
        if [ -z "${CODES[$r]:-}" ]; then
          kill -9 "${PIDS[$r]}" 2>/dev/null || true
          wait "${PIDS[$r]}" 2>/dev/null || true
          CODES[$r]=killed
          ENDED[$r]=$(now)
        fi
      done
      return 0
    fi
    sleep 0.05
  done
}

show() { # tag: every rank's stderr tail
  local r
  for ((r = 0; r < NRANKS; r++)); do
    echo "--- $1 rank $r (host $(host_of "$r")): exit ${CODES[$r]:-?}"
    tail -n 15 "$TMP/$1.$r.err"
  done
}

FAILED=0
fail() { echo "FAILED: $*"; FAILED=1; }

# 1. All-reduce across the hosts, every byte checked.
t0=$(now)
LOG_LEVEL=INFO start_ranks ok -b 8 -e 1M -f 8 -n 2 -w 1 -c 1
wait_ranks ok "$(awk -v t="$t0" 'BEGIN { printf "%.3f", t + 90 }')"
for ((r = 0; r < NRANKS; r++)); do
  [ "${CODES[$r]}" = 0 ] || fail "all-reduce: rank $r exited ${CODES[$r]}"
done
rows=$(grep -cvE '^#|^$' "$TMP/ok.0.out" || true)
[ "$rows" = 6 ] || fail "all-reduce: $rows data rows, expected 6 (8 B .. 256 KiB by 8)"
wrong=$(awk '!/^#/ && NF >= 13 && ($9 != 0 || $13 != 0)' "$TMP/ok.0.out")
[ -z "$wrong" ] || fail "all-reduce: rows with wrong values: $wrong"
grep -q "Out of bounds values : 0 OK" "$TMP/ok.0.out" || fail "all-reduce: no '0 OK' footer"
grep -q "(4 hosts)" "$TMP/ok.0.err" || fail "all-reduce: the bootstrap did not see 4 hosts"
if [ "$FAILED" = 0 ]; then
  echo "ok: all-reduce across 4 hosts ($NRANKS ranks, 2/1/2/1), every byte checked" \
    "($(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s)"
else
  cat "$TMP/ok.0.out"
  show ok
fi

# 2. Host 2's link taken down mid-collective.
start_ranks down -b 64K -e 64K -n 1000000 -w 0 -c 0
header=0
for _ in $(seq 1 1200); do # at most 60 s for the set-up
  if grep -q "(elements)" "$TMP/down.0.out" 2>/dev/null; then header=1; break; fi
  sleep 0.05
done
if [ "$header" = 1 ]; then
  sleep 0.5 # some collectives in flight
  down_at=$(now)
  ip -n "$SW" link set vh2 down
  # The exec timeout is the last resort: every rank must have ended before it.
  wait_ranks down "$(awk -v t="$down_at" -v e="$EXEC_TIMEOUT" 'BEGIN { printf "%.3f", t + e }')"
  for ((r = 0; r < NRANKS; r++)); do
    took=$(awk -v a="$down_at" -v b="${ENDED[$r]}" 'BEGIN { printf "%.2f", b - a }')
    echo "link down: rank $r (host $(host_of "$r")) exit ${CODES[$r]} after ${took} s"
    case "${CODES[$r]}" in
      0) fail "link down: rank $r exited 0" ;;
      killed) fail "link down: rank $r still running at the exec timeout ($EXEC_TIMEOUT s)" ;;
    esac
    grep -q "NRT_NETWORK_PROXY_FAILURE" "$TMP/down.$r.err" ||
      fail "link down: rank $r does not report NRT_NETWORK_PROXY_FAILURE"
    grep -q "lost rank" "$TMP/down.$r.err" || fail "link down: rank $r does not name a lost rank"
  done
  [ "$FAILED" = 0 ] || show down
else
  fail "link down: the run never printed its header"
  show down
fi

# 3. Two hosts on one veth pair, 16 MiB in flight, the link taken down, LINK_DOWN_RUNS times.
LINK_DOWN_RUNS=${LINK_DOWN_RUNS:-5}
P0="${PREFIX}p0"
P1="${PREFIX}p1"
ip netns add "$P0"
ip netns add "$P1"
ip -n "$P0" link add eth0 type veth peer name eth0 netns "$P1"
for i in 0 1; do
  ns="${PREFIX}p$i"
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "10.99.1.$((i + 1))/24" dev eth0
done

# pair_up: both ends up and carrying (libfabric's tcp provider skips an interface without a
# carrier at open and quietly falls back to another one, here lo): at most 10 s.
pair_up() {
  local i
  ip -n "$P0" link set eth0 up
  ip -n "$P1" link set eth0 up
  for _ in $(seq 1 200); do
    if ip -n "$P0" link show eth0 | grep -q LOWER_UP && ip -n "$P1" link show eth0 | grep -q LOWER_UP; then
      return 0
    fi
    sleep 0.05
  done
  return 1
}

# pair_run RUN: both ranks (cwd: a directory of their own, for crash reports), 16 MiB all-reduces
# until the link goes down.
PAIR_PIDS=()
pair_run() {
  local run=$1 r dir
  PAIR_PIDS=()
  for r in 0 1; do
    dir="$TMP/pair$run.$r"
    mkdir -p "$dir"
    (cd "$dir" && exec ip netns exec "${PREFIX}p$r" unshare --uts sh -c 'hostname "$0" && exec "$@"' "pxpair$r" \
      env PROXY_RANK="$r" PROXY_NRANKS=2 NEURON_RT_ROOT_COMM_ID="10.99.1.1:$((PORT + 1))" \
      NEURON_RT_BOOTSTRAP_TIMEOUT=60 NEURON_RT_EXEC_TIMEOUT="$EXEC_TIMEOUT" \
      NEURON_RT_LOG_LEVEL=WARN FI_TCP_IFACE=eth0 FI_PROVIDER=tcp \
      "$BIN" all-reduce --transport libfabric --provider tcp --ranks 2 \
      -b 16M -e 16M -n 1000000 -w 0 -c 0 >"$dir/out" 2>"$dir/err") &
    PAIR_PIDS+=($!)
  done
}

for ((run = 1; run <= LINK_DOWN_RUNS; run++)); do
  if ! pair_up; then
    fail "16 MiB link down, run $run: the veth pair never got a carrier"
    break
  fi
  pair_run "$run"
  header=0
  for _ in $(seq 1 1200); do # at most 60 s for the set-up
    if grep -q "(elements)" "$TMP/pair$run.0/out" 2>/dev/null; then header=1; break; fi
    sleep 0.05
  done
  if [ "$header" = 0 ]; then
    fail "16 MiB link down, run $run: the run never printed its header"
    for r in 0 1; do kill -9 "${PAIR_PIDS[$r]}" 2>/dev/null || true; tail -n 15 "$TMP/pair$run.$r/err"; done
    break
  fi
  sleep 1 # 16 MiB all-reduces in flight
  down_at=$(now)
  ip -n "$P0" link set eth0 down
  deadline=$(awk -v t="$down_at" -v e="$EXEC_TIMEOUT" 'BEGIN { printf "%.3f", t + e }')
  for r in 0 1; do
    code=
    while kill -0 "${PAIR_PIDS[$r]}" 2>/dev/null; do
      if awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n > d) }'; then
        kill -9 "${PAIR_PIDS[$r]}" 2>/dev/null || true
        code=killed
        break
      fi
      sleep 0.05
    done
    c=0
    wait "${PAIR_PIDS[$r]}" 2>/dev/null || c=$?
    [ -n "$code" ] || code=$c
    took=$(awk -v a="$down_at" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
    dir="$TMP/pair$run.$r"
    quarantined=$(grep -c "for the life of the process" "$dir/err" || true)
    echo "16 MiB link down, run $run: rank $r exit $code after ${took} s (quarantine lines: $quarantined)"
    bad=
    case "$code" in
      2) ;;
      killed) bad="still running at the exec timeout ($EXEC_TIMEOUT s)" ;;
      0) bad="exited 0 after its data path failed" ;;
      *) bad="exited $code (2 expected: a signal or a crash handler's exit)" ;;
    esac
    if compgen -G "$dir/*.btr" >/dev/null; then bad="${bad:+$bad; }left a crash report $(ls "$dir"/*.btr)"; fi
    grep -qE "NRT_NETWORK_PROXY_FAILURE|NRT_TIMEOUT" "$dir/err" ||
      bad="${bad:+$bad; }its log names no failure"
    if [ -n "$bad" ]; then
      fail "16 MiB link down, run $run: rank $r $bad"
      tail -n 20 "$dir/err"
    fi
  done
done

[ "$FAILED" = 0 ] && echo "netns tests passed"
exit "$FAILED"
