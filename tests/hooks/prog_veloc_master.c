/* Test program for the VELOC hook on VELOC master's API (which the pinned
 * VELOC 1.8 lacks; tests/cluster/test_plugin_hooks.py), linked with
 * tests/hooks/fake_veloc.c built -DFAKE_VELOC_MASTER and the client library.
 *   prog_veloc_master CFG N_DOUBLES N_INTS
 * Region 0 (N_DOUBLES doubles) in the group "grpA" (VELOC_Region_protect),
 * region 1 (N_INTS ints) in the default one (VELOC_Mem_protect); then for the
 * checkpoints "grpA" (writes its group) and "other" (the default group):
 * VELOC_Checkpoint, poll VELOC_Checkpoint_finished until it says finished
 * (VELOC_SUCCESS), then a `compute` phase of its own (label between). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <joulestep/client.h>

int VELOC_Init_single(unsigned int id, const char *cfg_file);
int VELOC_Mem_protect(int id, void *ptr, size_t count, size_t base_size);
int VELOC_Region_protect(int id, void *ptr, size_t count, size_t base_size, const char *name);
int VELOC_Checkpoint(const char *name, int version);
int VELOC_Checkpoint_finished(void);
int VELOC_Checkpoint_wait(void);
int VELOC_Finalize(int drain);

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	size_t nd = strtoul(argv[2], NULL, 10), ni = strtoul(argv[3], NULL, 10);
	double *d = calloc(nd ? nd : 1, sizeof(double));
	int *i = calloc(ni ? ni : 1, sizeof(int));
	if (!d || !i || VELOC_Init_single(0, argv[1]))
		return 1;
	int rc[2];
	rc[0] = VELOC_Region_protect(0, d, nd, sizeof(double), "grpA");
	rc[1] = VELOC_Mem_protect(1, i, ni, sizeof(int));
	printf("protect %d %d\n", rc[0], rc[1]);
	const char *names[] = {"grpA", "other"};
	for (int v = 0; v < 2; v++) {
		int polls = 1;
		rc[0] = VELOC_Checkpoint(names[v], v);
		while (VELOC_Checkpoint_finished() != 0 && polls < 1000)
			polls++;
		printf("ckpt %s %d polled %s\n", names[v], rc[0], polls < 1000 ? "finished" : "never");
		(void)js_phase_begin("compute", "between");
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
		(void)js_phase_end(-1);
	}
	printf("wait %d finalize %d\n", VELOC_Checkpoint_wait(), VELOC_Finalize(1));
	free(d);
	free(i);
	return 0;
}
