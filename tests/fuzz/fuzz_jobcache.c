/* Fuzz the job cache decoder js_jobcache_decode (<state>/jobs/<job_id>,
 * written by the job prolog, read by every step). Input: the file's bytes.
 * A decoded entry encodes and decodes back to itself. */
#include "fuzz.h"
#include "js_jobcache.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	char *text = malloc(n ? n : 1);
	if (!text)
		abort();
	memcpy(text, d, n);
	struct js_jobcache e, f;
	if (js_jobcache_decode(text, n, &e) == 0) {
		FUZZ_CHECK(e.first_seen_ns > 0);
		FUZZ_CHECK(memchr(e.account, 0, sizeof(e.account)) &&
			   memchr(e.partition, 0, sizeof(e.partition)) &&
			   memchr(e.cluster, 0, sizeof(e.cluster)));
		char buf[JS_JOBCACHE_MAX];
		FUZZ_CHECK(js_jobcache_encode(&e, buf, sizeof(buf)) == 0);
		FUZZ_CHECK(js_jobcache_decode(buf, strlen(buf), &f) == 0);
		FUZZ_CHECK(!memcmp(&e, &f, sizeof(e)));
	}
	free(text);
	return 0;
}
