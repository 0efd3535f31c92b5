/* Fuzz the tuned-file reader's parser js_tuned_parse (the admin's tuned=
 * policy file, docs/models.md "Policy file"). Input: the file's bytes. */
#include "fuzz.h"
#include "js_tuned.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	char *text = malloc(n ? n : 1); /* not NUL-terminated, like read() */
	if (!text)
		abort();
	memcpy(text, d, n);
	struct js_policy p, before;
	memset(&p, 0x5a, sizeof(p));
	before = p;
	char nm[128]; /* struct js_step's tuned_model */
	memset(nm, 'x', sizeof(nm));
	nm[sizeof(nm) - 1] = 0;
	char err[400] = "";
	if (js_tuned_parse(text, n, &p, nm, sizeof(nm), err, sizeof(err)) == 0) {
		FUZZ_CHECK(p.type == JS_POL_TUNED);
		FUZZ_CHECK(p.nmap >= 1 && p.nmap <= JS_MAX_MAP);
		for (size_t i = 0; i < p.nmap; i++) {
			FUZZ_CHECK(js_kind_valid(p.map[i].kind));
			FUZZ_CHECK(p.map[i].ratio > 0.0 && p.map[i].ratio <= 1.0);
		}
		FUZZ_CHECK(memchr(nm, 0, sizeof(nm)));
		char buf[64];
		FUZZ_CHECK(js_policy_format(&p, buf, sizeof(buf)) == 0 && !strcmp(buf, "tuned"));
	} else {
		FUZZ_CHECK(err[0]);
		/* on error p and node_model are unchanged (js_tuned.h) */
		FUZZ_CHECK(!memcmp(&p, &before, sizeof(p)));
		FUZZ_CHECK(strspn(nm, "x") == sizeof(nm) - 1);
	}
	free(text);
	return 0;
}
