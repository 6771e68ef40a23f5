/*
 * A C runtime that dlopen()s libnccom_proxy.so, creates two comms over the in-memory transport
 * in one process, plays the device itself (writes -1 to the host indices, waits for the
 * handshake semaphore, raises the host indices to post entries, waits for the complete
 * semaphores), and sends 1 MiB from rank 0 to rank 1 through the seam, twice (the second
 * execution runs the recycled proxy ops of the same block).
 *
 * Rank 0's comm gets its nec_inc_semaphore through config.callbacks; rank 1's through
 * dlsym(RTLD_DEFAULT, "nec_inc_semaphore"), which finds the function this executable exports
 * (it is linked with -rdynamic). Each counts its calls and the increments it made.
 *
 * Usage: seam_sendrecv /path/to/libnccom_proxy.so      Exit status 0 = every check passed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccom_proxy.h"

#define N_ENTRIES 16u
#define ENTRY_SIZE (64u * 1024u) /* 16 x 64 KiB = 1 MiB */
#define TOTAL (N_ENTRIES * ENTRY_SIZE)
#define EXECUTIONS 2u
#define POST_RATE 3u /* entries the device posts per step at most */
#define STREAM 1u
#define BB 7u
#define POISON 0xA5u
#define MAX_ITERS 10000000ul

#define FAIL(...)                                                                                 \
    do {                                                                                          \
        fprintf(stderr, "seam_sendrecv: FAIL line %d: ", __LINE__);                               \
        fprintf(stderr, __VA_ARGS__);                                                             \
        fprintf(stderr, "\n");                                                                    \
        exit(1);                                                                                  \
    } while (0)

/* ---- the device's semaphore callbacks (called on this thread, inside progress) ---- */

static uint32_t calls_a, calls_b;
static uint64_t total_a, total_b;

static void inc_a(nccom_host_word_t *addr, uint32_t val) {
    calls_a++;
    total_a += val;
    __atomic_fetch_add(addr, val, __ATOMIC_RELEASE);
}

/* Exported (-rdynamic): what dlsym(RTLD_DEFAULT, "nec_inc_semaphore") finds for rank 1. */
void nec_inc_semaphore(volatile uint32_t *addr, uint32_t val) {
    calls_b++;
    total_b += val;
    __atomic_fetch_add(addr, val, __ATOMIC_RELEASE);
}

/* ---- host memory: 6 words (send idx/handshake/complete, recv idx/handshake/complete) ---- */

static nccom_host_word_t words[6] __attribute__((aligned(64)));

static uint32_t load(int i) { return __atomic_load_n(&words[i], __ATOMIC_ACQUIRE); }
static void store(int i, uint32_t v) { __atomic_store_n(&words[i], v, __ATOMIC_RELEASE); }
static uint64_t addr_of(int i) { return (uint64_t)(uintptr_t)&words[i]; }

static uint8_t pattern(uint32_t e, uint32_t exec, uint32_t i) {
    return (uint8_t)((e * 7u + exec * 13u + i) % 251u);
}

enum phase { ARM, WAIT_HANDSHAKE, POST, FINISHED };

struct dev {
    int send;
    int idx, hs, cpl; /* word indices */
    uint8_t *buf;     /* TOTAL bytes */
    uint32_t posted, exec;
    enum phase phase;
};

/* One device step of one side (the C twin of World::device_step in core/src/progress/sendrecv/tests.rs). */
static void device_step(struct dev *d) {
    switch (d->phase) {
    case ARM:
        if (!d->send)
            memset(d->buf, POISON, TOTAL);
        store(d->idx, NCCOM_HOST_WORD_READY);
        d->phase = WAIT_HANDSHAKE;
        break;
    case WAIT_HANDSHAKE: {
        uint32_t h = load(d->hs);
        if (h > d->exec + 1)
            FAIL("handshake semaphore %u above executions %u", h, d->exec + 1);
        if (h == d->exec + 1) {
            if (load(d->idx) != 0)
                FAIL("the proxy must write 0 to the host index before the handshake increment");
            d->phase = POST;
        }
        break;
    }
    case POST: {
        uint32_t done = load(d->cpl) - d->exec * N_ENTRIES;
        if (done > d->posted)
            FAIL("complete semaphore %u above entries posted %u", done, d->posted);
        if (done == N_ENTRIES) {
            d->phase = FINISHED;
            break;
        }
        for (uint32_t k = 0; k < POST_RATE && d->posted < N_ENTRIES; k++) {
            uint32_t e = d->posted;
            if (d->send)
                for (uint32_t i = 0; i < ENTRY_SIZE; i++)
                    d->buf[e * ENTRY_SIZE + i] = pattern(e, d->exec, i);
            d->posted++;
            store(d->idx, d->posted); /* release: the payload is written before the post */
        }
        break;
    }
    case FINISHED:
        break;
    }
}

#define LOAD(name)                                                                                \
    name##_fn p_##name;                                                                           \
    do {                                                                                          \
        *(void **)(&p_##name) = dlsym(lib, #name);                                                \
        if (!p_##name)                                                                            \
            FAIL("dlsym(%s): %s", #name, dlerror());                                              \
    } while (0)

#define EXPECT_OK(call)                                                                           \
    do {                                                                                          \
        NRT_STATUS s_ = (call);                                                                   \
        if (s_ != NRT_SUCCESS)                                                                    \
            FAIL("%s returned %s (%u)", #call, p_nrt_get_status_as_str(s_), s_);                  \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s /path/to/libnccom_proxy.so\n", argv[0]);
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        FAIL("dlopen(%s): %s", argv[1], dlerror());

    LOAD(nccom_abi_version);
    LOAD(nrt_get_status_as_str);
    LOAD(nccom_mem_group_create);
    LOAD(nccom_mem_group_destroy);
    LOAD(nccom_comm_create);
    LOAD(nccom_comm_destroy);
    LOAD(neuronStartNetworkProxy);
    LOAD(neuronNetworkProxyProgress);
    LOAD(neuronStopNetworkProxy);

    uint32_t abi = p_nccom_abi_version();
    if (abi >> 16 != NCCOM_PROXY_ABI_VERSION_MAJOR)
        FAIL("library ABI %#x, header major %u", abi, NCCOM_PROXY_ABI_VERSION_MAJOR);

    uint8_t *src = aligned_alloc(64, TOTAL);
    uint8_t *dst = aligned_alloc(64, TOTAL);
    if (!src || !dst)
        FAIL("out of memory");
    memset(src, 0, TOTAL);
    memset(dst, POISON, TOTAL);

    nccom_mem_group_t *group = NULL;
    EXPECT_OK(p_nccom_mem_group_create(2, &group));

    const nccom_device_callbacks_t cbs_a = {.nec_inc_semaphore = inc_a};
    nccom_comm_config_t cfg = {0};
    cfg.nranks = 2;
    cfg.comm_id = 7;
    cfg.transport.kind = NCCOM_TRANSPORT_MEM;
    cfg.transport.mem_group = group;
    nccom_comm_t *comm[2] = {NULL, NULL};
    cfg.rank = 0;
    cfg.callbacks = &cbs_a;
    EXPECT_OK(p_nccom_comm_create(&cfg, &comm[0]));
    cfg.rank = 1;
    cfg.callbacks = NULL; /* -> dlsym(RTLD_DEFAULT, "nec_inc_semaphore") */
    EXPECT_OK(p_nccom_comm_create(&cfg, &comm[1]));
    /* Comms keep what they use: the group handle can go now. */
    EXPECT_OK(p_nccom_mem_group_destroy(group));

    /* One op per rank: rank 0 sends N_ENTRIES x ENTRY_SIZE to rank 1 (tag 3). */
    neuron_net_op_info_t send_op = {0}, recv_op = {0};
    send_op.send_peer = 1;
    send_op.recv_peer = NCCOM_NO_PEER;
    send_op.tag = 3;
    send_op.tx_entry_cnt = N_ENTRIES;
    send_op.data_type_sz = 4;
    send_op.post_send_idx_addr = addr_of(0);
    send_op.send_handshake_sem_addr = addr_of(1);
    send_op.send_complete_sem_addr = addr_of(2);
    recv_op.send_peer = NCCOM_NO_PEER;
    recv_op.recv_peer = 0;
    recv_op.tag = 3;
    recv_op.rx_entry_cnt = N_ENTRIES;
    recv_op.data_type_sz = 4;
    recv_op.post_recv_idx_addr = addr_of(3);
    recv_op.recv_handshake_sem_addr = addr_of(4);
    recv_op.recv_complete_sem_addr = addr_of(5);
    neuron_net_src_addr_t sfifo[N_ENTRIES];
    neuron_net_dest_addr_t dfifo[N_ENTRIES];
    for (uint32_t e = 0; e < N_ENTRIES; e++) {
        uint32_t mark = e + 1 == N_ENTRIES ? EXEC_COMPLETE : NET_TRANSFER;
        sfifo[e] = (neuron_net_src_addr_t){.net_op_idx = 0,
                                           .mark = mark,
                                           .addr = (uint64_t)(uintptr_t)(src + e * ENTRY_SIZE),
                                           .size = ENTRY_SIZE,
                                           .dest_rank = NCCOM_NO_PEER};
        dfifo[e] = (neuron_net_dest_addr_t){.net_op_idx = 0,
                                            .mark = mark,
                                            .addr = (uint64_t)(uintptr_t)(dst + e * ENTRY_SIZE),
                                            .size = ENTRY_SIZE,
                                            .src_rank = NCCOM_NO_PEER};
    }
    EXPECT_OK(p_neuronStartNetworkProxy(comm[0], STREAM, BB, &send_op, 1, sfifo, N_ENTRIES, NULL, 0));
    EXPECT_OK(p_neuronStartNetworkProxy(comm[1], STREAM, BB, &recv_op, 1, NULL, 0, dfifo, N_ENTRIES));

    struct dev devs[2] = {
        {.send = 1, .idx = 0, .hs = 1, .cpl = 2, .buf = src, .phase = ARM},
        {.send = 0, .idx = 3, .hs = 4, .cpl = 5, .buf = dst, .phase = ARM},
    };
    unsigned long ticks = 0;
    for (uint32_t exec = 0; exec < EXECUTIONS; exec++) {
        int comm_done[2] = {0, 0};
        unsigned long iters = 0;
        while (!(devs[0].phase == FINISHED && devs[1].phase == FINISHED && comm_done[0] &&
                 comm_done[1])) {
            if (++iters > MAX_ITERS)
                FAIL("execution %u: no completion after %lu iterations", exec, iters);
            device_step(&devs[0]);
            device_step(&devs[1]);
            for (int r = 0; r < 2; r++) {
                if (comm_done[r])
                    continue; /* the driver stops calling a stream once it is done (DESIGN 3) */
                int idle = 1, done = 1;
                EXPECT_OK(p_neuronNetworkProxyProgress(comm[r], STREAM, BB, &idle, &done));
                ticks++;
                comm_done[r] = done;
            }
        }
        /* Bytes. */
        for (uint32_t e = 0; e < N_ENTRIES; e++)
            for (uint32_t i = 0; i < ENTRY_SIZE; i++)
                if (dst[e * ENTRY_SIZE + i] != pattern(e, exec, i))
                    FAIL("execution %u entry %u byte %u: %#x, expected %#x", exec, e, i,
                         dst[e * ENTRY_SIZE + i], pattern(e, exec, i));
        /* Semaphores: one handshake and N_ENTRIES completions per execution and side. */
        for (int s = 0; s < 2; s++) {
            if (load(devs[s].hs) != exec + 1)
                FAIL("side %d handshake semaphore %u, expected %u", s, load(devs[s].hs), exec + 1);
            if (load(devs[s].cpl) != (exec + 1) * N_ENTRIES)
                FAIL("side %d complete semaphore %u, expected %u", s, load(devs[s].cpl),
                     (exec + 1) * N_ENTRIES);
        }
        uint64_t want = (uint64_t)(exec + 1) * (1 + N_ENTRIES);
        if (total_a != want || total_b != want)
            FAIL("semaphore increments a=%llu b=%llu, expected %llu each",
                 (unsigned long long)total_a, (unsigned long long)total_b,
                 (unsigned long long)want);
        if (calls_a < 2 * (exec + 1) || calls_b < 2 * (exec + 1) || calls_a > want || calls_b > want)
            FAIL("nec_inc_semaphore calls a=%u b=%u out of range [%u, %llu]", calls_a, calls_b,
                 2 * (exec + 1), (unsigned long long)want);
        /* Re-arm the device for the next execution of the same block. */
        for (int s = 0; s < 2; s++) {
            devs[s].exec++;
            devs[s].posted = 0;
            devs[s].phase = ARM;
        }
    }

    /* Teardown: stop, then progress on the stopped stream is valid (idle and done). */
    for (int r = 0; r < 2; r++) {
        EXPECT_OK(p_neuronStopNetworkProxy(comm[r], STREAM));
        int idle = 1, done = 1;
        EXPECT_OK(p_neuronNetworkProxyProgress(comm[r], STREAM, BB, &idle, &done));
        if (!idle || !done)
            FAIL("progress after stop: idle=%d done=%d, expected 1 and 1", idle, done);
    }
    EXPECT_OK(p_nccom_comm_destroy(comm[0]));
    EXPECT_OK(p_nccom_comm_destroy(comm[1]));
    free(src);
    free(dst);
    if (dlclose(lib) != 0)
        FAIL("dlclose: %s", dlerror());
    printf("seam_sendrecv: ok: %u bytes x %u executions through the seam in %lu progress calls; "
           "nec_inc_semaphore: %u calls (+%llu) via config.callbacks, %u calls (+%llu) via dlsym\n",
           TOTAL, EXECUTIONS, ticks, calls_a, (unsigned long long)total_a, calls_b,
           (unsigned long long)total_b);
    return 0;
}
