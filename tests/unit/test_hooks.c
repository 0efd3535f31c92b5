/* Unit tests of --energy-hooks' pure logic (spank/js_hooks.c): the option's
 * parsing, the tasks' LD_PRELOAD and the default hooks directory. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "js_hooks.h"

#define MPIIO (1u << JS_HOOK_MPIIO)
#define VELOC (1u << JS_HOOK_VELOC)

static void parse_names(void **st)
{
	(void)st;
	char err[200];
	unsigned m = 99;
	assert_int_equal(js_hooks_parse("mpiio,veloc", &m, err, sizeof(err)), 0);
	assert_int_equal(m, MPIIO | VELOC);
	assert_int_equal(js_hooks_parse("veloc", &m, err, sizeof(err)), 0);
	assert_int_equal(m, VELOC);
	assert_int_equal(js_hooks_parse("veloc,veloc", &m, err, sizeof(err)), 0);
	assert_int_equal(m, VELOC);
	assert_int_equal(js_hooks_parse("none", &m, err, sizeof(err)), 0);
	assert_int_equal(m, 0);
	assert_int_equal(js_hooks_parse("", &m, err, sizeof(err)), 0);
	assert_int_equal(m, 0);
	assert_int_equal(js_hooks_parse(NULL, &m, err, sizeof(err)), 0);
	assert_int_equal(m, 0);
}

/* Unknown names are refused with what is allowed; the known ones are kept
 * (the compute node applies them). */
static void parse_refuses_unknown(void **st)
{
	(void)st;
	char err[200];
	unsigned m;
	const char *bad[] = {"mpi", "MPIIO", "mpiio,", ",veloc", "mpiio,,veloc", "mpiio veloc",
			     "none,mpiio", "darshan"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		assert_int_equal(js_hooks_parse(bad[i], &m, err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, "allowed: mpiio, veloc, or none"));
	}
	assert_int_equal(js_hooks_parse("veloc,darshan,mpiio", &m, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "unknown hook 'darshan'"));
	assert_int_equal(m, MPIIO | VELOC);
	assert_int_equal(js_hooks_parse("none,mpiio", &m, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "'none' cannot be combined"));
	char longv[400];
	memset(longv, 'a', sizeof(longv) - 1);
	longv[sizeof(longv) - 1] = 0;
	assert_int_equal(js_hooks_parse(longv, &m, err, sizeof(err)), -EINVAL);
	assert_int_equal(m, 0);
}

static void format_mask(void **st)
{
	(void)st;
	char b[32];
	js_hooks_format(MPIIO | VELOC, b, sizeof(b));
	assert_string_equal(b, "mpiio,veloc");
	js_hooks_format(VELOC, b, sizeof(b));
	assert_string_equal(b, "veloc");
	js_hooks_format(0, b, sizeof(b));
	assert_string_equal(b, "");
	js_hooks_format(MPIIO | VELOC, b, 8); /* too small: a whole prefix only */
	assert_string_equal(b, "mpiio");
	assert_string_equal(js_hook_lib(JS_HOOK_MPIIO), "libjoulestep-mpiio.so");
	assert_string_equal(js_hook_lib(JS_HOOK_VELOC), "libjoulestep-veloc.so");
}

#define M "/l/joulestep/libjoulestep-mpiio.so"
#define V "/l/joulestep/libjoulestep-veloc.so"

/* Ours first, the job's own entries after, ours never twice (a batch step's
 * LD_PRELOAD reaches its sruns), hooks not asked for removed. */
static void preload_compose(void **st)
{
	(void)st;
	const char *all[] = {M, V};
	const char *add_m[] = {M};
	char out[JS_PRELOAD_MAX];
	assert_int_equal(js_hooks_preload(NULL, all, 2, all, 2, out, sizeof(out)), 0);
	assert_string_equal(out, M ":" V);
	assert_int_equal(js_hooks_preload("", add_m, 1, all, 2, out, sizeof(out)), 0);
	assert_string_equal(out, M);
	assert_int_equal(js_hooks_preload("/u/a.so /u/b.so", add_m, 1, all, 2, out, sizeof(out)), 0);
	assert_string_equal(out, M ":/u/a.so:/u/b.so");
	/* inherited from the batch step: once, in our order */
	assert_int_equal(js_hooks_preload(V ":" M ":/u/a.so", all, 2, all, 2, out, sizeof(out)), 0);
	assert_string_equal(out, M ":" V ":/u/a.so");
	/* a step with fewer hooks (or none) drops the others */
	assert_int_equal(js_hooks_preload(M ":/u/a.so:" V, add_m, 1, all, 2, out, sizeof(out)), 0);
	assert_string_equal(out, M ":/u/a.so");
	assert_int_equal(js_hooks_preload(M "::" V, NULL, 0, all, 2, out, sizeof(out)), 0);
	assert_string_equal(out, "");
	/* the same file name elsewhere is the job's own, kept */
	assert_int_equal(js_hooks_preload("/u/libjoulestep-mpiio.so", NULL, 0, all, 2, out, sizeof(out)), 0);
	assert_string_equal(out, "/u/libjoulestep-mpiio.so");
	/* a prefix of ours is not ours */
	assert_int_equal(js_hooks_preload(M "x", NULL, 0, all, 2, out, sizeof(out)), 0);
	assert_string_equal(out, M "x");
}

static void preload_too_long(void **st)
{
	(void)st;
	const char *add[] = {M};
	char old[64], out[48];
	memset(old, 'x', sizeof(old) - 1);
	old[sizeof(old) - 1] = 0;
	strcpy(out, "junk");
	assert_int_equal(js_hooks_preload(old, add, 1, add, 1, out, sizeof(out)), -ENAMETOOLONG);
	assert_string_equal(out, "");
	/* exactly fitting: len - 1 characters */
	char fit[sizeof(M)];
	assert_int_equal(js_hooks_preload(NULL, add, 1, add, 1, fit, sizeof(fit)), 0);
	assert_string_equal(fit, M);
	assert_int_equal(js_hooks_preload(NULL, add, 1, add, 1, fit, sizeof(fit) - 1), -ENAMETOOLONG);
}

static void default_dir(void **st)
{
	(void)st;
	char d[64];
	assert_int_equal(js_hooks_default_dir("/usr/lib/x86_64-linux-gnu/slurm-wlm/joulestep.so", d, sizeof(d)), 0);
	assert_string_equal(d, "/usr/lib/x86_64-linux-gnu/joulestep");
	assert_int_equal(js_hooks_default_dir("/usr/local/lib/slurm/joulestep.so", d, sizeof(d)), 0);
	assert_string_equal(d, "/usr/local/lib/joulestep");
	assert_int_equal(js_hooks_default_dir("/slurm/joulestep.so", d, sizeof(d)), 0);
	assert_string_equal(d, "/joulestep");
	assert_int_equal(js_hooks_default_dir("/joulestep.so", d, sizeof(d)), -EINVAL);
	assert_int_equal(js_hooks_default_dir("slurm/joulestep.so", d, sizeof(d)), -EINVAL);
	assert_int_equal(js_hooks_default_dir(NULL, d, sizeof(d)), -EINVAL);
	assert_int_equal(js_hooks_default_dir("/a/very/long/directory/name/slurm/joulestep.so", d, 16),
			 -ENAMETOOLONG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parse_names),      cmocka_unit_test(parse_refuses_unknown),
		cmocka_unit_test(format_mask),      cmocka_unit_test(preload_compose),
		cmocka_unit_test(preload_too_long), cmocka_unit_test(default_dir),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
