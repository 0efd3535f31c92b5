/* A test double of an MPI library for the MPI-IO hook's tests and bench:
 * exports the entry points libjoulestep-mpiio.so wraps, as PMPI_* with
 * MPI_* weak aliases (as Open MPI and MPICH do), with Open MPI's ABI
 * (handles are pointers; the predefined ones are the addresses of objects
 * named like Open MPI's, so programs compile against Open MPI's mpi.h).
 *
 * Single process, no communication. Files are real: every write, at an
 * offset or not, is appended to the file (so its size is the sum of the
 * bytes written); nonblocking writes complete at once. Built without mpi.h.
 * MPI_SUCCESS = 0; errors return 1 (MPI_ERR_BUFFER), e.g. for a datatype it
 * does not know. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OK 0
#define ERR 1
#define EXPORT __attribute__((visibility("default")))
#define ALIAS(name) \
	EXPORT extern __typeof__(P##name) name __attribute__((weak, alias("P" #name)));

/* Open MPI's predefined handles: &ompi_mpi_int is MPI_INT, etc. */
EXPORT char ompi_mpi_comm_world[512], ompi_mpi_comm_self[512], ompi_mpi_info_null[512], ompi_request_null[512];
EXPORT char ompi_mpi_byte[512], ompi_mpi_char[512], ompi_mpi_int[512], ompi_mpi_double[512];
EXPORT char ompi_mpi_float[512]; /* known to the program, not to this fake: its calls fail */

struct file {
	int fd;
};

static long type_size(const void *t)
{
	if (t == ompi_mpi_byte || t == ompi_mpi_char)
		return 1;
	if (t == ompi_mpi_int)
		return (long)sizeof(int);
	if (t == ompi_mpi_double)
		return (long)sizeof(double);
	return -1;
}

EXPORT int PMPI_Init(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return OK;
}
ALIAS(MPI_Init)

EXPORT int PMPI_Finalize(void)
{
	return OK;
}
ALIAS(MPI_Finalize)

EXPORT int PMPI_Comm_rank(void *comm, int *rank)
{
	(void)comm;
	*rank = 0;
	return OK;
}
ALIAS(MPI_Comm_rank)

EXPORT int PMPI_Type_size_x(void *type, long long *size)
{
	long s = type_size(type);
	if (s < 0)
		return ERR;
	*size = s;
	return OK;
}
ALIAS(MPI_Type_size_x)

EXPORT int PMPI_Type_size(void *type, int *size)
{
	long s = type_size(type);
	if (s < 0)
		return ERR;
	*size = (int)s;
	return OK;
}
ALIAS(MPI_Type_size)

EXPORT int PMPI_File_open(void *comm, const char *name, int amode, void *info, struct file **fh)
{
	(void)comm;
	(void)amode;
	(void)info;
	struct file *f = malloc(sizeof(*f));
	if (!f)
		return ERR;
	f->fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
	if (f->fd < 0) {
		free(f);
		return ERR;
	}
	*fh = f;
	return OK;
}
ALIAS(MPI_File_open)

EXPORT int PMPI_File_close(struct file **fh)
{
	int rc = close((*fh)->fd) == 0 ? OK : ERR;
	free(*fh);
	*fh = NULL;
	return rc;
}
ALIAS(MPI_File_close)

/* For the hooks' fork and thread tests (tests/hooks/prog_hooks_mt.c): a
 * thread that called fake_mpi_hold(in, rel) first makes its next
 * MPI_File_write* or MPI_File_sync write one byte to `in` and wait for one
 * byte on `rel`, i.e. stay inside the wrapped library until released (as a
 * slow write or a VELOC call waiting for its backend would). Per thread. */
static __thread int hold_in = -1, hold_rel = -1;

EXPORT void fake_mpi_hold(int in, int rel)
{
	hold_in = in;
	hold_rel = rel;
}

static void held(void)
{
	char c = 'h';
	if (hold_in < 0)
		return;
	int in = hold_in, rel = hold_rel;
	hold_in = hold_rel = -1;
	if (write(in, &c, 1) != 1 || read(rel, &c, 1) != 1)
		_exit(3);
}

static int put(struct file *f, const void *buf, int count, void *type)
{
	held();
	long s = type_size(type);
	if (!f || s < 0 || count < 0)
		return ERR;
	size_t n = (size_t)count * (size_t)s;
	return write(f->fd, buf, n) == (ssize_t)n ? OK : ERR;
}

#define WRITE(name) \
	EXPORT int P##name(struct file *f, const void *buf, int count, void *type, void *status) \
	{ \
		(void)status; \
		return put(f, buf, count, type); \
	} \
	ALIAS(name)
#define WRITE_AT(name) \
	EXPORT int P##name(struct file *f, long long off, const void *buf, int count, void *type, \
			   void *status) \
	{ \
		(void)off; \
		(void)status; \
		return put(f, buf, count, type); \
	} \
	ALIAS(name)

WRITE(MPI_File_write)
WRITE(MPI_File_write_all)
WRITE(MPI_File_write_shared)
WRITE(MPI_File_write_ordered)
WRITE_AT(MPI_File_write_at)
WRITE_AT(MPI_File_write_at_all)

EXPORT int PMPI_File_write_all_begin(struct file *f, const void *buf, int count, void *type)
{
	return put(f, buf, count, type);
}
ALIAS(MPI_File_write_all_begin)

EXPORT int PMPI_File_write_all_end(struct file *f, const void *buf, void *status)
{
	(void)f;
	(void)buf;
	(void)status;
	return OK;
}
ALIAS(MPI_File_write_all_end)

/* nonblocking: written at once; the request is a non-null token */
EXPORT int PMPI_File_iwrite(struct file *f, const void *buf, int count, void *type, void **req)
{
	*req = ompi_mpi_byte;
	return put(f, buf, count, type);
}
ALIAS(MPI_File_iwrite)

EXPORT int PMPI_File_iwrite_at_all(struct file *f, long long off, const void *buf, int count,
				   void *type, void **req)
{
	(void)off;
	*req = ompi_mpi_byte;
	return put(f, buf, count, type);
}
ALIAS(MPI_File_iwrite_at_all)

EXPORT int PMPI_Wait(void **req, void *status)
{
	(void)status;
	*req = ompi_request_null;
	return OK;
}
ALIAS(MPI_Wait)

EXPORT int PMPI_File_sync(struct file *f)
{
	held();
	return f && fsync(f->fd) == 0 ? OK : ERR;
}
ALIAS(MPI_File_sync)
