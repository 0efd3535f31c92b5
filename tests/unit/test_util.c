/* js_write_file: the journal's restore path writes cpufreq attributes by
 * path. On sysfs a write replaces the value at once; on a tree of regular
 * files (tests/fakehw, a site's test rig) an open with O_TRUNC leaves the file
 * empty until write() runs, and a concurrent reader (another step reading its
 * clocks at step end) then sees "" and records "cpufreq: Invalid argument".
 * The value must be replaced in place: a reader sees the old or the new value,
 * never an empty file. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "js_internal.h"

static char path[64];

static int setup(void **state)
{
	int fd;

	(void)state;
	snprintf(path, sizeof(path), "/tmp/js-util-XXXXXX");
	fd = mkstemp(path);
	if (fd < 0)
		return -1;
	close(fd);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(path);
	return 0;
}

static void test_shorter_value_replaces_exactly(void **state)
{
	char buf[32];
	ssize_t n;

	(void)state;
	assert_int_equal(js_write_file(path, "2400000\n"), 0);
	assert_int_equal(js_write_file(path, "800000\n"), 0);
	n = js_read_file(path, buf, sizeof(buf));
	assert_int_equal(n, 6); /* js_read_file drops the trailing newline */
	assert_string_equal(buf, "800000");
	assert_int_equal(js_write_file("/nonexistent-dir/x", "1\n"), -ENOENT);
}

static volatile int stop_reader;

static void *reader(void *arg)
{
	long *empty = arg;
	char buf[32];

	while (!stop_reader) {
		ssize_t n = js_read_file(path, buf, sizeof(buf));

		/* Only emptiness is checked: a lockless page-cache read may in
		 * rare cases see a write half copied (sysfs cannot), which
		 * no in-place write avoids on a regular file. */
		if (n <= 0)
			(*empty)++;
	}
	return NULL;
}

static void test_concurrent_reader_never_sees_empty(void **state)
{
	pthread_t t;
	long bad = 0;

	(void)state;
	assert_int_equal(js_write_file(path, "2400000\n"), 0);
	stop_reader = 0;
	assert_int_equal(pthread_create(&t, NULL, reader, &bad), 0);
	for (int i = 0; i < 20000; i++)
		assert_int_equal(js_write_file(path, (i & 1) ? "2400000\n" : "800000\n"), 0);
	stop_reader = 1;
	pthread_join(t, NULL);
	assert_int_equal(bad, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_shorter_value_replaces_exactly, setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_reader_never_sees_empty, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
