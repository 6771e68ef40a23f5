/*
 * A 4-rank ring all-reduce (sum of uint32) through libnrt_proxy.so over the in-memory
 * transport, every chunk checked. The FIFOs are built by hand here (a ring: N-1 reduce-scatter
 * steps, then N-1 all-gather steps; each step one send op to rank r+1 and one recv op from rank
 * r-1, CHUNKS entries each); the device is a thread of this program that plays all four ranks:
 * it answers the handshakes, posts the receive entries at once and each send entry only when
 * its chunk is ready (its own data; a chunk it received and reduced in the previous
 * reduce-scatter step; a chunk it received in the previous all-gather step), and reduces each
 * received reduce-scatter chunk into its data as soon as its entry is complete.
 *
 * Usage: ring_allreduce /path/to/libnccom_proxy.so [thread|caller]
 *   thread: a worker per rank (ranks_per_network_proxy 1); caller: one queue for the four
 *   ranks, driven by the host thread inside nrt_proxy_drive_until.
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

#define N 4u                      /* ranks */
#define CHUNKS 3u                 /* entries (chunks) per step: at least two */
#define CHUNK_WORDS 1024u         /* uint32 per chunk (4 KiB) */
#define BLOCK_WORDS (CHUNKS * CHUNK_WORDS)
#define DATA_WORDS (N * BLOCK_WORDS)
#define STEPS (2u * (N - 1u))     /* reduce-scatter, then all-gather */
#define OPS (2u * STEPS)          /* per rank: send op 2s, recv op 2s+1 */
#define EXECUTIONS 2u
#define STREAM 0u
#define BB 1u
#define COMM_ID 21u
#define MAX_ITERS 50000000ul
#define WAIT_MS 60000u

#define FAIL(...)                                                                                 \
    do {                                                                                          \
        fprintf(stderr, "ring_allreduce: FAIL line %d: ", __LINE__);                              \
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

enum { W_IDX, W_HS, W_CPL, W_PER_OP };

static nccom_host_word_t words[N][OPS][W_PER_OP] __attribute__((aligned(64)));
static nccom_host_word_t trigger[N] __attribute__((aligned(64)));
static uint32_t data[N][DATA_WORDS] __attribute__((aligned(64)));
static uint32_t scratch[N][N - 1][BLOCK_WORDS] __attribute__((aligned(64)));
static uint32_t go_exec, dev_done;

static uint32_t load(nccom_host_word_t *w) { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }
static void store(nccom_host_word_t *w, uint32_t v) { __atomic_store_n(w, v, __ATOMIC_RELEASE); }
static void inc_semaphore(nccom_host_word_t *w, uint32_t v) {
    __atomic_fetch_add(w, v, __ATOMIC_RELEASE);
}

static uint32_t mod(int64_t x) { return (uint32_t)(((x % (int64_t)N) + (int64_t)N) % (int64_t)N); }
static uint32_t value(uint32_t rank, uint32_t exec, uint32_t i) {
    return rank * 1000003u + exec * 7919u + i * 31u;
}
/* The block rank r sends in step s, and the block it receives. */
static uint32_t send_block(uint32_t r, uint32_t s) {
    return s < N - 1 ? mod((int64_t)r - s) : mod((int64_t)r + 1 - (s - (N - 1)));
}
static uint32_t recv_block(uint32_t r, uint32_t s) {
    return s < N - 1 ? mod((int64_t)r - s - 1) : mod((int64_t)r - (s - (N - 1)));
}
static uint32_t *chunk_ptr(uint32_t r, uint32_t block, uint32_t c) {
    return &data[r][block * BLOCK_WORDS + c * CHUNK_WORDS];
}

/* ---- the device: all four ranks, one thread ---- */

struct rank_dev {
    bool open[OPS];              /* handshake seen */
    uint32_t posted[OPS];
    bool reduced[N - 1][CHUNKS]; /* reduce-scatter step s, chunk c reduced into data */
    bool triggered, running;
};

static uint32_t completed(uint32_t r, uint32_t op, uint32_t exec) {
    return load(&words[r][op][W_CPL]) - exec * CHUNKS;
}

/* May rank r post chunk c of its send in step s? */
static bool send_ready(struct rank_dev *d, uint32_t r, uint32_t s, uint32_t c, uint32_t exec) {
    if (s == 0)
        return true;
    if (s < N)                   /* reduce-scatter step s, or all-gather step 0 */
        return d->reduced[s - 1][c];
    return completed(r, 2 * (s - 1) + 1, exec) > c; /* received in the previous all-gather */
}

static bool rank_step(struct rank_dev *d, uint32_t r, uint32_t exec) {
    if (!d->triggered) {
        if (__atomic_load_n(&go_exec, __ATOMIC_ACQUIRE) <= exec)
            return false;
        for (uint32_t op = 0; op < OPS; op++)
            store(&words[r][op][W_IDX], NCCOM_HOST_WORD_READY);
        store(&trigger[r], 1); /* the net stage is reached */
        d->triggered = true;
    }
    bool all = true;
    for (uint32_t s = 0; s < STEPS; s++) {
        for (uint32_t k = 0; k < 2; k++) {
            uint32_t op = 2 * s + k;
            if (!d->open[op]) {
                uint32_t h = load(&words[r][op][W_HS]);
                if (h > exec + 1)
                    FAIL("rank %u op %u: handshake %u above %u", r, op, h, exec + 1);
                d->open[op] = h == exec + 1;
                if (!d->open[op]) {
                    all = false;
                    continue;
                }
            }
            if (k == 1) { /* recv: every entry at once (its buffer is free) */
                if (d->posted[op] < CHUNKS) {
                    d->posted[op] = CHUNKS;
                    store(&words[r][op][W_IDX], CHUNKS);
                }
            } else {
                while (d->posted[op] < CHUNKS && send_ready(d, r, s, d->posted[op], exec)) {
                    d->posted[op]++;
                    store(&words[r][op][W_IDX], d->posted[op]);
                }
            }
            uint32_t done = completed(r, op, exec);
            if (done > d->posted[op])
                FAIL("rank %u op %u: %u entries complete, %u posted", r, op, done, d->posted[op]);
            if (done < CHUNKS)
                all = false;
        }
        /* Reduce the reduce-scatter chunks received so far. */
        if (s < N - 1) {
            uint32_t got = completed(r, 2 * s + 1, exec);
            for (uint32_t c = 0; c < got && c < CHUNKS; c++) {
                if (d->reduced[s][c])
                    continue;
                uint32_t *dst = chunk_ptr(r, recv_block(r, s), c);
                const uint32_t *src = &scratch[r][s][c * CHUNK_WORDS];
                for (uint32_t i = 0; i < CHUNK_WORDS; i++)
                    dst[i] += src[i];
                d->reduced[s][c] = true;
            }
        }
    }
    return all;
}

static void *device_main(void *arg) {
    (void)arg;
    for (uint32_t exec = 0; exec < EXECUTIONS; exec++) {
        struct rank_dev dev[N];
        memset(dev, 0, sizeof dev);
        bool done[N] = {false};
        for (unsigned long it = 0;; it++) {
            if (it > MAX_ITERS)
                FAIL("device: execution %u did not finish", exec);
            bool all = true;
            for (uint32_t r = 0; r < N; r++) {
                if (!done[r])
                    done[r] = rank_step(&dev[r], r, exec);
                all &= done[r];
            }
            if (all)
                break;
            sched_yield();
        }
        __atomic_store_n(&dev_done, exec + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* ---- the host ---- */

static void submit(nrt_proxy_comm_t *comm, uint32_t r) {
    neuron_net_op_info_t ops[OPS];
    neuron_net_src_addr_t src[STEPS * CHUNKS];
    neuron_net_dest_addr_t dst[STEPS * CHUNKS];
    memset(ops, 0, sizeof ops);
    uint32_t ns = 0, nd = 0;
    for (uint32_t s = 0; s < STEPS; s++) {
        neuron_net_op_info_t *snd = &ops[2 * s], *rcv = &ops[2 * s + 1];
        snd->send_peer = (int32_t)mod((int64_t)r + 1);
        snd->recv_peer = NCCOM_NO_PEER;
        snd->tag = 10 + s;
        snd->tx_entry_cnt = CHUNKS;
        snd->data_type_sz = 4;
        snd->post_send_idx_addr = (uint64_t)(uintptr_t)&words[r][2 * s][W_IDX];
        snd->send_handshake_sem_addr = (uint64_t)(uintptr_t)&words[r][2 * s][W_HS];
        snd->send_complete_sem_addr = (uint64_t)(uintptr_t)&words[r][2 * s][W_CPL];
        rcv->send_peer = NCCOM_NO_PEER;
        rcv->recv_peer = (int32_t)mod((int64_t)r - 1);
        rcv->tag = 10 + s;
        rcv->rx_entry_cnt = CHUNKS;
        rcv->data_type_sz = 4;
        rcv->post_recv_idx_addr = (uint64_t)(uintptr_t)&words[r][2 * s + 1][W_IDX];
        rcv->recv_handshake_sem_addr = (uint64_t)(uintptr_t)&words[r][2 * s + 1][W_HS];
        rcv->recv_complete_sem_addr = (uint64_t)(uintptr_t)&words[r][2 * s + 1][W_CPL];
        for (uint32_t c = 0; c < CHUNKS; c++) {
            bool last = c + 1 == CHUNKS;
            uint32_t *from = chunk_ptr(r, send_block(r, s), c);
            uint32_t *to = s < N - 1 ? &scratch[r][s][c * CHUNK_WORDS]
                                     : chunk_ptr(r, recv_block(r, s), c);
            src[ns++] = (neuron_net_src_addr_t){.net_op_idx = 2 * s,
                                                .mark = last ? NET_OP_COMPLETE : NET_TRANSFER,
                                                .addr = (uint64_t)(uintptr_t)from,
                                                .size = CHUNK_WORDS * 4,
                                                .dest_rank = NCCOM_NO_PEER};
            dst[nd++] = (neuron_net_dest_addr_t){
                .net_op_idx = 2 * s + 1,
                .mark = last ? (s + 1 == STEPS ? EXEC_COMPLETE : NET_OP_COMPLETE) : NET_TRANSFER,
                .addr = (uint64_t)(uintptr_t)to,
                .size = CHUNK_WORDS * 4,
                .src_rank = NCCOM_NO_PEER};
        }
    }
    nrt_proxy_block_t block = {STREAM, BB, ops, OPS, src, ns, dst, nd};
    nccom_host_word_t *trig[1] = {&trigger[r]};
    nrt_proxy_network_task_t t;
    memset(&t, 0, sizeof t);
    t.struct_size = sizeof t;
    t.task_id = 500 + r;
    t.blocks = &block;
    t.n_blocks = 1;
    t.trigger_words = trig;
    t.n_trigger_words = 1;
    t.flags = NRT_PROXY_TASK_WAIT_FOR_DEVICE | NRT_PROXY_TASK_KEEP;
    t.timeout_ms = WAIT_MS;
    EXPECT_OK(nrt_proxy_submit_network(comm, &t));
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3)
        FAIL("usage: %s /path/to/libnccom_proxy.so [thread|caller]", argv[0]);
    int caller = argc == 3 && strcmp(argv[2], "caller") == 0;
    nrt_proxy_config_t cfg;
    EXPECT_OK(nrt_proxy_config_from_env(&cfg));
    cfg.progress_lib = argv[1];
    cfg.drive_mode = caller ? NRT_PROXY_DRIVE_CALLER : NRT_PROXY_DRIVE_THREAD;
    cfg.ranks_per_network_proxy = caller ? N : 1;
    nrt_proxy_t *inst = NULL;
    EXPECT_OK(nrt_proxy_init(&cfg, &inst));
    nrt_proxy_group_t *group = NULL;
    EXPECT_OK(nrt_proxy_group_create(inst, N, &group));
    static const nccom_device_callbacks_t cbs = {.nec_inc_semaphore = inc_semaphore};
    nrt_proxy_comm_t *comm[N];
    for (uint32_t r = 0; r < N; r++) {
        nrt_proxy_comm_config_t cc;
        EXPECT_OK(nrt_proxy_comm_config_init(&cc));
        cc.rank = r;
        cc.nranks = N;
        cc.comm_id = COMM_ID;
        cc.group = group;
        cc.callbacks = &cbs;
        EXPECT_OK(nrt_proxy_comm_create(inst, &cc, &comm[r]));
        EXPECT_OK(nrt_proxy_comm_join(comm[r]));
    }
    EXPECT_OK(nrt_proxy_group_destroy(group));

    pthread_t dev;
    if (pthread_create(&dev, NULL, device_main, NULL) != 0)
        FAIL("pthread_create");
    for (uint32_t exec = 0; exec < EXECUTIONS; exec++) {
        for (uint32_t r = 0; r < N; r++) {
            for (uint32_t i = 0; i < DATA_WORDS; i++)
                data[r][i] = value(r, exec, i);
            store(&trigger[r], 0xFFFFFFFFu);
            if (exec == 0)
                submit(comm[r], r);
            else
                EXPECT_OK(nrt_proxy_resubmit(comm[r], 500 + 10 * (exec - 1) + r,
                                             500 + 10 * exec + r));
        }
        __atomic_store_n(&go_exec, exec + 1, __ATOMIC_RELEASE);
        for (uint32_t r = 0; r < N; r++) {
            nrt_proxy_task_record_t rec;
            uint32_t id = 500 + 10 * exec + r;
            if (caller)
                EXPECT_OK(nrt_proxy_drive_until(comm[r], id, WAIT_MS, &rec));
            else
                EXPECT_OK(nrt_proxy_wait(comm[r], WAIT_MS, &rec));
            if (rec.task_id != id || rec.progress_status != NRT_SUCCESS ||
                rec.run_state != NRT_PROXY_RUN_STATE_DONE || rec.comm_id != COMM_ID ||
                rec.streams != 1u << STREAM)
                FAIL("rank %u record {task %u status %s state %u}", r, rec.task_id,
                     nrt_get_status_as_str(rec.progress_status), rec.run_state);
        }
        for (unsigned long it = 0; __atomic_load_n(&dev_done, __ATOMIC_ACQUIRE) <= exec; it++) {
            if (it > MAX_ITERS)
                FAIL("execution %u: the device did not finish", exec);
            sched_yield();
        }
        for (uint32_t r = 0; r < N; r++)
            for (uint32_t i = 0; i < DATA_WORDS; i++) {
                uint32_t want = 0;
                for (uint32_t q = 0; q < N; q++)
                    want += value(q, exec, i);
                if (data[r][i] != want)
                    FAIL("execution %u rank %u word %u (block %u chunk %u): %u, expected %u", exec,
                         r, i, i / BLOCK_WORDS, i % BLOCK_WORDS / CHUNK_WORDS, data[r][i], want);
            }
    }
    if (pthread_join(dev, NULL) != 0)
        FAIL("pthread_join");
    for (uint32_t r = 0; r < N; r++) {
        EXPECT_OK(nrt_proxy_comm_leave(comm[r], WAIT_MS));
        EXPECT_OK(nrt_proxy_comm_destroy(comm[r]));
    }
    EXPECT_OK(nrt_proxy_fini(inst));
    printf("ring_allreduce: ok: %s mode, %u ranks, %u steps x %u chunks of %u bytes, %u "
           "executions\n",
           caller ? "caller" : "thread", N, STEPS, CHUNKS, CHUNK_WORDS * 4, EXECUTIONS);
    return 0;
}
