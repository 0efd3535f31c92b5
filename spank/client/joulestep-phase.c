/* joulestep-phase: mark phases from shell scripts.
 *
 *   joulestep-phase begin KIND [LABEL]
 *   joulestep-phase end [--bytes N]
 *   joulestep-phase ping
 *   (-v / --verbose before the command: say so when not in a step)
 *
 * Always synchronous: when it returns, the plugin has recorded the marker and
 * set the clock, so markers from successive processes stay ordered.
 * A marker never fails the job script (as the C library never fails the
 * program): exit status 0 when the marker was recorded, outside a joulestep
 * step, and when it was not recorded (refused by the plugin, a bad kind, a
 * stale JOULESTEP_SOCKET: the reason on stderr); 2 for a wrong command line
 * only, which the script shows on its first run, in a step or not. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "joulestep/client.h"

static int usage(void)
{
	fprintf(stderr, "usage: joulestep-phase [-v] begin KIND [LABEL]\n"
			"       joulestep-phase [-v] end [--bytes N]\n"
			"       joulestep-phase [-v] ping\n"
			"KIND: [a-z0-9_-]{1,32} (compute compress write checkpoint flush restart or your own)\n"
			"LABEL: [A-Za-z0-9_.:+/-]{1,64}; N: bytes written/read, a non-negative integer\n");
	return 2;
}

static int done(int rc, const char *what, int verbose)
{
	if (rc == JS_NOT_IN_STEP) {
		if (verbose)
			fprintf(stderr, "joulestep-phase: not in a joulestep step (JOULESTEP_SOCKET unset); %s ignored\n", what);
		return 0;
	}
	if (rc < 0) /* not recorded: say why, and let the script go on */
		fprintf(stderr, "joulestep-phase: %s not recorded: %s\n", what, strerror(-rc));
	return 0;
}

int main(int argc, char **argv)
{
	int i = 1, verbose = 0;
	while (i < argc && (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose"))) {
		verbose = 1;
		i++;
	}
	if (i >= argc)
		return usage();
	const char *cmd = argv[i++];
	js_phase_set_sync(1);
	if (!strcmp(cmd, "begin")) {
		if (argc - i < 1 || argc - i > 2)
			return usage();
		return done(js_phase_begin(argv[i], argc - i == 2 ? argv[i + 1] : NULL), "begin", verbose);
	}
	if (!strcmp(cmd, "end")) {
		long long bytes = -1;
		if (argc - i == 2 && !strcmp(argv[i], "--bytes")) {
			char *end;
			errno = 0;
			bytes = strtoll(argv[i + 1], &end, 10);
			if (errno || *end || end == argv[i + 1] || bytes < 0) {
				fprintf(stderr, "joulestep-phase: --bytes: a non-negative integer, got '%s'\n", argv[i + 1]);
				return 2;
			}
		} else if (argc - i != 0) {
			return usage();
		}
		return done(js_phase_end(bytes), "end", verbose);
	}
	if (!strcmp(cmd, "ping")) {
		if (argc - i != 0)
			return usage();
		int rc = js_phase_ping();
		if (rc == 0 && verbose)
			fprintf(stderr, "joulestep-phase: plugin answered at %s\n", getenv("JOULESTEP_SOCKET"));
		return done(rc, "ping", verbose);
	}
	return usage();
}
