/*
 * nccom_comm_abort from another thread, linked against libnccom_proxy.so (-lnccom_proxy,
 * -pthread): the main thread drives a comm whose only op never finishes (its device never arms
 * the host index) with neuronNetworkProxyProgress in a loop; a second thread aborts the comm
 * once the loop runs (while the driver is inside a progress call or between two). The loop must
 * end with NRT_CLOSED (idle and done written 0); afterwards start answers NRT_CLOSED, stop and
 * nccom_comm_invalidate_range still work, destroy succeeds once, and the handle is dead. Then a
 * thread aborts a second comm over and over while the main thread destroys it: each abort
 * answers NRT_SUCCESS or NRT_INVALID_HANDLE, never anything else, and nothing is freed twice
 * (valgrind runs this program too).
 *
 * Exit status 0 = every check passed.
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccom_proxy.h"

#define MAX_ITERS 20000000ul
#define ABORT_AFTER 100ul
#define RACE_ROUNDS 20
#define RACE_ABORTS 200

#define FAIL(...)                                                                                 \
    do {                                                                                          \
        fprintf(stderr, "abort_thread: FAIL line %d: ", __LINE__);                                \
        fprintf(stderr, __VA_ARGS__);                                                             \
        fprintf(stderr, "\n");                                                                    \
        exit(1);                                                                                  \
    } while (0)

#define EXPECT_STATUS(call, want)                                                                 \
    do {                                                                                          \
        NRT_STATUS s_ = (call);                                                                   \
        if (s_ != (want))                                                                         \
            FAIL("%s returned %s (%u), expected %s", #call, nrt_get_status_as_str(s_), s_,        \
                 nrt_get_status_as_str(want));                                                    \
    } while (0)

static void inc(nccom_host_word_t *addr, uint32_t val) {
    __atomic_fetch_add(addr, val, __ATOMIC_RELEASE);
}

static nccom_host_word_t words[3] __attribute__((aligned(64)));
static uint8_t buf[256] __attribute__((aligned(64)));
static unsigned long progress_calls; /* written by the driver, read by the aborter (atomics) */

static uint64_t addr_of(const volatile void *p) { return (uint64_t)(uintptr_t)p; }

static nccom_comm_config_t config(uint32_t rank, uint32_t nranks, nccom_mem_group_t *g,
                                  const nccom_device_callbacks_t *cbs) {
    nccom_comm_config_t c;
    memset(&c, 0, sizeof c);
    c.rank = rank;
    c.nranks = nranks;
    c.comm_id = 12;
    c.transport.kind = NCCOM_TRANSPORT_MEM;
    c.transport.mem_group = g;
    c.callbacks = cbs;
    return c;
}

static NRT_STATUS start_stuck_send(nccom_comm_t *c) {
    neuron_net_op_info_t op;
    neuron_net_src_addr_t src;
    memset(&op, 0, sizeof op);
    memset(&src, 0, sizeof src);
    op.send_peer = 1;
    op.recv_peer = NCCOM_NO_PEER;
    op.tag = 1;
    op.tx_entry_cnt = 1;
    op.data_type_sz = 1;
    op.post_send_idx_addr = addr_of(&words[0]);
    op.send_handshake_sem_addr = addr_of(&words[1]);
    op.send_complete_sem_addr = addr_of(&words[2]);
    src.mark = EXEC_COMPLETE;
    src.addr = addr_of(buf);
    src.size = sizeof buf;
    src.dest_rank = NCCOM_NO_PEER;
    return neuronStartNetworkProxy(c, 0, 1, &op, 1, &src, 1, NULL, 0);
}

static void *aborter(void *arg) {
    nccom_comm_t *c = arg;
    for (unsigned long i = 0; __atomic_load_n(&progress_calls, __ATOMIC_ACQUIRE) < ABORT_AFTER;
         i++) {
        if (i > MAX_ITERS)
            FAIL("the driver never reached %lu progress calls", ABORT_AFTER);
        sched_yield();
    }
    EXPECT_STATUS(nccom_comm_abort(c), NRT_SUCCESS);
    EXPECT_STATUS(nccom_comm_abort(c), NRT_SUCCESS); /* a second abort changes nothing */
    return NULL;
}

static void *abort_spammer(void *arg) {
    nccom_comm_t *c = arg;
    for (int i = 0; i < RACE_ABORTS; i++) {
        NRT_STATUS s = nccom_comm_abort(c);
        if (s != NRT_SUCCESS && s != NRT_INVALID_HANDLE)
            FAIL("abort racing destroy returned %s (%u)", nrt_get_status_as_str(s), s);
    }
    return NULL;
}

int main(void) {
    const nccom_device_callbacks_t cbs = {.nec_inc_semaphore = inc};
    nccom_mem_group_t *g = NULL;
    EXPECT_STATUS(nccom_mem_group_create(2, &g), NRT_SUCCESS);
    nccom_comm_config_t cfg = config(0, 2, g, &cbs);
    nccom_comm_t *c = NULL;
    EXPECT_STATUS(nccom_comm_create(&cfg, &c), NRT_SUCCESS);
    EXPECT_STATUS(start_stuck_send(c), NRT_SUCCESS);

    /* ---- abort from another thread ends the driving loop ---- */
    pthread_t t;
    if (pthread_create(&t, NULL, aborter, c) != 0)
        FAIL("pthread_create");
    NRT_STATUS last = NRT_SUCCESS;
    unsigned long n = 0;
    for (; n < MAX_ITERS; n++) {
        __atomic_store_n(&progress_calls, n, __ATOMIC_RELEASE);
        int idle = 1, done = 1;
        last = neuronNetworkProxyProgress(c, 0, 1, &idle, &done);
        if (last != NRT_SUCCESS) {
            if (idle != 0 || done != 0)
                FAIL("failed progress wrote idle=%d done=%d, expected 0 and 0", idle, done);
            break;
        }
        if (done)
            FAIL("the stuck op reported done");
    }
    if (pthread_join(t, NULL) != 0)
        FAIL("pthread_join");
    if (last != NRT_CLOSED)
        FAIL("the driving loop ended with %s after %lu calls, expected NRT_CLOSED",
             nrt_get_status_as_str(last), n);
    if (n < ABORT_AFTER)
        FAIL("the loop ended after %lu calls, before the abort", n);

    /* ---- after the abort ---- */
    int idle = 1, done = 1;
    EXPECT_STATUS(neuronNetworkProxyProgress(c, 0, 1, &idle, &done), NRT_CLOSED);
    EXPECT_STATUS(start_stuck_send(c), NRT_CLOSED);
    EXPECT_STATUS(neuronStopNetworkProxy(c, 0), NRT_SUCCESS);
    EXPECT_STATUS(nccom_comm_invalidate_range(c, buf, sizeof buf), NRT_SUCCESS);
    EXPECT_STATUS(nccom_comm_destroy(c), NRT_SUCCESS);
    EXPECT_STATUS(nccom_comm_destroy(c), NRT_INVALID_HANDLE);
    EXPECT_STATUS(nccom_comm_abort(c), NRT_INVALID_HANDLE);

    /* ---- aborts racing a destroy ---- */
    for (int r = 0; r < RACE_ROUNDS; r++) {
        cfg = config(1, 2, g, &cbs); /* rank 0's endpoint was taken by the first comm */
        if (r > 0) {
            /* Each round needs a free rank: a fresh group. */
            EXPECT_STATUS(nccom_mem_group_destroy(g), NRT_SUCCESS);
            EXPECT_STATUS(nccom_mem_group_create(2, &g), NRT_SUCCESS);
            cfg = config(1, 2, g, &cbs);
        }
        nccom_comm_t *d = NULL;
        EXPECT_STATUS(nccom_comm_create(&cfg, &d), NRT_SUCCESS);
        if (pthread_create(&t, NULL, abort_spammer, d) != 0)
            FAIL("pthread_create");
        sched_yield();
        EXPECT_STATUS(nccom_comm_destroy(d), NRT_SUCCESS); /* an abort never holds the comm */
        if (pthread_join(t, NULL) != 0)
            FAIL("pthread_join");
        EXPECT_STATUS(nccom_comm_abort(d), NRT_INVALID_HANDLE);
    }
    EXPECT_STATUS(nccom_mem_group_destroy(g), NRT_SUCCESS);
    printf("abort_thread: ok: progress ended NRT_CLOSED after %lu calls; %d abort/destroy races\n",
           n, RACE_ROUNDS);
    return 0;
}
