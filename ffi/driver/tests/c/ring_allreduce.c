/*
 * A 4-rank ring all-reduce (sum of int32) through libnrt_proxy.so over the in-memory transport,
 * its FIFOs and device programs from the C planner (nrt_proxy_plan_*): 2 streams x 2 basic
 * blocks, 4 KiB chunks, 2 chunks per ring step in every part, every output word checked in
 * two executions (the second resubmitted).
 *
 * The device is a thread of this program that plays all four ranks: for each rank it writes the
 * network task's trigger word (the net stage), then runs every stream's blocks in the plan's
 * schedule, each block's device program (nrt_proxy_plan_program) interpreted as a device would:
 * ARM writes NCCOM_HOST_WORD_READY to the host index, WAIT_HANDSHAKE waits for the handshake
 * semaphore to rise by one, POST writes the host index, WAIT waits for the complete semaphore,
 * REDUCE and COPY work on the rank's buffers. Semaphores are read when a block begins (they are
 * cumulative), so the program's counts are per execution.
 *
 * Usage: ring_allreduce /path/to/libnccom_proxy.so|- [thread|caller]
 *   -: no path (libnrt_proxy.so's own search: beside itself, then libnccom_proxy.so.1)
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

#define N 4u                /* ranks */
#define STREAMS 2u
#define BLOCKS 2u           /* basic blocks per stream */
#define PARTS (STREAMS * BLOCKS)
#define CHUNK_BYTES 4096u
#define COUNT (PARTS * N * 2u * (CHUNK_BYTES / 4u)) /* 2 chunks per ring step in every part */
#define EXECUTIONS 2u
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

struct part {
    nrt_proxy_plan_block_info_t info;
    neuron_net_op_info_t *ops;
    neuron_net_src_addr_t *src;
    neuron_net_dest_addr_t *dst;
    nrt_proxy_plan_instr_t *prog;
};

struct rank {
    nrt_proxy_plan_t *plan;
    nrt_proxy_plan_layout_t layout;
    uint32_t *input, *output;
    unsigned char *scratch;
    nccom_host_word_t *words;
    nccom_host_word_t trigger __attribute__((aligned(64)));
    struct part parts[PARTS];
    nrt_proxy_block_t blocks[PARTS];
    uint32_t schedule[BLOCKS];
    size_t n_schedule;
};

static struct rank ranks[N];
static uint32_t go_exec, dev_done;

static uint32_t load(nccom_host_word_t *w) { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }
static void store(nccom_host_word_t *w, uint32_t v) { __atomic_store_n(w, v, __ATOMIC_RELEASE); }
static void inc_semaphore(nccom_host_word_t *w, uint32_t v) {
    __atomic_fetch_add(w, v, __ATOMIC_RELEASE);
}

static uint32_t value(uint32_t rank, uint32_t exec, uint32_t i) {
    return rank * 1000003u + exec * 7919u + i * 31u;
}

static void *alloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        FAIL("posix_memalign(%zu)", bytes);
    memset(p, 0, bytes ? bytes : 64);
    return p;
}

/* ---- the host: plans and FIFOs from the C planner ---- */

static void make_plan(uint32_t r) {
    struct rank *k = &ranks[r];
    nrt_proxy_plan_params_t pp;
    EXPECT_OK(nrt_proxy_plan_params_init(&pp));
    pp.collective = NRT_PROXY_COLL_ALL_REDUCE;
    pp.algorithm = NRT_PROXY_ALGO_RING;
    pp.dtype = NRT_PROXY_DTYPE_I32;
    pp.op = NRT_PROXY_REDOP_SUM;
    pp.rank = r;
    pp.nranks = N;
    pp.count = COUNT;
    pp.chunk_bytes = CHUNK_BYTES;
    pp.streams = STREAMS;
    pp.blocks = BLOCKS;
    EXPECT_OK(nrt_proxy_plan_create(&pp, &k->plan));
    k->layout.struct_size = sizeof k->layout;
    EXPECT_OK(nrt_proxy_plan_layout(k->plan, &k->layout));
    const nrt_proxy_plan_layout_t *l = &k->layout;
    if (l->algorithm != NRT_PROXY_ALGO_RING || l->n_blocks != PARTS || l->streams != 3u ||
        l->input_bytes != COUNT * 4u || l->output_bytes != COUNT * 4u || l->in_place != 0 ||
        l->host_words == 0)
        FAIL("rank %u layout {algo %u parts %u streams %#x in %llu out %llu words %u}", r,
             l->algorithm, l->n_blocks, l->streams, (unsigned long long)l->input_bytes,
             (unsigned long long)l->output_bytes, l->host_words);
    k->input = alloc(l->input_bytes);
    k->output = alloc(l->output_bytes);
    k->scratch = alloc(l->scratch_bytes);
    k->words = alloc(l->host_words * sizeof(nccom_host_word_t));
    nrt_proxy_plan_block_info_t infos[PARTS];
    size_t n = 0;
    EXPECT_OK(nrt_proxy_plan_blocks(k->plan, infos, PARTS, &n));
    if (n != PARTS)
        FAIL("rank %u: %zu parts", r, n);
    nrt_proxy_plan_addresses_t a = {.input = (uintptr_t)k->input,
                                    .output = (uintptr_t)k->output,
                                    .scratch = (uintptr_t)k->scratch,
                                    .words = (uintptr_t)k->words,
                                    .word_stride = sizeof(nccom_host_word_t)};
    for (uint32_t i = 0; i < PARTS; i++) {
        struct part *p = &k->parts[i];
        p->info = infos[i];
        if (p->info.stream != i / BLOCKS || p->info.bb != i % BLOCKS + 1)
            FAIL("rank %u part %u is (stream %u, block %u)", r, i, p->info.stream, p->info.bb);
        p->ops = calloc(p->info.n_ops, sizeof *p->ops);
        p->src = calloc(p->info.n_src, sizeof *p->src);
        p->dst = calloc(p->info.n_dst, sizeof *p->dst);
        p->prog = calloc(p->info.n_instrs, sizeof *p->prog);
        if (!p->ops || !p->src || !p->dst || !p->prog)
            FAIL("calloc");
        EXPECT_OK(nrt_proxy_plan_fifos(k->plan, i, &a, p->ops, p->info.n_ops, p->src,
                                       p->info.n_src, p->dst, p->info.n_dst, &k->blocks[i]));
        if (k->blocks[i].n_ops != p->info.n_ops || k->blocks[i].ops != p->ops ||
            k->blocks[i].stream != p->info.stream || k->blocks[i].bb != p->info.bb)
            FAIL("rank %u part %u: the block does not describe the arrays", r, i);
        for (uint32_t o = 0; o < p->info.n_ops; o++) {
            uint32_t tx = p->ops[o].tx_entry_cnt, rx = p->ops[o].rx_entry_cnt;
            if ((tx != 0 && tx < 2) || (rx != 0 && rx < 2))
                FAIL("rank %u part %u op %u: %u / %u entries, want at least 2 chunks per step", r,
                     i, o, tx, rx);
        }
        size_t ni = 0;
        EXPECT_OK(nrt_proxy_plan_program(k->plan, i, p->prog, p->info.n_instrs, &ni));
        if (ni != p->info.n_instrs)
            FAIL("rank %u part %u: %zu instructions, info says %u", r, i, ni, p->info.n_instrs);
    }
    EXPECT_OK(nrt_proxy_plan_schedule(k->plan, 1, k->schedule, BLOCKS, &k->n_schedule));
    if (k->n_schedule != BLOCKS || k->schedule[0] != 1 || k->schedule[1] != 2)
        FAIL("rank %u: schedule of %zu entries", r, k->n_schedule);
}

static void submit(nrt_proxy_comm_t *comm, uint32_t r) {
    struct rank *k = &ranks[r];
    nccom_host_word_t *trig[1] = {&k->trigger};
    nrt_proxy_network_task_t t;
    memset(&t, 0, sizeof t);
    t.struct_size = sizeof t;
    t.task_id = 500 + r;
    t.blocks = k->blocks;
    t.n_blocks = PARTS;
    t.schedule = k->schedule;
    t.n_schedule = k->n_schedule;
    t.trigger_words = trig;
    t.n_trigger_words = 1;
    t.flags = NRT_PROXY_TASK_WAIT_FOR_DEVICE | NRT_PROXY_TASK_KEEP;
    t.timeout_ms = WAIT_MS;
    EXPECT_OK(nrt_proxy_submit_network(comm, &t));
}

/* ---- the device: every (rank, stream) lane interprets its blocks' programs ---- */

struct lane {
    uint32_t rank, stream;
    size_t sched;         /* position in the schedule */
    int part;             /* part running, -1 = none begun */
    uint32_t pc;
    uint32_t hs[64][2], cpl[64][2]; /* semaphores when the block began, per op and side */
};

static nccom_host_word_t *word(struct rank *k, const struct part *p, uint32_t op, uint32_t w) {
    return &k->words[p->info.word_base + op * NRT_PROXY_PLAN_WORDS_PER_OP + w];
}

static unsigned char *loc(struct rank *k, uint32_t buf, uint64_t off) {
    switch (buf) {
    case NRT_PROXY_BUF_INPUT: return (unsigned char *)k->input + off;
    case NRT_PROXY_BUF_OUTPUT: return (unsigned char *)k->output + off;
    case NRT_PROXY_BUF_SCRATCH: return k->scratch + off;
    default: FAIL("buffer %u", buf);
    }
}

/* Runs lane `l` as far as the words allow; true once its schedule is done. */
static bool lane_step(struct lane *l) {
    struct rank *k = &ranks[l->rank];
    while (l->sched < k->n_schedule) {
        if (l->part < 0) { /* begin the next block of the schedule on this stream */
            uint32_t bb = k->schedule[l->sched];
            for (uint32_t i = 0; i < PARTS; i++)
                if (k->parts[i].info.stream == l->stream && k->parts[i].info.bb == bb)
                    l->part = (int)i;
            if (l->part < 0) { /* no part here: done at once */
                l->sched++;
                continue;
            }
            const struct part *p = &k->parts[l->part];
            if (p->info.n_ops > 64)
                FAIL("part with %u ops", p->info.n_ops);
            for (uint32_t o = 0; o < p->info.n_ops; o++)
                for (uint32_t s = 0; s < 2; s++) {
                    l->hs[o][s] = load(word(k, p, o, s ? NRT_PROXY_PLAN_WORD_RECV_HANDSHAKE
                                                       : NRT_PROXY_PLAN_WORD_SEND_HANDSHAKE));
                    l->cpl[o][s] = load(word(k, p, o, s ? NRT_PROXY_PLAN_WORD_RECV_COMPLETE
                                                        : NRT_PROXY_PLAN_WORD_SEND_COMPLETE));
                }
            l->pc = 0;
        }
        const struct part *p = &k->parts[l->part];
        for (; l->pc < p->info.n_instrs; l->pc++) {
            const nrt_proxy_plan_instr_t *in = &p->prog[l->pc];
            uint32_t s = in->side;
            uint32_t post = s ? NRT_PROXY_PLAN_WORD_POST_RECV : NRT_PROXY_PLAN_WORD_POST_SEND;
            switch (in->kind) {
            case NRT_PROXY_INSTR_ARM:
                store(word(k, p, in->op, post), NCCOM_HOST_WORD_READY);
                break;
            case NRT_PROXY_INSTR_WAIT_HANDSHAKE: {
                uint32_t h = load(word(k, p, in->op, s ? NRT_PROXY_PLAN_WORD_RECV_HANDSHAKE
                                                       : NRT_PROXY_PLAN_WORD_SEND_HANDSHAKE));
                uint32_t rose = h - l->hs[in->op][s];
                if (rose == 0)
                    return false;
                if (rose != 1)
                    FAIL("rank %u op %u: handshake rose by %u", l->rank, in->op, rose);
                break;
            }
            case NRT_PROXY_INSTR_POST:
                store(word(k, p, in->op, post), in->upto);
                break;
            case NRT_PROXY_INSTR_WAIT: {
                uint32_t c = load(word(k, p, in->op, s ? NRT_PROXY_PLAN_WORD_RECV_COMPLETE
                                                       : NRT_PROXY_PLAN_WORD_SEND_COMPLETE));
                if (c - l->cpl[in->op][s] < in->upto)
                    return false;
                break;
            }
            case NRT_PROXY_INSTR_REDUCE: { /* int32 sum: the same bits as uint32 sums */
                uint32_t *d = (uint32_t *)(void *)loc(k, in->dst_buf, in->dst_offset);
                const uint32_t *a = (const uint32_t *)(void *)loc(k, in->a_buf, in->a_offset);
                const uint32_t *b = (const uint32_t *)(void *)loc(k, in->b_buf, in->b_offset);
                for (uint64_t i = 0; i < in->count; i++)
                    d[i] = a[i] + b[i];
                break;
            }
            case NRT_PROXY_INSTR_COPY:
                memcpy(loc(k, in->dst_buf, in->dst_offset), loc(k, in->a_buf, in->a_offset),
                       in->count);
                break;
            default:
                FAIL("instruction kind %u", in->kind);
            }
        }
        l->part = -1;
        l->sched++;
    }
    return true;
}

static void *device_main(void *arg) {
    (void)arg;
    for (uint32_t exec = 0; exec < EXECUTIONS; exec++) {
        struct lane lanes[N * STREAMS];
        memset(lanes, 0, sizeof lanes);
        bool done[N * STREAMS] = {false};
        for (uint32_t i = 0; i < N * STREAMS; i++) {
            lanes[i].rank = i / STREAMS;
            lanes[i].stream = i % STREAMS;
            lanes[i].part = -1;
        }
        for (unsigned long it = 0; __atomic_load_n(&go_exec, __ATOMIC_ACQUIRE) <= exec; it++) {
            if (it > MAX_ITERS)
                FAIL("device: execution %u was never started", exec);
            sched_yield();
        }
        for (uint32_t r = 0; r < N; r++)
            store(&ranks[r].trigger, 1); /* the net stage is reached */
        for (unsigned long it = 0;; it++) {
            if (it > MAX_ITERS)
                FAIL("device: execution %u did not finish", exec);
            bool all = true;
            for (uint32_t i = 0; i < N * STREAMS; i++) {
                if (!done[i])
                    done[i] = lane_step(&lanes[i]);
                all &= done[i];
            }
            if (all)
                break;
            sched_yield();
        }
        __atomic_store_n(&dev_done, exec + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3)
        FAIL("usage: %s /path/to/libnccom_proxy.so|- [thread|caller]", argv[0]);
    int caller = argc == 3 && strcmp(argv[2], "caller") == 0;
    if (nrt_proxy_abi_version() < NRT_PROXY_ABI_VERSION)
        FAIL("library ABI %#x, the planner needs %#x", nrt_proxy_abi_version(),
             NRT_PROXY_ABI_VERSION);
    nrt_proxy_config_t cfg;
    EXPECT_OK(nrt_proxy_config_from_env(&cfg));
    cfg.progress_lib = strcmp(argv[1], "-") == 0 ? NULL : argv[1];
    cfg.drive_mode = caller ? NRT_PROXY_DRIVE_CALLER : NRT_PROXY_DRIVE_THREAD;
    cfg.ranks_per_network_proxy = caller ? N : 1;
    nrt_proxy_t *inst = NULL;
    EXPECT_OK(nrt_proxy_init(&cfg, &inst));
    nrt_proxy_group_t *group = NULL;
    EXPECT_OK(nrt_proxy_group_create(inst, N, &group));
    static const nccom_device_callbacks_t cbs = {.nec_inc_semaphore = inc_semaphore};
    nrt_proxy_comm_t *comm[N];
    for (uint32_t r = 0; r < N; r++) {
        make_plan(r);
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
            for (uint32_t i = 0; i < COUNT; i++) {
                ranks[r].input[i] = value(r, exec, i);
                ranks[r].output[i] = 0xDEADBEEFu;
            }
            store(&ranks[r].trigger, 0xFFFFFFFFu);
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
                rec.streams != (1u << STREAMS) - 1u)
                FAIL("rank %u record {task %u status %s state %u streams %#x}", r, rec.task_id,
                     nrt_get_status_as_str(rec.progress_status), rec.run_state, rec.streams);
        }
        for (unsigned long it = 0; __atomic_load_n(&dev_done, __ATOMIC_ACQUIRE) <= exec; it++) {
            if (it > MAX_ITERS)
                FAIL("execution %u: the device did not finish", exec);
            sched_yield();
        }
        for (uint32_t r = 0; r < N; r++)
            for (uint32_t i = 0; i < COUNT; i++) {
                uint32_t want = 0;
                for (uint32_t q = 0; q < N; q++)
                    want += value(q, exec, i);
                if (ranks[r].output[i] != want)
                    FAIL("execution %u rank %u word %u: %u, expected %u", exec, r, i,
                         ranks[r].output[i], want);
                if (ranks[r].input[i] != value(r, exec, i))
                    FAIL("execution %u rank %u input word %u changed", exec, r, i);
            }
    }
    if (pthread_join(dev, NULL) != 0)
        FAIL("pthread_join");
    for (uint32_t r = 0; r < N; r++) {
        EXPECT_OK(nrt_proxy_comm_leave(comm[r], WAIT_MS));
        EXPECT_OK(nrt_proxy_comm_destroy(comm[r]));
        struct rank *k = &ranks[r];
        EXPECT_OK(nrt_proxy_plan_destroy(k->plan));
        for (uint32_t i = 0; i < PARTS; i++) {
            free(k->parts[i].ops);
            free(k->parts[i].src);
            free(k->parts[i].dst);
            free(k->parts[i].prog);
        }
        free(k->input);
        free(k->output);
        free(k->scratch);
        free((void *)(uintptr_t)k->words); /* nccom_host_word_t is volatile */
    }
    EXPECT_OK(nrt_proxy_fini(inst));
    printf("ring_allreduce: ok: %s mode, %u ranks, %u streams x %u blocks, %u-byte chunks, %u "
           "int32 per rank, %u executions (FIFOs from the C planner)\n",
           caller ? "caller" : "thread", N, STREAMS, BLOCKS, CHUNK_BYTES, COUNT, EXECUTIONS);
    return 0;
}
