/*
 * A small MPI benchmark with the nccl-tests definitions, the peer of proxy-perf in
 * benches/e2e.sh. Built with mpicc at run time.
 *
 *   allreduce <allreduce|sendrecv|reducescatter> <bytes> [iters] [warmup]
 *
 * allreduce: MPI_Allreduce of <bytes> of float, sum, out of place.
 * sendrecv:  rank r sends <bytes> to r+1 and receives <bytes> from r-1 (MPI_Sendrecv), the
 *            nccl-tests sendrecv pattern (with 2 ranks: both exchange).
 * reducescatter: MPI_Reduce_scatter_block of <bytes> of float (the send buffer; each rank
 *            gets <bytes>/n), sum: the nccl-tests reduce_scatter definition.
 *
 * warmup untimed ops, then 3 timed phases of iters ops, each after a barrier. A phase's time =
 * the slowest rank's mean time per op; time = the median of the 3 phases (us); algbw = bytes /
 * time (GB/s, 1e9 B); busbw = algbw * 2(n-1)/n for all-reduce, (n-1)/n for reduce-scatter,
 * algbw for send-recv. The result of the last op is checked (all-reduce, reduce-scatter:
 * every element the sum of the ranks' inputs; send-recv: the previous rank's input); a wrong
 * value exits 1.
 *
 * Output (rank 0), one line: "mpi <coll> ranks <n> bytes <b> time_us <t> algbw <a> busbw <b>
 * wrong <w> phases_us <t1> <t2> <t3>".
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, n = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc < 3) {
        if (rank == 0)
            fprintf(stderr, "usage: %s <allreduce|sendrecv> <bytes> [iters] [warmup]\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    int is_ar = strcmp(argv[1], "allreduce") == 0;
    int is_rs = strcmp(argv[1], "reducescatter") == 0;
    if (!is_ar && !is_rs && strcmp(argv[1], "sendrecv") != 0) {
        if (rank == 0)
            fprintf(stderr, "unknown collective '%s' (allreduce, sendrecv, reducescatter)\n",
                    argv[1]);
        MPI_Finalize();
        return 2;
    }
    long long bytes = atoll(argv[2]);
    int iters = argc > 3 ? atoi(argv[3]) : 100;
    int warmup = argc > 4 ? atoi(argv[4]) : 10;
    if (bytes < 4 || iters < 1 || warmup < 0) {
        if (rank == 0)
            fprintf(stderr, "bytes must be >= 4, iters >= 1, warmup >= 0\n");
        MPI_Finalize();
        return 2;
    }
    long long count = bytes / (long long)sizeof(float);
    float *in = malloc((size_t)count * sizeof(float));
    float *out = malloc((size_t)count * sizeof(float));
    if (!in || !out) {
        fprintf(stderr, "rank %d: cannot allocate %lld bytes\n", rank, bytes);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    for (long long i = 0; i < count; i++) {
        in[i] = (float)(rank + 1) + (float)(i % 7);
        out[i] = 0.0f;
    }
    int next = (rank + 1) % n, prev = (rank - 1 + n) % n;
    /* Phase 0: warm-up (untimed); phases 1..REPS: timed, each after a barrier. */
    enum { REPS = 3 };
    double times[REPS];
    for (int phase = 0; phase <= REPS; phase++) {
        int reps = phase == 0 ? warmup : iters;
        if (phase > 0)
            MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int it = 0; it < reps; it++) {
            if (is_rs)
                MPI_Reduce_scatter_block(in, out, (int)(count / n), MPI_FLOAT, MPI_SUM,
                                         MPI_COMM_WORLD);
            else if (is_ar)
                MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            else
                MPI_Sendrecv(in, (int)count, MPI_FLOAT, next, 7, out, (int)count, MPI_FLOAT, prev,
                             7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        double dt = MPI_Wtime() - t0;
        if (phase == 0)
            continue;
        double mine = dt / iters, slowest = 0.0;
        MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        times[phase - 1] = slowest;
    }
    long long wrong = 0, all_wrong = 0;
    long long checked = is_rs ? count / n : count;
    for (long long i = 0; i < checked; i++) {
        long long g = is_rs ? (long long)rank * (count / n) + i : i;
        float want = is_rs ? (float)(n * (n + 1) / 2) + (float)n * (float)(g % 7)
                   : is_ar ? (float)(n * (n + 1) / 2) + (float)n * (float)(i % 7)
                           : (float)(prev + 1) + (float)(i % 7);
        if (out[i] != want)
            wrong++;
    }
    MPI_Reduce(&wrong, &all_wrong, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        /* The median of the REPS timed phases (one load burst on a shared machine does not
           decide the row). */
        for (int a = 0; a < REPS; a++)
            for (int b = a + 1; b < REPS; b++)
                if (times[b] < times[a]) {
                    double t = times[a];
                    times[a] = times[b];
                    times[b] = t;
                }
        double slowest = times[REPS / 2];
        double us = slowest * 1e6;
        double algbw = (double)bytes / slowest / 1e9;
        double busbw = is_ar   ? algbw * 2.0 * (n - 1) / n
                       : is_rs ? algbw * (double)(n - 1) / n
                               : algbw;
        printf("mpi %s ranks %d bytes %lld time_us %.3f algbw %.4f busbw %.4f wrong %lld "
               "phases_us %.3f %.3f %.3f\n",
               is_ar ? "all-reduce" : is_rs ? "reduce-scatter" : "send-recv", n, bytes, us, algbw, busbw, all_wrong,
               times[0] * 1e6, times[1] * 1e6, times[2] * 1e6);
    }
    if (all_wrong != 0) {
        MPI_Finalize();
        return 1;
    }
    free(in);
    free(out);
    MPI_Finalize();
    return 0;
}
