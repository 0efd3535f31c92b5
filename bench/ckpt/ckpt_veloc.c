/* js-ckpt-veloc: checkpoints with the real VELOC (1.8; `make iolibs` or a
 * site's VELOC_ROOT), phases as in Wilkins 2022's Algorithm 1 (docs/science.md §2;
 * docs/experiments.md "Checkpointing on the real libraries").
 *
 *   js-ckpt-veloc --cfg FILE [--size N | --total N] [--reps R] [--compute-ms T]
 *
 * VELOC_Init(MPI_COMM_WORLD, FILE): FILE's scratch is the local tier (a
 * tmpfs dir for DRAM, a disk dir), persistent the "parallel FS", mode sync
 * or async (async: VELOC starts its backend daemon, which must be stopped
 * after the job: bench/iolibs/veloc-backend-stop.sh). Each rank protects
 * its state (VELOC_Mem_protect) and checkpoints it R times:
 *   checkpoint = VELOC_Checkpoint("ckpt", rep): the blocking part (sync:
 *                the local write and the copy to the persistent tier;
 *                async: the local write, handed to the backend);
 *   flush      = VELOC_Checkpoint_wait (async only): until the backend has
 *                written the persistent tier.
 * The phases are marked here, with a barrier between them, so that the
 * ranks of a node never have a checkpoint and a flush open at once (RAPL is
 * per package: overlapping phases would count the same joules twice); the
 * VELOC hook (--energy-hooks=veloc) marks each rank on its own instead.
 * Bytes: the rank's protected state (VELOC's header is not counted). */
#include <getopt.h>

#include "jsbench.h"

int VELOC_Init(MPI_Comm comm, const char *cfg_file);
int VELOC_Mem_protect(int id, void *ptr, size_t count, size_t base_size);
int VELOC_Checkpoint(const char *name, int version);
int VELOC_Checkpoint_wait(void);
int VELOC_Finalize(int drain);

static int g_rank;

static void usage(void)
{
	if (g_rank == 0)
		fprintf(stderr, "usage: js-ckpt-veloc --cfg FILE [--size N | --total N] [--reps R] "
				"[--compute-ms T] [--quiet]\n");
	MPI_Finalize();
	exit(2);
}

/* `mode = sync|async` of a VELOC config (as VELOC reads it): 1 sync. */
static int cfg_is_sync(const char *cfg)
{
	FILE *f = fopen(cfg, "re");
	char line[512], k[64], v[64];
	int sync = 0;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, " %63[a-z_] = %63s", k, v) == 2 && !strcmp(k, "mode"))
			sync = !strcmp(v, "sync");
	if (f)
		fclose(f);
	return sync;
}

static void compute_for(double s)
{
	volatile double x = 1.0;
	double end = jsb_now() + s;
	while (jsb_now() < end)
		for (int i = 0; i < 10000; i++)
			x = x * 1.0000001 + 1e-9;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int nranks;
	MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	static const struct option lo[] = {{"cfg", 1, 0, 'c'}, {"size", 1, 0, 'n'},
		{"total", 1, 0, 't'}, {"reps", 1, 0, 'r'}, {"compute-ms", 1, 0, 'm'},
		{"quiet", 0, 0, 'q'}, {0, 0, 0, 0}};
	const char *cfg = NULL;
	long long size = 16LL << 20, total = -1;
	int reps = 3, quiet = 0, c;
	double compute_s = 0;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'c': cfg = optarg; break;
		case 'n': size = jsb_parse_size(optarg); break;
		case 't': total = jsb_parse_size(optarg); if (total < 0) usage(); break;
		case 'r': reps = atoi(optarg); break;
		case 'm': compute_s = atof(optarg) / 1e3; break;
		case 'q': quiet = 1; break;
		default: usage();
		}
	}
	if (!cfg || optind != argc || size < 0 || reps < 1 || compute_s < 0)
		usage();
	long long my = total >= 0 ? total / nranks + (g_rank < total % nranks) : size;
	char *state = malloc(my ? (size_t)my : 1);
	if (!state)
		jsb_die("rank %d: cannot allocate %lld bytes", g_rank, my);
	int sync = cfg_is_sync(cfg);
	jsb_markers_sync(1);
	if (VELOC_Init(MPI_COMM_WORLD, cfg) != 0)
		jsb_die("rank %d: VELOC_Init(%s) failed", g_rank, cfg);
	if (VELOC_Mem_protect(0, state, (size_t)my, 1) != 0)
		jsb_die("rank %d: VELOC_Mem_protect failed", g_rank);

	double t_ckpt = 0, t_flush = 0;
	for (int rep = 1; rep <= reps; rep++) {
		memset(state, (g_rank * 7 + rep) & 0xff, (size_t)my); /* the new state */
		if (compute_s > 0)
			compute_for(compute_s);
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = jsb_now();
		jsb_begin("checkpoint", "veloc");
		if (VELOC_Checkpoint("ckpt", rep) != 0)
			jsb_die("rank %d: VELOC_Checkpoint(ckpt, %d) failed", g_rank, rep);
		jsb_end(my);
		double t1 = jsb_now();
		if (!sync) {
			MPI_Barrier(MPI_COMM_WORLD);
			t1 = jsb_now();
			jsb_begin("flush", "veloc");
			if (VELOC_Checkpoint_wait() != 0)
				jsb_die("rank %d: VELOC_Checkpoint_wait failed", g_rank);
			jsb_end(my);
		}
		double t2 = jsb_now();
		t_ckpt += t1 - t0;
		t_flush += t2 - t1;
		if (!quiet)
			printf("js-ckpt-veloc: rank %d rep %d checkpoint_s=%.6f flush_s=%.6f bytes=%lld\n",
			       g_rank, rep, t1 - t0, t2 - t1, my);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	VELOC_Finalize(1);
	long long all;
	double tc, tf;
	MPI_Reduce(&my, &all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	MPI_Reduce(&t_ckpt, &tc, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	MPI_Reduce(&t_flush, &tf, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	if (g_rank == 0)
		printf("js-ckpt-veloc: summary library=VELOC-1.8 mode=%s ranks=%d reps=%d "
		       "bytes_per_ckpt=%lld checkpoint_s=%.6f flush_s=%.6f\n",
		       sync ? "sync" : "async", nranks, reps, all, tc, tf);
	free(state);
	MPI_Finalize();
	return 0;
}
