#!/usr/bin/env bash
# End-to-end comparison on this machine, loopback only: proxy-perf (release, with libfabric)
# against Open MPI 4.1 (shared memory `btl self,vader`, and `pml cm` + `mtl ofi` over libfabric
# tcp) and fi_pingpong (the transport floor: tcp and shm), side by side in one table with
# ratios proxy-perf / peer.
#
#   benches/e2e.sh                 full: sizes 8 B, 64 KiB, 64 MiB; 2 and 4 ranks
#   E2E_QUICK=1 benches/e2e.sh     quick: sizes 8 B and 64 KiB, fewer iterations
#   E2E_BW=1 benches/e2e.sh        bandwidth at 64 MiB: the streams / blocks / early-flag
#                                  variants of proxy-perf beside their floor or peer, repeated
#                                  (below, "bandwidth mode")
#
# Environment: E2E_QUICK (0|1), E2E_OUT (logs and the table; default target/e2e),
# E2E_TIMEOUT (seconds per run; default 300, quick 120), E2E_FI_PORT (first control port of
# fi_pingpong; default 47700), CARGO_BUILD_JOBS (default 1: the machine is shared);
# E2E_SIZES, E2E_RANKS, E2E_COLLS ("all-reduce send-recv"), E2E_TRANSPORTS ("mem lf-tcp
# lf-shm") narrow the matrix, e.g. E2E_SIZES=8 E2E_RANKS=2 E2E_COLLS=send-recv.
#
# What runs:
# * proxy-perf all-reduce and send-recv, 2 and 4 ranks, each size, with --transport mem, and
#   --transport libfabric --provider tcp / shm (one process per rank, launched by proxy-perf
#   itself, bootstrap on 127.0.0.1, FI_TCP_IFACE=lo); for every driver/device mode
#   (--driver thread|caller, --device thread|polled) when `proxy-perf --help` lists those flags
#   (the script says which it found). time = µs per collective (out of place), busbw in GB/s.
#   For 8 B the run is wrapped in /usr/bin/time -v and repeated with 1/5 of the iterations:
#   context switches per collective, (cs(n) - cs(n/5)) / (2 · (n - n/5)) (out-of-place and
#   in-place each run n), which removes setup and teardown, for voluntary switches (the
#   thread blocked: park, futex, poll) and involuntary ones (preempted, or a sched_yield that
#   switched: Linux counts a yield as involuntary). On a loaded machine both carry noise; a
#   small negative value means "about zero".
# * benches/mpi/allreduce.c (built with mpicc here): the same collectives and sizes with the
#   nccl-tests definitions (time per op of the slowest rank, the median of 3 timed phases;
#   algbw = size / time; busbw = algbw · 2(n−1)/n for all-reduce, · 1 for send-recv), over
#   vader and over ofi tcp.
# * fi_pingpong -e rdm on 127.0.0.1 with "tcp;ofi_rxm" and shm, 8 B and 64 KiB: one-way µs per
#   transfer (usec/xfer), the floor for a 2-rank send-recv.
#
# Bandwidth mode (E2E_BW=1; issue 14): 64 MiB, each cell beside its floor or peer, every
# variant of proxy-perf's protocol flags in the same round, E2E_BW_REPS rounds (default 3):
# cells all-reduce 2 ranks in-process and libfabric shm (floor: the engine-free 2-thread
# all-reduce, `cargo run --release -p proxy-perf --example allreduce_floor`), all-reduce 2 ranks
# libfabric tcp, reduce-scatter 2 ranks tcp, all-reduce 4 ranks in-process and tcp (peer: Open
# MPI over vader for in-process, over `mtl ofi` tcp for tcp). E2E_BW_VARIANTS: "name=flags;..."
# (flags with ',' for spaces; flags starting with @PATH run that binary instead, e.g. an earlier
# commit's build), default below; E2E_BW_CELLS narrows the cells (ar2-mem ar2-shm
# ar2-tcp rs2-tcp ar4-mem ar4-tcp). Table: busbw (out of place) range over the rounds and the
# ratio to the floor/peer of the same round, range over the rounds.
#
# Every run is bounded by `timeout`. Missing tools are installed with apt-get (openmpi-bin
# libopenmpi-dev libfabric-bin time) when running as root; otherwise that peer is skipped.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
QUICK="${E2E_QUICK:-0}"
OUT="${E2E_OUT:-$ROOT/target/e2e}"
mkdir -p "$OUT"
RES="$OUT/results.tsv"
: >"$RES"
if [ "$QUICK" = 1 ]; then
    TO="${E2E_TIMEOUT:-120}"
    SIZES=(8 65536)
else
    TO="${E2E_TIMEOUT:-300}"
    SIZES=(8 65536 67108864)
fi
RANKS=(2 4)
COLLS=(all-reduce send-recv)
TRANSPORTS=(mem lf-tcp lf-shm)
# Narrow the matrix (space-separated lists), e.g. to re-run one cell.
[ -n "${E2E_SIZES:-}" ] && read -r -a SIZES <<<"$E2E_SIZES"
[ -n "${E2E_RANKS:-}" ] && read -r -a RANKS <<<"$E2E_RANKS"
[ -n "${E2E_COLLS:-}" ] && read -r -a COLLS <<<"$E2E_COLLS"
[ -n "${E2E_TRANSPORTS:-}" ] && read -r -a TRANSPORTS <<<"$E2E_TRANSPORTS"
FI_PORT="${E2E_FI_PORT:-47700}"
export FI_TCP_IFACE=lo
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}"

log() { echo "# $*"; }
bounded() { timeout -k 5 "$TO" "$@"; }

# Iterations per size: proxy-perf "n w", MPI "n w", fi_pingpong "n".
pp_iters() {
    case "$1" in
        8) [ "$QUICK" = 1 ] && echo "100 10" || echo "500 50" ;;
        65536) [ "$QUICK" = 1 ] && echo "30 5" || echo "200 20" ;;
        *) echo "5 1" ;;
    esac
}
mpi_iters() {
    case "$1" in
        8) [ "$QUICK" = 1 ] && echo "2000 200" || echo "20000 2000" ;;
        65536) [ "$QUICK" = 1 ] && echo "300 30" || echo "2000 200" ;;
        *) echo "10 2" ;;
    esac
}
fi_iters() {
    case "$1" in
        8) [ "$QUICK" = 1 ] && echo 2000 || echo 20000 ;;
        *) [ "$QUICK" = 1 ] && echo 500 || echo 5000 ;;
    esac
}

# ---- tools ---------------------------------------------------------------------------------
need_pkgs=()
command -v mpicc >/dev/null && command -v mpirun >/dev/null || need_pkgs+=(openmpi-bin libopenmpi-dev)
command -v fi_pingpong >/dev/null || need_pkgs+=(libfabric-bin)
[ -x /usr/bin/time ] || need_pkgs+=(time)
if [ "${#need_pkgs[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        log "installing ${need_pkgs[*]}"
        DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y --no-install-recommends \
            "${need_pkgs[@]}" >"$OUT/apt.log" 2>&1 ||
            { timeout 300 apt-get update >>"$OUT/apt.log" 2>&1 &&
                DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y \
                    --no-install-recommends "${need_pkgs[@]}" >>"$OUT/apt.log" 2>&1; } ||
            log "apt-get failed (see $OUT/apt.log); the missing peers are skipped"
    else
        log "not root: cannot install ${need_pkgs[*]}; the missing peers are skipped"
    fi
fi
HAVE_MPI=0; command -v mpicc >/dev/null && command -v mpirun >/dev/null && HAVE_MPI=1
HAVE_FI=0; command -v fi_pingpong >/dev/null && HAVE_FI=1
HAVE_TIME=0; [ -x /usr/bin/time ] && HAVE_TIME=1

# ---- machine -------------------------------------------------------------------------------
log "e2e $(date -u +%Y-%m-%dT%H:%M:%SZ) quick=$QUICK timeout=${TO}s out=$OUT"
log "machine: nproc $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), kernel $(uname -r)"
log "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (a shared machine: compare within this run)"
[ "$HAVE_MPI" = 1 ] && log "mpirun: $(timeout 10 mpirun --version 2>/dev/null | head -1)"
[ "$HAVE_FI" = 1 ] && log "libfabric: $(timeout 10 fi_info --version 2>/dev/null | tr '\n' ' ')"

# ---- proxy-perf build ----------------------------------------------------------------------
log "building proxy-perf (cargo build --release -p proxy-perf --features libfabric)"
if ! timeout 3600 cargo build --release -p proxy-perf --features libfabric >"$OUT/build.log" 2>&1; then
    log "proxy-perf build failed (see $OUT/build.log)"
    exit 1
fi
PP="$ROOT/target/release/proxy-perf"
HELP="$(timeout 30 "$PP" -h 2>&1)"
# The driver/device mode flags, if this proxy-perf has them: their values (from clap's
# "[possible values: a, b]", else the given defaults), or nothing.
modes_of() { # $1 flag, $2 default values
    awk -v flag="--$1" -v def="$2" '
        found && /^ *(-[A-Za-z], )?--[a-z]/ { exit }
        found && /possible values: / { v = $0; sub(/.*possible values: /, "", v); sub(/\].*/, "", v); gsub(/,/, "", v); print v; printed = 1; exit }
        { line = $0; sub(/^ *(-[A-Za-z], )?/, "", line) }
        !found && index(line, flag) == 1 && substr(line, length(flag) + 1, 1) ~ /^( |<|=|)$/ { found = 1 }
        END { if (found && !printed) print def }' <<<"$HELP"
}
DRIVERS="$(modes_of driver "thread caller")"
DEVICES="$(modes_of device "thread polled")"
if [ -n "$DRIVERS" ]; then log "proxy-perf --help lists --driver: passing --driver {$DRIVERS}"
else log "proxy-perf --help does not list --driver: not passed (the default driver only)"; fi
if [ -n "$DEVICES" ]; then log "proxy-perf --help lists --device: passing --device {$DEVICES}"
else log "proxy-perf --help does not list --device: not passed (the default device only)"; fi
MODES=()
for dr in ${DRIVERS:-"-"}; do
    for dv in ${DEVICES:-"-"}; do
        # thread/polled: the workers play the devices (no device threads).
        MODES+=("$dr/$dv")
    done
done
mode_flags() { # "driver/device" -> flags
    local dr="${1%/*}" dv="${1#*/}" f=()
    [ "$dr" != "-" ] && f+=(--driver "$dr")
    [ "$dv" != "-" ] && f+=(--device "$dv")
    echo "${f[@]}"
}
mode_name() { [ "$1" = "-/-" ] && echo default || echo "drv=${1%/*},dev=${1#*/}"; }

# ---- bandwidth mode (E2E_BW=1) -------------------------------------------------------------
if [ "${E2E_BW:-0}" = 1 ]; then
    BW_REPS="${E2E_BW_REPS:-3}"
    BW_VARIANTS="${E2E_BW_VARIANTS:-s1b1=--streams,1,--blocks,1;s2b1=--streams,2,--blocks,1;s4b1=--streams,4,--blocks,1;s1b4=--streams,1,--blocks,4;s2b4=--streams,2,--blocks,4;s2b4-early=--streams,2,--blocks,4,--early-recv,4,--early-send}"
    read -r -a BW_CELLS <<<"${E2E_BW_CELLS:-ar2-mem ar2-shm ar2-tcp rs2-tcp ar4-mem ar4-tcp}"
    BW="$OUT/bw.tsv"
    : >"$BW"
    log "bandwidth mode: cells ${BW_CELLS[*]}; variants $BW_VARIANTS; $BW_REPS rounds"
    if ! timeout 1800 cargo build --release -p proxy-perf --features libfabric --example allreduce_floor >>"$OUT/build.log" 2>&1; then
        log "allreduce_floor build failed (see $OUT/build.log)"
        exit 1
    fi
    FLOOR="$ROOT/target/release/examples/allreduce_floor"
    if [ "$HAVE_MPI" = 1 ] && ! timeout 120 mpicc -O2 -o "$OUT/mpi_bench" "$ROOT/benches/mpi/allreduce.c" >"$OUT/mpicc.log" 2>&1; then
        log "mpicc failed (see $OUT/mpicc.log); Open MPI skipped"
        HAVE_MPI=0
    fi
    bw_mpi() { # coll ranks net -> busbw
        local nf=()
        case "$3" in
            vader) nf=(--mca pml ob1 --mca btl self,vader) ;;
            ofi-tcp) nf=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tcp
                -x FI_PROVIDER=tcp -x FI_TCP_IFACE=lo) ;;
        esac
        bounded mpirun --oversubscribe --bind-to none --mca oob_tcp_if_include lo \
            --mca btl_tcp_if_include lo -np "$2" "${nf[@]}" "$OUT/mpi_bench" "$1" 67108864 5 1 2>&1 |
            awk '/^mpi / { for (i = 1; i < NF; i++) if ($i == "busbw") print $(i + 1) }'
    }
    for rep in $(seq 1 "$BW_REPS"); do
        for cell in "${BW_CELLS[@]}"; do
            coll=all-reduce; [ "${cell%%-*}" = rs2 ] && coll=reduce-scatter
            ranks="${cell:2:1}"; tr="${cell#*-}"
            case "$tr" in
                mem) trf=(--transport mem) ;;
                shm) trf=(--transport libfabric --provider shm) ;;
                tcp) trf=(--transport libfabric --provider tcp) ;;
            esac
            # The floor or peer of this cell, in this round.
            case "$cell" in
                ar2-mem | ar2-shm) peer=floor; pbw="$(bounded "$FLOOR" 64M 10 2 | awk '{ for (i = 1; i < NF; i++) if ($i == "busbw") print $(i + 1) }')" ;;
                ar4-mem) peer=mpi-vader; pbw="$( [ "$HAVE_MPI" = 1 ] && bw_mpi allreduce 4 vader)" ;;
                rs2-tcp) peer=mpi-ofi-tcp; pbw="$( [ "$HAVE_MPI" = 1 ] && bw_mpi reducescatter 2 ofi-tcp)" ;;
                *) peer=mpi-ofi-tcp; pbw="$( [ "$HAVE_MPI" = 1 ] && bw_mpi allreduce "$ranks" ofi-tcp)" ;;
            esac
            printf 'peer\t%s\t%s\t%s\t%s\n' "$cell" "$peer" "$rep" "${pbw:-}" >>"$BW"
            log "round $rep $cell: $peer busbw ${pbw:-FAILED}"
            IFS=';' read -r -a vs <<<"$BW_VARIANTS"
            for v in "${vs[@]}"; do
                name="${v%%=*}"; IFS=',' read -r -a vf <<<"${v#*=}"
                # A variant whose flags start with @PATH runs that proxy-perf binary (e.g. the
                # build of an earlier commit: "today=@/tmp/proxy-perf-old").
                bin="$PP"
                if [ "${vf[0]:0:1}" = @ ]; then bin="${vf[0]:1}"; vf=("${vf[@]:1}"); fi
                tag="bw_${cell}_${name}_$rep"
                bounded "$bin" "$coll" -b 64M -e 64M -n 5 -w 1 -c 1 --ranks "$ranks" "${trf[@]}" \
                    "${vf[@]}" >"$OUT/$tag.log" 2>&1
                rc=$?
                read -r bw wrong <<<"$(awk '$1 ~ /^[0-9]+$/ && NF >= 13 { print $8, $9; exit }' "$OUT/$tag.log")"
                if [ "$rc" != 0 ] || [ -z "$bw" ] || [ "$wrong" != 0 ]; then
                    log "FAILED (rc $rc, wrong ${wrong:-?}): $cell $name (see $OUT/$tag.log)"
                    bw=FAIL
                fi
                printf 'pp\t%s\t%s\t%s\t%s\n' "$cell" "$name" "$rep" "$bw" >>"$BW"
                log "round $rep $cell $name: busbw $bw"
            done
        done
    done
    # cell | variant | busbw min–max | peer | peer busbw min–max | ratio min–max (per round)
    awk -F'\t' '
        $1 == "peer" { peer[$2 "|" $4] = $5; pname[$2] = $3; next }
        $1 == "pp" { k = $2 "|" $3; if (!(k in seen)) { seen[k] = 1; order[++no] = k }
                     bw[k "|" $4] = $5; reps[$4] = 1 }
        function upd(a, v) { if (!(a in lo) || v < lo[a]) lo[a] = v; if (!(a in hi) || v > hi[a]) hi[a] = v }
        END {
            print "| cell | variant | busbw GB/s | floor / peer | its busbw GB/s | ratio |"
            print "| --- | --- | --- | --- | --- | --- |"
            for (i = 1; i <= no; i++) {
                split(order[i], c, "|")
                for (r in reps) {
                    b = bw[order[i] "|" r]; p = peer[c[1] "|" r]
                    if (b != "FAIL" && b != "") upd("b" i, b + 0)
                    if (p != "") upd("p" i, p + 0)
                    if (b != "FAIL" && b + 0 > 0 && p + 0 > 0) upd("r" i, b / p)
                }
                printf "| %s | %s | %s | %s | %s | %s |\n", c[1], c[2],
                    ("b" i in lo) ? sprintf("%.2f–%.2f", lo["b" i], hi["b" i]) : "FAIL", pname[c[1]],
                    ("p" i in lo) ? sprintf("%.2f–%.2f", lo["p" i], hi["p" i]) : "-",
                    ("r" i in lo) ? sprintf("%.2f–%.2f×", lo["r" i], hi["r" i]) : "-"
            }
        }' "$BW" >"$OUT/bw.md"
    log "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
    cat "$OUT/bw.md"
    exit 0
fi

# ---- proxy-perf runs -----------------------------------------------------------------------
# Parses the first data row: "time busbw wrong" (out of place).
pp_parse() { awk '$1 ~ /^[0-9]+$/ && NF >= 13 { print $6, $8, $9; exit }' "$1"; }
vcs_of() { awk -F: '/Voluntary context switches/ { s += $2 } END { print s + 0 }' "$1"; }
ics_of() { awk -F: '/Involuntary context switches/ { s += $2 } END { print s + 0 }' "$1"; }

pp_run() { # coll ranks size transport-name mode
    local coll="$1" ranks="$2" size="$3" tr="$4" mode="$5"
    local trflags=()
    case "$tr" in
        mem) trflags=(--transport mem) ;;
        lf-tcp) trflags=(--transport libfabric --provider tcp) ;;
        lf-shm) trflags=(--transport libfabric --provider shm) ;;
    esac
    local n w
    read -r n w <<<"$(pp_iters "$size")"
    local tag="pp_${coll}_${ranks}_${size}_${tr}_$(mode_name "$mode" | tr ',=' '__')"
    # shellcheck disable=SC2046
    local cmd=("$PP" "$coll" -b "$size" -e "$size" -n "$n" -w "$w" -c 1 --ranks "$ranks"
        "${trflags[@]}" $(mode_flags "$mode"))
    echo "${cmd[*]}" >"$OUT/$tag.cmd"
    local cs="-"
    if [ "$size" = 8 ] && [ "$HAVE_TIME" = 1 ]; then
        bounded /usr/bin/time -v -o "$OUT/$tag.time" "${cmd[@]}" >"$OUT/$tag.log" 2>&1
        local rc=$?
        local n1=$((n / 5))
        local cmd1=("${cmd[@]}")
        for i in "${!cmd1[@]}"; do [ "${cmd1[$i]}" = -n ] && cmd1[$((i + 1))]=$n1; done
        bounded /usr/bin/time -v -o "$OUT/$tag.short.time" "${cmd1[@]}" >"$OUT/$tag.short.log" 2>&1
        if [ "$rc" = 0 ] && [ -s "$OUT/$tag.time" ] && [ -s "$OUT/$tag.short.time" ]; then
            # "vol Δ/invol Δ": voluntary and involuntary switches per collective, each from
            # the difference of the two runs.
            cs="$(awk -v a="$(vcs_of "$OUT/$tag.time")" -v b="$(vcs_of "$OUT/$tag.short.time")" \
                -v ia="$(ics_of "$OUT/$tag.time")" -v ib="$(ics_of "$OUT/$tag.short.time")" \
                -v d=$((2 * (n - n1))) 'BEGIN { printf "%.1f/%.1f", (a - b) / d, (ia - ib) / d }')"
        fi
    else
        bounded "${cmd[@]}" >"$OUT/$tag.log" 2>&1
        local rc=$?
    fi
    local parsed
    parsed="$(pp_parse "$OUT/$tag.log")"
    if [ "$rc" != 0 ] || [ -z "$parsed" ]; then
        log "FAILED (rc $rc): ${cmd[*]} (see $OUT/$tag.log)"
        printf 'pp\t%s\t%s\t%s\t%s\t%s\tFAIL\t-\t-\n' "$coll" "$ranks" "$size" "$tr" \
            "$(mode_name "$mode")" >>"$RES"
        return
    fi
    local t bw wrong
    read -r t bw wrong <<<"$parsed"
    [ "$wrong" != 0 ] && log "WRONG VALUES ($wrong): ${cmd[*]}"
    printf 'pp\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$coll" "$ranks" "$size" "$tr" \
        "$(mode_name "$mode")" "$t" "$bw" "$cs" >>"$RES"
    log "proxy-perf $coll ranks $ranks size $size $tr $(mode_name "$mode"): $t us, busbw $bw, cs/coll $cs"
}

for coll in "${COLLS[@]}"; do
    for ranks in "${RANKS[@]}"; do
        for size in "${SIZES[@]}"; do
            for tr in "${TRANSPORTS[@]}"; do
                for mode in "${MODES[@]}"; do
                    pp_run "$coll" "$ranks" "$size" "$tr" "$mode"
                done
            done
        done
    done
done

# ---- Open MPI ------------------------------------------------------------------------------
if [ "$HAVE_MPI" = 1 ]; then
    MPIB="$OUT/mpi_bench"
    if ! timeout 120 mpicc -O2 -o "$MPIB" "$ROOT/benches/mpi/allreduce.c" >"$OUT/mpicc.log" 2>&1; then
        log "mpicc failed (see $OUT/mpicc.log); Open MPI skipped"
        HAVE_MPI=0
    fi
fi
MPI_COMMON=(--oversubscribe --bind-to none --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo)
if [ "$HAVE_MPI" = 1 ]; then
    for coll in "${COLLS[@]}"; do
        mcoll="${coll//-/}"
        for ranks in "${RANKS[@]}"; do
            for size in "${SIZES[@]}"; do
                read -r n w <<<"$(mpi_iters "$size")"
                for net in vader ofi-tcp; do
                    case "$net" in
                        vader) nf=(--mca pml ob1 --mca btl self,vader) ;;
                        ofi-tcp) nf=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tcp
                            -x FI_PROVIDER=tcp -x FI_TCP_IFACE=lo) ;;
                    esac
                    tag="mpi_${coll}_${ranks}_${size}_${net}"
                    bounded mpirun "${MPI_COMMON[@]}" -np "$ranks" "${nf[@]}" "$MPIB" "$mcoll" \
                        "$size" "$n" "$w" >"$OUT/$tag.log" 2>&1
                    rc=$?
                    line="$(grep '^mpi ' "$OUT/$tag.log" | tail -1)"
                    if [ "$rc" != 0 ] || [ -z "$line" ]; then
                        log "FAILED (rc $rc): mpirun $coll $ranks ranks $size B $net (see $OUT/$tag.log)"
                        continue
                    fi
                    t="$(awk '{ for (i = 1; i < NF; i++) if ($i == "time_us") print $(i + 1) }' <<<"$line")"
                    bw="$(awk '{ for (i = 1; i < NF; i++) if ($i == "busbw") print $(i + 1) }' <<<"$line")"
                    printf 'mpi\t%s\t%s\t%s\t%s\t-\t%s\t%s\t-\n' "$coll" "$ranks" "$size" "$net" "$t" "$bw" >>"$RES"
                    log "Open MPI $coll ranks $ranks size $size $net: $t us, busbw $bw"
                done
            done
        done
    done
fi

# ---- fi_pingpong ---------------------------------------------------------------------------
if [ "$HAVE_FI" = 1 ]; then
    for prov in "tcp;ofi_rxm" shm; do
        for size in 8 65536; do
            n="$(fi_iters "$size")"
            port=$FI_PORT
            FI_PORT=$((FI_PORT + 1))
            tag="fi_${prov//;/_}_${size}"
            bounded fi_pingpong -p "$prov" -e rdm -I "$n" -S "$size" -B "$port" >"$OUT/$tag.server.log" 2>&1 &
            spid=$!
            ok=0
            for _try in 1 2 3 4 5; do
                sleep 0.5
                if bounded fi_pingpong -p "$prov" -e rdm -I "$n" -S "$size" -P "$port" 127.0.0.1 \
                    >"$OUT/$tag.log" 2>&1; then
                    ok=1
                    break
                fi
            done
            wait "$spid" 2>/dev/null
            # Row: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
            us="$(awk '$1 ~ /^[0-9]+[kmg]?$/ && NF >= 8 { print $7; exit }' "$OUT/$tag.log")"
            if [ "$ok" != 1 ] || [ -z "$us" ]; then
                log "FAILED: fi_pingpong $prov $size B (see $OUT/$tag.log)"
                continue
            fi
            bw="$(awk -v s="$size" -v u="$us" 'BEGIN { printf "%.4f", s / u / 1000 }')"
            name="fi-${prov%%;*}"
            printf 'fi\tsend-recv\t2\t%s\t%s\t-\t%s\t%s\t-\n' "$size" "$name" "$us" "$bw" >>"$RES"
            log "fi_pingpong $prov $size B: $us us one way"
        done
    done
fi

# ---- the table -----------------------------------------------------------------------------
# Peers of each proxy-perf transport: mem and lf-shm against Open MPI vader (shared memory);
# lf-tcp against Open MPI ofi-tcp; send-recv with 2 ranks also against fi_pingpong (floor).
TABLE="$OUT/table.md"
awk -F'\t' '
    $1 == "mpi" || $1 == "fi" { peer[$2 "|" $3 "|" $4 "|" $5] = $7 "|" $8; next }
    $1 == "pp" { rows[++nr] = $0 }
    function cell(v) { return v == "" ? "-" : v }
    function ratio(a, b) { return (a + 0 > 0 && b + 0 > 0) ? sprintf("%.2f", a / b) : "-" }
    END {
        print "| collective | ranks | size (B) | proxy-perf transport | mode | proxy-perf µs | busbw GB/s | ctx sw/coll (vol Δ/invol Δ) | peer | peer µs | peer busbw GB/s | ratio µs (pp/peer) |"
        print "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
        for (i = 1; i <= nr; i++) {
            split(rows[i], f, "\t")
            k = f[2] "|" f[3] "|" f[4]
            np = 0
            if (f[5] == "mem" || f[5] == "lf-shm") { names[++np] = "vader" }
            if (f[5] == "lf-tcp") { names[++np] = "ofi-tcp" }
            if (f[2] == "send-recv" && f[3] == 2 && f[5] == "lf-tcp") { names[++np] = "fi-tcp" }
            if (f[2] == "send-recv" && f[3] == 2 && f[5] == "lf-shm") { names[++np] = "fi-shm" }
            for (j = 1; j <= np; j++) {
                p = peer[k "|" names[j]]
                split(p, q, "|")
                label = (names[j] ~ /^fi-/) ? "fi_pingpong " substr(names[j], 4) " (one way)" : "Open MPI " names[j]
                printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], label, cell(q[1]), cell(q[2]), ratio(f[7], q[1])
            }
        }
    }' "$RES" >"$TABLE"
echo
log "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
log "side by side (ratio > 1: proxy-perf slower); raw rows in $RES, logs in $OUT"
cat "$TABLE"

# ---- plausibility --------------------------------------------------------------------------
v8="$(awk -F'\t' '$1 == "mpi" && $2 == "all-reduce" && $3 == 2 && $4 == 8 && $5 == "vader" { print $7 }' "$RES")"
if [ -n "$v8" ]; then
    if awk -v v="$v8" 'BEGIN { exit !(v < 5) }'; then
        log "plausibility: Open MPI vader 8 B all-reduce on 2 ranks $v8 us (< 5 us: plausible)"
    else
        log "plausibility WARNING: Open MPI vader 8 B all-reduce on 2 ranks $v8 us (>= 5 us: the machine is busy?)"
    fi
fi
fails="$(grep -c $'\tFAIL\t' "$RES" || true)"
log "proxy-perf runs failed: $fails"
[ "$fails" = 0 ]
