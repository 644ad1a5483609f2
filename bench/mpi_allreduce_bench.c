/* float32 MPI_Allreduce timing, the peer of allreduce_bench.cpp: the same sizes, iterations and
 * median, one line per size ("<bytes> <median microseconds per op>") from rank 0. Compiled by
 * run_allreduce.py with each MPI's own mpicc (Open MPI, MPICH) and started with its mpirun.
 *   mpi_allreduce_bench [--min-bytes N] [--max-bytes N] [--repeats R] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* About 64 MB of traffic per timed batch (at least 3, at most 200 ops), as allreduce_bench. */
static int iterations(size_t bytes) {
  size_t n = (64u << 20) / bytes;
  return n < 3 ? 3 : n > 200 ? 200 : (int)n;
}

static int by_value(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  size_t min_bytes = 4 << 10, max_bytes = 256 << 20;
  int repeats = 5, rank;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--min-bytes")) min_bytes = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--max-bytes")) max_bytes = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--repeats")) repeats = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "mpi_allreduce_bench: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  float* data = malloc(max_bytes);
  double* per_op = malloc(sizeof(double) * (size_t)repeats);
  if (!data || !per_op) {
    fprintf(stderr, "mpi_allreduce_bench: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (size_t i = 0; i < max_bytes / sizeof(float); ++i) data[i] = 1.0f;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    int count = (int)(bytes / sizeof(float)), iters = iterations(bytes);
    for (int w = 0; w < (iters / 10 > 2 ? iters / 10 : 2); ++w)
      MPI_Allreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int r = 0; r < repeats; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      double start = MPI_Wtime();
      for (int i = 0; i < iters; ++i) MPI_Allreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      per_op[r] = (MPI_Wtime() - start) * 1e6 / iters;
    }
    qsort(per_op, (size_t)repeats, sizeof(double), by_value);
    if (rank == 0) printf("%zu %.2f\n", bytes, per_op[repeats / 2]);
    fflush(stdout);
  }
  free(per_op);
  free(data);
  MPI_Finalize();
  return 0;
}
