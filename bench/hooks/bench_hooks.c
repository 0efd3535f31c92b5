/* Cost of one call through the --energy-hooks libraries (bench/hooks/
 * bench_hooks.py runs it with and without LD_PRELOAD):
 *   bench_hooks mpiio N FILE    MPI_File_write of one int
 *   bench_hooks veloc N CFG     VELOC_Checkpoint_begin + _mem + _end (one
 *                               8-byte region; the fake's sync mode with
 *                               discard = 1: no I/O, the hook's cost alone)
 * Prints each call's time in ns, one per line, over N calls, each timed alone
 * (CLOCK_MONOTONIC), with a 20 us pause between calls so that a receiver
 * keeps up with the markers. Built against mpi.h and the test doubles of
 * tests/hooks/ (or Open MPI itself with -DBENCH_REAL_MPI, mpiio only). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef BENCH_REAL_MPI
int VELOC_Init_single(unsigned int id, const char *cfg_file);
int VELOC_Mem_protect(int id, void *ptr, size_t count, size_t base_size);
int VELOC_Checkpoint_begin(const char *name, int version);
int VELOC_Checkpoint_mem(void);
int VELOC_Checkpoint_end(int success);
int VELOC_Finalize(int drain);
#endif

static long long now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	int n = atoi(argv[2]), rc = 0;
	long long *t = calloc((size_t)(n > 0 ? n : 1), sizeof(*t));
	struct timespec pause = {0, 20000};
	if (!t || n <= 0)
		return 2;
	if (!strcmp(argv[1], "mpiio")) {
		MPI_File fh;
		int v = 0;
		if (MPI_Init(&argc, &argv) ||
		    MPI_File_open(MPI_COMM_SELF, argv[3], MPI_MODE_CREATE | MPI_MODE_WRONLY,
				  MPI_INFO_NULL, &fh))
			return 1;
		for (int i = 0; i < n; i++) {
			long long a = now_ns();
			rc |= MPI_File_write(fh, &v, 1, MPI_INT, MPI_STATUS_IGNORE);
			t[i] = now_ns() - a;
			nanosleep(&pause, NULL);
		}
		MPI_File_close(&fh);
		MPI_Finalize();
#ifndef BENCH_REAL_MPI
	} else if (!strcmp(argv[1], "veloc")) {
		double d = 0;
		if (VELOC_Init_single(0, argv[3]) || VELOC_Mem_protect(0, &d, 1, sizeof(d)))
			return 1;
		for (int i = 0; i < n; i++) {
			long long a = now_ns();
			rc |= VELOC_Checkpoint_begin("bench", i);
			rc |= VELOC_Checkpoint_mem();
			rc |= VELOC_Checkpoint_end(1);
			t[i] = now_ns() - a;
			nanosleep(&pause, NULL);
		}
		VELOC_Finalize(1);
#endif
	} else {
		return 2;
	}
	if (rc) {
		fprintf(stderr, "bench_hooks: a call failed\n");
		return 1;
	}
	for (int i = 0; i < n; i++)
		printf("%lld\n", t[i]);
	free(t);
	return 0;
}
