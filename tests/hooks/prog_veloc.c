/* Test program for the VELOC hook (tests/cluster/test_plugin_hooks.py),
 * linked with tests/hooks/fake_veloc.c; the prototypes are veloc.h's.
 *   prog_veloc CFG N_DOUBLES N_INTS K
 * Protects two regions (id 0: N_DOUBLES doubles, id 1: N_INTS ints), then:
 * K checkpoints "ckpt" (wait, begin, mem, end), one selective checkpoint
 * "sel" of region 1 only, two VELOC_Checkpoint "conv" calls back to back,
 * a final wait, finalize. Prints each call's return code. */
#include <stdio.h>
#include <stdlib.h>

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

int main(int argc, char **argv)
{
	if (argc != 5)
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
