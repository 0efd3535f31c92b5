// js-ckpt-gio: synchronous checkpoints with the real HACC GenericIO (`make
// iolibs` or a site's GENERICIO_ROOT), one blocking `checkpoint` phase per
// checkpoint (Wilkins 2022; docs/science.md §2; docs/experiments.md).
//
//   js-ckpt-gio --pfs DIR [--size N | --total N] [--reps R] [--io posix|mpiio]
//               [--files M] [--keep] [--quiet]
//
// Each rank holds N bytes of state (doubles: N is rounded down to 8) as one
// GenericIO variable and writes it R times with GenericIO::write into
// DIR/ckpt-<job>.<rep>: GenericIO's N->M aggregation puts the ranks of a
// partition into one file (`<name>#<partition>`, and `<name>` its map);
// --files M sets partition = rank % M, else GenericIO's own default (one per
// node name). --io: GenericIO's POSIX (default, the paper's choice from
// 2 GiB per rank) or MPI-IO file I/O. GenericIO has no shared library and no
// install: there is no call to hook, so the phases are marked here, around
// the call, with a barrier on each side. Bytes: the rank's state.
#include <dirent.h>
#include <getopt.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "GenericIO.h"
#include "joulestep/client.h"

namespace {
int g_rank;

void usage()
{
	if (g_rank == 0)
		std::fprintf(stderr, "usage: js-ckpt-gio --pfs DIR [--size N | --total N] [--reps R] "
				     "[--io posix|mpiio] [--files M] [--keep] [--quiet]\n");
	MPI_Finalize();
	std::exit(2);
}

long long parse_size(const char *s)
{
	char *end;
	long long v = std::strtoll(s, &end, 10);
	long long mul = *end == 'K' ? 1LL << 10 : *end == 'M' ? 1LL << 20 : *end == 'G' ? 1LL << 30 : 1;
	if (mul > 1)
		end++;
	return end == s || *end || v < 0 ? -1 : v * mul;
}

// A checkpoint's files: DIR/NAME (the map) and DIR/NAME#<partition>.
void remove_ckpt(const std::string &dir, const std::string &name)
{
	std::remove((dir + "/" + name).c_str());
	DIR *d = opendir(dir.c_str());
	for (struct dirent *e; d && (e = readdir(d));)
		if (!std::strncmp(e->d_name, (name + "#").c_str(), name.size() + 1))
			std::remove((dir + "/" + e->d_name).c_str());
	if (d)
		closedir(d);
}

void marker(int rc)
{
	static bool told;
	if (rc < 0 && !told) {
		told = true;
		std::fprintf(stderr, "js-ckpt-gio: phase marker: %s\n", std::strerror(-rc));
	}
}
} // namespace

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int nranks;
	MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	static const struct option lo[] = {{"pfs", 1, 0, 'p'}, {"size", 1, 0, 'n'},
		{"total", 1, 0, 't'}, {"reps", 1, 0, 'r'}, {"io", 1, 0, 'i'}, {"files", 1, 0, 'm'},
		{"keep", 0, 0, 'k'}, {"quiet", 0, 0, 'q'}, {0, 0, 0, 0}};
	const char *pfs = nullptr;
	long long size = 16LL << 20, total = -1;
	int reps = 3, files = 0, keep = 0, quiet = 0, mpiio = 0, c;
	while ((c = getopt_long(argc, argv, "", lo, nullptr)) != -1) {
		switch (c) {
		case 'p': pfs = optarg; break;
		case 'n': size = parse_size(optarg); break;
		case 't': total = parse_size(optarg); if (total < 0) usage(); break;
		case 'r': reps = std::atoi(optarg); break;
		case 'i':
			if (std::strcmp(optarg, "mpiio") && std::strcmp(optarg, "posix"))
				usage();
			mpiio = !std::strcmp(optarg, "mpiio");
			break;
		case 'm': files = std::atoi(optarg); break;
		case 'k': keep = 1; break;
		case 'q': quiet = 1; break;
		default: usage();
		}
	}
	if (!pfs || optind != argc || size < 0 || reps < 1 || files < 0)
		usage();
	long long my = total >= 0 ? total / nranks + (g_rank < total % nranks) : size;
	size_t n = (size_t)my / sizeof(double);
	my = (long long)(n * sizeof(double));
	gio::GenericIO::setNaturalDefaultPartition();
	if (files > 0)
		gio::GenericIO::setDefaultPartition(g_rank % files);
	const char *job = std::getenv("SLURM_JOB_ID");
	js_phase_set_sync(1);

	double t_ckpt = 0;
	std::string last;
	for (int rep = 1; rep <= reps; rep++) {
		std::string base = std::string("ckpt-") + (job ? job : "0") + "." + std::to_string(rep);
		std::string name = std::string(pfs) + "/" + base;
		{
			gio::GenericIO gio(MPI_COMM_WORLD, name,
					   mpiio ? gio::GenericIO::FileIOMPI : gio::GenericIO::FileIOPOSIX);
			std::vector<double> state(n + gio.requestedExtraSpace() / sizeof(double));
			for (size_t i = 0; i < n; i++)
				state[i] = g_rank * 1e6 + rep + (double)i;
			gio.setNumElems(n);
			gio.addVariable("state", state.data(), gio::GenericIO::VarHasExtraSpace);
			MPI_Barrier(MPI_COMM_WORLD);
			double t0 = MPI_Wtime();
			marker(js_phase_begin("checkpoint", "genericio"));
			gio.write();
			marker(js_phase_end(my));
			double t1 = MPI_Wtime();
			MPI_Barrier(MPI_COMM_WORLD);
			t_ckpt += t1 - t0;
			if (!quiet)
				std::printf("js-ckpt-gio: rank %d rep %d checkpoint_s=%.6f bytes=%lld\n",
					    g_rank, rep, t1 - t0, my);
		}
		if (g_rank == 0 && !last.empty())
			remove_ckpt(pfs, last);
		last = base;
	}
	MPI_Barrier(MPI_COMM_WORLD);
	if (g_rank == 0 && !keep)
		remove_ckpt(pfs, last); // --keep: the last checkpoint stays
	long long all;
	double tc;
	MPI_Reduce(&my, &all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	MPI_Reduce(&t_ckpt, &tc, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	if (g_rank == 0)
		std::printf("js-ckpt-gio: summary library=GenericIO io=%s ranks=%d reps=%d "
			    "bytes_per_ckpt=%lld checkpoint_s=%.6f\n",
			    mpiio ? "mpiio" : "posix", nranks, reps, all, tc);
	MPI_Finalize();
	return 0;
}
