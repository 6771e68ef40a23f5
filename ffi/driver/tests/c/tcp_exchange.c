/*
 * One rank of a 2-process exchange through libnrt_proxy.so over libfabric tcp (loopback): the
 * comm is created through the progress half's libfabric transport (its bootstrap at ROOT), and
 * the driver bootstraps its own barrier channel between the two processes (BARRIER_ROOT). Each
 * process has a device thread that plays its rank (trigger word, host indices, semaphores,
 * barrier trigger, barrier-done semaphore). Each execution: a network task (send N_ENTRIES x
 * ENTRY_SIZE to the peer, receive as much) and a barrier task; the second execution is
 * resubmitted. Every byte and record field is checked.
 *
 * Usage: tcp_exchange /path/to/libnccom_proxy.so RANK ROOT BARRIER_ROOT [thread|caller]
 *   thread (default): the queue's worker drives the comm; caller: no worker, this thread drives
 *   it inside nrt_proxy_drive_until.
 * With NEURON_RT_PROXY_IDLE=block the idle driver blocks on the comm's CQ descriptor: the
 * program then dumps the comm's proxy queue before the leave (its header line says
 * `idle=wired idle_sleeps=N`, checked by the test), and after the leave calls the progress
 * half's idle entry points itself (found with dlsym in the loaded library): the comm has a
 * descriptor, arms, a kick ends a sleep at once, and bad arguments get their statuses.
 * (the progress half must be built with --features libfabric). With TCP_EXCHANGE_OWN_SHM=1
 * the comm runs over the engine's own shared memory instead (`provider`
 * NRT_PROXY_PROVIDER_OWN_SHM, libnrt_proxy ABI 1.9), the rest unchanged (not with
 * NEURON_RT_PROXY_IDLE=block, whose checks expect tcp's CQ descriptor). With
 * TCP_EXCHANGE_ENTRY_BYTES=B each of the 4 entries is B bytes (default 32 KiB). With
 * TCP_EXCHANGE_KILL_PEER=1 rank 1 kills itself (SIGKILL) in the second execution once its tasks
 * are submitted and its device has posted both ops (its sends and receives in flight), and
 * rank 0 must see its network task, or when its bytes had crossed its barrier task, end with
 * a failure status (not hang, not crash), stop its device, leave, destroy and finish: it then
 * prints `tcp_exchange: peer lost: ...`. Exit status
 * 0 = ok.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrt_proxy.h"

#define N_ENTRIES 4u
/* Bytes per FIFO entry: 32 KiB, or TCP_EXCHANGE_ENTRY_BYTES (at most 16 MiB). */
#define DEFAULT_ENTRY_SIZE (32u * 1024u)
#define MAX_ENTRY_SIZE (16u * 1024u * 1024u)
static uint32_t entry_size = DEFAULT_ENTRY_SIZE;
#define ENTRY_SIZE entry_size
#define TOTAL (N_ENTRIES * entry_size)
#define EXECUTIONS 2u
#define STREAM 1u
#define BB 2u
#define COMM_ID 31u
#define MAX_ITERS 50000000ul
#define WAIT_MS 60000u

static uint32_t rank;

#define FAIL(...)                                                                                 \
    do {                                                                                          \
        fprintf(stderr, "tcp_exchange rank %u: FAIL line %d: ", rank, __LINE__);                  \
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

enum { W_SEND_IDX, W_SEND_HS, W_SEND_CPL, W_RECV_IDX, W_RECV_HS, W_RECV_CPL, W_NET_TRIGGER,
       W_BAR_TRIGGER, W_BAR_DONE, W_COUNT };
static nccom_host_word_t words[W_COUNT] __attribute__((aligned(64)));
static uint8_t *src_buf, *dst_buf;
static uint32_t go_exec, dev_done;
/* TCP_EXCHANGE_KILL_PEER=1: rank 1 dies in execution KILL_EXEC; `abandon` stops rank 0's
 * device, whose words will not move again; `dev_posted` counts the device's posted ops. */
#define KILL_EXEC 1u
static int kill_peer;
static uint32_t abandon, dev_posted;

static uint32_t load(nccom_host_word_t *w) { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }
static void store(nccom_host_word_t *w, uint32_t v) { __atomic_store_n(w, v, __ATOMIC_RELEASE); }
static void inc_semaphore(nccom_host_word_t *w, uint32_t v) {
    __atomic_fetch_add(w, v, __ATOMIC_RELEASE);
}
static uint8_t pattern(uint32_t r, uint32_t exec, uint32_t i) {
    return (uint8_t)((r * 29u + exec * 11u + i) % 253u);
}

/* The device: per execution, trigger, both ops (post everything after each handshake),
 * barrier trigger, barrier-done. */
static void *device_main(void *arg) {
    (void)arg;
    for (uint32_t exec = 0; exec < EXECUTIONS; exec++) {
        unsigned long it = 0;
        while (__atomic_load_n(&go_exec, __ATOMIC_ACQUIRE) <= exec)
            if (__atomic_load_n(&abandon, __ATOMIC_ACQUIRE))
                return NULL;
            else if (++it > MAX_ITERS)
                FAIL("device: no go");
            else
                sched_yield();
        for (uint32_t i = 0; i < TOTAL; i++)
            src_buf[i] = pattern(rank, exec, i);
        store(&words[W_SEND_IDX], NCCOM_HOST_WORD_READY);
        store(&words[W_RECV_IDX], NCCOM_HOST_WORD_READY);
        store(&words[W_NET_TRIGGER], 1);
        bool posted[2] = {false, false};
        for (it = 0;; it++) {
            if (__atomic_load_n(&abandon, __ATOMIC_ACQUIRE))
                return NULL;
            if (it > MAX_ITERS)
                FAIL("device: execution %u did not finish", exec);
            for (int k = 0; k < 2; k++) {
                int idx = k ? W_RECV_IDX : W_SEND_IDX, hs = idx + 1;
                if (!posted[k] && load(&words[hs]) == exec + 1) {
                    store(&words[idx], N_ENTRIES);
                    posted[k] = true;
                    __atomic_fetch_add(&dev_posted, 1, __ATOMIC_RELEASE);
                }
            }
            if (kill_peer && rank == 1 && exec == KILL_EXEC && posted[0] && posted[1]) {
                /* The dying rank's device goes no further (no barrier trigger: the peer's
                 * barrier of this execution cannot pass), its main thread kills the process. */
                for (unsigned long k = 0; k < MAX_ITERS; k++)
                    sched_yield();
                FAIL("device: execution %u: the process was not killed", exec);
            }
            if (load(&words[W_SEND_CPL]) == (exec + 1) * N_ENTRIES &&
                load(&words[W_RECV_CPL]) == (exec + 1) * N_ENTRIES)
                break;
            sched_yield();
        }
        store(&words[W_BAR_TRIGGER], 1);
        for (it = 0; load(&words[W_BAR_DONE]) != exec + 1; it++)
            if (__atomic_load_n(&abandon, __ATOMIC_ACQUIRE))
                return NULL;
            else if (it > MAX_ITERS)
                FAIL("device: no barrier-done in execution %u", exec);
            else
                sched_yield();
        __atomic_store_n(&dev_done, exec + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static void check(const nrt_proxy_task_record_t *r, uint32_t id, uint32_t streams) {
    if (r->task_id != id || r->comm_id != COMM_ID || r->streams != streams ||
        r->progress_status != NRT_SUCCESS || r->run_state != NRT_PROXY_RUN_STATE_DONE)
        FAIL("record {task %u comm %u streams %#x status %s state %u}, expected task %u",
             r->task_id, r->comm_id, r->streams, nrt_get_status_as_str(r->progress_status),
             r->run_state, id);
}

/* The progress half's idle wait (ABI 1.4), called directly on the comm (left: nothing drives
 * it now). */
static void check_idle_entries(const char *lib, nrt_proxy_comm_t *comm) {
    nccom_comm_t *nc = NULL;
    EXPECT_OK(nrt_proxy_comm_nccom(comm, &nc));
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!h)
        FAIL("the progress half is not loaded: %s", dlerror());
    nccom_comm_idle_available_fn avail = (nccom_comm_idle_available_fn)dlsym(h, "nccom_comm_idle_available");
    nccom_comm_idle_arm_fn arm = (nccom_comm_idle_arm_fn)dlsym(h, "nccom_comm_idle_arm");
    nccom_comm_idle_sleep_fn sleep_fn = (nccom_comm_idle_sleep_fn)dlsym(h, "nccom_comm_idle_sleep");
    nccom_comm_idle_kick_fn kick = (nccom_comm_idle_kick_fn)dlsym(h, "nccom_comm_idle_kick");
    if (!avail && !arm && !sleep_fn && !kick) {
        /* A progress half older than ABI 1.4: the driver must have run without its idle wait
         * (the test checks the dump said `idle=none`). */
        dlclose(h);
        printf("tcp_exchange: idle wait: no entry points (a progress half older than 1.4)\n");
        return;
    }
    if (!avail || !arm || !sleep_fn || !kick)
        FAIL("the progress half lacks an idle entry point");
    uint32_t available = 7, armed = 7, woken = 7;
    EXPECT_OK(avail(nc, &available));
    if (available != 1)
        FAIL("nccom_comm_idle_available: %u, expected 1 (tcp has a CQ descriptor)", available);
    EXPECT_OK(arm(nc, &armed));
    if (armed != NCCOM_IDLE_ARMED && armed != NCCOM_IDLE_READY)
        FAIL("nccom_comm_idle_arm: %u, expected armed or ready", armed);
    EXPECT_OK(kick(nc));
    if (armed == NCCOM_IDLE_ARMED) {
        EXPECT_OK(sleep_fn(nc, 10000000000ull, &woken));
        if (woken != 1)
            FAIL("nccom_comm_idle_sleep after a kick: woken %u, expected 1", woken);
    }
    if (avail(NULL, &available) != NRT_INVALID_HANDLE || avail(nc, NULL) != NRT_INVALID ||
        arm(NULL, &armed) != NRT_INVALID_HANDLE || arm(nc, NULL) != NRT_INVALID ||
        sleep_fn(nc, 0, NULL) != NRT_INVALID || kick(NULL) != NRT_INVALID_HANDLE)
        FAIL("an idle entry point accepted a NULL");
    dlclose(h);
    printf("tcp_exchange: idle wait: available %u, armed %u, woken after a kick %u\n",
           available, armed, woken);
}

/* Rank 0 of TCP_EXCHANGE_KILL_PEER=1, in the execution its peer dies in: a task of the
 * execution must end with a failure status within WAIT_MS (the comm's dead-peer check sees the
 * death); then the device is stopped and everything torn down, each call answering a status
 * (the leave may report what the failed tasks left), and the program ends without a crash. */
static void peer_lost(nrt_proxy_comm_t *comm, nrt_proxy_t *inst, pthread_t dev, int caller,
                      uint32_t exec) {
    nrt_proxy_task_record_t rec;
    memset(&rec, 0, sizeof rec);
    /* The network task may still have completed (its bytes crossed before the peer died);
     * then the barrier task, which needs the peer's (its device never triggers it), must
     * fail. */
    for (uint32_t k = 0; k < 2; k++) {
        NRT_STATUS s = caller ? nrt_proxy_drive_until(comm, (k ? 20 : 10) + exec, WAIT_MS, &rec)
                              : nrt_proxy_wait(comm, WAIT_MS, &rec);
        if (s != NRT_SUCCESS)
            FAIL("execution %u after the peer died: the wait answered %s", exec,
                 nrt_get_status_as_str(s));
        if (rec.progress_status != NRT_SUCCESS)
            break;
        if (k == 1)
            FAIL("execution %u: both tasks ended NRT_SUCCESS though the peer died", exec);
    }
    __atomic_store_n(&abandon, 1, __ATOMIC_RELEASE);
    if (pthread_join(dev, NULL) != 0)
        FAIL("pthread_join");
    NRT_STATUS health = NRT_SUCCESS;
    EXPECT_OK(nrt_proxy_comm_get_async_error(comm, &health));
    NRT_STATUS left = nrt_proxy_comm_leave(comm, WAIT_MS);
    EXPECT_OK(nrt_proxy_comm_destroy(comm));
    EXPECT_OK(nrt_proxy_fini(inst));
    printf("tcp_exchange: peer lost: rank %u, %s mode, task %u ended %s, async error %s, "
           "leave %s\n",
           rank, caller ? "caller" : "thread", rec.task_id,
           nrt_get_status_as_str(rec.progress_status), nrt_get_status_as_str(health),
           nrt_get_status_as_str(left));
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: %s LIB RANK ROOT BARRIER_ROOT [thread|caller]\n", argv[0]);
        return 2;
    }
    int caller = argc == 6 && strcmp(argv[5], "caller") == 0;
    rank = (uint32_t)atoi(argv[2]);
    uint32_t peer = 1 - rank;
    nrt_proxy_config_t cfg;
    EXPECT_OK(nrt_proxy_config_from_env(&cfg));
    cfg.progress_lib = argv[1];
    cfg.drive_mode = caller ? NRT_PROXY_DRIVE_CALLER : NRT_PROXY_DRIVE_THREAD;
    nrt_proxy_t *inst = NULL;
    EXPECT_OK(nrt_proxy_init(&cfg, &inst));
    static const nccom_device_callbacks_t cbs = {.nec_inc_semaphore = inc_semaphore};
    nrt_proxy_comm_config_t cc;
    EXPECT_OK(nrt_proxy_comm_config_init(&cc));
    cc.rank = rank;
    cc.nranks = 2;
    cc.comm_id = COMM_ID;
    /* TCP_EXCHANGE_OWN_SHM=1: the engine's own shared memory instead of libfabric tcp. */
    const char *own = getenv("TCP_EXCHANGE_OWN_SHM");
    const char *kill_env = getenv("TCP_EXCHANGE_KILL_PEER");
    kill_peer = kill_env && strcmp(kill_env, "1") == 0;
    const char *entry_env = getenv("TCP_EXCHANGE_ENTRY_BYTES");
    if (entry_env) {
        char *end = NULL;
        unsigned long v = strtoul(entry_env, &end, 10);
        if (!end || *end || v == 0 || v > MAX_ENTRY_SIZE)
            FAIL("TCP_EXCHANGE_ENTRY_BYTES=%s: not 1..%u", entry_env, MAX_ENTRY_SIZE);
        entry_size = (uint32_t)v;
    }
    cc.provider = own && strcmp(own, "1") == 0 ? NRT_PROXY_PROVIDER_OWN_SHM : "tcp;ofi_rxm";
    cc.root_addr = argv[3];
    cc.barrier_root_addr = argv[4];
    cc.bootstrap_timeout_ms = 30000;
    cc.callbacks = &cbs;
    nrt_proxy_comm_t *comm = NULL;
    EXPECT_OK(nrt_proxy_comm_create(inst, &cc, &comm)); /* collective: both processes */
    EXPECT_OK(nrt_proxy_comm_join(comm));
    src_buf = aligned_alloc(64, TOTAL);
    dst_buf = aligned_alloc(64, TOTAL);
    if (!src_buf || !dst_buf)
        FAIL("out of memory");
    memset(src_buf, 0, TOTAL);

    neuron_net_op_info_t ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].send_peer = (int32_t)peer;
    ops[0].recv_peer = NCCOM_NO_PEER;
    ops[0].tag = 4;
    ops[0].tx_entry_cnt = N_ENTRIES;
    ops[0].data_type_sz = 1;
    ops[0].post_send_idx_addr = (uint64_t)(uintptr_t)&words[W_SEND_IDX];
    ops[0].send_handshake_sem_addr = (uint64_t)(uintptr_t)&words[W_SEND_HS];
    ops[0].send_complete_sem_addr = (uint64_t)(uintptr_t)&words[W_SEND_CPL];
    ops[1].send_peer = NCCOM_NO_PEER;
    ops[1].recv_peer = (int32_t)peer;
    ops[1].tag = 4;
    ops[1].rx_entry_cnt = N_ENTRIES;
    ops[1].data_type_sz = 1;
    ops[1].post_recv_idx_addr = (uint64_t)(uintptr_t)&words[W_RECV_IDX];
    ops[1].recv_handshake_sem_addr = (uint64_t)(uintptr_t)&words[W_RECV_HS];
    ops[1].recv_complete_sem_addr = (uint64_t)(uintptr_t)&words[W_RECV_CPL];
    neuron_net_src_addr_t sf[N_ENTRIES];
    neuron_net_dest_addr_t df[N_ENTRIES];
    for (uint32_t e = 0; e < N_ENTRIES; e++) {
        bool last = e + 1 == N_ENTRIES;
        sf[e] = (neuron_net_src_addr_t){.net_op_idx = 0,
                                        .mark = last ? NET_OP_COMPLETE : NET_TRANSFER,
                                        .addr = (uint64_t)(uintptr_t)(src_buf + e * ENTRY_SIZE),
                                        .size = ENTRY_SIZE,
                                        .dest_rank = NCCOM_NO_PEER};
        df[e] = (neuron_net_dest_addr_t){.net_op_idx = 1,
                                         .mark = last ? EXEC_COMPLETE : NET_TRANSFER,
                                         .addr = (uint64_t)(uintptr_t)(dst_buf + e * ENTRY_SIZE),
                                         .size = ENTRY_SIZE,
                                         .src_rank = NCCOM_NO_PEER};
    }
    nrt_proxy_block_t block = {STREAM, BB, ops, 2, sf, N_ENTRIES, df, N_ENTRIES};
    nccom_host_word_t *trig[1] = {&words[W_NET_TRIGGER]};
    nrt_proxy_network_task_t t;
    memset(&t, 0, sizeof t);
    t.struct_size = sizeof t;
    t.task_id = 10;
    t.blocks = &block;
    t.n_blocks = 1;
    t.trigger_words = trig;
    t.n_trigger_words = 1;
    t.flags = NRT_PROXY_TASK_WAIT_FOR_DEVICE | NRT_PROXY_TASK_KEEP;
    t.timeout_ms = WAIT_MS;
    nccom_host_word_t *btrig[1] = {&words[W_BAR_TRIGGER]};
    nccom_host_word_t *bdone[1] = {&words[W_BAR_DONE]};
    nrt_proxy_barrier_task_t b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    b.task_id = 20;
    b.trigger_words = btrig;
    b.n_trigger_words = 1;
    b.done_semaphores = bdone;
    b.n_done_semaphores = 1;
    b.flags = NRT_PROXY_TASK_KEEP;
    b.timeout_ms = WAIT_MS;

    pthread_t dev;
    if (pthread_create(&dev, NULL, device_main, NULL) != 0)
        FAIL("pthread_create");
    for (uint32_t exec = 0; exec < EXECUTIONS; exec++) {
        store(&words[W_NET_TRIGGER], 0xFFFFFFFFu);
        store(&words[W_BAR_TRIGGER], 0xFFFFFFFFu);
        memset(dst_buf, 0xEE, TOTAL);
        if (exec == 0) {
            EXPECT_OK(nrt_proxy_submit_network(comm, &t));
            EXPECT_OK(nrt_proxy_submit_barrier(comm, &b));
        } else {
            EXPECT_OK(nrt_proxy_resubmit(comm, 10 + exec - 1, 10 + exec));
            EXPECT_OK(nrt_proxy_resubmit(comm, 20 + exec - 1, 20 + exec));
        }
        __atomic_store_n(&go_exec, exec + 1, __ATOMIC_RELEASE);
        if (kill_peer && exec == KILL_EXEC && rank == 1) {
            /* Both ops posted by the device (sends and receives in flight), then die. In
             * caller mode this thread drives the queue meanwhile, 1 ms at a time. */
            for (unsigned long it = 0;
                 __atomic_load_n(&dev_posted, __ATOMIC_ACQUIRE) < 2 * KILL_EXEC + 2; it++) {
                if (it > MAX_ITERS)
                    FAIL("execution %u: the device did not post", exec);
                if (!caller) {
                    sched_yield();
                    continue;
                }
                nrt_proxy_task_record_t r;
                NRT_STATUS s = nrt_proxy_drive_until(comm, 10 + exec, 1, &r);
                if (s != NRT_SUCCESS && s != NRT_TIMEOUT)
                    FAIL("execution %u: driving before the kill: %s", exec,
                         nrt_get_status_as_str(s));
            }
            raise(SIGKILL);
        }
        nrt_proxy_task_record_t rec;
        if (kill_peer && exec == KILL_EXEC) {
            peer_lost(comm, inst, dev, caller, exec);
            return 0;
        }
        if (caller)
            EXPECT_OK(nrt_proxy_drive_until(comm, 10 + exec, WAIT_MS, &rec));
        else
            EXPECT_OK(nrt_proxy_wait(comm, WAIT_MS, &rec));
        check(&rec, 10 + exec, 1u << STREAM);
        if (caller)
            EXPECT_OK(nrt_proxy_drive_until(comm, 20 + exec, WAIT_MS, &rec));
        else
            EXPECT_OK(nrt_proxy_wait(comm, WAIT_MS, &rec));
        check(&rec, 20 + exec, 0);
        for (unsigned long it = 0; __atomic_load_n(&dev_done, __ATOMIC_ACQUIRE) <= exec; it++)
            if (it > MAX_ITERS)
                FAIL("execution %u: the device did not finish", exec);
            else
                sched_yield();
        for (uint32_t i = 0; i < TOTAL; i++)
            if (dst_buf[i] != pattern(peer, exec, i))
                FAIL("execution %u byte %u: %#x, expected %#x", exec, i, dst_buf[i],
                     pattern(peer, exec, i));
    }
    if (pthread_join(dev, NULL) != 0)
        FAIL("pthread_join");
    NRT_STATUS health = NRT_FAILURE;
    EXPECT_OK(nrt_proxy_comm_get_async_error(comm, &health));
    if (health != NRT_SUCCESS)
        FAIL("async error %s", nrt_get_status_as_str(health));
    const char *idle_env = getenv("NEURON_RT_PROXY_IDLE");
    int idle_block = idle_env && strcmp(idle_env, "block") == 0;
    if (idle_block)
        EXPECT_OK(nrt_proxy_comm_dump(comm, WAIT_MS));
    EXPECT_OK(nrt_proxy_comm_leave(comm, WAIT_MS));
    if (idle_block)
        check_idle_entries(argv[1], comm);
    EXPECT_OK(nrt_proxy_comm_destroy(comm));
    EXPECT_OK(nrt_proxy_fini(inst));
    free(src_buf);
    free(dst_buf);
    printf("tcp_exchange: ok: rank %u, %s mode, %u executions x %u bytes each way over %s\n",
           rank, caller ? "caller" : "thread", EXECUTIONS, TOTAL,
           own && strcmp(own, "1") == 0 ? "own shm" : "libfabric tcp");
    return 0;
}
