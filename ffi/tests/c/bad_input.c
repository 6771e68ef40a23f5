/*
 * Bad input from C, linked against libnccom_proxy.so (-lnccom_proxy): every call below must be
 * answered with its status, and nothing may crash. Also: comm creation without any
 * nec_inc_semaphore fails clearly (this executable does not export one), handles that were
 * destroyed or never created are detected, double destroy is detected, and progress after stop
 * is valid (idle and done).
 *
 * Exit status 0 = every check passed; the failed checks are listed on stderr otherwise.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nccom_proxy.h"

static int failures, checks;

#define CHECK(call, want)                                                                         \
    do {                                                                                          \
        NRT_STATUS got_ = (call);                                                                 \
        checks++;                                                                                 \
        if (got_ != (want)) {                                                                     \
            failures++;                                                                           \
            fprintf(stderr, "bad_input: FAIL line %d: %s returned %s (%u), expected %s\n",        \
                    __LINE__, #call, nrt_get_status_as_str(got_), got_,                           \
                    nrt_get_status_as_str(want));                                                 \
        }                                                                                         \
    } while (0)

#define EXPECT(cond)                                                                              \
    do {                                                                                          \
        checks++;                                                                                 \
        if (!(cond)) {                                                                            \
            failures++;                                                                           \
            fprintf(stderr, "bad_input: FAIL line %d: %s\n", __LINE__, #cond);                    \
        }                                                                                         \
    } while (0)

static void inc(nccom_host_word_t *addr, uint32_t val) {
    __atomic_fetch_add(addr, val, __ATOMIC_RELEASE);
}

static nccom_host_word_t words[8] __attribute__((aligned(64)));
static uint8_t buf[4][256] __attribute__((aligned(64)));

static uint64_t addr_of(const volatile void *p) { return (uint64_t)(uintptr_t)p; }

static nccom_comm_config_t config(uint32_t rank, uint32_t nranks, nccom_mem_group_t *g) {
    nccom_comm_config_t c;
    memset(&c, 0, sizeof c);
    c.rank = rank;
    c.nranks = nranks;
    c.comm_id = 11;
    c.transport.kind = NCCOM_TRANSPORT_MEM;
    c.transport.mem_group = g;
    return c;
}

/* A valid send op of 2 entries to `peer`, with its source FIFO. */
static void send_op(neuron_net_op_info_t *op, neuron_net_src_addr_t src[2], int32_t peer) {
    memset(op, 0, sizeof *op);
    op->send_peer = peer;
    op->recv_peer = NCCOM_NO_PEER;
    op->tag = 1;
    op->tx_entry_cnt = 2;
    op->data_type_sz = 1;
    op->post_send_idx_addr = addr_of(&words[0]);
    op->send_handshake_sem_addr = addr_of(&words[1]);
    op->send_complete_sem_addr = addr_of(&words[2]);
    for (int e = 0; e < 2; e++) {
        memset(&src[e], 0, sizeof src[e]);
        src[e].net_op_idx = 0;
        src[e].mark = e == 1 ? NET_OP_COMPLETE : NET_TRANSFER;
        src[e].addr = addr_of(buf[e]);
        src[e].size = sizeof buf[e];
        src[e].dest_rank = NCCOM_NO_PEER;
    }
}

int main(void) {
    /* ---- status strings and ABI version ---- */
    EXPECT(strcmp(nrt_get_status_as_str(NRT_SUCCESS), "NRT_SUCCESS") == 0);
    EXPECT(strcmp(nrt_get_status_as_str(NRT_NETWORK_PROXY_FAILURE), "NRT_NETWORK_PROXY_FAILURE") == 0);
    EXPECT(strcmp(nrt_get_status_as_str(9999), "NRT_UNKNOWN_STATUS") == 0);
    EXPECT(nccom_abi_version() == NCCOM_PROXY_ABI_VERSION);

    /* ---- groups ---- */
    nccom_mem_group_t *g = NULL, *g3 = NULL;
    CHECK(nccom_mem_group_create(0, &g), NRT_INVALID);
    EXPECT(g == NULL);
    CHECK(nccom_mem_group_create(257, &g), NRT_INVALID);
    CHECK(nccom_mem_group_create(2, NULL), NRT_INVALID);
    CHECK(nccom_mem_group_create(2, &g), NRT_SUCCESS);
    CHECK(nccom_mem_group_create(3, &g3), NRT_SUCCESS);

    /* ---- device callbacks: none anywhere -> comm creation fails clearly ---- */
    nccom_comm_t *c0 = NULL, *c1 = NULL, *cx = NULL;
    nccom_comm_config_t cfg = config(0, 2, g);
    CHECK(nccom_comm_create(&cfg, &c0), NRT_UNINITIALIZED);
    EXPECT(c0 == NULL);
    nccom_device_callbacks_t no_inc;
    memset(&no_inc, 0, sizeof no_inc);
    CHECK(nccom_register_device_callbacks(&no_inc), NRT_INVALID);
    cfg.callbacks = &no_inc;
    CHECK(nccom_comm_create(&cfg, &c0), NRT_INVALID);
    const nccom_device_callbacks_t cbs = {.nec_inc_semaphore = inc};
    CHECK(nccom_register_device_callbacks(&cbs), NRT_SUCCESS);

    /* ---- bad configs (none of them takes a rank) ---- */
    CHECK(nccom_comm_create(NULL, &c0), NRT_INVALID);
    cfg = config(0, 2, g);
    CHECK(nccom_comm_create(&cfg, NULL), NRT_INVALID);
    cfg = config(2, 2, g);
    CHECK(nccom_comm_create(&cfg, &c0), NRT_INVALID); /* rank >= nranks */
    cfg = config(0, 3, g);
    CHECK(nccom_comm_create(&cfg, &c0), NRT_INVALID); /* group has 2 ranks */
    cfg = config(0, 2, g);
    cfg.comm_id = 1u << 15;
    CHECK(nccom_comm_create(&cfg, &c0), NRT_INVALID);
    cfg = config(0, 2, g);
    cfg.flags = 0x80;
    CHECK(nccom_comm_create(&cfg, &c0), NRT_INVALID);
    cfg = config(0, 2, g);
    cfg.transport.kind = 42;
    CHECK(nccom_comm_create(&cfg, &c0), NRT_INVALID);
    cfg = config(0, 2, g);
    cfg.transport.kind = NCCOM_TRANSPORT_LIBFABRIC; /* with a mem group: invalid in every build */
    CHECK(nccom_comm_create(&cfg, &c0), NRT_INVALID);
    cfg = config(0, 2, NULL);
    CHECK(nccom_comm_create(&cfg, &c0), NRT_INVALID);
    int local = 0;
    cfg = config(0, 2, (nccom_mem_group_t *)&local); /* never a group */
    CHECK(nccom_comm_create(&cfg, &c0), NRT_INVALID_HANDLE);
    EXPECT(c0 == NULL);

    cfg = config(0, 2, g);
    CHECK(nccom_comm_create(&cfg, &c0), NRT_SUCCESS);
    CHECK(nccom_comm_create(&cfg, &cx), NRT_INVALID); /* rank 0 of the group is taken */
    cfg = config(1, 2, g);
    CHECK(nccom_comm_create(&cfg, &c1), NRT_SUCCESS);

    /* ---- the seam: bad comm handles ---- */
    nccom_comm_t *never = (nccom_comm_t *)&local;
    nccom_comm_t *forged = (nccom_comm_t *)(uintptr_t)0x1234;
    nccom_comm_t *group_as_comm = (nccom_comm_t *)g;
    neuron_net_op_info_t op;
    neuron_net_src_addr_t src[2];
    send_op(&op, src, 1);
    int idle = 1, done = 1;
    nccom_comm_t *bad[] = {NULL, never, forged, group_as_comm};
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(neuronStartNetworkProxy(bad[i], 0, 1, &op, 1, src, 2, NULL, 0), NRT_INVALID_HANDLE);
        CHECK(neuronNetworkProxyProgress(bad[i], 0, 1, &idle, &done), NRT_INVALID_HANDLE);
        CHECK(neuronStopNetworkProxy(bad[i], 0), NRT_INVALID_HANDLE);
        CHECK(neuronStopNetworkProxyStep(bad[i], 0, &done), NRT_INVALID_HANDLE);
        CHECK(nccom_comm_register_memory(bad[i], buf, sizeof buf), NRT_INVALID_HANDLE);
        {
            nccom_protocol_stats_t ps = {.size = sizeof ps};
            CHECK(nccom_comm_protocol_stats(bad[i], &ps), NRT_INVALID_HANDLE);
        }
        CHECK(nccom_comm_destroy(bad[i]), NRT_INVALID_HANDLE);
    }
    CHECK(nccom_mem_group_destroy((nccom_mem_group_t *)c0), NRT_INVALID_HANDLE);

    /* ---- the seam: bad arguments on a live comm ---- */
    CHECK(neuronStartNetworkProxy(c0, 4, 1, &op, 1, src, 2, NULL, 0), NRT_INVALID);      /* stream 4 */
    idle = 1;
    done = 1;
    CHECK(neuronNetworkProxyProgress(c0, 4, 1, &idle, &done), NRT_INVALID);
    EXPECT(idle == 0 && done == 0); /* a failed call is neither idle nor done */
    CHECK(neuronStopNetworkProxy(c0, 4), NRT_INVALID);
    CHECK(neuronStopNetworkProxyStep(c0, 4, &done), NRT_INVALID);
    CHECK(neuronStopNetworkProxyStep(c0, 0, NULL), NRT_INVALID);
    CHECK(neuronStartNetworkProxy(c0, 0, 1, NULL, 1, src, 2, NULL, 0), NRT_INVALID);    /* NULL ops */
    CHECK(neuronStartNetworkProxy(c0, 0, 1, &op, 1, NULL, 2, NULL, 0), NRT_INVALID);    /* NULL src */
    CHECK(neuronStartNetworkProxy(c0, 0, 1, &op, 1, src, 2, NULL, 3), NRT_INVALID);     /* NULL dst */
    CHECK(neuronStartNetworkProxy(c0, 0, 1, NULL, 0, NULL, 0, NULL, 0), NRT_INVALID);   /* no ops */
    CHECK(neuronStartNetworkProxy(c0, 0, 1, &op, 1, src, 1, NULL, 0), NRT_INVALID);     /* 1 src, op says 2 */
    CHECK(neuronStartNetworkProxy(c0, 0, NCCOM_BB_NONE, &op, 1, src, 2, NULL, 0), NRT_INVALID);
    CHECK(neuronStartNetworkProxy(c0, 0, 1, &op, 1, (neuron_net_src_addr_t *)((char *)src + 1), 2,
                                  NULL, 0),
          NRT_INVALID); /* misaligned FIFO */
    send_op(&op, src, 1);
    src[1].mark = 7; /* unknown mark */
    CHECK(neuronStartNetworkProxy(c0, 0, 1, &op, 1, src, 2, NULL, 0), NRT_INVALID);
    send_op(&op, src, 1);
    src[0].mark = NET_OP_COMPLETE; /* a complete mark before the op's last entry */
    CHECK(neuronStartNetworkProxy(c0, 0, 1, &op, 1, src, 2, NULL, 0), NRT_INVALID);
    send_op(&op, src, 1);
    src[1].net_op_idx = 1; /* only op 0 exists */
    CHECK(neuronStartNetworkProxy(c0, 0, 1, &op, 1, src, 2, NULL, 0), NRT_INVALID);
    send_op(&op, src, 2); /* peer 2 >= nranks 2 */
    CHECK(neuronStartNetworkProxy(c0, 0, 1, &op, 1, src, 2, NULL, 0), NRT_INVALID);
    send_op(&op, src, 1);
    src[0].dest_rank = 5; /* entry peer >= nranks */
    CHECK(neuronStartNetworkProxy(c0, 0, 1, &op, 1, src, 2, NULL, 0), NRT_INVALID);
    send_op(&op, src, 1);
    op.send_complete_sem_addr += 2; /* misaligned host word */
    CHECK(neuronStartNetworkProxy(c0, 0, 1, &op, 1, src, 2, NULL, 0), NRT_INVALID);
    send_op(&op, src, 1);
    op.post_send_idx_addr = 0; /* missing host word */
    CHECK(neuronStartNetworkProxy(c0, 0, 1, &op, 1, src, 2, NULL, 0), NRT_INVALID);
    send_op(&op, src, 1);
    src[1].size = 3;
    op.data_type_sz = 2; /* size not a multiple of the element size */
    CHECK(neuronStartNetworkProxy(c0, 0, 1, &op, 1, src, 2, NULL, 0), NRT_INVALID);
    CHECK(neuronNetworkProxyProgress(c0, 0, 1, NULL, &done), NRT_INVALID);
    CHECK(neuronNetworkProxyProgress(c0, 0, 1, &idle, NULL), NRT_INVALID);

    /* A rejected start files nothing: the stream is idle and done. */
    idle = 1, done = 1;
    CHECK(neuronNetworkProxyProgress(c0, 0, 1, &idle, &done), NRT_SUCCESS);
    EXPECT(idle == 1 && done == 1);
    /* Progress ANDs into the caller's ints: seeded 0, they stay 0. */
    idle = 0, done = 0;
    CHECK(neuronNetworkProxyProgress(c0, 0, 1, &idle, &done), NRT_SUCCESS);
    EXPECT(idle == 0 && done == 0);

    /* ---- a valid start, progress (waiting for the device), stop, progress after stop ---- */
    send_op(&op, src, 1);
    CHECK(neuronStartNetworkProxy(c0, 2, 1, &op, 1, src, 2, NULL, 0), NRT_SUCCESS);
    idle = 1, done = 1;
    CHECK(neuronNetworkProxyProgress(c0, 2, 1, &idle, &done), NRT_SUCCESS);
    EXPECT(idle == 1 && done == 0); /* waiting for the device's -1: idle, not done */
    CHECK(neuronStopNetworkProxy(c0, 2), NRT_SUCCESS);
    idle = 1, done = 1;
    CHECK(neuronNetworkProxyProgress(c0, 2, 1, &idle, &done), NRT_SUCCESS);
    EXPECT(idle == 1 && done == 1);
    CHECK(neuronStopNetworkProxy(c0, 2), NRT_SUCCESS); /* stop twice is fine */
    /* The stepped stop (ABI 1.1): a block waiting for the device, torn down in a few steps. */
    CHECK(neuronStartNetworkProxy(c0, 2, 1, &op, 1, src, 2, NULL, 0), NRT_SUCCESS);
    CHECK(neuronNetworkProxyProgress(c0, 2, 1, &idle, &done), NRT_SUCCESS);
    done = 0;
    for (int steps = 0; !done && steps < 100; steps++)
        CHECK(neuronStopNetworkProxyStep(c0, 2, &done), NRT_SUCCESS);
    EXPECT(done == 1); /* within 100 steps */
    idle = 1, done = 1;
    CHECK(neuronNetworkProxyProgress(c0, 2, 1, &idle, &done), NRT_SUCCESS);
    EXPECT(idle == 1 && done == 1);
    /* The protocol counters (ABI 1.2): two starts accepted on c0 (the rejected ones not
       counted), the size protocol, bad pointers. */
    {
        nccom_protocol_stats_t ps;
        memset(&ps, 0, sizeof ps);
        ps.size = sizeof ps;
        CHECK(nccom_comm_protocol_stats(c0, &ps), NRT_SUCCESS);
        EXPECT(ps.size == sizeof ps && ps.starts == 2 && ps.early_send_completions == 0);
        memset(&ps, 0, sizeof ps);
        ps.size = 16; /* an older, smaller struct: size, reserved, starts */
        ps.block_switches = 77;
        CHECK(nccom_comm_protocol_stats(c0, &ps), NRT_SUCCESS);
        EXPECT(ps.size == 16 && ps.starts == 2 && ps.block_switches == 77);
        ps.size = 4;
        CHECK(nccom_comm_protocol_stats(c0, &ps), NRT_INVALID);
        CHECK(nccom_comm_protocol_stats(c0, NULL), NRT_INVALID);
    }

    /* ---- a failing comm: the receive is shorter than the message (truncation) ---- */
    {
        neuron_net_op_info_t rop;
        neuron_net_dest_addr_t dst[2];
        send_op(&op, src, 1); /* 2 x 256 B from buf[0], buf[1]; host words 0..2 */
        memset(&rop, 0, sizeof rop);
        rop.send_peer = NCCOM_NO_PEER;
        rop.recv_peer = 0;
        rop.tag = 1;
        rop.rx_entry_cnt = 2;
        rop.data_type_sz = 1;
        rop.post_recv_idx_addr = addr_of(&words[3]);
        rop.recv_handshake_sem_addr = addr_of(&words[4]);
        rop.recv_complete_sem_addr = addr_of(&words[5]);
        for (int e = 0; e < 2; e++) {
            memset(&dst[e], 0, sizeof dst[e]);
            dst[e].mark = e == 1 ? NET_OP_COMPLETE : NET_TRANSFER;
            dst[e].addr = addr_of(buf[2 + e]);
            dst[e].size = e == 1 ? 128 : sizeof buf[2 + e]; /* entry 1: 128 B for a 256 B message */
            dst[e].src_rank = NCCOM_NO_PEER;
        }
        CHECK(neuronStartNetworkProxy(c0, 3, 1, &op, 1, src, 2, NULL, 0), NRT_SUCCESS);
        CHECK(neuronStartNetworkProxy(c1, 3, 1, &rop, 1, NULL, 0, dst, 2), NRT_SUCCESS);
        for (int i = 0; i < 6; i++)
            __atomic_store_n(&words[i], 0, __ATOMIC_RELEASE);
        /* The device: ready on both sides, then both entries posted once the handshake is seen. */
        __atomic_store_n(&words[0], NCCOM_HOST_WORD_READY, __ATOMIC_RELEASE);
        __atomic_store_n(&words[3], NCCOM_HOST_WORD_READY, __ATOMIC_RELEASE);
        NRT_STATUS s1 = NRT_SUCCESS;
        for (int i = 0; i < 100000 && s1 == NRT_SUCCESS; i++) {
            if (__atomic_load_n(&words[1], __ATOMIC_ACQUIRE) == 1)
                __atomic_store_n(&words[0], 2, __ATOMIC_RELEASE);
            if (__atomic_load_n(&words[4], __ATOMIC_ACQUIRE) == 1)
                __atomic_store_n(&words[3], 2, __ATOMIC_RELEASE);
            idle = 1, done = 1;
            (void)neuronNetworkProxyProgress(c0, 3, 1, &idle, &done);
            idle = 1, done = 1;
            s1 = neuronNetworkProxyProgress(c1, 3, 1, &idle, &done);
        }
        CHECK(s1, NRT_NETWORK_PROXY_FAILURE);
        /* Sticky: every later progress on the comm, any stream, fails at once; start is refused. */
        CHECK(neuronNetworkProxyProgress(c1, 3, 1, &idle, &done), NRT_NETWORK_PROXY_FAILURE);
        CHECK(neuronNetworkProxyProgress(c1, 0, 1, &idle, &done), NRT_NETWORK_PROXY_FAILURE);
        EXPECT(neuronStartNetworkProxy(c1, 0, 1, &rop, 1, NULL, 0, dst, 2) != NRT_SUCCESS);
        /* Stop (and later destroy) always work on a failed comm. */
        CHECK(neuronStopNetworkProxy(c1, 3), NRT_SUCCESS);
        CHECK(neuronStopNetworkProxy(c0, 3), NRT_SUCCESS);
    }

    /* ---- checked addresses ---- */
    cfg = config(0, 3, g3);
    cfg.flags = NCCOM_COMM_CHECK_ADDRESSES;
    CHECK(nccom_comm_create(&cfg, &cx), NRT_SUCCESS);
    send_op(&op, src, 1);
    CHECK(neuronStartNetworkProxy(cx, 0, 1, &op, 1, src, 2, NULL, 0), NRT_INVALID); /* unregistered */
    CHECK(nccom_comm_register_memory(cx, NULL, 64), NRT_INVALID);
    CHECK(nccom_comm_register_memory(cx, buf, 0), NRT_INVALID);
    CHECK(nccom_comm_register_memory(cx, buf, sizeof buf), NRT_SUCCESS);
    CHECK(neuronStartNetworkProxy(cx, 0, 1, &op, 1, src, 2, NULL, 0), NRT_INVALID); /* words not yet */
    CHECK(nccom_comm_register_memory(cx, (const void *)words, sizeof words), NRT_SUCCESS);
    CHECK(neuronStartNetworkProxy(cx, 0, 1, &op, 1, src, 2, NULL, 0), NRT_SUCCESS);
    CHECK(neuronStopNetworkProxy(cx, 0), NRT_SUCCESS);
    CHECK(nccom_comm_destroy(cx), NRT_SUCCESS);

    /* ---- invalidate a range, abort ---- */
    CHECK(nccom_comm_invalidate_range(c0, buf, sizeof buf), NRT_SUCCESS);
    CHECK(nccom_comm_invalidate_range(c0, NULL, 64), NRT_INVALID);
    CHECK(nccom_comm_invalidate_range(c0, buf, 0), NRT_INVALID);
    CHECK(nccom_comm_invalidate_range(c0, (const void *)(UINTPTR_MAX - 8), 64), NRT_INVALID);
    CHECK(nccom_comm_invalidate_range(NULL, buf, 64), NRT_INVALID_HANDLE);
    CHECK(nccom_comm_invalidate_range((nccom_comm_t *)g, buf, 64), NRT_INVALID_HANDLE);
    CHECK(nccom_comm_abort(NULL), NRT_INVALID_HANDLE);
    CHECK(nccom_comm_abort((nccom_comm_t *)g), NRT_INVALID_HANDLE);
    CHECK(nccom_comm_abort((nccom_comm_t *)words), NRT_INVALID_HANDLE);

    /* ---- after destroy, double destroy ---- */
    CHECK(nccom_comm_destroy(c0), NRT_SUCCESS);
    CHECK(neuronStartNetworkProxy(c0, 0, 1, &op, 1, src, 2, NULL, 0), NRT_INVALID_HANDLE);
    CHECK(neuronNetworkProxyProgress(c0, 0, 1, &idle, &done), NRT_INVALID_HANDLE);
    CHECK(neuronStopNetworkProxy(c0, 0), NRT_INVALID_HANDLE);
    CHECK(nccom_comm_register_memory(c0, buf, sizeof buf), NRT_INVALID_HANDLE);
    CHECK(nccom_comm_invalidate_range(c0, buf, sizeof buf), NRT_INVALID_HANDLE);
    CHECK(nccom_comm_abort(c0), NRT_INVALID_HANDLE);
    CHECK(nccom_comm_destroy(c0), NRT_INVALID_HANDLE);
    CHECK(nccom_comm_destroy(cx), NRT_INVALID_HANDLE);
    CHECK(nccom_comm_destroy(c1), NRT_SUCCESS);
    CHECK(nccom_comm_destroy(c1), NRT_INVALID_HANDLE);

    CHECK(nccom_mem_group_destroy(g), NRT_SUCCESS);
    CHECK(nccom_mem_group_destroy(g), NRT_INVALID_HANDLE);
    CHECK(nccom_mem_group_destroy(NULL), NRT_INVALID_HANDLE);
    cfg = config(1, 3, g3);
    CHECK(nccom_mem_group_destroy(g3), NRT_SUCCESS);
    CHECK(nccom_comm_create(&cfg, &cx), NRT_INVALID_HANDLE); /* group destroyed */
    CHECK(nccom_register_device_callbacks(NULL), NRT_SUCCESS);

    if (failures) {
        fprintf(stderr, "bad_input: %d of %d checks failed\n", failures, checks);
        return 1;
    }
    printf("bad_input: ok: %d checks\n", checks);
    return 0;
}
