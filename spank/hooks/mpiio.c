/* libjoulestep-mpiio.so: MPI-IO writes as `write` phases, MPI_File_sync as
 * `flush` (docs/user-guide.md, "Automatic phases").
 *
 * A PMPI interposer loaded with LD_PRELOAD: it defines the MPI_File_* entry
 * points below and calls the MPI library's PMPI_File_* ones, looked up when
 * first called (it has no DT_NEEDED on libmpi: a program without MPI loads
 * nothing more and runs unchanged). Built against the mpi.h of the MPI the
 * site runs (Debian's Open MPI by default: MPI handles are ABI, so a hook
 * built for Open MPI must not be used with MPICH, and the other way round).
 *
 * What is marked (one phase per call, label = the function's name):
 *   MPI_File_write, _at, _all, _at_all, _shared, _ordered       write
 *   MPI_File_write_all_begin, _at_all_begin, _ordered_begin      write
 *   MPI_File_iwrite, _at, _shared, _all, _at_all (MPI 3.1)       write
 *   MPI_File_sync                                                flush
 * Bytes: count x MPI_Type_size_x(datatype), the bytes the call was given,
 * counted once the call returned MPI_SUCCESS (unknown, "-", when it failed:
 * the datatype is only queried after a successful call, so a bad datatype
 * reaches the error handler the program expects, the file's). Split
 * collectives and nonblocking writes: the phase is the initiating call and
 * carries the bytes; the completion (..._end, MPI_Wait/Test*) is not marked
 * (Open MPI's OMPIO and MPICH's ROMIO write in the split collective's _begin;
 * a nonblocking write's transfer overlaps the program's own work until it
 * waits). MPI_File_sync: bytes unknown. */
#include <limits.h>
#include <mpi.h>

#include "js_hook.h"

#define LIB "libjoulestep-mpiio"

typedef int (*type_size_x_fn)(MPI_Datatype, MPI_Count *);

/* count x the datatype's size in bytes; -1 when unknown. */
static long long nbytes(int count, MPI_Datatype type)
{
	static void *cache;
	type_size_x_fn size_x = (type_size_x_fn)js_hook_next(&cache, "PMPI_Type_size_x", NULL);
	MPI_Count sz = 0;
	if (count < 0 || !size_x || size_x(type, &sz) != MPI_SUCCESS || sz < 0 ||
	    sz == MPI_UNDEFINED)
		return -1;
	if (count && sz > LLONG_MAX / count)
		return LLONG_MAX;
	return (long long)count * (long long)sz;
}

/* One wrapper: resolve P<name>, pass through when nested in another hooked
 * call, else mark the call as a phase of `kind`. */
#define HOOK(kind, name, params, args, bytes_expr)                                   \
	JS_HOOK_API int name params                                                  \
	{                                                                            \
		static void *cache;                                                  \
		int(*real) params = (int(*) params)js_hook_next(&cache, "P" #name,   \
								(void *)name);       \
		if (!real) {                                                         \
			js_hook_missing(LIB, "P" #name);                             \
			return MPI_ERR_INTERN;                                       \
		}                                                                    \
		if (js_hook_busy)                                                    \
			return real args;                                            \
		js_hook_busy = 1;                                                    \
		int began = js_hook_begin(kind, #name);                              \
		int rc = real args;                                                  \
		js_hook_end(began, rc == MPI_SUCCESS ? (bytes_expr) : -1);           \
		js_hook_busy = 0;                                                    \
		return rc;                                                           \
	}

#define WRITE(name)                                                                  \
	HOOK("write", name,                                                          \
	     (MPI_File fh, const void *buf, int count, MPI_Datatype dt, MPI_Status *st), \
	     (fh, buf, count, dt, st), nbytes(count, dt))
#define WRITE_AT(name)                                                               \
	HOOK("write", name,                                                          \
	     (MPI_File fh, MPI_Offset off, const void *buf, int count, MPI_Datatype dt,  \
	      MPI_Status *st),                                                       \
	     (fh, off, buf, count, dt, st), nbytes(count, dt))
#define IWRITE(name)                                                                 \
	HOOK("write", name,                                                          \
	     (MPI_File fh, const void *buf, int count, MPI_Datatype dt, MPI_Request *rq), \
	     (fh, buf, count, dt, rq), nbytes(count, dt))
#define IWRITE_AT(name)                                                              \
	HOOK("write", name,                                                          \
	     (MPI_File fh, MPI_Offset off, const void *buf, int count, MPI_Datatype dt,  \
	      MPI_Request *rq),                                                      \
	     (fh, off, buf, count, dt, rq), nbytes(count, dt))
#define WRITE_BEGIN(name)                                                            \
	HOOK("write", name, (MPI_File fh, const void *buf, int count, MPI_Datatype dt), \
	     (fh, buf, count, dt), nbytes(count, dt))

WRITE(MPI_File_write)
WRITE(MPI_File_write_all)
WRITE(MPI_File_write_shared)
WRITE(MPI_File_write_ordered)
WRITE_AT(MPI_File_write_at)
WRITE_AT(MPI_File_write_at_all)
WRITE_BEGIN(MPI_File_write_all_begin)
WRITE_BEGIN(MPI_File_write_ordered_begin)
HOOK("write", MPI_File_write_at_all_begin,
     (MPI_File fh, MPI_Offset off, const void *buf, int count, MPI_Datatype dt),
     (fh, off, buf, count, dt), nbytes(count, dt))
IWRITE(MPI_File_iwrite)
IWRITE(MPI_File_iwrite_shared)
IWRITE_AT(MPI_File_iwrite_at)
#if MPI_VERSION > 3 || (MPI_VERSION == 3 && MPI_SUBVERSION >= 1)
IWRITE(MPI_File_iwrite_all)
IWRITE_AT(MPI_File_iwrite_at_all)
#endif
HOOK("flush", MPI_File_sync, (MPI_File fh), (fh), -1)
