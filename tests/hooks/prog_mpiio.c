/* Test program for the MPI-IO hook (tests/cluster/test_plugin_hooks.py):
 * writes a file with the MPI-IO calls libjoulestep-mpiio.so marks, each
 * with a count derived from N, and prints one line per call with its
 * return code. Compiled against mpi.h, linked with tests/hooks/fake_mpi.c.
 *   prog_mpiio FILE N */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(what, call) printf("%s %d\n", what, (call))

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	int n = atoi(argv[2]);
	/* enough for the largest call below (3n bytes, 2n doubles, 11 doubles) */
	double *buf = calloc((size_t)(3 * n + 16), sizeof(double));
	MPI_File fh;
	MPI_Request rq;
	if (!buf || MPI_Init(&argc, &argv) != MPI_SUCCESS ||
	    MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL,
			  &fh) != MPI_SUCCESS)
		return 1;
	CHECK("write", MPI_File_write(fh, buf, n, MPI_INT, MPI_STATUS_IGNORE));
	CHECK("write_at", MPI_File_write_at(fh, 0, buf, 2 * n, MPI_DOUBLE, MPI_STATUS_IGNORE));
	CHECK("write_all", MPI_File_write_all(fh, buf, 3 * n, MPI_BYTE, MPI_STATUS_IGNORE));
	CHECK("write_at_all", MPI_File_write_at_all(fh, 0, buf, n, MPI_DOUBLE, MPI_STATUS_IGNORE));
	CHECK("write_shared", MPI_File_write_shared(fh, buf, 5, MPI_INT, MPI_STATUS_IGNORE));
	CHECK("write_ordered", MPI_File_write_ordered(fh, buf, 7, MPI_INT, MPI_STATUS_IGNORE));
	CHECK("write_all_begin", MPI_File_write_all_begin(fh, buf, n, MPI_INT));
	CHECK("write_all_end", MPI_File_write_all_end(fh, buf, MPI_STATUS_IGNORE));
	CHECK("iwrite", MPI_File_iwrite(fh, buf, 11, MPI_DOUBLE, &rq));
	CHECK("wait", MPI_Wait(&rq, MPI_STATUS_IGNORE));
	CHECK("iwrite_at_all", MPI_File_iwrite_at_all(fh, 0, buf, 2 * n, MPI_BYTE, &rq));
	CHECK("wait", MPI_Wait(&rq, MPI_STATUS_IGNORE));
	/* a failing call: the fake knows no MPI_FLOAT */
	CHECK("write_bad_type", MPI_File_write(fh, buf, n, MPI_FLOAT, MPI_STATUS_IGNORE) != MPI_SUCCESS);
	CHECK("sync", MPI_File_sync(fh));
	CHECK("close", MPI_File_close(&fh));
	MPI_Finalize();
	free(buf);
	return 0;
}
