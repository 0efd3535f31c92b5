/* Fuzz the option parser of --energy-tag, js_tags_parse. Input: up to two
 * option values separated by a newline (the second appends to the first,
 * as a repeated --energy-tag does). */
#include "fuzz.h"
#include "js_parse.h"

static bool charset(const char *s, size_t max)
{
	size_t n = strlen(s);
	if (n < 1 || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= 'A' && s[i] <= 'Z') || strchr("_.:+-", s[i])))
			return false;
	return true;
}

static void check_tags(const struct js_tags *t)
{
	FUZZ_CHECK(t->n <= JS_MAX_TAGS);
	for (size_t i = 0; i < t->n; i++) {
		FUZZ_CHECK(memchr(t->t[i].key, 0, sizeof(t->t[i].key)));
		FUZZ_CHECK(memchr(t->t[i].val, 0, sizeof(t->t[i].val)));
		FUZZ_CHECK(charset(t->t[i].key, JS_TAG_KEY_LEN));
		FUZZ_CHECK(charset(t->t[i].val, JS_TAG_VAL_LEN));
		for (size_t j = 0; j < i; j++)
			FUZZ_CHECK(strcmp(t->t[i].key, t->t[j].key));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct js_tags t;
	memset(&t, 0, sizeof(t));
	char *s;
	for (int k = 0; k < 2 && (s = fuzz_split(&d, &n, '\n')); k++) {
		struct js_tags before = t;
		char err[400] = "";
		if (js_tags_parse(s, &t, err, sizeof(err))) {
			FUZZ_CHECK(err[0]);
			/* a refused value leaves the tags as they were */
			FUZZ_CHECK(!memcmp(&before, &t, sizeof(t)));
		} else {
			FUZZ_CHECK(t.n >= before.n);
		}
		check_tags(&t);
		free(s);
	}
	return 0;
}
