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
# --provider tcp`; the map of hosts comes from the bootstrap.
#
# First the calibration: `proxy-perf --tune` run by every rank across the two namespaces (it
# times exchanges over the shaped link and fits its α, β and per-message o, then fits the in-host constants
# among host 0's ranks over the same transport; sizes HIER_TUNE_SIZES, default 8 B .. 8 MiB). HIER_TUNE=hand writes the
# old hand-made file instead (the in-process defaults inside a host, the tbf rate and ~30 µs per
# step between hosts), HIER_TUNE=FILE uses a file of your own, HIER_TUNE=none none (the tuner's
# defaults, within and between hosts). Then for each algorithm in
# HIER_ALGOS (default: hierarchical recursive-doubling ring auto) one run over HIER_SIZES
# (default 8 B .. 8 MiB, ×4), HIER_ROUNDS rounds (default 3) interleaved; the tuner's (`auto`)
# runs get the calibration file. The summary takes the median over the rounds, puts the times
# side by side and says per size whether `auto` picked the fastest of the
# others (right), and by how much it lost where not. Output in HIER_OUT (target/hier):
# tune.out, tune.json, <algo>.<round>.out and every rank's stderr.
#
# Bounded: every rank runs under `timeout` (HIER_TIMEOUT s, default 300); about 5 minutes at
# the defaults on a 2-CPU machine (1 for the calibration, about 75 s per round).
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
SIZES="${HIER_SIZES:--b 8 -e 8M -f 4}"
TUNE_SIZES="${HIER_TUNE_SIZES:--b 8 -e 8M -f 4}"
LIMIT="${HIER_TIMEOUT:-300}"
ROUNDS="${HIER_ROUNDS:-3}"
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

launch() { # name, proxy-perf args... -> $TMP/<name>.<rank>.out/.err; every rank's status
  local name=$1 r h env_tune=()
  shift
  if [ "$name" = auto ] && [ -f "$TMP/tune.json" ]; then
    env_tune=(NEURON_RT_PROXY_TUNE_FILE="$TMP/tune.json")
  fi
  PIDS=()
  for ((r = 0; r < NRANKS; r++)); do
    h=$((r / PER_HOST))
    ip netns exec "${PREFIX}h$h" unshare --uts sh -c 'hostname "$0" && exec "$@"' "pxhier$h" \
      env PROXY_RANK="$r" PROXY_NRANKS="$NRANKS" NEURON_RT_ROOT_COMM_ID="$ROOT" \
      NEURON_RT_BOOTSTRAP_TIMEOUT=60 NEURON_RT_EXEC_TIMEOUT=60 NEURON_RT_LOG_LEVEL="${HIER_LOG:-WARN}" \
      FI_TCP_IFACE=eth0 FI_PROVIDER=tcp "${env_tune[@]}" \
      timeout "$LIMIT" "$BIN" all-reduce --transport libfabric --provider tcp --ranks "$NRANKS" \
      "$@" >"$TMP/$name.$r.out" 2>"$TMP/$name.$r.err" &
    PIDS+=($!)
  done
  local failed=0
  for ((r = 0; r < NRANKS; r++)); do
    wait "${PIDS[$r]}" || { echo "rank $r of $name failed:"; tail -5 "$TMP/$name.$r.err"; failed=1; }
  done
  PIDS=()
  cp "$TMP/$name.0.out" "$OUT/$name.out"
  for ((r = 0; r < NRANKS; r++)); do cp "$TMP/$name.$r.err" "$OUT/$name.$r.err"; done
  return $failed
}

echo "# two hosts x $PER_HOST ranks, link tbf rate $RATE; $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
# The calibration file of the tuner's runs.
case "${HIER_TUNE:-measure}" in
measure)
  # shellcheck disable=SC2086
  launch tune --tune "$TMP/tune.json" $TUNE_SIZES
  cp "$TMP/tune.json" "$OUT/tune.json"
  grep -E "^# (fitted|between)|choice across" "$OUT/tune.out" || true
  echo "# calibrated $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
  ;;
hand)
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
  ;;
none) echo "# no calibration file: the tuner's defaults" ;;
*) cp "$HIER_TUNE" "$TMP/tune.json" ;;
esac

# Interleaved rounds (for round: for algorithm: run), so that the machine's other work falls on
# every algorithm alike; the summary takes each size's median over the rounds.
for ((round = 1; round <= ROUNDS; round++)); do
  for a in $ALGOS; do
    # shellcheck disable=SC2086
    launch "$a" --algo "$a" $SIZES
    mv "$OUT/$a.out" "$OUT/$a.$round.out"
  done
done
echo "# measured $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
median() { # algo size -> the median out-of-place time (µs) over the rounds
  local a=$1 s=$2
  for ((round = 1; round <= ROUNDS; round++)); do
    awk -v s="$s" '!/^#/ && $1 == s {print $6; exit}' "$OUT/$a.$round.out" 2>/dev/null
  done | sort -g | awk '{v[NR] = $1} END {if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'
}
wrong() { # algo size -> wrong values out of / in place, summed over the rounds
  cat "$OUT/$1".*.out | awk -v s="$2" '!/^#/ && $1 == s {o += $9; i += $13} END {print o "/" i}'
}
# Side by side: median time (µs, out of place; wrong values out of/in place over the rounds) per
# size and algorithm; with auto among them, its pick per size and whether it is the fastest of
# the others.
printf '%10s' "bytes"
for a in $ALGOS; do printf ' %20s' "$a"; done
[[ " $ALGOS " == *" auto "* ]] && printf ' %20s %20s %s' "fastest" "auto picked" "verdict"
echo
first=$(echo "$ALGOS" | awk '{print $1}')
sizes=$(awk '!/^#/ && NF >= 13 {print $1}' "$OUT/$first.1.out")
for s in $sizes; do
  printf '%10s' "$s"
  best="" bt=""
  for a in $ALGOS; do
    t=$(median "$a" "$s")
    printf ' %20s' "$t ($(wrong "$a" "$s"))"
    if [ "$a" != auto ] && [ -n "$t" ] && { [ -z "$bt" ] || awk -v x="$t" -v y="$bt" 'BEGIN {exit !(x < y)}'; }; then
      best=$a bt=$t
    fi
  done
  if [[ " $ALGOS " == *" auto "* ]]; then
    # auto's pick at this size from its footer: "name a..b, name c, ..."
    pick=$(grep -h "Algorithm by size" "$OUT/auto.1.out" | sed 's/.*: //' | tr ',' '\n' | awk -v s="$s" '
      NF == 2 { n = split($2, r, /\.\./); lo = r[1]; hi = (n == 2 ? r[2] : r[1]);
                if (s + 0 >= lo + 0 && s + 0 <= hi + 0) print $1 }')
    # The pick's time: its own runs' median, else (an algorithm not among the others) auto's.
    pt=$([ -n "$pick" ] && [[ " $ALGOS " == *" $pick "* ]] && median "$pick" "$s" || median auto "$s")
    if [ "$pick" = "$best" ]; then
      verdict=right
    elif [ -n "$pt" ] && awk -v x="$pt" -v y="$bt" 'BEGIN {exit !(x <= y)}'; then
      verdict="right (auto's own time; $pick not among the others)"
    elif [ -n "$pt" ]; then
      verdict="wrong ($(awk -v x="$pt" -v y="$bt" 'BEGIN {printf "%.2fx the fastest", x / y}'))"
    else
      verdict="(no time)"
    fi
    printf ' %20s %20s %s' "$best" "$pick" "$verdict"
  fi
  echo
done
echo "# end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg); tables in $OUT"
