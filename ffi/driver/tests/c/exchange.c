/*
 * A C runtime over both libraries: links -lnrt_proxy, which dlopen()s the progress half given
 * on the command line, and runs a 2-rank exchange (each rank sends N_ENTRIES x ENTRY_SIZE to
 * the other and receives as much) over the in-memory transport, EXECUTIONS times.
 *
 * The device is a thread of this program (as a real runtime's device is another agent): per
 * rank and execution it writes the network task's trigger word, waits for the proxy to consume
 * it (0), runs the host-index protocol of its send and recv ops (READY, wait for the handshake
 * semaphore, post entries, wait for the complete semaphore), then writes the barrier task's
 * trigger word and waits for the barrier-done semaphore that rank 0's barrier task (the
 * leader) increments. The host thread arms the trigger words, submits a network task and a
 * barrier task per rank (the first execution with NRT_PROXY_TASK_KEEP, later ones by
 * nrt_proxy_resubmit), waits for the four 24-byte records and checks every field, then checks
 * every received byte and the semaphore counts.
 *
 * Usage: exchange /path/to/libnccom_proxy.so [thread|caller|trampolines]
 *   thread: a worker thread per rank's proxy queue (ranks_per_network_proxy 1);
 *   caller: no worker; both ranks share one queue (ranks_per_network_proxy 2), which the host
 *           thread drives inside nrt_proxy_drive_until;
 *   trampolines: no proxy queue and no task: the host thread drives the seam itself through
 *           the exported trampolines ncclStartNetworkProxy / ncclNetworkProxyProgress (bool
 *           out-parameters) / ncclStopNetworkProxy on the comms' progress-half handles
 *           (nrt_proxy_comm_nccom), consumes the trigger words and plays the barrier itself.
 * The spin budget and log level come from the environment (nrt_proxy_config_from_env).
 * EXCHANGE_TRACE=FILE records every event class with the trace API (nrt_proxy_trace_start
 * before nrt_proxy_init, so the progress half is started as it loads; nrt_proxy_trace_stop and
 * nrt_proxy_trace_write once the ranks have left) and prints the summary; a ring of
 * EXCHANGE_TRACE_CAPACITY records when set.
 * Exit status 0 = every check passed.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrt_proxy.h"

#define NRANKS 2u
#define N_ENTRIES 8u
#define ENTRY_SIZE (16u * 1024u)
#define TOTAL (N_ENTRIES * ENTRY_SIZE)
#define EXECUTIONS 3u
#define POST_RATE 3u
#define STREAM 2u
#define BB 5u
#define COMM_ID 11u
#define POISON 0xA5u
#define MAX_ITERS 20000000ul
#define WAIT_MS 60000u

_Static_assert(sizeof(nrt_proxy_task_record_t) == 24, "24-byte record");
_Static_assert(offsetof(nrt_proxy_task_record_t, task_id) == 0x00, "task_id @0x00");
_Static_assert(offsetof(nrt_proxy_task_record_t, slot) == 0x04, "slot @0x04");
_Static_assert(offsetof(nrt_proxy_task_record_t, comm_id) == 0x08, "comm_id @0x08");
_Static_assert(offsetof(nrt_proxy_task_record_t, streams) == 0x0C, "streams @0x0C");
_Static_assert(offsetof(nrt_proxy_task_record_t, progress_status) == 0x10, "status @0x10");
_Static_assert(offsetof(nrt_proxy_task_record_t, run_state) == 0x14, "run_state @0x14");

#define FAIL(...)                                                                                 \
    do {                                                                                          \
        fprintf(stderr, "exchange: FAIL line %d: ", __LINE__);                                    \
        fprintf(stderr, __VA_ARGS__);                                                             \
        fprintf(stderr, "\n");                                                                    \
        exit(1);                                                                                  \
    } while (0)

#define EXPECT_OK(call)                                                                           \
    do {                                                                                          \
        NRT_STATUS s_ = (call);                                                                   \
        if (s_ != NRT_SUCCESS)                                                                    \
            FAIL("%s returned %s (%u)", #call, nrt_get_status_as_str(s_), s_);                    \
    } while (0)

/* ---- host memory shared with the device ---- */

enum { W_SEND_IDX, W_SEND_HS, W_SEND_CPL, W_RECV_IDX, W_RECV_HS, W_RECV_CPL, W_NET_TRIGGER,
       W_BAR_TRIGGER, W_BAR_DONE, W_COUNT };

static nccom_host_word_t words[NRANKS][W_COUNT] __attribute__((aligned(64)));
static uint8_t *src_buf[NRANKS], *dst_buf[NRANKS];
static uint32_t go_exec;   /* host → device: executions released (atomic) */
static uint32_t dev_done[NRANKS]; /* device → host: executions finished per rank (atomic) */
static uint64_t inc_total;  /* nec_inc_semaphore increments (atomic) */
/* Trampolines mode: each rank's FIFOs, filed again for every execution. */
static neuron_net_op_info_t t_ops[NRANKS][2];
static neuron_net_src_addr_t t_src[NRANKS][N_ENTRIES];
static neuron_net_dest_addr_t t_dst[NRANKS][N_ENTRIES];

static uint32_t load(nccom_host_word_t *w) { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }
static void store(nccom_host_word_t *w, uint32_t v) { __atomic_store_n(w, v, __ATOMIC_RELEASE); }

static void inc_semaphore(nccom_host_word_t *addr, uint32_t val) {
    __atomic_fetch_add(&inc_total, val, __ATOMIC_RELAXED);
    __atomic_fetch_add(addr, val, __ATOMIC_RELEASE);
}

static uint8_t pattern(uint32_t rank, uint32_t exec, uint32_t e, uint32_t i) {
    return (uint8_t)((rank * 31u + exec * 13u + e * 7u + i) % 251u);
}

/* ---- the device ---- */

enum phase { ARM, WAIT_HANDSHAKE, POST, FINISHED };

struct op_dev {
    int send;
    nccom_host_word_t *idx, *hs, *cpl;
    uint32_t posted;
    enum phase phase;
};

static void op_step(struct op_dev *d, uint32_t rank, uint32_t exec) {
    switch (d->phase) {
    case ARM:
        store(d->idx, NCCOM_HOST_WORD_READY);
        d->phase = WAIT_HANDSHAKE;
        break;
    case WAIT_HANDSHAKE: {
        uint32_t h = load(d->hs);
        if (h > exec + 1)
            FAIL("rank %u handshake semaphore %u above executions %u", rank, h, exec + 1);
        if (h == exec + 1)
            d->phase = POST;
        break;
    }
    case POST: {
        uint32_t done = load(d->cpl) - exec * N_ENTRIES;
        if (done > d->posted)
            FAIL("rank %u complete semaphore above entries posted %u", rank, d->posted);
        if (done == N_ENTRIES) {
            d->phase = FINISHED;
            break;
        }
        for (uint32_t k = 0; k < POST_RATE && d->posted < N_ENTRIES; k++) {
            uint32_t e = d->posted;
            if (d->send)
                for (uint32_t i = 0; i < ENTRY_SIZE; i++)
                    src_buf[rank][e * ENTRY_SIZE + i] = pattern(rank, exec, e, i);
            d->posted++;
            store(d->idx, d->posted); /* release: the payload before the post */
        }
        break;
    }
    case FINISHED:
        break;
    }
}

enum rank_phase { R_WAIT_GO, R_TRIGGERED, R_OPS, R_BARRIER, R_DONE };

static void *device_main(void *arg) {
    (void)arg;
    enum rank_phase ph[NRANKS];
    struct op_dev ops[NRANKS][2];
    for (uint32_t exec = 0; exec < EXECUTIONS; exec++) {
        for (uint32_t r = 0; r < NRANKS; r++) {
            ph[r] = R_WAIT_GO;
            ops[r][0] = (struct op_dev){1, &words[r][W_SEND_IDX], &words[r][W_SEND_HS],
                                        &words[r][W_SEND_CPL], 0, ARM};
            ops[r][1] = (struct op_dev){0, &words[r][W_RECV_IDX], &words[r][W_RECV_HS],
                                        &words[r][W_RECV_CPL], 0, ARM};
        }
        unsigned long iters = 0;
        for (;;) {
            if (++iters > MAX_ITERS)
                FAIL("device: execution %u: no completion after %lu iterations (phases %d %d)",
                     exec, iters, ph[0], ph[1]);
            int all = 1;
            for (uint32_t r = 0; r < NRANKS; r++) {
                switch (ph[r]) {
                case R_WAIT_GO:
                    if (__atomic_load_n(&go_exec, __ATOMIC_ACQUIRE) > exec) {
                        /* Reached the net stage: the network task may start. */
                        store(&words[r][W_NET_TRIGGER], 1);
                        ph[r] = R_TRIGGERED;
                    }
                    break;
                case R_TRIGGERED:
                    if (load(&words[r][W_NET_TRIGGER]) == 0) /* consumed by the proxy */
                        ph[r] = R_OPS;
                    break;
                case R_OPS:
                    op_step(&ops[r][0], r, exec);
                    op_step(&ops[r][1], r, exec);
                    if (ops[r][0].phase == FINISHED && ops[r][1].phase == FINISHED) {
                        store(&words[r][W_BAR_TRIGGER], 1);
                        ph[r] = R_BARRIER;
                    }
                    break;
                case R_BARRIER:
                    if (load(&words[r][W_BAR_DONE]) == exec + 1) {
                        __atomic_store_n(&dev_done[r], exec + 1, __ATOMIC_RELEASE);
                        ph[r] = R_DONE;
                    }
                    break;
                case R_DONE:
                    break;
                }
                all &= ph[r] == R_DONE;
            }
            if (all)
                break;
            sched_yield();
        }
    }
    return NULL;
}

/* ---- the host ---- */

static void check_record(const nrt_proxy_task_record_t *r, uint32_t task_id, uint32_t streams) {
    if (r->task_id != task_id || r->comm_id != COMM_ID || r->streams != streams ||
        r->progress_status != NRT_SUCCESS || r->run_state != NRT_PROXY_RUN_STATE_DONE)
        FAIL("record {task %u slot %u comm %u streams %#x status %s run_state %u}, expected task "
             "%u comm %u streams %#x NRT_SUCCESS DONE",
             r->task_id, r->slot, r->comm_id, r->streams,
             nrt_get_status_as_str(r->progress_status), r->run_state, task_id, COMM_ID, streams);
}

/* Trampolines mode, one execution: what a network task and a barrier task do, by hand. */
static void trampoline_execution(nrt_proxy_comm_t **comm, uint32_t exec) {
    nccom_comm_t *nc[NRANKS];
    for (uint32_t r = 0; r < NRANKS; r++) {
        EXPECT_OK(nrt_proxy_comm_nccom(comm[r], &nc[r]));
        store(&words[r][W_NET_TRIGGER], 0xFFFFFFFFu);
        store(&words[r][W_BAR_TRIGGER], 0xFFFFFFFFu);
        memset(dst_buf[r], POISON, TOTAL);
        EXPECT_OK(ncclStartNetworkProxy(nc[r], STREAM, BB, t_ops[r], 2, t_src[r], N_ENTRIES,
                                        t_dst[r], N_ENTRIES));
    }
    __atomic_store_n(&go_exec, exec + 1, __ATOMIC_RELEASE);
    /* The trigger: wait until the device wrote it, then consume it (write 0). */
    for (uint32_t r = 0; r < NRANKS; r++) {
        for (unsigned long it = 0; load(&words[r][W_NET_TRIGGER]) == 0xFFFFFFFFu; it++) {
            if (it > MAX_ITERS)
                FAIL("rank %u: no trigger", r);
            sched_yield();
        }
        store(&words[r][W_NET_TRIGGER], 0);
    }
    bool done[NRANKS] = {false, false};
    for (unsigned long it = 0; !(done[0] && done[1]); it++) {
        if (it > MAX_ITERS)
            FAIL("execution %u: the seam did not finish", exec);
        for (uint32_t r = 0; r < NRANKS; r++) {
            if (done[r])
                continue;
            bool idle = true, d = true;
            EXPECT_OK(ncclNetworkProxyProgress(nc[r], STREAM, BB, &idle, &d));
            done[r] = d;
        }
        sched_yield();
    }
    for (uint32_t r = 0; r < NRANKS; r++)
        EXPECT_OK(ncclStopNetworkProxy(nc[r], STREAM));
    /* The barrier: both devices wrote their barrier trigger; consume them, then increment
     * every barrier-done semaphore (the leader's job). */
    for (uint32_t r = 0; r < NRANKS; r++) {
        for (unsigned long it = 0; load(&words[r][W_BAR_TRIGGER]) == 0xFFFFFFFFu; it++) {
            if (it > MAX_ITERS)
                FAIL("rank %u: no barrier trigger", r);
            sched_yield();
        }
        store(&words[r][W_BAR_TRIGGER], 0);
    }
    for (uint32_t r = 0; r < NRANKS; r++)
        __atomic_fetch_add(&words[r][W_BAR_DONE], 1, __ATOMIC_RELEASE);
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s /path/to/libnccom_proxy.so [thread|caller]\n", argv[0]);
        return 2;
    }
    const char *mode = argc == 3 ? argv[2] : "thread";
    int caller = strcmp(mode, "caller") == 0;
    int tramp = strcmp(mode, "trampolines") == 0;
    if (!caller && !tramp && strcmp(mode, "thread") != 0)
        FAIL("unknown mode %s", mode);
    if (nrt_proxy_abi_version() >> 16 != NRT_PROXY_ABI_VERSION_MAJOR)
        FAIL("library ABI %#x, header major %u", nrt_proxy_abi_version(),
             NRT_PROXY_ABI_VERSION_MAJOR);

    const char *trace_file = getenv("EXCHANGE_TRACE");
    if (trace_file) {
        const char *cap = getenv("EXCHANGE_TRACE_CAPACITY");
        EXPECT_OK(nrt_proxy_trace_start(NCCOM_TRACE_ALL, cap ? strtoul(cap, NULL, 10) : 0));
    }

    nrt_proxy_config_t cfg;
    EXPECT_OK(nrt_proxy_config_from_env(&cfg));
    cfg.progress_lib = argv[1];
    cfg.drive_mode = caller ? NRT_PROXY_DRIVE_CALLER : NRT_PROXY_DRIVE_THREAD;
    cfg.ranks_per_network_proxy = caller ? NRANKS : 1;
    nrt_proxy_t *inst = NULL;
    EXPECT_OK(nrt_proxy_init(&cfg, &inst));

    nrt_proxy_group_t *group = NULL;
    EXPECT_OK(nrt_proxy_group_create(inst, NRANKS, &group));
    static const nccom_device_callbacks_t cbs = {.nec_inc_semaphore = inc_semaphore};
    nrt_proxy_comm_t *comm[NRANKS];
    for (uint32_t r = 0; r < NRANKS; r++) {
        nrt_proxy_comm_config_t cc;
        EXPECT_OK(nrt_proxy_comm_config_init(&cc));
        cc.rank = r;
        cc.nranks = NRANKS;
        cc.comm_id = COMM_ID;
        cc.group = group;
        cc.callbacks = &cbs;
        EXPECT_OK(nrt_proxy_comm_create(inst, &cc, &comm[r]));
        if (!tramp)
            EXPECT_OK(nrt_proxy_comm_join(comm[r]));
        src_buf[r] = aligned_alloc(64, TOTAL);
        dst_buf[r] = aligned_alloc(64, TOTAL);
        if (!src_buf[r] || !dst_buf[r])
            FAIL("out of memory");
        memset(src_buf[r], 0, TOTAL);
    }
    EXPECT_OK(nrt_proxy_group_destroy(group)); /* comms keep what they use */

    /* Each rank's FIFOs: op 0 sends to the peer, op 1 receives from it. */
    for (uint32_t r = 0; r < NRANKS; r++) {
        uint32_t peer = 1 - r;
        neuron_net_op_info_t ops[2];
        memset(ops, 0, sizeof ops);
        ops[0].send_peer = (int32_t)peer;
        ops[0].recv_peer = NCCOM_NO_PEER;
        ops[0].tag = 3;
        ops[0].tx_entry_cnt = N_ENTRIES;
        ops[0].data_type_sz = 4;
        ops[0].post_send_idx_addr = (uint64_t)(uintptr_t)&words[r][W_SEND_IDX];
        ops[0].send_handshake_sem_addr = (uint64_t)(uintptr_t)&words[r][W_SEND_HS];
        ops[0].send_complete_sem_addr = (uint64_t)(uintptr_t)&words[r][W_SEND_CPL];
        ops[1].send_peer = NCCOM_NO_PEER;
        ops[1].recv_peer = (int32_t)peer;
        ops[1].tag = 3;
        ops[1].rx_entry_cnt = N_ENTRIES;
        ops[1].data_type_sz = 4;
        ops[1].post_recv_idx_addr = (uint64_t)(uintptr_t)&words[r][W_RECV_IDX];
        ops[1].recv_handshake_sem_addr = (uint64_t)(uintptr_t)&words[r][W_RECV_HS];
        ops[1].recv_complete_sem_addr = (uint64_t)(uintptr_t)&words[r][W_RECV_CPL];
        /* Heap FIFOs, freed right after the submit: the library copied them. */
        neuron_net_src_addr_t *sf = calloc(N_ENTRIES, sizeof *sf);
        neuron_net_dest_addr_t *df = calloc(N_ENTRIES, sizeof *df);
        if (!sf || !df)
            FAIL("out of memory");
        for (uint32_t e = 0; e < N_ENTRIES; e++) {
            int last = e + 1 == N_ENTRIES;
            sf[e] = (neuron_net_src_addr_t){.net_op_idx = 0,
                                            .mark = last ? NET_OP_COMPLETE : NET_TRANSFER,
                                            .addr = (uint64_t)(uintptr_t)(src_buf[r] + e * ENTRY_SIZE),
                                            .size = ENTRY_SIZE,
                                            .dest_rank = NCCOM_NO_PEER};
            df[e] = (neuron_net_dest_addr_t){.net_op_idx = 1,
                                             .mark = last ? EXEC_COMPLETE : NET_TRANSFER,
                                             .addr = (uint64_t)(uintptr_t)(dst_buf[r] + e * ENTRY_SIZE),
                                             .size = ENTRY_SIZE,
                                             .src_rank = NCCOM_NO_PEER};
        }
        memcpy(t_ops[r], ops, sizeof ops);
        memcpy(t_src[r], sf, N_ENTRIES * sizeof *sf);
        memcpy(t_dst[r], df, N_ENTRIES * sizeof *df);
        if (tramp) {
            free(sf);
            free(df);
            continue;
        }
        nrt_proxy_block_t block = {STREAM, BB, ops, 2, sf, N_ENTRIES, df, N_ENTRIES};
        nccom_host_word_t *trig[1] = {&words[r][W_NET_TRIGGER]};
        nrt_proxy_network_task_t t;
        memset(&t, 0, sizeof t);
        t.struct_size = sizeof t;
        t.task_id = 100 + r;
        t.blocks = &block;
        t.n_blocks = 1;
        t.trigger_words = trig;
        t.n_trigger_words = 1;
        t.flags = NRT_PROXY_TASK_WAIT_FOR_DEVICE | NRT_PROXY_TASK_KEEP;
        t.timeout_ms = WAIT_MS;
        store(&words[r][W_NET_TRIGGER], 0xFFFFFFFFu); /* armed */
        memset(dst_buf[r], POISON, TOTAL);
        EXPECT_OK(nrt_proxy_submit_network(comm[r], &t));
        free(sf);
        free(df);
        /* The barrier: rank 0 (the leader) increments both ranks' barrier-done semaphores. */
        nccom_host_word_t *btrig[1] = {&words[r][W_BAR_TRIGGER]};
        nccom_host_word_t *bdone[NRANKS] = {&words[0][W_BAR_DONE], &words[1][W_BAR_DONE]};
        nrt_proxy_barrier_task_t b;
        memset(&b, 0, sizeof b);
        b.struct_size = sizeof b;
        b.task_id = 200 + r;
        b.trigger_words = btrig;
        b.n_trigger_words = 1;
        b.done_semaphores = bdone;
        b.n_done_semaphores = NRANKS;
        b.flags = NRT_PROXY_TASK_KEEP;
        b.timeout_ms = WAIT_MS;
        store(&words[r][W_BAR_TRIGGER], 0xFFFFFFFFu);
        EXPECT_OK(nrt_proxy_submit_barrier(comm[r], &b));
    }

    pthread_t dev;
    if (pthread_create(&dev, NULL, device_main, NULL) != 0)
        FAIL("pthread_create");
    for (uint32_t exec = 0; exec < EXECUTIONS; exec++) {
        uint32_t net_id = 100 + 10 * exec, bar_id = 200 + 10 * exec;
        if (tramp) {
            trampoline_execution(comm, exec);
            goto check;
        }
        if (exec > 0) {
            /* Resubmit the kept tasks under new ids: nothing copied again. */
            for (uint32_t r = 0; r < NRANKS; r++) {
                store(&words[r][W_NET_TRIGGER], 0xFFFFFFFFu);
                store(&words[r][W_BAR_TRIGGER], 0xFFFFFFFFu);
                memset(dst_buf[r], POISON, TOTAL);
                EXPECT_OK(nrt_proxy_resubmit(comm[r], net_id - 10 + r, net_id + r));
                EXPECT_OK(nrt_proxy_resubmit(comm[r], bar_id - 10 + r, bar_id + r));
            }
        }
        __atomic_store_n(&go_exec, exec + 1, __ATOMIC_RELEASE);
        for (uint32_t r = 0; r < NRANKS; r++) {
            nrt_proxy_task_record_t rec;
            if (caller) {
                EXPECT_OK(nrt_proxy_drive_until(comm[r], net_id + r, WAIT_MS, &rec));
                check_record(&rec, net_id + r, 1u << STREAM);
                EXPECT_OK(nrt_proxy_drive_until(comm[r], bar_id + r, WAIT_MS, &rec));
                check_record(&rec, bar_id + r, 0);
            } else {
                EXPECT_OK(nrt_proxy_wait(comm[r], WAIT_MS, &rec));
                check_record(&rec, net_id + r, 1u << STREAM);
                EXPECT_OK(nrt_proxy_wait(comm[r], WAIT_MS, &rec));
                check_record(&rec, bar_id + r, 0);
            }
            NRT_STATUS health = NRT_FAILURE;
            EXPECT_OK(nrt_proxy_comm_get_async_error(comm[r], &health));
            if (health != NRT_SUCCESS)
                FAIL("rank %u async error %s", r, nrt_get_status_as_str(health));
        }
    check:
        /* The device finished this execution (it saw the barrier-done semaphore). */
        for (unsigned long it = 0;; it++) {
            if (__atomic_load_n(&dev_done[0], __ATOMIC_ACQUIRE) > exec &&
                __atomic_load_n(&dev_done[1], __ATOMIC_ACQUIRE) > exec)
                break;
            if (it > MAX_ITERS)
                FAIL("execution %u: the device did not finish", exec);
            sched_yield();
        }
        for (uint32_t r = 0; r < NRANKS; r++) {
            uint32_t peer = 1 - r;
            for (uint32_t e = 0; e < N_ENTRIES; e++)
                for (uint32_t i = 0; i < ENTRY_SIZE; i++)
                    if (dst_buf[r][e * ENTRY_SIZE + i] != pattern(peer, exec, e, i))
                        FAIL("execution %u rank %u entry %u byte %u: %#x, expected %#x", exec, r,
                             e, i, dst_buf[r][e * ENTRY_SIZE + i], pattern(peer, exec, e, i));
            uint32_t want[W_COUNT] = {0};
            want[W_SEND_HS] = want[W_RECV_HS] = exec + 1;
            want[W_SEND_CPL] = want[W_RECV_CPL] = (exec + 1) * N_ENTRIES;
            want[W_BAR_DONE] = exec + 1;
            int checked[] = {W_SEND_HS, W_RECV_HS, W_SEND_CPL, W_RECV_CPL, W_BAR_DONE,
                             W_NET_TRIGGER, W_BAR_TRIGGER};
            for (size_t k = 0; k < sizeof checked / sizeof checked[0]; k++)
                if (load(&words[r][checked[k]]) != want[checked[k]])
                    FAIL("execution %u rank %u word %d: %u, expected %u", exec, r, checked[k],
                         load(&words[r][checked[k]]), want[checked[k]]);
        }
    }
    if (pthread_join(dev, NULL) != 0)
        FAIL("pthread_join");
    /* Per rank and execution: 2 handshakes + 2 x N_ENTRIES completions (barrier-done
     * semaphores are incremented by the barrier task directly, not through the callback). */
    uint64_t want_inc = (uint64_t)EXECUTIONS * (NRANKS * (2 + 2 * N_ENTRIES));
    if (__atomic_load_n(&inc_total, __ATOMIC_RELAXED) != want_inc)
        FAIL("nec_inc_semaphore increments %llu, expected %llu",
             (unsigned long long)inc_total, (unsigned long long)want_inc);

    nrt_proxy_task_record_t rec;
    for (uint32_t r = 0; r < NRANKS; r++) {
        if (nrt_proxy_try_pop(comm[r], &rec) != NRT_QUEUE_EMPTY)
            FAIL("rank %u: a record left over", r);
        if (!tramp)
            EXPECT_OK(nrt_proxy_comm_leave(comm[r], WAIT_MS));
        if (nrt_proxy_comm_leave(comm[r], WAIT_MS) != NRT_CLOSED)
            FAIL("rank %u: a leave of a comm that is not joined must answer NRT_CLOSED", r);
        EXPECT_OK(nrt_proxy_comm_destroy(comm[r]));
        free(src_buf[r]);
        free(dst_buf[r]);
    }
    if (trace_file) {
        nrt_proxy_trace_summary_t sum;
        EXPECT_OK(nrt_proxy_trace_stop());
        if (nrt_proxy_trace_write(NULL, &sum) != NRT_INVALID)
            FAIL("nrt_proxy_trace_write(NULL) must answer NRT_INVALID");
        EXPECT_OK(nrt_proxy_trace_write(trace_file, &sum));
        if (sum.records == 0 || sum.files == 0)
            FAIL("trace: %llu events in %llu files", (unsigned long long)sum.records,
                 (unsigned long long)sum.files);
        printf("exchange: trace: %llu events, %llu pending, %llu dropped, %llu files\n",
               (unsigned long long)sum.records, (unsigned long long)sum.pending,
               (unsigned long long)sum.dropped, (unsigned long long)sum.files);
    }
    EXPECT_OK(nrt_proxy_fini(inst));
    printf("exchange: ok: %s mode, %u ranks x %u executions x %u bytes each way, %llu semaphore "
           "increments\n",
           mode, NRANKS, EXECUTIONS, TOTAL,
           (unsigned long long)inc_total);
    return 0;
}
