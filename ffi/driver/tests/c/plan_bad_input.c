/*
 * Bad input to the C planner (nrt_proxy_plan_*): NULL pointers, wrong struct sizes, values out
 * of range, arrays too small (nothing written), bad addresses, a destroyed, never-created or
 * other-kind plan handle. Each call must answer its status and leave the caller's memory as it
 * was; run under valgrind too (no invalid access, no leak).
 *
 * Usage: plan_bad_input /path/to/libnccom_proxy.so
 * Exit status 0 = every check passed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrt_proxy.h"

static int checks;

#define FAIL(...)                                                                                 \
    do {                                                                                          \
        fprintf(stderr, "plan_bad_input: FAIL line %d: ", __LINE__);                              \
        fprintf(stderr, __VA_ARGS__);                                                             \
        fprintf(stderr, "\n");                                                                    \
        exit(1);                                                                                  \
    } while (0)

#define EXPECT(call, want)                                                                        \
    do {                                                                                          \
        NRT_STATUS s_ = (call);                                                                   \
        if (s_ != (want))                                                                         \
            FAIL("%s returned %s (%u), expected %s", #call, nrt_get_status_as_str(s_), s_,        \
                 nrt_get_status_as_str(want));                                                    \
        checks++;                                                                                 \
    } while (0)

#define UNCHANGED(obj, byte)                                                                      \
    do {                                                                                          \
        const unsigned char *p_ = (const unsigned char *)(const void *)&(obj);                    \
        for (size_t i_ = 0; i_ < sizeof(obj); i_++)                                               \
            if (p_[i_] != (byte))                                                                 \
                FAIL("%s byte %zu was written", #obj, i_);                                        \
        checks++;                                                                                 \
    } while (0)

static nrt_proxy_plan_params_t good(void) {
    nrt_proxy_plan_params_t p;
    if (nrt_proxy_plan_params_init(&p) != NRT_SUCCESS)
        FAIL("params_init");
    p.collective = NRT_PROXY_COLL_ALL_REDUCE;
    p.algorithm = NRT_PROXY_ALGO_RING;
    p.dtype = NRT_PROXY_DTYPE_F32;
    p.rank = 1;
    p.nranks = 4;
    p.count = 4096;
    p.chunk_bytes = 1024;
    p.streams = 2;
    return p;
}

/* plan_create with one field changed must answer NRT_INVALID and leave *out NULL. */
#define BAD_PARAM(field, v)                                                                       \
    do {                                                                                          \
        nrt_proxy_plan_params_t p_ = good();                                                      \
        p_.field = (v);                                                                           \
        nrt_proxy_plan_t *out_ = (nrt_proxy_plan_t *)(uintptr_t)0x1;                              \
        EXPECT(nrt_proxy_plan_create(&p_, &out_), NRT_INVALID);                                   \
        if (out_ != NULL)                                                                         \
            FAIL("%s = %s: *out not NULL", #field, #v);                                           \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 2)
        FAIL("usage: %s /path/to/libnccom_proxy.so", argv[0]);

    /* Params. */
    EXPECT(nrt_proxy_plan_params_init(NULL), NRT_INVALID);
    nrt_proxy_plan_params_t pp = good();
    nrt_proxy_plan_t *plan = NULL;
    EXPECT(nrt_proxy_plan_create(NULL, &plan), NRT_INVALID);
    EXPECT(nrt_proxy_plan_create(&pp, NULL), NRT_INVALID);
    BAD_PARAM(struct_size, 0);
    BAD_PARAM(struct_size, (uint32_t)sizeof(nrt_proxy_plan_params_t) + 8);
    BAD_PARAM(collective, 6);
    BAD_PARAM(algorithm, 10);
    BAD_PARAM(algorithm, NRT_PROXY_ALGO_BINOMIAL); /* not an all-reduce algorithm */
    BAD_PARAM(dtype, 6);
    BAD_PARAM(op, 4);
    BAD_PARAM(rank, 4);
    BAD_PARAM(nranks, 0);
    BAD_PARAM(root, 4);
    BAD_PARAM(in_place, 2);
    BAD_PARAM(pipeline_depth, 0);
    BAD_PARAM(streams, 0);
    BAD_PARAM(streams, 5);
    BAD_PARAM(blocks, 0);
    BAD_PARAM(nec_early_send, 2);
    BAD_PARAM(nec_idx_wrap, 1);
    BAD_PARAM(nec_credits, 129);
    BAD_PARAM(chunk_bytes, 0);
    BAD_PARAM(count, UINT64_MAX / 2); /* sizes overflow */

    /* A good plan. */
    EXPECT(nrt_proxy_plan_create(&pp, &plan), NRT_SUCCESS);
    nrt_proxy_plan_layout_t layout;
    EXPECT(nrt_proxy_plan_layout(plan, NULL), NRT_INVALID);
    memset(&layout, 0xA5, sizeof layout);
    layout.struct_size = 8;
    EXPECT(nrt_proxy_plan_layout(plan, &layout), NRT_INVALID);
    if (layout.struct_size != 8 || layout.input_bytes != 0xA5A5A5A5A5A5A5A5ull)
        FAIL("layout written with a wrong struct_size");
    layout.struct_size = sizeof layout;
    EXPECT(nrt_proxy_plan_layout(plan, &layout), NRT_SUCCESS);
    if (layout.n_blocks != 2 || layout.streams != 3 || layout.input_bytes != 4096 * 4)
        FAIL("layout {parts %u streams %#x input %llu}", layout.n_blocks, layout.streams,
             (unsigned long long)layout.input_bytes);

    /* Parts: size-in / size-out. */
    nrt_proxy_plan_block_info_t infos[2];
    size_t count = 777;
    EXPECT(nrt_proxy_plan_blocks(plan, infos, 2, NULL), NRT_INVALID);
    EXPECT(nrt_proxy_plan_blocks(plan, NULL, 2, &count), NRT_INVALID);
    memset(infos, 0x5A, sizeof infos);
    EXPECT(nrt_proxy_plan_blocks(plan, infos, 1, &count), NRT_INVALID);
    UNCHANGED(infos, 0x5A);
    if (count != 777)
        FAIL("count written for a too-small array");
    EXPECT(nrt_proxy_plan_blocks(plan, infos, 2, &count), NRT_SUCCESS);
    if (count != 2 || infos[0].stream != 0 || infos[1].stream != 1 || infos[0].n_ops == 0)
        FAIL("parts {count %zu streams %u %u ops %u}", count, infos[0].stream, infos[1].stream,
             infos[0].n_ops);

    /* Schedule. */
    uint32_t sched[4];
    memset(sched, 0x5A, sizeof sched);
    count = 777;
    EXPECT(nrt_proxy_plan_schedule(plan, 0, sched, 4, &count), NRT_INVALID);
    EXPECT(nrt_proxy_plan_schedule(plan, 3, sched, 2, &count), NRT_INVALID);
    UNCHANGED(sched, 0x5A);
    EXPECT(nrt_proxy_plan_schedule(plan, 3, sched, 4, NULL), NRT_INVALID);
    EXPECT(nrt_proxy_plan_schedule(plan, 3, sched, 4, &count), NRT_SUCCESS);
    if (count != 3 || sched[0] != 1 || sched[2] != 1)
        FAIL("schedule {count %zu: %u %u %u}", count, sched[0], sched[1], sched[2]);

    /* FIFOs: addresses and capacities. */
    const nrt_proxy_plan_block_info_t *b = &infos[0];
    size_t n_ops = b->n_ops, n_src = b->n_src, n_dst = b->n_dst;
    neuron_net_op_info_t *ops = malloc(n_ops * sizeof *ops);
    neuron_net_src_addr_t *src = malloc(n_src * sizeof *src);
    neuron_net_dest_addr_t *dst = malloc(n_dst * sizeof *dst);
    if (!ops || !src || !dst)
        FAIL("malloc");
    memset(ops, 0x5A, n_ops * sizeof *ops);
    static uint32_t words[4096];
    static float in[4096], out[4096], scratch[65536];
    if (layout.host_words > 4096 || layout.scratch_bytes > sizeof scratch)
        FAIL("the test's buffers are too small for the layout");
    const nrt_proxy_plan_addresses_t a = {.input = (uintptr_t)in,
                                          .output = (uintptr_t)out,
                                          .scratch = (uintptr_t)scratch,
                                          .words = (uintptr_t)words,
                                          .word_stride = 4};
    nrt_proxy_block_t blk;
    memset(&blk, 0x5A, sizeof blk);
    EXPECT(nrt_proxy_plan_fifos(plan, 2, &a, ops, n_ops, src, n_src, dst, n_dst, &blk),
           NRT_INVALID);
    EXPECT(nrt_proxy_plan_fifos(plan, 0, NULL, ops, n_ops, src, n_src, dst, n_dst, &blk),
           NRT_INVALID);
    EXPECT(nrt_proxy_plan_fifos(plan, 0, &a, ops, n_ops, src, n_src, dst, n_dst, NULL),
           NRT_INVALID);
    EXPECT(nrt_proxy_plan_fifos(plan, 0, &a, NULL, n_ops, src, n_src, dst, n_dst, &blk),
           NRT_INVALID);
    EXPECT(nrt_proxy_plan_fifos(plan, 0, &a, ops, n_ops - 1, src, n_src, dst, n_dst, &blk),
           NRT_INVALID);
    EXPECT(nrt_proxy_plan_fifos(plan, 0, &a, ops, n_ops, src, n_src - 1, dst, n_dst, &blk),
           NRT_INVALID);
    EXPECT(nrt_proxy_plan_fifos(plan, 0, &a, ops, n_ops, src, n_src, dst, n_dst - 1, &blk),
           NRT_INVALID);
    nrt_proxy_plan_addresses_t bad[6];
    for (int i = 0; i < 6; i++)
        bad[i] = a;
    bad[0].word_stride = 0;
    bad[1].word_stride = 6;
    bad[2].words = 0;
    bad[3].words = (uintptr_t)words + 2;
    bad[4].input = 0;
    bad[5].output = UINT64_MAX - 8;
    for (int i = 0; i < 6; i++)
        EXPECT(nrt_proxy_plan_fifos(plan, 0, &bad[i], ops, n_ops, src, n_src, dst, n_dst, &blk),
               NRT_INVALID);
    for (size_t i = 0; i < n_ops * sizeof *ops; i++)
        if (((unsigned char *)ops)[i] != 0x5A)
            FAIL("ops written by a refused call");
    UNCHANGED(blk, 0x5A);
    EXPECT(nrt_proxy_plan_fifos(plan, 0, &a, ops, n_ops, src, n_src, dst, n_dst, &blk),
           NRT_SUCCESS);
    if (blk.ops != ops || blk.n_ops != n_ops || blk.n_src != n_src || blk.stream != 0 ||
        blk.bb != 1 || ops[0].data_type_sz != 4)
        FAIL("block {ops %p n %zu stream %u bb %u}", (const void *)blk.ops, blk.n_ops, blk.stream,
             blk.bb);

    /* Program. */
    nrt_proxy_plan_instr_t *prog = malloc(b->n_instrs * sizeof *prog);
    if (!prog)
        FAIL("malloc");
    count = 777;
    EXPECT(nrt_proxy_plan_program(plan, 2, prog, b->n_instrs, &count), NRT_INVALID);
    EXPECT(nrt_proxy_plan_program(plan, 0, prog, b->n_instrs - 1, &count), NRT_INVALID);
    EXPECT(nrt_proxy_plan_program(plan, 0, prog, b->n_instrs, NULL), NRT_INVALID);
    if (count != 777)
        FAIL("count written by a refused call");
    EXPECT(nrt_proxy_plan_program(plan, 0, prog, b->n_instrs, &count), NRT_SUCCESS);
    if (count != b->n_instrs || prog[0].kind != NRT_PROXY_INSTR_ARM)
        FAIL("program {count %zu first kind %u}", count, prog[0].kind);

    /* Handles: destroyed, never created, NULL, another kind. */
    EXPECT(nrt_proxy_plan_destroy(plan), NRT_SUCCESS);
    EXPECT(nrt_proxy_plan_destroy(plan), NRT_INVALID_HANDLE);
    layout.struct_size = sizeof layout;
    EXPECT(nrt_proxy_plan_layout(plan, &layout), NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_plan_blocks(plan, infos, 2, &count), NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_plan_schedule(plan, 1, sched, 4, &count), NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_plan_fifos(plan, 0, &a, ops, n_ops, src, n_src, dst, n_dst, &blk),
           NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_plan_program(plan, 0, prog, b->n_instrs, &count), NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_plan_layout(NULL, &layout), NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_plan_destroy(NULL), NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_plan_layout((nrt_proxy_plan_t *)(void *)&layout, &layout),
           NRT_INVALID_HANDLE);
    nrt_proxy_config_t cfg;
    EXPECT(nrt_proxy_config_init(&cfg), NRT_SUCCESS);
    cfg.progress_lib = argv[1];
    nrt_proxy_t *inst = NULL;
    EXPECT(nrt_proxy_init(&cfg, &inst), NRT_SUCCESS);
    EXPECT(nrt_proxy_plan_destroy((nrt_proxy_plan_t *)(void *)inst), NRT_INVALID_HANDLE);
    EXPECT(nrt_proxy_fini(inst), NRT_SUCCESS);

    free(ops);
    free(src);
    free(dst);
    free(prog);
    printf("plan_bad_input: ok: %d checks\n", checks);
    return 0;
}
