/* Loads libmpiapp.so (linked against the MPI library) with RTLD_LOCAL and
 * calls it: prog_dlopen LIBMPIAPP FILE N. Prints "mpiapp_write <rc>". */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	int (*fn)(const char *, int) = (int (*)(const char *, int))dlsym(h, "mpiapp_write");
	if (!fn)
		return 1;
	printf("mpiapp_write %d\n", fn(argv[2], atoi(argv[3])));
	return 0;
}
