/* js-damaris: the I/O approaches of Dorier et al. (FGCS 2016) and Yildiz et
 * al. (DIDC 2014), docs/science.md §5, on a 3-D stencil with joulestep phase
 * markers (docs/experiments.md "I/O approaches (Damaris)").
 *
 * A fixed global domain NX x NY x NZ (doubles) is split along z among the
 * compute ranks, which run a 7-point Jacobi stencil (halo exchange with MPI)
 * and produce an output of `vars` copies of their block every K iterations:
 *   tp      time partitioning: every rank computes, stops and writes its own
 *           file (file per process, as CM1 with HDF5);
 *   dc      dedicated cores: on every node the last k ranks are writers; the
 *           other ranks hand their output to a writer of their node (MPI
 *           send, shared memory within a node) and compute on while it writes;
 *   dn      dedicated nodes c:d: all ranks of the last d/(c+d) of the nodes
 *           are writers, fed over MPI by the compute ranks of the others.
 * Writers write one file per output with their clients' data (as Damaris'
 * dedicated cores do). Phases (docs/experiments.md has the table):
 *   compute ranks  `compute` label sim  - the K iterations between outputs
 *                  `send`    label dc|dn - hand-off of the output (bytes)
 *   writer ranks   `write`   label tp|dc|dn - the write of the output (bytes)
 * so a record's ranks[] says which ranks computed and which wrote. Idle
 * writers wait for data polling with short sleeps (Damaris' dedicated cores
 * block on a queue), not busy-waiting in MPI. */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <sys/resource.h>

#include "jsbench.h"

enum mode { TP, DC, DN };
static const char *mode_name[] = {"tp", "dc", "dn"};

struct opts {
	enum mode mode;
	int k;            /* dc: writers per node */
	int c, d;         /* dn: compute:dedicated node ratio */
	long long nx, ny, nz;
	int iters, every, vars;
	const char *out;
	int fsync, keep, quiet, async_markers;
};

static int g_rank, g_nranks;

static void usage(void)
{
	if (g_rank == 0)
		fprintf(stderr,
			"usage: js-damaris --mode tp|dc|dn --out DIR [options]\n"
			"  --dedicated K   dc: writer ranks per node (default 1)\n"
			"  --ratio C:D     dn: compute to dedicated nodes (default 1:1)\n"
			"  --grid NX,NY,NZ global domain in doubles, or NXxNYxNZ (default 64,64,64)\n"
			"  --iters N       iterations (default 20)\n"
			"  --every K       iterations between outputs (default 5)\n"
			"  --vars V        variables per output: output = V x the domain (default 1)\n"
			"  --out DIR       output directory (the \"parallel FS\")\n"
			"  --no-fsync      do not fsync output files\n"
			"  --keep          keep the output files\n"
			"  --quiet         only the summary lines\n"
			"  --async-markers do not wait for the plugin on each marker\n");
	MPI_Finalize();
	exit(2);
}

static void parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{"mode", 1, 0, 'm'}, {"dedicated", 1, 0, 'k'}, {"ratio", 1, 0, 'r'},
		{"grid", 1, 0, 'g'}, {"iters", 1, 0, 'n'}, {"every", 1, 0, 'e'},
		{"vars", 1, 0, 'v'}, {"out", 1, 0, 'o'}, {"no-fsync", 0, 0, 'F'},
		{"keep", 0, 0, 'K'}, {"quiet", 0, 0, 'q'}, {"async-markers", 0, 0, 'A'},
		{"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	*o = (struct opts){.mode = (enum mode)-1, .k = 1, .c = 1, .d = 1, .nx = 64, .ny = 64,
			   .nz = 64, .iters = 20, .every = 5, .vars = 1, .fsync = 1};
	int ch, bad = 0;
	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (ch) {
		case 'm':
			o->mode = !strcmp(optarg, "tp") ? TP : !strcmp(optarg, "dc") ? DC
				: !strcmp(optarg, "dn") ? DN : (enum mode)-1;
			break;
		case 'k': o->k = atoi(optarg); break;
		case 'r': bad |= sscanf(optarg, "%d:%d", &o->c, &o->d) != 2; break;
		case 'g': /* NX,NY,NZ or NXxNYxNZ (no commas: sbatch --export splits on them) */
			bad |= sscanf(optarg, "%lld,%lld,%lld", &o->nx, &o->ny, &o->nz) != 3 &&
			       sscanf(optarg, "%lldx%lldx%lld", &o->nx, &o->ny, &o->nz) != 3;
			break;
		case 'n': o->iters = atoi(optarg); break;
		case 'e': o->every = atoi(optarg); break;
		case 'v': o->vars = atoi(optarg); break;
		case 'o': o->out = optarg; break;
		case 'F': o->fsync = 0; break;
		case 'K': o->keep = 1; break;
		case 'q': o->quiet = 1; break;
		case 'A': o->async_markers = 1; break;
		default: usage();
		}
	}
	if (bad || optind != argc || (int)o->mode < 0 || o->k < 1 || o->c < 1 || o->d < 1 ||
	    o->nx < 3 || o->ny < 3 || o->nz < 1 || o->iters < 1 || o->every < 1 || o->vars < 1 ||
	    !o->out)
		usage();
}

/* ---------------------------------------------------------------- roles */
struct roles {
	int *writer_of;  /* rank -> its writer rank (itself for TP), -1 for writers in DC/DN */
	int *is_writer;  /* rank -> 1 if it writes */
	int *comp_index; /* rank -> index among compute ranks, -1 for dedicated writers */
	int ncomp, nwriters, nnodes;
	int *node_of;
};

static void assign_roles(const struct opts *o, struct roles *R)
{
	int n = g_nranks;
	R->writer_of = calloc((size_t)n, sizeof(int));
	R->is_writer = calloc((size_t)n, sizeof(int));
	R->comp_index = calloc((size_t)n, sizeof(int));
	R->node_of = calloc((size_t)n, sizeof(int));
	if (!R->writer_of || !R->is_writer || !R->comp_index || !R->node_of)
		jsb_die("out of memory");
	R->nnodes = jsb_nodes(MPI_COMM_WORLD, R->node_of);
	if (o->mode == TP) {
		for (int r = 0; r < n; r++)
			R->writer_of[r] = r, R->is_writer[r] = 1;
	} else if (o->mode == DC) {
		/* the last k ranks of every node write for the node's other ranks */
		for (int nd = 0; nd < R->nnodes; nd++) {
			int cnt = 0, idx = 0;
			for (int r = 0; r < n; r++)
				cnt += R->node_of[r] == nd;
			if (cnt <= o->k)
				jsb_die("dc: node %d has %d ranks, needs more than --dedicated %d", nd, cnt, o->k);
			int *w = calloc((size_t)n, sizeof(int)), nw = 0;
			for (int r = 0; r < n; r++)
				if (R->node_of[r] == nd && idx++ >= cnt - o->k)
					w[nw++] = r, R->is_writer[r] = 1;
			int ci = 0;
			for (int r = 0; r < n; r++)
				if (R->node_of[r] == nd && !R->is_writer[r])
					R->writer_of[r] = w[ci++ % nw];
			free(w);
		}
	} else {
		if (R->nnodes < 2)
			jsb_die("dn: needs at least 2 nodes, the job has %d", R->nnodes);
		int nio = (int)lround((double)R->nnodes * o->d / (o->c + o->d));
		nio = nio < 1 ? 1 : nio >= R->nnodes ? R->nnodes - 1 : nio;
		int first_io = R->nnodes - nio, nw = 0;
		int *w = calloc((size_t)n, sizeof(int));
		for (int r = 0; r < n; r++)
			if (R->node_of[r] >= first_io)
				w[nw++] = r, R->is_writer[r] = 1;
		int ci = 0;
		for (int r = 0; r < n; r++)
			if (!R->is_writer[r])
				R->writer_of[r] = w[ci++ % nw];
		free(w);
	}
	R->ncomp = R->nwriters = 0;
	for (int r = 0; r < n; r++) {
		if (o->mode != TP && R->is_writer[r])
			R->writer_of[r] = -1, R->comp_index[r] = -1;
		else
			R->comp_index[r] = R->ncomp++;
		R->nwriters += R->is_writer[r];
	}
}

/* ------------------------------------------------------------- waiting */
/* Wait for requests without spinning: idle writers (and clients waiting for
 * a busy writer) sleep between tests, as Damaris' dedicated cores block. */
static void wait_idle(int n, MPI_Request *req)
{
	int flag = 0;
	struct timespec ts = {0, 200000};
	for (;;) {
		MPI_Testall(n, req, &flag, MPI_STATUSES_IGNORE);
		if (flag)
			return;
		nanosleep(&ts, NULL);
	}
}

static long long write_file(const char *path, const char *buf, size_t len, int do_fsync)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		jsb_die("rank %d: open %s: %s", g_rank, path, strerror(errno));
	int rc = jsb_pwrite_all(fd, buf, len, 0);
	if (!rc && do_fsync && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && !rc)
		rc = -errno;
	if (rc)
		jsb_die("rank %d: write %s: %s", g_rank, path, strerror(-rc));
	return (long long)len;
}

/* ------------------------------------------------------------- stencil */
struct field {
	long long nx, ny, nzl; /* local planes, plus one halo plane each side */
	double *a, *b;
	int up, down;          /* neighbour compute ranks (world ranks) or MPI_PROC_NULL */
};

#define AT(f, p, x, y, z) ((p)[((z) + 1) * (f)->nx * (f)->ny + (y) * (f)->nx + (x)])

static void step(struct field *f, MPI_Comm comp)
{
	long long plane = f->nx * f->ny;
	/* halo exchange along z (counts fit: a plane is checked below 2^31) */
	MPI_Sendrecv(&AT(f, f->a, 0, 0, f->nzl - 1), (int)plane, MPI_DOUBLE, f->up, 1,
		     &AT(f, f->a, 0, 0, -1), (int)plane, MPI_DOUBLE, f->down, 1, comp, MPI_STATUS_IGNORE);
	MPI_Sendrecv(&AT(f, f->a, 0, 0, 0), (int)plane, MPI_DOUBLE, f->down, 2,
		     &AT(f, f->a, 0, 0, f->nzl), (int)plane, MPI_DOUBLE, f->up, 2, comp, MPI_STATUS_IGNORE);
	for (long long z = 0; z < f->nzl; z++)
		for (long long y = 1; y < f->ny - 1; y++)
			for (long long x = 1; x < f->nx - 1; x++)
				AT(f, f->b, x, y, z) = (AT(f, f->a, x, y, z) * 2.0 +
					AT(f, f->a, x - 1, y, z) + AT(f, f->a, x + 1, y, z) +
					AT(f, f->a, x, y - 1, z) + AT(f, f->a, x, y + 1, z) +
					AT(f, f->a, x, y, z - 1) + AT(f, f->a, x, y, z + 1)) / 8.0;
	double *t = f->a;
	f->a = f->b;
	f->b = t;
}

/* CPU time of this process (user + system), for the CPU usage per rank
 * and node that Yildiz's Table 1 reports (the records have none). */
static double cpu_seconds(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

/* ---------------------------------------------------------------- main */
int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &g_nranks);
	struct opts o;
	parse(argc, argv, &o);
	jsb_markers_sync(!o.async_markers);
	struct roles R;
	assign_roles(&o, &R);
	if (o.nz < R.ncomp)
		jsb_die("--grid: NZ=%lld is less than the %d compute ranks", o.nz, R.ncomp);
	if (o.nx * o.ny > (1LL << 28))
		jsb_die("--grid: an XY plane of %lld points is too large", o.nx * o.ny);

	int me_comp = R.comp_index[g_rank] >= 0;
	MPI_Comm comp;
	MPI_Comm_split(MPI_COMM_WORLD, me_comp ? 0 : MPI_UNDEFINED, g_rank, &comp);
	int noutputs = o.iters / o.every;
	const char *label = mode_name[o.mode];

	/* the compute ranks' z slabs, their output sizes (every rank knows all) */
	long long *out_bytes = calloc((size_t)g_nranks, sizeof(long long));
	for (int r = 0; r < g_nranks; r++) {
		int ci = R.comp_index[r];
		if (ci >= 0) {
			long long nzl = o.nz / R.ncomp + (ci < o.nz % R.ncomp);
			out_bytes[r] = nzl * o.nx * o.ny * (long long)sizeof(double) * o.vars;
			if (o.mode != TP && out_bytes[r] > INT32_MAX)
				jsb_die("an output of %lld bytes per rank is too large for one message", out_bytes[r]);
		}
	}
	char prefix[128];
	const char *job = getenv("SLURM_JOB_ID"), *stp = getenv("SLURM_STEP_ID");
	long pid0 = (long)getpid();
	MPI_Bcast(&pid0, 1, MPI_LONG, 0, MPI_COMM_WORLD);
	if (job && stp)
		snprintf(prefix, sizeof(prefix), "dam-%s.%s", job, stp);
	else
		snprintf(prefix, sizeof(prefix), "dam-p%ld", pid0);
	if (g_rank == 0)
		jsb_mkdir(o.out);
	MPI_Barrier(MPI_COMM_WORLD);

	double cpu0 = cpu_seconds(), t_start = jsb_now(), t_compute = 0, t_write = 0, t_send = 0;
	long long written = 0;
	char path[4096];

	if (me_comp) {
		struct field f = {.nx = o.nx, .ny = o.ny};
		int ci = R.comp_index[g_rank];
		f.nzl = o.nz / R.ncomp + (ci < o.nz % R.ncomp);
		size_t cells = (size_t)(f.nx * f.ny * (f.nzl + 2));
		f.a = malloc(cells * sizeof(double));
		f.b = malloc(cells * sizeof(double));
		size_t fbytes = (size_t)(f.nx * f.ny * f.nzl) * sizeof(double);
		char *obuf = malloc(fbytes * (size_t)o.vars);
		if (!f.a || !f.b || !obuf)
			jsb_die("rank %d: out of memory", g_rank);
		for (size_t i = 0; i < cells; i++)
			f.a[i] = f.b[i] = (double)((i * 2654435761u + (size_t)g_rank) % 1000) / 1000.0;
		int csize;
		MPI_Comm_size(comp, &csize);
		int cr;
		MPI_Comm_rank(comp, &cr);
		f.up = cr + 1 < csize ? cr + 1 : MPI_PROC_NULL;
		f.down = cr > 0 ? cr - 1 : MPI_PROC_NULL;
		MPI_Request sreq = MPI_REQUEST_NULL;
		int it = 0;
		for (int out = 1; it < o.iters; out++) {
			int until = out <= noutputs ? out * o.every : o.iters;
			double t0 = jsb_now();
			jsb_begin("compute", "sim");
			for (; it < until; it++) {
				step(&f, comp);
				if (sreq != MPI_REQUEST_NULL) { /* progress the pending hand-off */
					int fl;
					MPI_Test(&sreq, &fl, MPI_STATUS_IGNORE);
				}
			}
			jsb_end(-1);
			t_compute += jsb_now() - t0;
			if (out > noutputs)
				break;
			double t1 = jsb_now();
			if (o.mode == TP) {
				/* the simulation stops: every rank's compute phase ends before
				 * the writes begin, and the writes end before it goes on */
				MPI_Barrier(comp);
				jsb_begin("write", label);
				for (int v = 0; v < o.vars; v++)
					memcpy(obuf + v * fbytes, &AT(&f, f.a, 0, 0, 0), fbytes);
				snprintf(path, sizeof(path), "%s/%s.tp.o%d.r%d", o.out, prefix, out, g_rank);
				long long b = write_file(path, obuf, fbytes * (size_t)o.vars, o.fsync);
				jsb_end(b);
				written += b;
				MPI_Barrier(comp);
				t_write += jsb_now() - t1;
				if (!o.keep)
					unlink(path);
			} else {
				jsb_begin("send", label);
				wait_idle(1, &sreq); /* the writer has the previous output */
				for (int v = 0; v < o.vars; v++)
					memcpy(obuf + v * fbytes, &AT(&f, f.a, 0, 0, 0), fbytes);
				MPI_Isend(obuf, (int)(fbytes * (size_t)o.vars), MPI_BYTE, R.writer_of[g_rank], out,
					  MPI_COMM_WORLD, &sreq);
				jsb_end((long long)(fbytes * (size_t)o.vars));
				t_send += jsb_now() - t1;
			}
		}
		wait_idle(1, &sreq);
		free(f.a);
		free(f.b);
		free(obuf);
	} else {
		/* a dedicated writer: receive every output of its clients, write it */
		int nc = 0;
		long long total = 0;
		for (int r = 0; r < g_nranks; r++)
			if (R.writer_of[r] == g_rank)
				nc++, total += out_bytes[r];
		int *cl = malloc(sizeof(int) * (size_t)(nc ? nc : 1));
		MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)(nc ? nc : 1));
		char *buf = malloc(total ? (size_t)total : 1);
		if (!cl || !req || !buf)
			jsb_die("rank %d: out of memory", g_rank);
		nc = 0;
		for (int r = 0; r < g_nranks; r++)
			if (R.writer_of[r] == g_rank)
				cl[nc++] = r;
		int widx = 0;
		for (int r = 0; r < g_rank; r++)
			widx += R.is_writer[r];
		for (int out = 1; out <= noutputs; out++) {
			long long off = 0;
			for (int i = 0; i < nc; i++) {
				MPI_Irecv(buf + off, (int)out_bytes[cl[i]], MPI_BYTE, cl[i], out, MPI_COMM_WORLD,
					  &req[i]);
				off += out_bytes[cl[i]];
			}
			wait_idle(nc, req);
			double t1 = jsb_now();
			jsb_begin("write", label);
			snprintf(path, sizeof(path), "%s/%s.%s.o%d.w%d", o.out, prefix, label, out, widx);
			long long b = write_file(path, buf, (size_t)total, o.fsync);
			jsb_end(b);
			written += b;
			t_write += jsb_now() - t1;
			if (!o.keep)
				unlink(path);
		}
		free(cl);
		free(req);
		free(buf);
	}
	double t_end = jsb_now();
	double cpu = cpu_seconds() - cpu0;
	MPI_Barrier(MPI_COMM_WORLD);
	double runtime = jsb_now() - t_start;

	/* per-rank lines, in rank order, from rank 0 */
	double mine[6] = {t_compute, t_send, t_write, (double)written, cpu / (t_end - t_start),
			  (double)R.node_of[g_rank]};
	double *all = g_rank == 0 ? malloc(sizeof(mine) * (size_t)g_nranks) : NULL;
	MPI_Gather(mine, 6, MPI_DOUBLE, all, 6, MPI_DOUBLE, 0, MPI_COMM_WORLD);
	if (g_rank == 0) {
		long long total_written = 0;
		for (int r = 0; r < g_nranks; r++) {
			double *m = all + 6 * r;
			total_written += (long long)m[3];
			if (!o.quiet)
				printf("js-damaris: rank %d node %d role %s compute_s=%.4f send_s=%.4f "
				       "write_s=%.4f bytes=%lld cpu_usage=%.3f\n", r, (int)m[5],
				       R.comp_index[r] >= 0 ? (R.is_writer[r] ? "compute+write" : "compute")
							    : "write", m[0], m[1], m[2], (long long)m[3], m[4]);
		}
		for (int nd = 0; nd < R.nnodes; nd++) {
			double u = 0;
			int cnt = 0;
			for (int r = 0; r < g_nranks; r++)
				if ((int)all[6 * r + 5] == nd)
					u += all[6 * r + 4], cnt++;
			printf("js-damaris: node %d ranks=%d cpu_usage=%.3f\n", nd, cnt, cnt ? u / cnt : 0);
		}
		printf("js-damaris: summary mode=%s ranks=%d nodes=%d compute_ranks=%d writers=%d "
		       "iters=%d every=%d outputs=%d bytes_per_output=%lld bytes=%lld runtime_s=%.4f\n",
		       label, g_nranks, R.nnodes, R.ncomp, R.nwriters, o.iters, o.every, noutputs,
		       noutputs ? total_written / noutputs : 0, total_written, runtime);
		free(all);
	}
	free(out_bytes);
	if (comp != MPI_COMM_NULL)
		MPI_Comm_free(&comp);
	MPI_Finalize();
	return 0;
}
