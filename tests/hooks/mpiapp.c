/* A plugin-like module linked against the MPI library, for prog_dlopen: the
 * program dlopen()s it with RTLD_LOCAL, so the MPI library is outside the
 * global scope and the hook must find PMPI_File_write by another way than
 * RTLD_NEXT (as with a Python extension linked against libmpi). */
#include <mpi.h>

__attribute__((visibility("default"))) int mpiapp_write(const char *path, int n_ints)
{
	static int buf[1 << 16];
	MPI_File fh;
	if (n_ints < 0 || n_ints > (int)(sizeof(buf) / sizeof(buf[0])))
		return -1;
	if (MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL,
			  &fh) != MPI_SUCCESS)
		return -1;
	int rc = MPI_File_write(fh, buf, n_ints, MPI_INT, MPI_STATUS_IGNORE);
	MPI_File_close(&fh);
	return rc;
}
