/* Test program for the VELOC hook (tests/cluster/test_plugin_hooks.py),
 * linked with tests/hooks/fake_veloc.c; the prototypes are veloc.h's.
 *   prog_veloc CFG N_DOUBLES N_INTS K
 * Protects two regions (id 0: N_DOUBLES doubles, id 1: N_INTS ints), then:
 * K checkpoints "ckpt" (wait, begin, mem, end), one selective checkpoint
 * "sel" of region 1 only, two VELOC_Checkpoint "conv" calls back to back,
 * a final wait, finalize. Prints each call's return code.
 *   prog_veloc CFG N_DOUBLES N_INTS K SPIN_MS
 * The pattern of VELOC's own heatdis: K times VELOC_Checkpoint "spin", then
 * SPIN_MS ms of compute (a busy loop), then a final wait, finalize. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int VELOC_Init_single(unsigned int id, const char *cfg_file);
int VELOC_Mem_protect(int id, void *ptr, size_t count, size_t base_size);
int VELOC_Checkpoint_begin(const char *name, int version);
int VELOC_Checkpoint_mem(void);
int VELOC_Checkpoint_selective(int mode, int *ids, int id_count);
int VELOC_Checkpoint_end(int success);
int VELOC_Checkpoint_wait(void);
int VELOC_Checkpoint(const char *name, int version);
int VELOC_Finalize(int drain);

#define CKPT_SOME 1

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* SPIN_MS of compute between checkpoints; returns the sum computed, so that
 * the loop is not optimised away. */
static double spin(double *d, size_t nd, long ms)
{
	double t0 = now_s(), acc = 0;
	while (now_s() - t0 < ms / 1000.0)
		for (size_t j = 0; j < nd; j++)
			acc += d[j] * 0.5 + 1;
	return acc;
}

static int spin_run(size_t nd, size_t ni, int k, long ms, double *d, int *i)
{
	int rc = VELOC_Mem_protect(0, d, nd, sizeof(double));
	int rc1 = VELOC_Mem_protect(1, i, ni, sizeof(int));
	printf("protect %d %d\n", rc, rc1);
	for (int v = 0; v < k; v++) {
		rc = VELOC_Checkpoint("spin", v);
		double acc = spin(d, nd, ms);
		printf("spin %d %d %d\n", v, rc, acc > 0);
	}
	rc = VELOC_Checkpoint_wait();
	printf("wait %d\n", rc);
	rc = VELOC_Finalize(1);
	printf("finalize %d\n", rc);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 5 && argc != 6)
		return 2;
	size_t nd = strtoul(argv[2], NULL, 10), ni = strtoul(argv[3], NULL, 10);
	int k = atoi(argv[4]), v = 0, one = 1;
	double *d = calloc(nd ? nd : 1, sizeof(double));
	int *i = calloc(ni ? ni : 1, sizeof(int));
	if (!d || !i)
		return 1;
	/* one call per statement: printf's arguments have no evaluation order */
	int rc[4];
	rc[0] = VELOC_Init_single(0, argv[1]);
	printf("init %d\n", rc[0]);
	if (argc == 6)
		return spin_run(nd, ni, k, atol(argv[5]), d, i);
	rc[0] = VELOC_Mem_protect(0, d, nd, sizeof(double));
	rc[1] = VELOC_Mem_protect(1, i, ni, sizeof(int));
	printf("protect %d %d\n", rc[0], rc[1]);
	for (; v < k; v++) {
		d[0] = v;
		rc[0] = VELOC_Checkpoint_wait();
		rc[1] = VELOC_Checkpoint_begin("ckpt", v);
		rc[2] = VELOC_Checkpoint_mem();
		rc[3] = VELOC_Checkpoint_end(1);
		printf("ckpt %d %d %d %d %d\n", v, rc[0], rc[1], rc[2], rc[3]);
	}
	rc[0] = VELOC_Checkpoint_wait();
	rc[1] = VELOC_Checkpoint_begin("sel", v++);
	rc[2] = VELOC_Checkpoint_selective(CKPT_SOME, &one, 1);
	rc[3] = VELOC_Checkpoint_end(1);
	printf("sel %d %d %d %d\n", rc[0], rc[1], rc[2], rc[3]);
	rc[0] = VELOC_Checkpoint("conv", v++);
	rc[1] = VELOC_Checkpoint("conv", v++);
	printf("conv %d %d\n", rc[0], rc[1]);
	rc[0] = VELOC_Checkpoint_wait();
	printf("wait %d\n", rc[0]);
	rc[0] = VELOC_Finalize(1);
	printf("finalize %d\n", rc[0]);
	free(d);
	free(i);
	return 0;
}
