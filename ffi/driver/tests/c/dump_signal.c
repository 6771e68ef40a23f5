/* dump_signal.c: the two process-wide settings nrt_proxy_init reads from the environment
 * (NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY, NEURON_RT_PROXY_DUMP_SIGNAL), with a config from
 * nrt_proxy_config_init (not from the environment). Two ranks of one process join their proxy
 * queue; the program raises the dump signal, says "raised" on stdout, and waits for a line on
 * stdin (the test sends it once the dump is in the log) before it tears everything down.
 * Usage: dump_signal PROGRESS_LIB SIGNAL_NUMBER */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include "nrt_proxy.h"

#define CHECK(call) do { NRT_STATUS s_ = (call); if (s_ != NRT_SUCCESS) { \
    fprintf(stderr, "%s: %s\n", #call, nrt_get_status_as_str(s_)); return 1; } } while (0)

static void inc(nccom_host_word_t *w, uint32_t v) { __atomic_fetch_add(w, v, __ATOMIC_RELEASE); }

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    nrt_proxy_config_t cfg;
    CHECK(nrt_proxy_config_init(&cfg));
    cfg.progress_lib = argv[1];
    nrt_proxy_t *inst;
    CHECK(nrt_proxy_init(&cfg, &inst));
    nrt_proxy_group_t *group;
    CHECK(nrt_proxy_group_create(inst, 2, &group));
    static const nccom_device_callbacks_t cbs = {.nec_inc_semaphore = inc};
    nrt_proxy_comm_t *comm[2];
    for (uint32_t r = 0; r < 2; r++) {
        nrt_proxy_comm_config_t cc;
        CHECK(nrt_proxy_comm_config_init(&cc));
        cc.rank = r, cc.nranks = 2, cc.comm_id = 3, cc.group = group, cc.callbacks = &cbs;
        CHECK(nrt_proxy_comm_create(inst, &cc, &comm[r]));
        CHECK(nrt_proxy_comm_join(comm[r]));
    }
    if (raise(atoi(argv[2])) != 0) return 3;
    printf("raised\n");
    fflush(stdout);
    int c;
    while ((c = getchar()) != '\n' && c != EOF) {}
    for (uint32_t r = 0; r < 2; r++) {
        CHECK(nrt_proxy_comm_leave(comm[r], 10000));
        CHECK(nrt_proxy_comm_destroy(comm[r]));
    }
    CHECK(nrt_proxy_group_destroy(group));
    CHECK(nrt_proxy_fini(inst));
    printf("dump_signal: ok\n");
    return 0;
}
