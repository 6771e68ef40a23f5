/* minimal.c: two ranks of one process swap 4 KiB through libnrt_proxy.so.
 * Build: cc -std=c11 minimal.c $(pkg-config --cflags --libs nrt_proxy) -o minimal
 * Run:   ./minimal [/path/to/libnccom_proxy.so]   (default: libnccom_proxy.so.1) */
#include <stdio.h>
#include <string.h>
#include "nrt_proxy.h"

#define N 4096u
#define CHECK(call) do { NRT_STATUS s_ = (call); if (s_ != NRT_SUCCESS) { \
    fprintf(stderr, "%s: %s\n", #call, nrt_get_status_as_str(s_)); return 1; } } while (0)

static void inc(nccom_host_word_t *w, uint32_t v) { __atomic_fetch_add(w, v, __ATOMIC_RELEASE); }
static uint32_t ld(nccom_host_word_t *w) { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }
static void st(nccom_host_word_t *w, uint32_t v) { __atomic_store_n(w, v, __ATOMIC_RELEASE); }

/* Per rank: [send idx, send handshake, send complete, recv idx, recv handshake, recv complete]. */
static nccom_host_word_t words[2][6];
static unsigned char src[2][N], dst[2][N];

int main(int argc, char **argv) {
    nrt_proxy_config_t cfg;
    CHECK(nrt_proxy_config_from_env(&cfg));
    if (argc > 1) cfg.progress_lib = argv[1];
    nrt_proxy_t *inst;
    CHECK(nrt_proxy_init(&cfg, &inst));
    nrt_proxy_group_t *group;
    CHECK(nrt_proxy_group_create(inst, 2, &group));
    static const nccom_device_callbacks_t cbs = {.nec_inc_semaphore = inc};
    nrt_proxy_comm_t *comm[2];
    for (uint32_t r = 0; r < 2; r++) {
        nrt_proxy_comm_config_t cc;
        CHECK(nrt_proxy_comm_config_init(&cc));
        cc.rank = r, cc.nranks = 2, cc.comm_id = 1, cc.group = group, cc.callbacks = &cbs;
        CHECK(nrt_proxy_comm_create(inst, &cc, &comm[r]));
        CHECK(nrt_proxy_comm_join(comm[r]));
        memset(src[r], 'a' + (int)r, N);
        /* Op 0 sends one entry to the peer, op 1 receives one from it. */
        nccom_host_word_t *w = words[r];
        neuron_net_op_info_t ops[2] = {
            {.send_peer = (int32_t)(1 - r), .recv_peer = NCCOM_NO_PEER, .tx_entry_cnt = 1,
             .data_type_sz = 1, .post_send_idx_addr = (uintptr_t)&w[0],
             .send_handshake_sem_addr = (uintptr_t)&w[1], .send_complete_sem_addr = (uintptr_t)&w[2]},
            {.send_peer = NCCOM_NO_PEER, .recv_peer = (int32_t)(1 - r), .rx_entry_cnt = 1,
             .data_type_sz = 1, .post_recv_idx_addr = (uintptr_t)&w[3],
             .recv_handshake_sem_addr = (uintptr_t)&w[4], .recv_complete_sem_addr = (uintptr_t)&w[5]}};
        neuron_net_src_addr_t s = {.net_op_idx = 0, .mark = NET_OP_COMPLETE,
                                   .addr = (uintptr_t)src[r], .size = N, .dest_rank = NCCOM_NO_PEER};
        neuron_net_dest_addr_t d = {.net_op_idx = 1, .mark = EXEC_COMPLETE,
                                    .addr = (uintptr_t)dst[r], .size = N, .src_rank = NCCOM_NO_PEER};
        nrt_proxy_block_t block = {.stream = 0, .bb = 0, .ops = ops, .n_ops = 2,
                                   .src = &s, .n_src = 1, .dst = &d, .n_dst = 1};
        nrt_proxy_network_task_t task = {.struct_size = sizeof task, .task_id = r,
                                         .blocks = &block, .n_blocks = 1};
        CHECK(nrt_proxy_submit_network(comm[r], &task)); /* copied: block, ops, s, d may go */
        st(&w[0], NCCOM_HOST_WORD_READY); /* the device's side: both ops ready */
        st(&w[3], NCCOM_HOST_WORD_READY);
    }
    /* Play the device: after each handshake, post the one entry (host index 1). */
    for (uint32_t r = 0; r < 2; r++)
        for (int k = 0; k < 2; k++) {
            for (long i = 0; ld(&words[r][3 * k + 1]) != 1; i++) /* the worker answers */
                if (i > 1000000000L) return 1;
            st(&words[r][3 * k], 1);
        }
    for (uint32_t r = 0; r < 2; r++) {
        nrt_proxy_task_record_t rec;
        CHECK(nrt_proxy_wait(comm[r], 10000, &rec));
        CHECK(rec.progress_status);
        if (dst[r][0] != 'a' + (1 - r) || dst[r][N - 1] != 'a' + (1 - r)) return 1;
        CHECK(nrt_proxy_comm_leave(comm[r], 10000));
        CHECK(nrt_proxy_comm_destroy(comm[r]));
    }
    CHECK(nrt_proxy_group_destroy(group));
    CHECK(nrt_proxy_fini(inst));
    printf("minimal: ok\n");
    return 0;
}
