/*
 * Bad input to the driver half (nrt_proxy_*) from C, against the real libraries: NULL
 * pointers, stream >= 4, block id NCCOM_BB_NONE, zero-length FIFOs, mismatched lengths, a
 * destroyed or never-created handle, a handle of another loaded copy of libnrt_proxy.so (both
 * ways), double join and double leave, submit after leave, a full ring (the refused task stays
 * the caller's: submitted again later, it runs), a progress half of the wrong ABI major, the
 * trampolines' checks. Each call must answer its exact status; the comm's health and last error
 * are checked where a task failed; everything is destroyed at the end. Run under valgrind too
 * (no invalid access, no definite leak).
 *
 * Usage: driver_bad_input LIBNCCOM COPY_OF_LIBNRT FAKE_PROGRESS_V2
 *   LIBNCCOM: the progress half; COPY_OF_LIBNRT: a copy of libnrt_proxy.so at another path
 *   (dlopen'ed RTLD_LOCAL: a second instance with its own handle tables); FAKE_PROGRESS_V2: the
 *   stub progress half of ABI major 2 (tests/c/fake_progress_v2.c).
 * Exit status 0 = every check passed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrt_proxy.h"

static int checks;

#define FAIL(...)                                                                                 \
    do {                                                                                          \
        fprintf(stderr, "driver_bad_input: FAIL line %d: ", __LINE__);                            \
        fprintf(stderr, __VA_ARGS__);                                                             \
        fprintf(stderr, "\n");                                                                    \
        exit(1);                                                                                  \
    } while (0)

#define EXPECT(call, want)                                                                        \
    do {                                                                                          \
        NRT_STATUS s_ = (call);                                                                   \
        if (s_ != (NRT_STATUS)(want))                                                             \
            FAIL("%s returned %s (%u), expected %s", #call, nrt_get_status_as_str(s_), s_,        \
                 nrt_get_status_as_str(want));                                                    \
        checks++;                                                                                 \
    } while (0)

#define TRUE(cond)                                                                                \
    do {                                                                                          \
        if (!(cond))                                                                              \
            FAIL("%s is false", #cond);                                                           \
        checks++;                                                                                 \
    } while (0)

static void inc(nccom_host_word_t *w, uint32_t v) { __atomic_fetch_add(w, v, __ATOMIC_RELEASE); }
static const nccom_device_callbacks_t CBS = {.nec_inc_semaphore = inc};

/* Host words: [send idx, send handshake, send complete, trigger words...]. */
static nccom_host_word_t words[16] __attribute__((aligned(64)));
static unsigned char buf[64];

static nrt_proxy_config_t config(const char *lib, uint32_t mode) {
    nrt_proxy_config_t c;
    if (nrt_proxy_config_init(&c) != NRT_SUCCESS)
        FAIL("config_init");
    c.progress_lib = lib;
    c.drive_mode = mode;
    c.spin_us = 0;
    return c;
}

/* Rank 0 of a 2-rank group (rank 1 is never created: enough for tasks that are refused, skip,
 * or wait for a trigger word nobody writes). */
static nrt_proxy_comm_t *comm0(nrt_proxy_t *inst, nrt_proxy_group_t *g) {
    nrt_proxy_comm_config_t cc;
    EXPECT(nrt_proxy_comm_config_init(&cc), NRT_SUCCESS);
    cc.rank = 0, cc.nranks = 2, cc.comm_id = 9, cc.group = g, cc.callbacks = &CBS;
    nrt_proxy_comm_t *c = NULL;
    EXPECT(nrt_proxy_comm_create(inst, &cc, &c), NRT_SUCCESS);
    TRUE(c != NULL);
    return c;
}

/* One send op (1 entry of 64 B to rank 1) and its source entry. */
static neuron_net_op_info_t op(void) {
    return (neuron_net_op_info_t){.send_peer = 1, .recv_peer = NCCOM_NO_PEER, .tag = 1,
                                  .tx_entry_cnt = 1, .data_type_sz = 1,
                                  .post_send_idx_addr = (uintptr_t)&words[0],
                                  .send_handshake_sem_addr = (uintptr_t)&words[1],
                                  .send_complete_sem_addr = (uintptr_t)&words[2]};
}
static const neuron_net_src_addr_t SRC[2] = {
    {.net_op_idx = 0, .mark = EXEC_COMPLETE, .size = 64, .dest_rank = NCCOM_NO_PEER},
    {.net_op_idx = 0, .mark = EXEC_COMPLETE, .size = 64, .dest_rank = NCCOM_NO_PEER}};

static nrt_proxy_network_task_t net_task(uint32_t id, const nrt_proxy_block_t *b, uint32_t flags) {
    return (nrt_proxy_network_task_t){.struct_size = sizeof(nrt_proxy_network_task_t),
                                      .task_id = id, .blocks = b, .n_blocks = 1, .flags = flags,
                                      .timeout_ms = NRT_PROXY_TIMEOUT_DEFAULT};
}

static void last_error(nrt_proxy_comm_t *c, char *out, size_t len) {
    EXPECT(nrt_proxy_comm_last_error(c, out, len), NRT_SUCCESS);
}

typedef NRT_STATUS (*init_fn)(const nrt_proxy_config_t *, nrt_proxy_t **);
typedef NRT_STATUS (*fini_fn)(nrt_proxy_t *);
typedef NRT_STATUS (*group_create_fn)(nrt_proxy_t *, uint32_t, nrt_proxy_group_t **);
typedef NRT_STATUS (*comm_fn)(nrt_proxy_comm_t *);

static void *sym(void *h, const char *name) {
    void *p = dlsym(h, name);
    if (p == NULL)
        FAIL("dlsym %s: %s", name, dlerror());
    return p;
}

int main(int argc, char **argv) {
    if (argc != 4)
        FAIL("usage: %s LIBNCCOM COPY_OF_LIBNRT FAKE_PROGRESS_V2", argv[0]);
    const char *lib = argv[1];
    nrt_proxy_t *inst = NULL;

    /* Configs, NULLs, libraries. */
    EXPECT(nrt_proxy_config_init(NULL), NRT_INVALID);
    EXPECT(nrt_proxy_config_from_env(NULL), NRT_INVALID);
    nrt_proxy_config_t cfg = config(lib, NRT_PROXY_DRIVE_CALLER);
    EXPECT(nrt_proxy_init(NULL, &inst), NRT_INVALID);
    EXPECT(nrt_proxy_init(&cfg, NULL), NRT_INVALID);
    nrt_proxy_config_t bad = cfg;
    bad.struct_size -= 8;
    EXPECT(nrt_proxy_init(&bad, &inst), NRT_INVALID);
    bad = cfg, bad.drive_mode = 7;
    EXPECT(nrt_proxy_init(&bad, &inst), NRT_INVALID);
    bad = cfg, bad.status_capacity = 3; /* not a power of two */
    EXPECT(nrt_proxy_init(&bad, &inst), NRT_INVALID);
    bad = cfg, bad.progress_lib = "/nonexistent/libnccom_proxy.so";
    EXPECT(nrt_proxy_init(&bad, &inst), NRT_INVALID);
    bad = cfg, bad.progress_lib = argv[3]; /* ABI major 2 */
    EXPECT(nrt_proxy_init(&bad, &inst), NRT_INVALID);
    TRUE(inst == NULL);

    /* A small ring: 2 submission slots, at most 2 unreported tasks per comm. */
    cfg.submit_capacity = 2;
    cfg.status_capacity = 2;
    EXPECT(nrt_proxy_init(&cfg, &inst), NRT_SUCCESS);
    nrt_proxy_group_t *g = NULL;
    EXPECT(nrt_proxy_group_create(NULL, 2, &g), NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_group_create(inst, 0, &g), NRT_INVALID);
    EXPECT(nrt_proxy_group_create(inst, 2, NULL), NRT_INVALID);
    EXPECT(nrt_proxy_group_create(inst, 2, &g), NRT_SUCCESS);
    nrt_proxy_comm_config_t cc;
    EXPECT(nrt_proxy_comm_config_init(NULL), NRT_INVALID);
    EXPECT(nrt_proxy_comm_config_init(&cc), NRT_SUCCESS);
    cc.rank = 0, cc.nranks = 2, cc.comm_id = 9, cc.group = g, cc.callbacks = &CBS;
    nrt_proxy_comm_t *c = NULL;
    EXPECT(nrt_proxy_comm_create(inst, NULL, &c), NRT_INVALID);
    EXPECT(nrt_proxy_comm_create(inst, &cc, NULL), NRT_INVALID);
    nrt_proxy_comm_config_t badcc = cc;
    badcc.rank = 2; /* rank >= nranks */
    EXPECT(nrt_proxy_comm_create(inst, &badcc, &c), NRT_INVALID);
    badcc = cc, badcc.struct_size = 8;
    EXPECT(nrt_proxy_comm_create(inst, &badcc, &c), NRT_INVALID);
    EXPECT(nrt_proxy_comm_create((nrt_proxy_t *)g, &cc, &c), NRT_INVALID_HANDLE);
    TRUE(c == NULL);
    c = comm0(inst, g);

    /* Never-created, other-kind and NULL comm handles. */
    uint64_t local = 7;
    nrt_proxy_comm_t *fakes[4] = {NULL, (nrt_proxy_comm_t *)(uintptr_t)0x1234,
                                  (nrt_proxy_comm_t *)&local, (nrt_proxy_comm_t *)g};
    nrt_proxy_task_record_t rec;
    for (int i = 0; i < 4; i++) {
        EXPECT(nrt_proxy_comm_join(fakes[i]), NRT_INVALID_HANDLE);
        EXPECT(nrt_proxy_comm_leave(fakes[i], 10), NRT_INVALID_HANDLE);
        EXPECT(nrt_proxy_try_pop(fakes[i], &rec), NRT_INVALID_HANDLE);
        EXPECT(nrt_proxy_wait(fakes[i], 1, &rec), NRT_INVALID_HANDLE);
        EXPECT(nrt_proxy_comm_abort(fakes[i]), NRT_INVALID_HANDLE);
        EXPECT(nrt_proxy_comm_destroy(fakes[i]), NRT_INVALID_HANDLE);
    }
    EXPECT(nrt_proxy_fini((nrt_proxy_t *)c), NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_group_destroy((nrt_proxy_group_t *)(uintptr_t)0x1234), NRT_INVALID_HANDLE);

    /* Handles of another loaded copy of the library, both ways. */
    void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        FAIL("dlopen %s: %s", argv[2], dlerror());
    init_fn other_init = (init_fn)sym(h, "nrt_proxy_init");
    fini_fn other_fini = (fini_fn)sym(h, "nrt_proxy_fini");
    group_create_fn other_group_create = (group_create_fn)sym(h, "nrt_proxy_group_create");
    comm_fn other_join = (comm_fn)sym(h, "nrt_proxy_comm_join");
    comm_fn other_destroy = (comm_fn)sym(h, "nrt_proxy_comm_destroy");
    TRUE((void *)other_init != (void *)nrt_proxy_init);
    nrt_proxy_t *other = NULL;
    nrt_proxy_config_t ocfg = config(lib, NRT_PROXY_DRIVE_THREAD);
    EXPECT(other_init(&ocfg, &other), NRT_SUCCESS);
    nrt_proxy_group_t *og = NULL;
    EXPECT(nrt_proxy_group_create(other, 2, &og), NRT_INVALID_HANDLE);
    EXPECT(other_group_create(inst, 2, &og), NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_fini(other), NRT_INVALID_HANDLE);
    EXPECT(other_join(c), NRT_INVALID_HANDLE);
    EXPECT(other_destroy(c), NRT_INVALID_HANDLE);
    EXPECT(other_group_create(other, 2, &og), NRT_SUCCESS);
    EXPECT(nrt_proxy_group_destroy(og), NRT_INVALID_HANDLE);
    EXPECT(other_fini(other), NRT_SUCCESS);
    /* The copy stays loaded (as every progress half does): unloading a library whose worker
     * threads were made by Rust's std is not supported; its objects are all destroyed. */

    /* Not joined yet; then double join. */
    neuron_net_op_info_t ops[1] = {op()};
    neuron_net_src_addr_t src[2] = {SRC[0], SRC[1]};
    src[0].addr = src[1].addr = (uintptr_t)buf;
    nrt_proxy_block_t good = {.stream = 0, .bb = 3, .ops = ops, .n_ops = 1, .src = src, .n_src = 1};
    nrt_proxy_network_task_t t = net_task(1, &good, NRT_PROXY_TASK_SKIP);
    EXPECT(nrt_proxy_submit_network(c, &t), NRT_CLOSED);
    EXPECT(nrt_proxy_comm_leave(c, 10), NRT_CLOSED);
    EXPECT(nrt_proxy_comm_join(c), NRT_SUCCESS);
    EXPECT(nrt_proxy_comm_join(c), NRT_INVALID);

    /* Bad submissions: each refused, nothing submitted. */
    EXPECT(nrt_proxy_submit_network(c, NULL), NRT_INVALID);
    nrt_proxy_block_t b;
#define BAD_BLOCK(field, v)                                                                       \
    do {                                                                                          \
        b = good;                                                                                 \
        b.field = (v);                                                                            \
        nrt_proxy_network_task_t t_ = net_task(2, &b, 0);                                         \
        EXPECT(nrt_proxy_submit_network(c, &t_), NRT_INVALID);                                    \
    } while (0)
    BAD_BLOCK(stream, 4);
    BAD_BLOCK(stream, UINT32_MAX);
    BAD_BLOCK(bb, NCCOM_BB_NONE);
    BAD_BLOCK(n_ops, 0);    /* zero-length op FIFO */
    BAD_BLOCK(ops, NULL);   /* NULL with a length */
    BAD_BLOCK(n_src, 0);    /* mismatched: the op has 1 tx entry */
    BAD_BLOCK(n_src, 2);    /* mismatched: 2 source entries for 1 */
    BAD_BLOCK(src, NULL);   /* NULL with a length */
    BAD_BLOCK(n_dst, 1);    /* mismatched (and NULL): no rx entries */
    /* An op with no entries at all (zero-length source FIFO). */
    neuron_net_op_info_t empty = op();
    empty.tx_entry_cnt = 0;
    nrt_proxy_block_t eb = {.stream = 0, .bb = 3, .ops = &empty, .n_ops = 1};
    t = net_task(2, &eb, 0);
    EXPECT(nrt_proxy_submit_network(c, &t), NRT_INVALID);
    t = net_task(2, &good, 0);
    t.n_blocks = 0;
    EXPECT(nrt_proxy_submit_network(c, &t), NRT_INVALID);
    t = net_task(2, &good, 0), t.blocks = NULL;
    EXPECT(nrt_proxy_submit_network(c, &t), NRT_INVALID);
    t = net_task(2, &good, 0), t.struct_size -= 8;
    EXPECT(nrt_proxy_submit_network(c, &t), NRT_INVALID);
    t = net_task(2, &good, 0x80); /* unknown flag */
    EXPECT(nrt_proxy_submit_network(c, &t), NRT_INVALID);
    t = net_task(2, &good, 0), t.reserved = 1;
    EXPECT(nrt_proxy_submit_network(c, &t), NRT_INVALID);
    uint32_t sched[2] = {3, 4}; /* block 4 is not in the task */
    t = net_task(2, &good, 0), t.schedule = sched, t.n_schedule = 2;
    EXPECT(nrt_proxy_submit_network(c, &t), NRT_INVALID);
    t = net_task(2, &good, 0), t.schedule = NULL, t.n_schedule = 2;
    EXPECT(nrt_proxy_submit_network(c, &t), NRT_INVALID);
    nccom_host_word_t *five[5] = {&words[8], &words[8], &words[8], &words[8], &words[8]};
    t = net_task(2, &good, NRT_PROXY_TASK_WAIT_FOR_DEVICE), t.trigger_words = five;
    t.n_trigger_words = 5;
    EXPECT(nrt_proxy_submit_network(c, &t), NRT_INVALID);
    nccom_host_word_t *null_word[1] = {NULL};
    t.trigger_words = null_word, t.n_trigger_words = 1;
    EXPECT(nrt_proxy_submit_network(c, &t), NRT_INVALID);
    nccom_host_word_t *misaligned[1] = {(nccom_host_word_t *)((uintptr_t)&words[8] + 1)};
    t.trigger_words = misaligned;
    EXPECT(nrt_proxy_submit_network(c, &t), NRT_INVALID);
    t.trigger_words = NULL;
    EXPECT(nrt_proxy_submit_network(c, &t), NRT_INVALID);
    /* Barriers. */
    EXPECT(nrt_proxy_submit_barrier(c, NULL), NRT_INVALID);
    nrt_proxy_barrier_task_t bt = {.struct_size = sizeof bt, .task_id = 3,
                                   .trigger_words = null_word, .n_trigger_words = 1};
    EXPECT(nrt_proxy_submit_barrier(c, &bt), NRT_INVALID);
    bt.n_trigger_words = 0, bt.flags = NRT_PROXY_TASK_WAIT_FOR_DEVICE;
    EXPECT(nrt_proxy_submit_barrier(c, &bt), NRT_INVALID);
    bt.flags = 0, bt.n_done_semaphores = 1; /* NULL with a length */
    EXPECT(nrt_proxy_submit_barrier(c, &bt), NRT_INVALID);
    bt.n_done_semaphores = 0, bt.struct_size = 4;
    EXPECT(nrt_proxy_submit_barrier(c, &bt), NRT_INVALID);
    /* Other NULL out-parameters and buffers. */
    uint32_t tick = 0;
    NRT_STATUS health = 99;
    EXPECT(nrt_proxy_try_pop(c, NULL), NRT_INVALID);
    EXPECT(nrt_proxy_wait(c, 1, NULL), NRT_INVALID);
    EXPECT(nrt_proxy_tick(c, NULL), NRT_INVALID);
    EXPECT(nrt_proxy_drive_until(c, 1, 1, NULL), NRT_INVALID);
    EXPECT(nrt_proxy_comm_get_async_error(c, NULL), NRT_INVALID);
    EXPECT(nrt_proxy_comm_last_error(c, NULL, 8), NRT_INVALID);
    EXPECT(nrt_proxy_comm_nccom(c, NULL), NRT_INVALID);
    EXPECT(nrt_proxy_comm_invalidate_range(c, NULL, 64), NRT_INVALID);
    EXPECT(nrt_proxy_resubmit(c, 1, 2), NRT_INVALID); /* no such kept task */
    /* Nothing was submitted; the comm is healthy. */
    EXPECT(nrt_proxy_try_pop(c, &rec), NRT_QUEUE_EMPTY);
    EXPECT(nrt_proxy_tick(c, &tick), NRT_SUCCESS);
    TRUE(tick == NRT_PROXY_TICK_IDLE);
    EXPECT(nrt_proxy_comm_get_async_error(c, &health), NRT_SUCCESS);
    TRUE(health == NRT_SUCCESS);
    /* The last refused call is the comm's last error, with its cause. */
    char err[256];
    memset(err, 0x55, sizeof err);
    last_error(c, err, sizeof err);
    TRUE(strstr(err, "nrt_proxy_resubmit") != NULL && strstr(err, "NRT_INVALID") != NULL);

    /* A full ring: two tasks that cannot finish (wait for the device, trigger words armed,
     * nobody writes them; caller mode, and nobody drives yet). The third is refused with
     * NRT_QUEUE_FULL and stays the caller's. Their 1 ms limit then ends them NRT_TIMEOUT once
     * driven. */
    nrt_proxy_network_task_t full[3];
    nccom_host_word_t *trig[3][1] = {{&words[8]}, {&words[9]}, {&words[10]}};
    for (uint32_t i = 0; i < 3; i++) {
        words[8 + i] = 0xFFFFFFFFu;
        full[i] = net_task(10 + i, &good, NRT_PROXY_TASK_WAIT_FOR_DEVICE);
        full[i].trigger_words = trig[i], full[i].n_trigger_words = 1, full[i].timeout_ms = 1;
    }
    EXPECT(nrt_proxy_submit_network(c, &full[0]), NRT_SUCCESS);
    EXPECT(nrt_proxy_submit_network(c, &full[1]), NRT_SUCCESS);
    EXPECT(nrt_proxy_submit_network(c, &full[2]), NRT_QUEUE_FULL);
    EXPECT(nrt_proxy_submit_network(c, &full[2]), NRT_QUEUE_FULL);
    EXPECT(nrt_proxy_try_pop(c, &rec), NRT_QUEUE_EMPTY);
    EXPECT(nrt_proxy_drive_until(c, 10, 30000, &rec), NRT_SUCCESS);
    TRUE(rec.task_id == 10 && rec.comm_id == 9 && rec.streams == 1);
    TRUE(rec.progress_status == NRT_TIMEOUT && rec.run_state == NRT_PROXY_RUN_STATE_DONE);
    EXPECT(nrt_proxy_comm_get_async_error(c, &health), NRT_SUCCESS);
    TRUE(health == NRT_TIMEOUT);
    last_error(c, err, sizeof err);
    TRUE(strstr(err, "task 10") != NULL && strstr(err, "NRT_TIMEOUT") != NULL);
    /* Room again: the refused task is submitted now, and runs. */
    EXPECT(nrt_proxy_submit_network(c, &full[2]), NRT_SUCCESS);
    EXPECT(nrt_proxy_drive_until(c, 12, 30000, &rec), NRT_SUCCESS);
    TRUE(rec.task_id == 12 && rec.progress_status == NRT_TIMEOUT);
    EXPECT(nrt_proxy_wait(c, 30000, &rec), NRT_SUCCESS);
    TRUE(rec.task_id == 11 && rec.progress_status == NRT_TIMEOUT);
    EXPECT(nrt_proxy_try_pop(c, &rec), NRT_QUEUE_EMPTY);
    EXPECT(nrt_proxy_wait(c, 10, &rec), NRT_QUEUE_EMPTY);          /* nothing outstanding */
    EXPECT(nrt_proxy_drive_until(c, 99, 10, &rec), NRT_QUEUE_EMPTY);
    /* The first failure stays the comm's async error. */
    EXPECT(nrt_proxy_comm_get_async_error(c, &health), NRT_SUCCESS);
    TRUE(health == NRT_TIMEOUT);
    EXPECT(nrt_proxy_comm_dump(c, 1000), NRT_SUCCESS);

    /* The trampolines, on the progress half's comm of rank 1 (never joined: the caller drives
     * its seam itself). */
    nrt_proxy_comm_t *c2 = NULL;
    cc.rank = 1;
    EXPECT(nrt_proxy_comm_create(inst, &cc, &c2), NRT_SUCCESS);
    nccom_comm_t *nc = NULL;
    EXPECT(nrt_proxy_comm_nccom(c2, &nc), NRT_SUCCESS);
    TRUE(nc != NULL);
    bool idle = true, done = true; /* AND-ed into by each call */
    EXPECT(ncclNetworkProxyProgress(nc, 0, 3, NULL, &done), NRT_INVALID);
    EXPECT(ncclNetworkProxyProgress(nc, 0, 3, &idle, NULL), NRT_INVALID);
    EXPECT(ncclNetworkProxyProgress(nc, 0, 3, &idle, &done), NRT_SUCCESS);
    TRUE(idle && done);
    EXPECT(ncclNetworkProxyProgress(nc, 4, 3, &idle, &done), NRT_INVALID);
    TRUE(!idle && !done);
    EXPECT(ncclStartNetworkProxy(nc, 0, NCCOM_BB_NONE, ops, 1, src, 1, NULL, 0), NRT_INVALID);
    EXPECT(ncclStartNetworkProxy(nc, 4, 3, ops, 1, src, 1, NULL, 0), NRT_INVALID);
    EXPECT(ncclStartNetworkProxy(nc, 0, 3, ops, 1, src, 2, NULL, 0), NRT_INVALID);
    EXPECT(ncclStartNetworkProxy(NULL, 0, 3, ops, 1, src, 1, NULL, 0), NRT_INVALID_HANDLE);
    EXPECT(ncclStopNetworkProxy(nc, 0), NRT_SUCCESS);
    EXPECT(nrt_proxy_comm_destroy(c2), NRT_SUCCESS);
    EXPECT(ncclStopNetworkProxy(nc, 0), NRT_INVALID_HANDLE); /* stale now */

    /* Leave; double leave, submit after leave, join after leave. */
    EXPECT(nrt_proxy_comm_leave(c, 10000), NRT_SUCCESS);
    EXPECT(nrt_proxy_comm_leave(c, 10), NRT_CLOSED);
    t = net_task(20, &good, NRT_PROXY_TASK_SKIP);
    EXPECT(nrt_proxy_submit_network(c, &t), NRT_CLOSED);
    bt = (nrt_proxy_barrier_task_t){.struct_size = sizeof bt, .task_id = 21,
                                    .flags = NRT_PROXY_TASK_SKIP};
    EXPECT(nrt_proxy_submit_barrier(c, &bt), NRT_CLOSED);
    EXPECT(nrt_proxy_comm_join(c), NRT_INVALID);

    /* Destroy everything, each twice; then every call on the destroyed handles. */
    EXPECT(nrt_proxy_comm_destroy(c), NRT_SUCCESS);
    EXPECT(nrt_proxy_comm_destroy(c), NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_group_destroy(g), NRT_SUCCESS);
    EXPECT(nrt_proxy_group_destroy(g), NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_fini(inst), NRT_SUCCESS);
    EXPECT(nrt_proxy_fini(inst), NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_comm_join(c), NRT_INVALID_HANDLE);
    t = net_task(30, &good, NRT_PROXY_TASK_SKIP);
    EXPECT(nrt_proxy_submit_network(c, &t), NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_wait(c, 1, &rec), NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_comm_abort(c), NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_comm_get_async_error(c, &health), NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_group_create(inst, 2, &g), NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_comm_create(inst, &cc, &c), NRT_INVALID_HANDLE);

    printf("driver_bad_input: ok: %d checks\n", checks);
    return 0;
}
