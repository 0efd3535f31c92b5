/* Fuzz the CPU list parser js_cpuset_parse: the step's CPUs as Slurm gives
 * them ("0-3,8"), and cpufreq's related_cpus ("0 1 2"). Input: the list.
 * A parsed set formats (js_cpuset_format) and parses back to itself. */
#include <errno.h>

#include "fuzz.h"
#include <joulestep/freq.h>

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	char *s = fuzz_cstr(d, n);
	struct js_cpuset a, b;
	if (js_cpuset_parse(s, &a) == 0) {
		static char buf[8192]; /* "0,2,4,...,1022": < 8192 */
		FUZZ_CHECK(js_cpuset_format(&a, buf, sizeof(buf)) == 0);
		FUZZ_CHECK(js_cpuset_parse(buf, &b) == 0);
		FUZZ_CHECK(!memcmp(&a, &b, sizeof(a)));
		char small[8];
		int rc = js_cpuset_format(&a, small, sizeof(small));
		FUZZ_CHECK(rc == 0 || rc == -ENOSPC);
		FUZZ_CHECK(memchr(small, 0, sizeof(small)));
	}
	free(s);
	return 0;
}
