/* joulestep fuzz harnesses (libFuzzer, ASan+UBSan): shared helpers.
 * Each harness calls one parser on the input and checks the parser's
 * documented contract on what it returns; a broken contract aborts, which
 * libFuzzer reports as a crash like any sanitizer finding. */
#ifndef JS_FUZZ_H
#define JS_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(cond)                                                              \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "fuzz: contract broken: %s (%s:%d)\n", #cond, \
				__FILE__, __LINE__);                                  \
			abort();                                                      \
		}                                                                     \
	} while (0)

/* The input as a NUL-terminated string in a buffer of exactly n + 1 bytes
 * (ASan sees any read past it). Stops at an embedded NUL like C callers. */
static inline char *fuzz_cstr(const uint8_t *d, size_t n)
{
	char *s = malloc(n + 1);
	if (!s)
		abort();
	memcpy(s, d, n);
	s[n] = 0;
	return s;
}

/* Next piece of the input up to `sep` (or the end), as its own exact-size
 * string; *d and *n advance past the separator. NULL when nothing is left. */
static inline char *fuzz_split(const uint8_t **d, size_t *n, int sep)
{
	if (!*n)
		return NULL;
	const uint8_t *e = memchr(*d, sep, *n);
	size_t len = e ? (size_t)(e - *d) : *n;
	char *s = fuzz_cstr(*d, len);
	*d += len + (e ? 1 : 0);
	*n -= len + (e ? 1 : 0);
	return s;
}

#endif
