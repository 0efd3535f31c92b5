/* js-damaris-real: the I/O approaches of Dorier 2016 and Yildiz 2014 with the real
 * Damaris 1.7.1 and its HDF5 storage plugin (`make iolibs` or a site's
 * DAMARIS_ROOT; docs/experiments.md "Damaris on the real library").
 *
 *   js-damaris-real --mode tp|dc|dn --out DIR [--k K] [--nodes D]
 *                   [--grid NXxNYxNZ] [--iters N] [--every E] [--sweeps S]
 *
 * A simulation of a global NX x NY x NZ field of doubles, split along z
 * among the compute ranks (NZ divisible by their number; S passes over its
 * block per iteration: a fixed amount of work over the domain, so that a
 * dedicated core takes compute away, as in the papers), that outputs the
 * field every E of N iterations:
 *   tp: time partitioning: every rank writes its own block itself, one HDF5
 *       file per rank per output (H5Fcreate/H5Dwrite); phases `compute`
 *       (label sim) and `write` (label tp, the rank's bytes);
 *   dc: Damaris with K dedicated cores per node (<dedicated cores="K"
 *       nodes="0"/>), dn: with D dedicated nodes (<dedicated cores="0"
 *       nodes="D"/>); the clients hand their block over (damaris_write +
 *       damaris_end_iteration: phase `send`, the rank's bytes) and compute on;
 *       Damaris' servers write it with the HDF5 plugin (FilePerCore) inside
 *       the library: not marked (no call of ours to bracket; docs/design.md),
 *       their node's energy is in the step's record.
 * Damaris groups ranks into nodes by host; several slurmd on one host are
 * one node to it. Rank 0 writes the Damaris XML into DIR. */
#include <getopt.h>
#include <hdf5.h>

#include "Damaris.h"
#include "jsbench.h"

struct opts {
	char mode[4];
	const char *out;
	int k, nodes, nx, ny, nz, iters, every;
	int sweeps;
};

static int g_rank;

static void usage(void)
{
	if (g_rank == 0)
		fprintf(stderr, "usage: js-damaris-real --mode tp|dc|dn --out DIR [--k K] [--nodes D] "
				"[--grid NXxNYxNZ] [--iters N] [--every E] [--sweeps S]\n");
	MPI_Finalize();
	exit(2);
}

static void parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {{"mode", 1, 0, 'm'}, {"out", 1, 0, 'o'},
		{"k", 1, 0, 'k'}, {"nodes", 1, 0, 'd'}, {"grid", 1, 0, 'g'}, {"iters", 1, 0, 'n'},
		{"every", 1, 0, 'e'}, {"sweeps", 1, 0, 's'}, {0, 0, 0, 0}};
	*o = (struct opts){.k = 1, .nodes = 1, .nx = 32, .ny = 32, .nz = 32, .iters = 10,
			   .every = 5, .sweeps = 20};
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'm': snprintf(o->mode, sizeof(o->mode), "%s", optarg); break;
		case 'o': o->out = optarg; break;
		case 'k': o->k = atoi(optarg); break;
		case 'd': o->nodes = atoi(optarg); break;
		case 'g':
			if (sscanf(optarg, "%dx%dx%d", &o->nx, &o->ny, &o->nz) != 3)
				usage();
			break;
		case 'n': o->iters = atoi(optarg); break;
		case 'e': o->every = atoi(optarg); break;
		case 's': o->sweeps = atoi(optarg); break;
		default: usage();
		}
	}
	if (!o->out || optind != argc || (strcmp(o->mode, "tp") && strcmp(o->mode, "dc") &&
					   strcmp(o->mode, "dn")) ||
	    o->k < 1 || o->nodes < 1 || o->nx < 1 || o->ny < 1 || o->nz < 1 || o->iters < 1 ||
	    o->every < 1 || o->sweeps < 0)
		usage();
}

/* The Damaris configuration of the run (rank 0 writes it). Damaris' servers name
 * their POSIX shared-memory segment after the buffer (/dev/shm/<name>, removed and
 * made anew at start): a name of its own per job and step (tag), or two Damaris jobs
 * on one node would share one segment and crash each other. */
static void write_xml(const struct opts *o, const char *path, int clients, const char *tag)
{
	FILE *f = fopen(path, "we");
	if (!f)
		jsb_die("%s: %s", path, strerror(errno));
	fprintf(f,
		"<?xml version=\"1.0\"?>\n"
		"<simulation name=\"jsdam\" language=\"c\" xmlns=\"http://damaris.gforge.inria.fr/damaris/model\">\n"
		" <architecture>\n  <domains count=\"1\"/>\n"
		"  <dedicated cores=\"%d\" nodes=\"%d\"/>\n  <placement/>\n"
		"  <buffer name=\"jsdam-%s\" size=\"%lld\"/>\n  <queue name=\"queue\" size=\"100\"/>\n"
		" </architecture>\n <data>\n"
		"  <parameter name=\"NX\" type=\"int\" value=\"%d\"/>\n"
		"  <parameter name=\"NY\" type=\"int\" value=\"%d\"/>\n"
		"  <parameter name=\"NZ\" type=\"int\" value=\"%d\"/>\n"
		"  <parameter name=\"size\" type=\"int\" value=\"%d\"/>\n"
		"  <layout name=\"block\" type=\"double\" dimensions=\"NZ/size,NY,NX\" global=\"NZ,NY,NX\" ghosts=\"0:0,0:0,0:0\"/>\n"
		"  <variable name=\"field\" type=\"scalar\" layout=\"block\" visualizable=\"false\" time-varying=\"true\" store=\"h5\"/>\n"
		" </data>\n <storage>\n  <store name=\"h5\" type=\"HDF5\">\n"
		"   <option key=\"FileMode\">FilePerCore</option>\n"
		"   <option key=\"XDMFMode\">NoIteration</option>\n"
		"   <option key=\"FilesPath\">%s/</option>\n  </store>\n </storage>\n"
		" <actions/>\n</simulation>\n",
		strcmp(o->mode, "dc") ? 0 : o->k, strcmp(o->mode, "dn") ? 0 : o->nodes, tag,
		/* room for 4 outputs of every client in the shared buffer */
		4LL * o->nx * o->ny * o->nz * 8 + (1 << 20), o->nx, o->ny, o->nz, clients, o->out);
	fclose(f);
}

static void compute(double *a, size_t n, int sweeps, int it)
{
	for (int s = 0; s < sweeps; s++)
		for (size_t i = 1; i + 1 < n; i++)
			a[i] = 0.25 * (a[i - 1] + 2 * a[i] + a[i + 1]) + 1e-3 * (double)(it + s);
}

/* tp: the rank's block into DIR/tp-<job>-o<o>-r<rank>.h5 */
static void write_h5(const struct opts *o, const double *a, int nzl, int out)
{
	char path[4096];
	const char *job = getenv("SLURM_JOB_ID");
	snprintf(path, sizeof(path), "%s/tp-%s-o%d-r%d.h5", o->out, job ? job : "0", out, g_rank);
	hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	hsize_t dims[3] = {(hsize_t)nzl, (hsize_t)o->ny, (hsize_t)o->nx};
	hid_t sp = H5Screate_simple(3, dims, NULL);
	hid_t d = H5Dcreate2(f, "field", H5T_NATIVE_DOUBLE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	if (f < 0 || sp < 0 || d < 0 || H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, a) < 0)
		jsb_die("rank %d: HDF5 write of %s failed", g_rank, path);
	H5Dclose(d);
	H5Sclose(sp);
	H5Fclose(f);
}

/* The simulation of one compute rank (comm: the compute ranks). Returns its field,
 * which the caller frees only after the servers have it: with dedicated nodes Damaris'
 * RemoteClient hands a block over with MPI_Isend from the caller's memory and returns
 * (src/client/RemoteClient.cpp), and nothing in its API waits for that send. */
static double *simulate(const struct opts *o, MPI_Comm comm, int tp)
{
	int me, n;
	MPI_Comm_rank(comm, &me);
	MPI_Comm_size(comm, &n);
	if (o->nz % n)
		jsb_die("NZ=%d is not divisible by the %d compute ranks", o->nz, n);
	int nzl = o->nz / n;
	size_t cells = (size_t)nzl * o->ny * o->nx;
	long long bytes = (long long)cells * 8;
	double *a = calloc(cells, sizeof(double));
	if (!a)
		jsb_die("out of memory");
	if (!tp) {
		damaris_parameter_set("size", &n, sizeof(int));
		int64_t pos[3] = {(int64_t)me * nzl, 0, 0};
		damaris_set_position("field", pos);
	}
	int outputs = 0;
	for (int it = 1; it <= o->iters; it++) {
		jsb_begin("compute", "sim");
		compute(a, cells, o->sweeps, it);
		jsb_end(-1);
		if (it % o->every)
			continue;
		outputs++;
		if (tp) {
			MPI_Barrier(comm); /* the simulation stops for its output */
			jsb_begin("write", "tp");
			write_h5(o, a, nzl, outputs);
			jsb_end(bytes);
			MPI_Barrier(comm);
		} else {
			jsb_begin("send", o->mode);
			if (damaris_write("field", a) != DAMARIS_OK)
				jsb_die("rank %d: damaris_write failed", g_rank);
			damaris_end_iteration();
			jsb_end(bytes);
		}
	}
	if (me == 0)
		printf("js-damaris-real: summary library=%s mode=%s clients=%d outputs=%d "
		       "bytes_per_output=%lld\n", tp ? "HDF5" : "Damaris-1.7.1", o->mode, n, outputs,
		       bytes * n);
	return a;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int nranks;
	MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	struct opts o;
	parse(argc, argv, &o);
	jsb_markers_sync(1);
	if (!strcmp(o.mode, "tp")) {
		free(simulate(&o, MPI_COMM_WORLD, 1));
		MPI_Finalize();
		return 0;
	}
	char xml[4096], tag[64];
	const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
	snprintf(xml, sizeof(xml), "%s/damaris-%s.xml", o.out, job ? job : "0");
	snprintf(tag, sizeof(tag), "%.20s.%.20s", job ? job : "0", step ? step : "0");
	if (g_rank == 0)
		write_xml(&o, xml, 1, tag);
	MPI_Barrier(MPI_COMM_WORLD);
	if (damaris_initialize(xml, MPI_COMM_WORLD) != DAMARIS_OK)
		jsb_die("rank %d: damaris_initialize(%s) failed", g_rank, xml);
	int is_client = 0;
	double *a = NULL;
	int rc = damaris_start(&is_client);
	if ((rc == DAMARIS_OK || rc == DAMARIS_NO_SERVER) && is_client) {
		MPI_Comm comm;
		damaris_client_comm_get(&comm);
		a = simulate(&o, comm, 0);
		damaris_stop();
	}
	/* Every rank, the servers once damaris_start returned (all clients stopped): the
	 * clients make MPI progress here, so that their last blocks reach the servers,
	 * from memory still theirs. Without it (a client freed its block and left) the
	 * dedicated node waited for the last output for ever. */
	MPI_Barrier(MPI_COMM_WORLD);
	damaris_finalize();
	free(a);
	MPI_Finalize();
	return 0;
}
