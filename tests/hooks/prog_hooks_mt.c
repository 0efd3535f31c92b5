/* Test program for the hooks in forked and threaded programs (issue 23,
 * defect 9; tests/cluster/test_plugin_hooks.py), linked with both test
 * doubles (tests/hooks/fake_mpi.c, fake_veloc.c), whose *_hold() keep a
 * thread inside the wrapped library until released.
 *
 *   prog_hooks_mt fork CFG
 *     thread T is inside VELOC_Checkpoint_begin (held); meanwhile the main
 *     thread forks (the child calls VELOC_Mem_protect and exits) and calls
 *     VELOC_Mem_protect itself. Neither may wait for T: no hook lock is held
 *     across a call into VELOC, and the child starts with fresh hook state.
 *     A call that hangs is ended by alarm() (the child 5 s, the parent 10 s).
 *   prog_hooks_mt threads FILE N
 *     thread A is inside MPI_File_write(N ints) (held) when thread B calls
 *     MPI_File_sync (held too); A returns first, then B.
 *   prog_hooks_mt flush CFG FILE N
 *     the main thread ends a VELOC checkpoint "f" of 1000 doubles (async:
 *     its flush phase opens), then is inside MPI_File_write(N ints) (held)
 *     when thread W calls VELOC_Checkpoint_wait, which ends the flush while
 *     the write, nested in it, is still open; then the write returns. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int VELOC_Init_single(unsigned int id, const char *cfg_file);
int VELOC_Mem_protect(int id, void *ptr, size_t count, size_t base_size);
int VELOC_Checkpoint_begin(const char *name, int version);
int VELOC_Checkpoint_mem(void);
int VELOC_Checkpoint_end(int success);
int VELOC_Checkpoint_wait(void);
int VELOC_Finalize(int drain);
void fake_mpi_hold(int in, int rel);
void fake_veloc_hold(int in, int rel);

struct held {
	int in[2], rel[2], rc;
	MPI_File fh;
	int n;
	int *buf;
};

static void pipes(struct held *h)
{
	if (pipe(h->in) || pipe(h->rel))
		exit(1);
}

static void wait_inside(struct held *h)
{
	char c;
	if (read(h->in[0], &c, 1) != 1)
		exit(1);
}

static void release(struct held *h)
{
	if (write(h->rel[1], "r", 1) != 1)
		exit(1);
}

static double data[1000];

static void *ckpt_thread(void *arg)
{
	struct held *h = arg;
	fake_veloc_hold(h->in[1], h->rel[0]);
	int b = VELOC_Checkpoint_begin("t", 0);
	int m = VELOC_Checkpoint_mem();
	int e = VELOC_Checkpoint_end(1);
	h->rc = b || m || e;
	return NULL;
}

static int fork_mode(const char *cfg)
{
	static int more[10], child_more[10];
	struct held t = {0};
	pthread_t th;
	pipes(&t);
	alarm(10);
	if (VELOC_Init_single(0, cfg) || VELOC_Mem_protect(0, data, 1000, sizeof(double)))
		return 1;
	pthread_create(&th, NULL, ckpt_thread, &t);
	wait_inside(&t); /* T is inside VELOC_Checkpoint_begin */
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		alarm(5);
		int rc = VELOC_Mem_protect(2, child_more, 10, sizeof(int));
		printf("child protect %d\n", rc);
		fflush(stdout);
		_exit(0);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	if (WIFSIGNALED(st))
		printf("child killed by signal %d\n", WTERMSIG(st));
	else
		printf("child exit %d\n", WEXITSTATUS(st));
	fflush(stdout);
	int rc = VELOC_Mem_protect(1, more, 10, sizeof(int));
	printf("parent protect %d\n", rc);
	fflush(stdout);
	release(&t);
	pthread_join(th, NULL);
	printf("checkpoint %d wait %d finalize %d\n", t.rc, VELOC_Checkpoint_wait(), VELOC_Finalize(1));
	return 0;
}

static void *write_thread(void *arg)
{
	struct held *h = arg;
	fake_mpi_hold(h->in[1], h->rel[0]);
	h->rc = MPI_File_write(h->fh, h->buf, h->n, MPI_INT, MPI_STATUS_IGNORE);
	return NULL;
}

static void *sync_thread(void *arg)
{
	struct held *h = arg;
	fake_mpi_hold(h->in[1], h->rel[0]);
	h->rc = MPI_File_sync(h->fh);
	return NULL;
}

static int threads_mode(int argc, char **argv, const char *file, int n)
{
	struct held a = {0}, b = {0};
	pthread_t ta, tb;
	int *buf = calloc((size_t)n + 1, sizeof(int));
	MPI_File fh;
	if (!buf || MPI_Init(&argc, &argv) != MPI_SUCCESS ||
	    MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL,
			  &fh) != MPI_SUCCESS)
		return 1;
	pipes(&a);
	pipes(&b);
	a.fh = b.fh = fh;
	a.n = n;
	a.buf = buf;
	pthread_create(&ta, NULL, write_thread, &a);
	wait_inside(&a); /* A: inside its write */
	pthread_create(&tb, NULL, sync_thread, &b);
	wait_inside(&b); /* B: inside its sync */
	release(&a);
	pthread_join(ta, NULL);
	release(&b);
	pthread_join(tb, NULL);
	printf("write %d sync %d\n", a.rc, b.rc);
	MPI_File_close(&fh);
	MPI_Finalize();
	free(buf);
	return 0;
}

static void *wait_thread(void *arg)
{
	struct held *h = arg;
	wait_inside(h); /* the main thread is inside its write */
	h->rc = VELOC_Checkpoint_wait();
	release(h);
	return NULL;
}

static int flush_mode(int argc, char **argv, const char *cfg, const char *file, int n)
{
	struct held w = {0};
	pthread_t tw;
	int *buf = calloc((size_t)n + 1, sizeof(int));
	MPI_File fh;
	if (!buf || VELOC_Init_single(0, cfg) || VELOC_Mem_protect(0, data, 1000, sizeof(double)) ||
	    MPI_Init(&argc, &argv) != MPI_SUCCESS ||
	    MPI_File_open(MPI_COMM_WORLD, file, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL,
			  &fh) != MPI_SUCCESS)
		return 1;
	int c = VELOC_Checkpoint_begin("f", 0) || VELOC_Checkpoint_mem() || VELOC_Checkpoint_end(1);
	pipes(&w);
	pthread_create(&tw, NULL, wait_thread, &w);
	fake_mpi_hold(w.in[1], w.rel[0]);
	int rc = MPI_File_write(fh, buf, n, MPI_INT, MPI_STATUS_IGNORE);
	pthread_join(tw, NULL);
	printf("flush: checkpoint %d write %d wait %d finalize %d\n", c, rc, w.rc, VELOC_Finalize(1));
	MPI_File_close(&fh);
	MPI_Finalize();
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "flush"))
		return flush_mode(argc, argv, argv[2], argv[3], atoi(argv[4]));
	if (argc == 3 && !strcmp(argv[1], "fork"))
		return fork_mode(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "threads"))
		return threads_mode(argc, argv, argv[2], atoi(argv[3]));
	return 2;
}
