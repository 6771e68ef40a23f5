#!/bin/bash
# Issue 25: 8 B all-reduce with 4 rank processes on this host (2 CPUs here), every case of the
# barrier's place (--barrier) and of the idle wait (--wait), and the defaults, over libfabric shm
# and tcp and over the engine's own shared memory (`own-shm`: --transport shm), interleaved with
# Open MPI, ROUNDS
# rounds (default 6); prints the median of each case (µs) and its ratio to Open MPI.
#
# Needs a release build with libfabric (`cargo build --release -p proxy-perf --features
# libfabric`) and Open MPI's benchmark built by benches/e2e.sh (target/e2e/mpi_bench; run
# `E2E_SIZES=8 E2E_RANKS=4 E2E_COLLS=all-reduce E2E_TRANSPORTS=lf-shm benches/e2e.sh` once).
# Every run is bounded by `timeout`. Raw values: target/crowded/values.tsv.
set -u
cd "$(dirname "$0")/.."
PP=target/release/proxy-perf
MPIB=target/e2e/mpi_bench
for f in "$PP" "$MPIB"; do
    [ -x "$f" ] || { echo "crowded.sh: $f is missing (see the header)" >&2; exit 2; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI=(mpirun --oversubscribe --bind-to none --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo -np 4)
ROUNDS=${ROUNDS:-6}
OUT=target/crowded; mkdir -p "$OUT"; out=$OUT/values.tsv; : > "$out"
echo "# $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg), $ROUNDS rounds"
pp() { # label args...
    local l=$1; shift
    echo -e "$l\t$(timeout 120 "$PP" all-reduce --ranks 4 -b 8 -e 8 -w 200 "$@" 2>&1 |
        awk '/^ +[0-9]/{print $6, $10}')" >> "$out"
}
mpi() { # label iters net-flags...
    local l=$1 n=$2; shift 2
    echo -e "$l\t$(timeout 120 "${MPI[@]}" "$@" "$MPIB" allreduce 8 "$n" 100 2>&1 |
        awk '/^mpi /{for(i=1;i<NF;i++) if($i=="time_us") print $(i+1)}')" >> "$out"
}
for _ in $(seq 1 "$ROUNDS"); do
    pp shm-default --transport libfabric --provider shm -n 3000
    pp shm-end --transport libfabric --provider shm -n 3000 --barrier end
    pp shm-launch --transport libfabric --provider shm -n 3000 --barrier launch
    pp shm-loop --transport libfabric --provider shm -n 3000 --loop
    pp own-shm --transport shm -n 3000
    pp own-shm-loop --transport shm -n 3000 --loop
    mpi ompi-vader 3000 --mca pml ob1 --mca btl self,vader
    pp tcp-default --transport libfabric --provider tcp -n 1000
    pp tcp-poll-end --transport libfabric --provider tcp -n 1000 --wait poll --barrier end
    pp tcp-block-end --transport libfabric --provider tcp -n 1000 --wait sleep --barrier end
    pp tcp-poll-launch --transport libfabric --provider tcp -n 1000 --wait poll --barrier launch
    pp tcp-block-launch --transport libfabric --provider tcp -n 1000 --wait sleep --barrier launch
    pp tcp-worker-poll --transport libfabric --provider tcp -n 1000 --driver thread --device polled --wait poll
    pp tcp-worker-block --transport libfabric --provider tcp -n 1000 --driver thread --device polled --wait sleep
    mpi ompi-ofi-tcp 1000 --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tcp \
        -x FI_PROVIDER=tcp -x FI_TCP_IFACE=lo
done
echo "# $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" <<'PY'
import statistics as st, sys
d = {}
for line in open(sys.argv[1]):
    k, _, v = line.rstrip("\n").partition("\t")
    for x in v.split():
        try:
            d.setdefault(k, []).append(float(x))
        except ValueError:
            pass
vader = st.median(d.get("ompi-vader", [float("nan")]))
ref = {"shm": vader, "own": vader, "tcp": st.median(d.get("ompi-ofi-tcp", [float("nan")]))}
for k, v in d.items():
    m = st.median(v)
    r = "" if k.startswith("ompi") else f"  {m / ref[k[:3]]:.2f}x Open MPI"
    print(f"{k:18s} n={len(v):3d} median {m:9.2f} us{r}")
PY
