/* js-ckpt: synchronous (GenericIO-like) vs asynchronous (VELOC-like)
 * checkpointing, with joulestep phase markers (docs/science.md §2, Wilkins 2022
 * Algorithm 1; docs/experiments.md "Checkpointing").
 *
 * Each rank holds N bytes of state and checkpoints it R times.
 *   sync  --io mpiio: one `checkpoint` phase per checkpoint: MPI-IO collective
 *                     writes (MPI_File_write_at_all) of N ranks into M
 *                     aggregated files in the "parallel FS" directory
 *                     (GenericIO's N->M aggregation);
 *         --io posix: the same layout written with pwrite by every rank
 *                     (GenericIO's POSIX mode, used by the paper from 2 GiB
 *                     per rank);
 *   async:            `checkpoint` = blocking write of the rank's file to the
 *                     local tier (DRAM tmpfs or local disk), then `flush` =
 *                     from the end of that write until the wait for the
 *                     background thread that copies the file (mmap + write,
 *                     file per process) to the parallel FS returns.
 * Every rank marks its own phases and reports its bytes on each END. */
#include <getopt.h>
#include <pthread.h>
#include <sys/mman.h>

#include "jsbench.h"

#define CHUNK (1LL << 30) /* largest single write / MPI count */

enum fsync_mode { FSYNC_NONE, FSYNC_PFS, FSYNC_ALL };

struct opts {
	int async;
	int posix;
	long long size, total;
	int reps;
	const char *pfs, *local;
	int files;
	double compute_s;
	enum fsync_mode fsync;
	int keep, quiet, async_markers;
};

static int g_rank, g_nranks;

static void usage(void)
{
	if (g_rank == 0)
		fprintf(stderr,
			"usage: js-ckpt --strategy sync|async --pfs DIR [--local DIR] [options]\n"
			"  --size N        bytes of state per rank (K/M/G suffixes; default 16M)\n"
			"  --total N       bytes over all ranks instead (strong scaling)\n"
			"  --reps R        checkpoints (default 3)\n"
			"  --pfs DIR       the \"parallel file system\" directory\n"
			"  --local DIR     async: local tier (e.g. a /dev/shm dir, or local disk)\n"
			"  --io mpiio|posix  sync: MPI-IO collective (default) or POSIX writes\n"
			"  --files M       sync: aggregated files (default: one per node)\n"
			"  --compute-ms T  compute between checkpoints (async: overlaps the flush)\n"
			"  --fsync pfs|all|none  what is fsynced before a phase ends (default pfs)\n"
			"  --keep          keep the last checkpoint's files (else the local dir goes too)\n"
			"  --quiet         only the summary line\n"
			"  --async-markers do not wait for the plugin on each marker (see docs)\n");
	MPI_Finalize();
	exit(2);
}

static void parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{"strategy", 1, 0, 's'}, {"size", 1, 0, 'n'}, {"total", 1, 0, 't'},
		{"reps", 1, 0, 'r'}, {"pfs", 1, 0, 'p'}, {"local", 1, 0, 'l'},
		{"io", 1, 0, 'i'}, {"files", 1, 0, 'm'}, {"compute-ms", 1, 0, 'c'},
		{"fsync", 1, 0, 'f'}, {"keep", 0, 0, 'k'}, {"quiet", 0, 0, 'q'},
		{"async-markers", 0, 0, 'A'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	*o = (struct opts){.async = -1, .size = 16LL << 20, .total = -1, .reps = 3,
			   .fsync = FSYNC_PFS};
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			o->async = !strcmp(optarg, "async") ? 1 : !strcmp(optarg, "sync") ? 0 : -2;
			break;
		case 'n': o->size = jsb_parse_size(optarg); break;
		case 't': o->total = jsb_parse_size(optarg); if (o->total < 0) o->total = -2; break;
		case 'r': o->reps = atoi(optarg); break;
		case 'p': o->pfs = optarg; break;
		case 'l': o->local = optarg; break;
		case 'i':
			o->posix = !strcmp(optarg, "posix") ? 1 : !strcmp(optarg, "mpiio") ? 0 : -1;
			break;
		case 'm': o->files = atoi(optarg); if (o->files < 1) o->files = -1; break;
		case 'c': o->compute_s = atof(optarg) / 1e3; break;
		case 'f':
			o->fsync = !strcmp(optarg, "none") ? FSYNC_NONE : !strcmp(optarg, "all") ? FSYNC_ALL
				 : !strcmp(optarg, "pfs") ? FSYNC_PFS : (enum fsync_mode)-1;
			break;
		case 'k': o->keep = 1; break;
		case 'q': o->quiet = 1; break;
		case 'A': o->async_markers = 1; break;
		default: usage();
		}
	}
	if (optind != argc || o->async < 0 || o->size < 0 || o->total == -2 || o->reps < 1 ||
	    !o->pfs || (o->async && !o->local) || o->posix < 0 || o->files < 0 ||
	    o->compute_s < 0 || (int)o->fsync < 0)
		usage();
}

/* ------------------------------------------------------------ compute */
static volatile double g_sink;

static void compute_for(double seconds)
{
	double x = 1.0, end = jsb_now() + seconds;
	while (jsb_now() < end)
		for (int i = 0; i < 20000; i++)
			x = x * 1.0000001 + 1e-9;
	g_sink = x;
}

/* ------------------------------------------------------- flush thread */
struct flusher {
	pthread_t tid;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	char src[4096], dst[4096];
	size_t len;
	int fsync;
	int pending, done, quit, err;
};

static int copy_file(const char *src, const char *dst, size_t len, int do_fsync)
{
	int in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (out < 0) {
		int e = -errno;
		close(in);
		return e;
	}
	int rc = 0;
	if (len) {
		void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, in, 0);
		if (m == MAP_FAILED)
			rc = -errno;
		else {
			rc = jsb_pwrite_all(out, m, len, 0);
			munmap(m, len);
		}
	}
	if (!rc && do_fsync && fsync(out) < 0)
		rc = -errno;
	if (close(out) < 0 && !rc)
		rc = -errno;
	close(in);
	return rc;
}

static void *flush_main(void *arg)
{
	struct flusher *f = arg;
	pthread_mutex_lock(&f->mu);
	for (;;) {
		while (!f->pending && !f->quit)
			pthread_cond_wait(&f->cv, &f->mu);
		if (f->quit)
			break;
		f->pending = 0;
		pthread_mutex_unlock(&f->mu);
		int rc = copy_file(f->src, f->dst, f->len, f->fsync);
		pthread_mutex_lock(&f->mu);
		f->err = rc;
		f->done = 1;
		pthread_cond_broadcast(&f->cv);
	}
	pthread_mutex_unlock(&f->mu);
	return NULL;
}

static void flush_start(struct flusher *f, const char *src, const char *dst, size_t len)
{
	pthread_mutex_lock(&f->mu);
	snprintf(f->src, sizeof(f->src), "%s", src);
	snprintf(f->dst, sizeof(f->dst), "%s", dst);
	f->len = len;
	f->done = 0;
	f->pending = 1;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static int flush_wait(struct flusher *f)
{
	pthread_mutex_lock(&f->mu);
	while (!f->done)
		pthread_cond_wait(&f->cv, &f->mu);
	int rc = f->err;
	pthread_mutex_unlock(&f->mu);
	return rc;
}

/* ------------------------------------------------------------- writes */
static void write_local(const char *path, const char *buf, size_t len, int do_fsync)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		jsb_die("rank %d: open %s: %s", g_rank, path, strerror(errno));
	int rc = jsb_pwrite_all(fd, buf, len, 0);
	if (!rc && do_fsync && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && !rc)
		rc = -errno;
	if (rc)
		jsb_die("rank %d: write %s: %s", g_rank, path, strerror(-rc));
}

/* GenericIO-like: the ranks of gcomm write their blocks, one after the
 * other in rank order, into one shared file. */
static void write_aggregated(const struct opts *o, MPI_Comm gcomm, const char *path,
			     const char *buf, long long len)
{
	long long off = 0;
	MPI_Exscan(&len, &off, 1, MPI_LONG_LONG, MPI_SUM, gcomm);
	int grank;
	MPI_Comm_rank(gcomm, &grank);
	if (grank == 0)
		off = 0; /* MPI_Exscan leaves rank 0's result undefined */
	int pfs_sync = o->fsync != FSYNC_NONE;
	if (o->posix) {
		int fd = -1;
		if (grank == 0)
			fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		MPI_Barrier(gcomm); /* created and truncated before anyone writes */
		if (grank != 0)
			fd = open(path, O_WRONLY | O_CLOEXEC);
		if (fd < 0)
			jsb_die("rank %d: open %s: %s", g_rank, path, strerror(errno));
		int rc = jsb_pwrite_all(fd, buf, (size_t)len, (off_t)off);
		if (!rc && pfs_sync && fsync(fd) < 0)
			rc = -errno;
		if (close(fd) < 0 && !rc)
			rc = -errno;
		if (rc)
			jsb_die("rank %d: write %s: %s", g_rank, path, strerror(-rc));
		MPI_Barrier(gcomm); /* the file is complete when every rank is done */
		return;
	}
	MPI_File fh;
	int rc = MPI_File_open(gcomm, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
	if (rc != MPI_SUCCESS)
		jsb_die("rank %d: MPI_File_open %s failed (%d)", g_rank, path, rc);
	MPI_File_set_size(fh, 0);
	/* counts are ints: write in chunks, the same number of collective calls
	 * on every rank of the file */
	long long mine = (len + CHUNK - 1) / CHUNK, rounds;
	MPI_Allreduce(&mine, &rounds, 1, MPI_LONG_LONG, MPI_MAX, gcomm);
	long long done = 0;
	for (long long i = 0; i < rounds; i++) {
		int n = (int)(len - done < CHUNK ? len - done : CHUNK);
		rc = MPI_File_write_at_all(fh, (MPI_Offset)(off + done), buf + done, n, MPI_BYTE,
					   MPI_STATUS_IGNORE);
		if (rc != MPI_SUCCESS)
			jsb_die("rank %d: MPI_File_write_at_all %s failed (%d)", g_rank, path, rc);
		done += n;
	}
	if (pfs_sync)
		MPI_File_sync(fh);
	MPI_File_close(&fh);
}

/* ---------------------------------------------------------------- main */
struct times {
	double local, flush;
};

static void report(const struct opts *o, int rep, const char *part, double secs, long long bytes)
{
	double tmax;
	long long sum;
	MPI_Reduce(&secs, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	MPI_Reduce(&bytes, &sum, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (g_rank == 0 && !o->quiet)
		printf("js-ckpt: rep %d part=%s ranks=%d bytes=%lld seconds=%.6f GiB/s=%.3f\n", rep,
		       part, g_nranks, sum, tmax, tmax > 0 ? sum / (double)(1LL << 30) / tmax : 0.0);
}

int main(int argc, char **argv)
{
	int prov;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &prov);
	MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &g_nranks);
	struct opts o;
	parse(argc, argv, &o);
	jsb_markers_sync(!o.async_markers);

	long long my = o.size;
	if (o.total >= 0)
		my = o.total / g_nranks + (g_rank < o.total % g_nranks);
	char *state = malloc(my ? (size_t)my : 1);
	if (!state)
		jsb_die("rank %d: cannot allocate %lld bytes of state", g_rank, my);

	int *node_of = malloc(sizeof(int) * (size_t)g_nranks);
	if (!node_of)
		jsb_die("out of memory");
	int nnodes = jsb_nodes(MPI_COMM_WORLD, node_of);
	free(node_of);
	int files = o.files ? o.files : nnodes;
	if (files > g_nranks)
		files = g_nranks;
	MPI_Comm gcomm = MPI_COMM_NULL;
	int group = (int)((long long)g_rank * files / g_nranks);
	if (!o.async)
		MPI_Comm_split(MPI_COMM_WORLD, group, g_rank, &gcomm);

	/* file names unique per step (concurrent runs share the directories) */
	char prefix[128];
	const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
	long pid0 = (long)getpid();
	MPI_Bcast(&pid0, 1, MPI_LONG, 0, MPI_COMM_WORLD);
	if (job && step)
		snprintf(prefix, sizeof(prefix), "ckpt-%s.%s", job, step);
	else
		snprintf(prefix, sizeof(prefix), "ckpt-p%ld", pid0);
	if (g_rank == 0) {
		jsb_mkdir(o.pfs);
		if (o.async)
			jsb_mkdir(o.local);
	}
	if (o.async && g_rank != 0)
		jsb_mkdir(o.local); /* node-local: every node makes its own */
	MPI_Barrier(MPI_COMM_WORLD);

	struct flusher fl = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
			     .fsync = o.fsync != FSYNC_NONE};
	if (o.async && pthread_create(&fl.tid, NULL, flush_main, &fl))
		jsb_die("rank %d: cannot start the flush thread", g_rank);

	double t_local = 0, t_flush = 0;
	for (int rep = 1; rep <= o.reps; rep++) {
		char label[32], lpath[4096], ppath[4096];
		snprintf(label, sizeof(label), "ckpt-%d", rep);
		memset(state, (g_rank * 7 + rep) & 0xff, (size_t)my); /* the new state */
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = jsb_now(), t1, t2;
		if (!o.async) {
			snprintf(ppath, sizeof(ppath), "%s/%s.gio.%d.%d", o.pfs, prefix, rep, group);
			jsb_begin("checkpoint", label);
			write_aggregated(&o, gcomm, ppath, state, my);
			jsb_end(my);
			t1 = t2 = jsb_now();
			if (o.compute_s > 0)
				compute_for(o.compute_s);
		} else {
			snprintf(lpath, sizeof(lpath), "%s/%s.veloc.%d.%d", o.local, prefix, rep, g_rank);
			snprintf(ppath, sizeof(ppath), "%s/%s.veloc.%d.%d", o.pfs, prefix, rep, g_rank);
			jsb_begin("checkpoint", label);
			write_local(lpath, state, (size_t)my, o.fsync == FSYNC_ALL);
			jsb_end(my);
			t1 = jsb_now();
			/* the node's local phase ends before its flush begins: RAPL is per
			 * package, overlapping parts would count the same joules twice */
			MPI_Barrier(MPI_COMM_WORLD);
			/* Algorithm 1: the flush phase runs from here until wait returns */
			jsb_begin("flush", label);
			flush_start(&fl, lpath, ppath, (size_t)my);
			if (o.compute_s > 0)
				compute_for(o.compute_s);
			int rc = flush_wait(&fl);
			if (rc)
				jsb_die("rank %d: flush %s -> %s: %s", g_rank, lpath, ppath, strerror(-rc));
			jsb_end(my);
			t2 = jsb_now();
		}
		t_local += t1 - t0;
		t_flush += t2 - t1;
		report(&o, rep, o.async ? "local" : "sync", t1 - t0, my);
		if (o.async)
			report(&o, rep, "flush", t2 - t1, my);
		MPI_Barrier(MPI_COMM_WORLD);
		if (!(o.keep && rep == o.reps)) {
			if (o.async)
				unlink(lpath);
			int grank = 0;
			if (gcomm != MPI_COMM_NULL)
				MPI_Comm_rank(gcomm, &grank);
			if (o.async || grank == 0)
				unlink(ppath);
		}
	}
	if (o.async) {
		pthread_mutex_lock(&fl.mu);
		fl.quit = 1;
		pthread_cond_broadcast(&fl.cv);
		pthread_mutex_unlock(&fl.mu);
		pthread_join(fl.tid, NULL);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	if (o.async && !o.keep)
		rmdir(o.local); /* the local tier is scratch: gone once empty (every node) */
	long long total;
	MPI_Reduce(&my, &total, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	double tl, tf;
	MPI_Reduce(&t_local, &tl, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	MPI_Reduce(&t_flush, &tf, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	if (g_rank == 0)
		printf("js-ckpt: summary strategy=%s io=%s ranks=%d nodes=%d files=%d reps=%d "
		       "bytes_per_ckpt=%lld local_s=%.6f flush_s=%.6f\n",
		       o.async ? "async" : "sync", o.async ? "posix-fpp" : o.posix ? "posix" : "mpiio",
		       g_nranks, nnodes, o.async ? g_nranks : files, o.reps, total, tl, tf);
	if (gcomm != MPI_COMM_NULL)
		MPI_Comm_free(&gcomm);
	free(state);
	MPI_Finalize();
	return 0;
}
