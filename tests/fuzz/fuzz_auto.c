/* Fuzz the auto-file parser js_auto_parse (the admin's auto= policy file,
 * docs/admin-guide.md "The auto policy"). Input: the file's bytes; the app
 * and job id come from its first bytes, so both the default map and an
 * app's map, and baseline jobs, are reached. */
#include "fuzz.h"
#include "js_auto.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	static const char *const apps[] = {"a", "lammps", "x", "NAME"};
	uint32_t job = n ? d[0] : 0;
	const char *app = apps[(n > 1 ? d[1] : 0) % 4];
	char *text = malloc(n ? n : 1); /* not NUL-terminated, like read() */
	if (!text)
		abort();
	memcpy(text, d, n);
	struct js_policy p, before;
	memset(&p, 0x5a, sizeof(p));
	p.gpu_io = true;
	p.uncore_io = false;
	before = p;
	struct js_auto a;
	memset(&a, 0x5a, sizeof(a));
	struct js_auto abefore = a;
	char err[400] = "";
	if (js_auto_parse(text, n, app, job, &p, &a, err, sizeof(err)) == 0) {
		FUZZ_CHECK(p.type == JS_POL_AUTO);
		FUZZ_CHECK(p.gpu_io && !p.uncore_io); /* the user's +gpu-io kept */
		FUZZ_CHECK(p.nmap <= JS_MAX_MAP && a.nstate == p.nmap);
		FUZZ_CHECK(a.baseline_every >= 1 && a.baseline == (job % a.baseline_every == 0));
		for (size_t i = 0; i < p.nmap; i++) {
			FUZZ_CHECK(js_kind_valid(p.map[i].kind));
			FUZZ_CHECK(p.map[i].ratio > 0.0 && p.map[i].ratio <= 1.0);
			FUZZ_CHECK(memchr(a.state[i], 0, sizeof(a.state[i])));
			if (a.baseline && !strcmp(a.state[i], "settled"))
				FUZZ_CHECK(p.map[i].ratio == 1.0);
		}
		FUZZ_CHECK(!strncmp(a.digest, "fnv1a64:", 8) && strlen(a.digest) == 24);
		FUZZ_CHECK(!strcmp(a.app, app));
		char buf[64];
		FUZZ_CHECK(js_policy_format(&p, buf, sizeof(buf)) == 0 && !strcmp(buf, "auto+gpu-io"));
	} else {
		FUZZ_CHECK(err[0]);
		/* on error p and a are unchanged (js_auto.h) */
		FUZZ_CHECK(!memcmp(&p, &before, sizeof(p)));
		FUZZ_CHECK(!memcmp(&a, &abefore, sizeof(a)));
	}
	free(text);
	return 0;
}
