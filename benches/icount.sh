#!/bin/bash
# Instructions per collective, counted (valgrind's callgrind), not timed: on a shared, noisy
# machine a 5 % change of the work per collective is lost in the run-to-run spread of the time
# (BENCHMARKS.md, "Instructions per collective"), while an instruction count is the same in
# every run. Prints the instructions one collective costs, in all and per part of the engine
# (inclusive: a part's count includes what it calls), and the calls per collective.
#
#   benches/icount.sh                      8 B all-reduce, 8 ranks in process
#   RANKS=4 SIZE=32K benches/icount.sh     another shape
#   benches/icount.sh --algo ring          extra arguments go to proxy-perf
#
# Every rank on one proxy queue, driven by one thread (`--ranks-per-proxy RANKS`, polled
# devices): under valgrind the threads of a process take turns, so a second driving thread
# would count its spins while it waits for the first one. One thread does the whole work of the
# collective and nothing else (the same ticks per collective as natively: `--stats`).
#
# Needs valgrind (`callgrind_annotate` too), python3 and a release build of proxy-perf
# (`cargo build --release -p proxy-perf`; PP= names another binary, e.g. a baseline build to
# compare). Environment: RANKS (8), SIZE (8), ITERS (1000), PP (target/release/proxy-perf),
# OUT (target/icount: the callgrind profile, for callgrind_annotate). Bounded by `timeout`
# (TIMEOUT seconds, default 600).
set -u
cd "$(dirname "$0")/.."
RANKS=${RANKS:-8}
SIZE=${SIZE:-8}
ITERS=${ITERS:-1000}
PP=${PP:-target/release/proxy-perf}
OUT=${OUT:-target/icount}
TIMEOUT=${TIMEOUT:-600}
for t in valgrind callgrind_annotate python3; do
    command -v "$t" > /dev/null || { echo "icount.sh: $t is missing (apt-get install valgrind python3)" >&2; exit 2; }
done
[ -x "$PP" ] || { echo "icount.sh: $PP is missing (cargo build --release -p proxy-perf)" >&2; exit 2; }
mkdir -p "$OUT"
prof=$OUT/callgrind.out
echo "# $(date -u +%H:%M:%S) UTC: $PP all-reduce --ranks $RANKS --ranks-per-proxy $RANKS -b $SIZE -e $SIZE -w 20 -n $ITERS -c 1 $*"
if ! timeout "$TIMEOUT" valgrind --tool=callgrind --callgrind-out-file="$prof" \
    "$PP" all-reduce --ranks "$RANKS" --ranks-per-proxy "$RANKS" -b "$SIZE" -e "$SIZE" \
    -w 20 -n "$ITERS" -c 1 "$@" > "$OUT/run.log" 2>&1; then
    echo "icount.sh: the run failed or timed out (log: $OUT/run.log)" >&2
    exit 1
fi
grep -q "FAILED" "$OUT/run.log" && { echo "icount.sh: wrong values (log: $OUT/run.log)" >&2; exit 1; }
callgrind_annotate --tree=caller --inclusive=yes "$prof" > "$OUT/tree.txt" 2> /dev/null
python3 - "$OUT/tree.txt" << 'PY'
import re, sys

lines = open(sys.argv[1]).read().splitlines()

def block(sym):
    """(inclusive instructions, calls) of the function whose symbol ends with `sym`: callgrind
    lists a function once per file its lines come from; the entry with callers counts."""
    best = None
    for i, l in enumerate(lines):
        m = re.match(r"\s*([\d,]+) .*\*\s+\S+?:(.*?)( \[[^\]]*\])?$", l)
        if not m or not m.group(2).endswith(sym):
            continue
        calls, j = 0, i - 1
        while j >= 0 and " < " in lines[j]:
            c = re.search(r"\((\d[\d,]*)x\)", lines[j])
            calls += int(c.group(1).replace(",", "")) if c else 0
            j -= 1
        ins = int(m.group(1).replace(",", ""))
        if calls and (best is None or ins > best[0]):
            best = (ins, calls)
    return best

total = block("GroupRun>::execution")
if total is None:
    sys.exit("icount.sh: no GroupRun::execution in the profile (a build with other symbols?)")
colls = total[1]
print(f"# {colls} collectives (warm-up, timed out of place and in place, checked)")
print(f"{'part':<44} {'instr/collective':>16} {'share':>6} {'calls/coll':>10} {'instr/call':>10}")
parts = [
    ("one collective, all of it", "GroupRun>::execution"),
    ("proxy queue ticks", "DriverState>::tick"),
    ("  network task steps", "NetworkTask as proxy_core::driver::task::ProxyTask>::step"),
    ("    comm start (validate, file the ops)", "Comm>::start"),
    ("    comm progress (the op walk)", "Comm>::progress"),
    ("      send / recv op steps", "sendrecv::step"),
    ("    teardown (stop steps)", "NetworkTask::teardown_step"),
    ("  barrier task steps", "BarrierTask as proxy_core::driver::task::ProxyTask>::step"),
    ("emulated device polls", "PolledDevice::poll_once"),
    ("  device walks (quiet path missed)", "Device::walk"),
    ("submissions (network + barrier task)", "EngineRank>::submit_keyed"),
]
for name, sym in parts:
    b = block(sym)
    if b is None:
        print(f"{name:<44} {'(inlined or absent)':>16}")
        continue
    ins, calls = b
    print(f"{name:<44} {ins / colls:>16.0f} {100 * ins / total[0]:>5.1f}% "
          f"{calls / colls:>10.1f} {ins / max(calls, 1):>10.0f}")
PY
