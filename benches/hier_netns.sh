#!/usr/bin/env bash
# Two hosts in network namespaces: the hierarchical all-reduce against the flat ones, and the
# tuner's choice (issue 26; BENCHMARKS.md, "Two hosts").
#
# Two "hosts" (network namespaces, each in a UTS namespace of its own whose host name is the
# host's, so the bootstrap sees two hosts) joined by one veth pair, addresses 10.98.0.1-2/24
# assigned inside them; the link between them rate-limited with a token bucket (tc tbf,
# HIER_RATE, default 1gbit each way; this kernel has no netem for a delay) so that it is the
# slow link, as between real hosts. Inside a host the ranks talk over the namespace's own
# loopback path. Ranks per host: HIER_PER_HOST
# (default 2). Every rank runs the release `proxy-perf all-reduce --transport libfabric
# --provider tcp`; the map of hosts comes from the bootstrap. For each size list and each
# algorithm in HIER_ALGOS (default: hierarchical recursive-doubling ring auto) one run; the
# tuner's runs get a calibration file with the default constants inside a host and the shaped
# link's between hosts (HIER_TUNE: a file of your own instead).
#
# Needs root, `ip`, `tc` (iproute2) and `unshare` (util-linux). Nothing is added to the
# machine's own namespace; the namespaces are removed at the end, also on failure.
set -euo pipefail
cd "$(dirname "$0")/.."

PREFIX="pxhr$$"
PER_HOST="${HIER_PER_HOST:-2}"
NRANKS=$((2 * PER_HOST))
RATE="${HIER_RATE:-1gbit}"
ALGOS="${HIER_ALGOS:-hierarchical recursive-doubling ring auto}"
SIZES="${HIER_SIZES:--b 8 -e 16M -f 16}"
PORT=29700
TMP=$(mktemp -d)
OUT="${HIER_OUT:-target/hier}"
PIDS=()

cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  ip netns del "${PREFIX}h0" 2>/dev/null || true
  ip netns del "${PREFIX}h1" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

[ "$(id -u)" = 0 ] || { echo "error: needs root"; exit 1; }
for t in ip tc unshare; do
  command -v "$t" >/dev/null || { echo "error: no '$t'"; exit 1; }
done

cargo build -q --release -p proxy-perf --features libfabric
BIN="$PWD/target/${HIER_PROFILE:-release}/proxy-perf"
mkdir -p "$OUT"

ip netns add "${PREFIX}h0"
ip netns add "${PREFIX}h1"
ip -n "${PREFIX}h0" link add eth0 type veth peer name eth0 netns "${PREFIX}h1"
for h in 0 1; do
  ns="${PREFIX}h$h"
  ip -n "$ns" link set lo up
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 || true
  ip -n "$ns" addr add "10.98.0.$((h + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  [ "$RATE" = none ] || tc -n "$ns" qdisc add dev eth0 root tbf rate "$RATE" burst 256kb latency 100ms
done
# Wait until both ends have carrier: libfabric's tcp offers only the interfaces that are up, and
# a rank that finds only "lo" cannot reach the other host.
for _ in $(seq 1 100); do
  ip -n "${PREFIX}h0" link show eth0 | grep -q LOWER_UP && ip -n "${PREFIX}h1" link show eth0 | grep -q LOWER_UP && break
  sleep 0.05
done
ROOT="10.98.0.1:$PORT"

# The calibration file of the tuner's runs: the in-process constants (the defaults) and the
# shaped link's: the tbf rate (byte_ps), the tcp stacks' per-step cost (step_ns).
if [ -n "${HIER_TUNE:-}" ]; then
  cp "$HIER_TUNE" "$TMP/tune.json"
else
  # byte_ps 8000 = 1 Gbit/s; step_ns: the tcp stacks' ~30 µs.
  cat >"$TMP/tune.json" <<EOF
{
  "version": 1,
  "cost_model": { "step_ns": 2000, "entry_ns": 1000, "byte_ps": 35, "reduce_ps": 35 },
  "inter_host_cost_model": { "step_ns": 30000, "entry_ns": 2000, "byte_ps": 8000, "reduce_ps": 35 },
  "measured_on": "benches/hier_netns.sh: the tbf rate, not measured",
  "samples": 0,
  "rms_relative_error": 0
}
EOF
fi

run() { # algo -> table in $OUT/<algo>.out (rank 0's stdout)
  local algo=$1 r h tune=()
  [ "$algo" = auto ] && tune=(NEURON_RT_PROXY_TUNE_FILE="$TMP/tune.json")
  PIDS=()
  for ((r = 0; r < NRANKS; r++)); do
    h=$((r / PER_HOST))
    # shellcheck disable=SC2086
    ip netns exec "${PREFIX}h$h" unshare --uts sh -c 'hostname "$0" && exec "$@"' "pxhier$h" \
      env PROXY_RANK="$r" PROXY_NRANKS="$NRANKS" NEURON_RT_ROOT_COMM_ID="$ROOT" \
      NEURON_RT_BOOTSTRAP_TIMEOUT=60 NEURON_RT_EXEC_TIMEOUT=60 NEURON_RT_LOG_LEVEL="${HIER_LOG:-WARN}" \
      FI_TCP_IFACE=eth0 FI_PROVIDER=tcp "${tune[@]}" \
      timeout 600 "$BIN" all-reduce --transport libfabric --provider tcp --ranks "$NRANKS" \
      --algo "$algo" $SIZES >"$TMP/$algo.$r.out" 2>"$TMP/$algo.$r.err" &
    PIDS+=($!)
  done
  local failed=0
  for ((r = 0; r < NRANKS; r++)); do
    wait "${PIDS[$r]}" || { echo "rank $r of --algo $algo failed:"; tail -5 "$TMP/$algo.$r.err"; failed=1; }
  done
  PIDS=()
  cp "$TMP/$algo.0.out" "$OUT/$algo.out"
  for ((r = 0; r < NRANKS; r++)); do cp "$TMP/$algo.$r.err" "$OUT/$algo.$r.err"; done
  return $failed
}

echo "# two hosts x $PER_HOST ranks, link tbf rate $RATE; $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
for a in $ALGOS; do
  run "$a"
done
# Side by side: time (µs, out of place) per size and algorithm; the tuner's pick by size.
printf '%10s' "bytes"
for a in $ALGOS; do printf ' %20s' "$a"; done
echo
sizes=$(awk '!/^#/ && NF >= 13 {print $1}' "$OUT/$(echo "$ALGOS" | awk '{print $1}').out")
for s in $sizes; do
  printf '%10s' "$s"
  for a in $ALGOS; do
    printf ' %20s' "$(awk -v s="$s" '!/^#/ && $1 == s {print $6 " (" $9 "/" $13 ")"}' "$OUT/$a.out")"
  done
  echo
done
grep -h "Algorithm by size" "$OUT/auto.out" 2>/dev/null | sed 's/^/auto: /' || true
echo "# end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg); tables in $OUT"
