/*
 * allreduce.c: a CPU-only runtime's all-reduce through libnrt_proxy.so, with no device code of
 * its own: the planner (nrt_proxy_plan_*) writes each rank's FIFOs, and the library's host device
 * (nrt_proxy_host_device_*) plays each rank's device program on host memory.
 *
 * RANKS ranks of one process sum COUNT int32 each, EXECUTIONS times, every output word checked.
 *   caller: one proxy queue for all ranks, no thread of the library: this thread ticks the
 *           queue (nrt_proxy_tick) and polls every rank's host device until each task's record
 *           arrives;
 *   thread: a worker thread per rank drives its queue and a library thread plays each device
 *           (nrt_proxy_host_device_start / _wait); this thread only waits.
 *
 * bells (thread mode, ABI 1.5): each host device is attached to its comm
 *          (nrt_proxy_host_device_attach: its host writes ring the comm's worker, the worker's
 *          progress rings the device's thread) and the workers nap instead of yielding
 *          (worker_nap_us = NRT_PROXY_BELLED_NAP_US, or NEURON_RT_PROXY_WORKER_NAP_US).
 *
 * Build: cc -std=c11 allreduce.c $(pkg-config --cflags --libs nrt_proxy) -pthread -o allreduce
 *    or: the CMake project beside this file (find_package(nrt_proxy)).
 * Run:   ./allreduce [caller|thread|bells] [ranks] [count] [executions] [gap_us]
 *        (default: caller 2 65536 3 0; 2..8 ranks; gap_us: the tasks are submitted and wait
 *        that long for their devices, which start after it). The last line gives µs per
 *        execution, the process's CPU time per execution (getrusage: user + system) and its
 *        context switches per execution (voluntary + involuntary).
 * Exit status 0 = every word checked.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "nrt_proxy.h"

#define MAX_RANKS 8u
#define MAX_PARTS 16u
#define COMM_ID 7u
#define WAIT_MS 60000u

#define CHECK(call)                                                                               \
    do {                                                                                          \
        NRT_STATUS s_ = (call);                                                                   \
        if (s_ != NRT_SUCCESS) {                                                                  \
            fprintf(stderr, "allreduce: line %d: %s: %s\n", __LINE__, #call,                     \
                    nrt_get_status_as_str(s_));                                                   \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

struct rank {
    nrt_proxy_plan_t *plan;
    nrt_proxy_host_device_t *dev;
    nrt_proxy_comm_t *comm;
    int32_t *input, *output;
    void *scratch;
    nccom_host_word_t *words;
    nccom_host_word_t trigger;
    nrt_proxy_block_t blocks[MAX_PARTS];
    uint32_t n_blocks;
    uint32_t schedule[MAX_PARTS];
    size_t n_schedule;
};

static uint32_t COUNT = 65536u;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* The process's CPU time (µs) and context switches so far. */
static void usage(double *cpu_us, long *switches) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    *cpu_us = (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 +
              (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
    *switches = u.ru_nvcsw + u.ru_nivcsw;
}

static void inc(nccom_host_word_t *w, uint32_t v) { __atomic_fetch_add(w, v, __ATOMIC_RELEASE); }

static void *zalloc(size_t n) {
    void *p = calloc(1, n ? n : 64);
    if (p == NULL) {
        fprintf(stderr, "allreduce: out of memory\n");
        exit(1);
    }
    return p;
}

/* Plans rank r's part, places its buffers and host words, writes its FIFOs. */
static void prepare(struct rank *k, uint32_t r, uint32_t nranks) {
    nrt_proxy_plan_params_t pp;
    CHECK(nrt_proxy_plan_params_init(&pp));
    pp.collective = NRT_PROXY_COLL_ALL_REDUCE;
    pp.dtype = NRT_PROXY_DTYPE_I32;
    pp.op = NRT_PROXY_REDOP_SUM;
    pp.rank = r, pp.nranks = nranks, pp.count = COUNT;
    CHECK(nrt_proxy_plan_create(&pp, &k->plan));
    nrt_proxy_plan_layout_t l = {.struct_size = sizeof l};
    CHECK(nrt_proxy_plan_layout(k->plan, &l));
    if (l.n_blocks > MAX_PARTS) {
        fprintf(stderr, "allreduce: %u parts\n", l.n_blocks);
        exit(1);
    }
    k->input = zalloc(l.input_bytes);
    k->output = zalloc(l.output_bytes);
    k->scratch = zalloc(l.scratch_bytes);
    k->words = zalloc(l.host_words * sizeof(nccom_host_word_t));
    nrt_proxy_plan_addresses_t a = {.input = (uintptr_t)k->input, .output = (uintptr_t)k->output,
                                    .scratch = (uintptr_t)k->scratch,
                                    .words = (uintptr_t)k->words,
                                    .word_stride = sizeof(nccom_host_word_t)};
    nrt_proxy_plan_block_info_t info[MAX_PARTS];
    size_t n_info = 0;
    CHECK(nrt_proxy_plan_blocks(k->plan, info, MAX_PARTS, &n_info));
    k->n_blocks = 0;
    for (uint32_t i = 0; i < n_info; i++) {
        if (info[i].n_ops == 0)
            continue; /* one rank alone sends nothing */
        neuron_net_op_info_t *ops = zalloc(info[i].n_ops * sizeof *ops);
        neuron_net_src_addr_t *src = zalloc(info[i].n_src * sizeof *src);
        neuron_net_dest_addr_t *dst = zalloc(info[i].n_dst * sizeof *dst);
        CHECK(nrt_proxy_plan_fifos(k->plan, i, &a, ops, info[i].n_ops, src, info[i].n_src, dst,
                                   info[i].n_dst, &k->blocks[k->n_blocks++]));
    }
    CHECK(nrt_proxy_plan_schedule(k->plan, 1, k->schedule, MAX_PARTS, &k->n_schedule));
    CHECK(nrt_proxy_host_device_create(k->plan, &a, &k->dev));
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "caller";
    int bells = strcmp(mode, "bells") == 0;
    int caller = !bells && strcmp(mode, "thread") != 0;
    uint32_t nranks = argc > 2 ? (uint32_t)atoi(argv[2]) : 2u;
    if (nranks < 2 || nranks > MAX_RANKS) {
        fprintf(stderr, "allreduce: 2..%u ranks\n", MAX_RANKS);
        return 2;
    }
    if (argc > 3)
        COUNT = (uint32_t)atoi(argv[3]);
    uint32_t EXECUTIONS = argc > 4 ? (uint32_t)atoi(argv[4]) : 3u;
    uint32_t gap_us = argc > 5 ? (uint32_t)atoi(argv[5]) : 0u;
    if (COUNT < 1 || EXECUTIONS < 1) {
        fprintf(stderr, "allreduce: count and executions must be positive\n");
        return 2;
    }
    nrt_proxy_config_t cfg;
    CHECK(nrt_proxy_config_from_env(&cfg));
    cfg.drive_mode = caller ? NRT_PROXY_DRIVE_CALLER : NRT_PROXY_DRIVE_THREAD;
    cfg.ranks_per_network_proxy = caller ? nranks : 1;
    if (bells && cfg.worker_nap_us == 0) /* NEURON_RT_PROXY_WORKER_NAP_US may set it */
        cfg.worker_nap_us = NRT_PROXY_BELLED_NAP_US;
    nrt_proxy_t *inst;
    CHECK(nrt_proxy_init(&cfg, &inst));
    nrt_proxy_group_t *group;
    CHECK(nrt_proxy_group_create(inst, nranks, &group));
    static const nccom_device_callbacks_t cbs = {.nec_inc_semaphore = inc};
    static struct rank ranks[MAX_RANKS];
    for (uint32_t r = 0; r < nranks; r++) {
        struct rank *k = &ranks[r];
        prepare(k, r, nranks);
        nrt_proxy_comm_config_t cc;
        CHECK(nrt_proxy_comm_config_init(&cc));
        cc.rank = r, cc.nranks = nranks, cc.comm_id = COMM_ID, cc.group = group;
        cc.callbacks = &cbs;
        CHECK(nrt_proxy_comm_create(inst, &cc, &k->comm));
        CHECK(nrt_proxy_comm_join(k->comm));
        if (bells)
            CHECK(nrt_proxy_host_device_attach(k->dev, k->comm));
    }

    double t0 = now_us(), cpu0;
    long sw0;
    usage(&cpu0, &sw0);
    for (uint32_t e = 0; e < EXECUTIONS; e++) {
        for (uint32_t r = 0; r < nranks; r++) {
            struct rank *k = &ranks[r];
            for (uint32_t i = 0; i < COUNT; i++)
                k->input[i] = (int32_t)(r * 1000u + e * 7u + i % 97u);
            /* The device's net stage: the task waits for this word, the device writes it. */
            __atomic_store_n(&k->trigger, 0xFFFFFFFFu, __ATOMIC_RELEASE);
            nccom_host_word_t *trig[1] = {&k->trigger};
            nrt_proxy_network_task_t t = {.struct_size = sizeof t, .task_id = 100 * e + r,
                                          .blocks = k->blocks, .n_blocks = k->n_blocks,
                                          .schedule = k->schedule, .n_schedule = k->n_schedule,
                                          .trigger_words = trig, .n_trigger_words = 1,
                                          .flags = NRT_PROXY_TASK_WAIT_FOR_DEVICE,
                                          .timeout_ms = WAIT_MS};
            CHECK(nrt_proxy_submit_network(k->comm, &t));
            CHECK(nrt_proxy_host_device_launch(k->dev, 1, trig, 1, NULL, 0, NULL));
        }
        if (gap_us > 0) /* the tasks wait for their devices meanwhile: what does that cost? */
            nanosleep(&(struct timespec){.tv_sec = gap_us / 1000000,
                                         .tv_nsec = (long)(gap_us % 1000000) * 1000},
                      NULL);
        for (uint32_t r = 0; !caller && r < nranks; r++)
            CHECK(nrt_proxy_host_device_start(ranks[r].dev));
        for (uint32_t r = 0; r < nranks; r++) {
            struct rank *k = &ranks[r];
            nrt_proxy_task_record_t rec;
            if (caller) {
                /* Tick the queue and play every device until this rank's record is back. */
                for (unsigned long spins = 0;; spins++) {
                    uint32_t tick, state;
                    CHECK(nrt_proxy_tick(k->comm, &tick));
                    for (uint32_t q = 0; q < nranks; q++)
                        CHECK(nrt_proxy_host_device_poll(ranks[q].dev, &state));
                    NRT_STATUS s = nrt_proxy_try_pop(k->comm, &rec);
                    if (s == NRT_SUCCESS)
                        break;
                    if (s != NRT_QUEUE_EMPTY || spins > 100000000ul)
                        CHECK(s == NRT_QUEUE_EMPTY ? NRT_TIMEOUT : s);
                }
                uint32_t state;
                do /* the device's last steps after the proxy's (its copies, the barrier) */
                    CHECK(nrt_proxy_host_device_poll(k->dev, &state));
                while (state == NRT_PROXY_DEVICE_PENDING);
            } else {
                CHECK(nrt_proxy_wait(k->comm, WAIT_MS, &rec));
                CHECK(nrt_proxy_host_device_wait(k->dev, WAIT_MS));
            }
            CHECK(rec.progress_status);
        }
        for (uint32_t r = 0; r < nranks; r++)
            for (uint32_t i = 0; i < COUNT; i++) {
                int32_t want = 0;
                for (uint32_t q = 0; q < nranks; q++)
                    want += (int32_t)(q * 1000u + e * 7u + i % 97u);
                if (ranks[r].output[i] != want) {
                    fprintf(stderr, "allreduce: execution %u rank %u word %u: %d, expected %d\n",
                            e, r, i, ranks[r].output[i], want);
                    return 1;
                }
            }
    }
    double t1 = now_us(), cpu1;
    long sw1;
    usage(&cpu1, &sw1);

    for (uint32_t r = 0; r < nranks; r++) {
        struct rank *k = &ranks[r];
        CHECK(nrt_proxy_comm_leave(k->comm, WAIT_MS));
        CHECK(nrt_proxy_comm_destroy(k->comm));
        CHECK(nrt_proxy_host_device_destroy(k->dev));
        CHECK(nrt_proxy_plan_destroy(k->plan));
        for (uint32_t b = 0; b < k->n_blocks; b++) {
            free((void *)k->blocks[b].ops);
            free((void *)k->blocks[b].src);
            free((void *)k->blocks[b].dst);
        }
        free(k->input), free(k->output), free(k->scratch), free((void *)k->words);
    }
    CHECK(nrt_proxy_group_destroy(group));
    CHECK(nrt_proxy_fini(inst));
    printf("allreduce: ok: %s mode, %u ranks, %u int32 each, %u executions, host devices\n",
           caller ? "caller" : bells ? "bells" : "thread", nranks, COUNT, EXECUTIONS);
    printf("allreduce: %.2f us/execution, cpu %.2f us/execution, %.2f switches/execution\n",
           (t1 - t0) / EXECUTIONS, (cpu1 - cpu0) / EXECUTIONS,
           (double)(sw1 - sw0) / EXECUTIONS);
    return 0;
}
