/*
 * refusal_flood.c: a runtime that misuses a comm in a loop must not flood the log.
 *   1. One thread repeats one bad call (nrt_proxy_tick with a NULL out-parameter) 100000 times.
 *   2. Two threads call one comm at once for 300 ms (nrt_proxy_comm_get_async_error): the
 *      calls that meet the other one inside the comm are refused NRT_FAILURE ("in use by
 *      another call").
 * Every refused call answers its status; the log (stderr) gets the first 10 refusals of each
 * kind in full and then at most one summary line a second (the test counts the lines). The
 * comm's last error names the last refused call and its cause.
 *
 * Usage: refusal_flood /path/to/libnccom_proxy.so
 * Exit status 0 = every check passed.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nrt_proxy.h"

#define FAIL(...) do { fprintf(stdout, "refusal_flood: FAIL line %d: ", __LINE__); \
    fprintf(stdout, __VA_ARGS__); fputc('\n', stdout); exit(1); } while (0)
#define EXPECT(call, want) do { NRT_STATUS s_ = (call); if (s_ != (want)) \
    FAIL("%s returned %s", #call, nrt_get_status_as_str(s_)); } while (0)

static nrt_proxy_comm_t *comm;
static volatile int stop;
static unsigned long refused[2], answered[2];

static void inc(nccom_host_word_t *w, uint32_t v) { __atomic_fetch_add(w, v, __ATOMIC_RELEASE); }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *hammer(void *arg) {
    int me = (int)(size_t)arg;
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
        NRT_STATUS health;
        NRT_STATUS s = nrt_proxy_comm_get_async_error(comm, &health);
        if (s == NRT_SUCCESS)
            answered[me]++;
        else if (s == NRT_FAILURE)
            refused[me]++;
        else
            FAIL("get_async_error answered %s", nrt_get_status_as_str(s));
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2)
        FAIL("usage: %s /path/to/libnccom_proxy.so", argv[0]);
    nrt_proxy_config_t cfg;
    EXPECT(nrt_proxy_config_from_env(&cfg), NRT_SUCCESS);
    cfg.progress_lib = argv[1];
    cfg.drive_mode = NRT_PROXY_DRIVE_CALLER;
    nrt_proxy_t *inst;
    EXPECT(nrt_proxy_init(&cfg, &inst), NRT_SUCCESS);
    nrt_proxy_group_t *group;
    EXPECT(nrt_proxy_group_create(inst, 1, &group), NRT_SUCCESS);
    nrt_proxy_comm_config_t cc;
    EXPECT(nrt_proxy_comm_config_init(&cc), NRT_SUCCESS);
    static const nccom_device_callbacks_t cbs = {.nec_inc_semaphore = inc};
    cc.rank = 0, cc.nranks = 1, cc.comm_id = 3, cc.group = group, cc.callbacks = &cbs;
    EXPECT(nrt_proxy_comm_create(inst, &cc, &comm), NRT_SUCCESS);
    EXPECT(nrt_proxy_comm_join(comm), NRT_SUCCESS);

    /* 1. One bad call, 100000 times. */
    for (int i = 0; i < 100000; i++)
        EXPECT(nrt_proxy_tick(comm, NULL), NRT_INVALID);
    char err[256];
    EXPECT(nrt_proxy_comm_last_error(comm, err, sizeof err), NRT_SUCCESS);
    if (strstr(err, "nrt_proxy_tick") == NULL || strstr(err, "NRT_INVALID") == NULL)
        FAIL("last error '%s'", err);

    /* 2. Two threads on one comm for 300 ms. */
    pthread_t t[2];
    double t0 = now_s();
    for (size_t i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, hammer, (void *)i) != 0)
            FAIL("pthread_create");
    while (now_s() - t0 < 0.3) {
        struct timespec d = {0, 10 * 1000 * 1000};
        nanosleep(&d, NULL);
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);

    EXPECT(nrt_proxy_comm_leave(comm, 1000), NRT_SUCCESS);
    EXPECT(nrt_proxy_comm_destroy(comm), NRT_SUCCESS);
    EXPECT(nrt_proxy_group_destroy(group), NRT_SUCCESS);
    EXPECT(nrt_proxy_fini(inst), NRT_SUCCESS);
    printf("refusal_flood: ok: 100000 bad calls; two threads: %lu answered, %lu refused\n",
           answered[0] + answered[1], refused[0] + refused[1]);
    return 0;
}
