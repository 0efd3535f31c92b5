/* joulestep-plugstack-check: does the plugin accept these plugstack.conf
 * arguments?  Parsed by the plugin's own parser (js_conf_parse, then the
 * %n expansion of js_conf_expand_node, spank/js_parse.c), so the answer is
 * the one slurmstepd gets; `joulestep doctor` runs it on the line it
 * suggests and, with --node, on the lines of the node's plugstack.conf.
 *
 *   joulestep-plugstack-check [-n NODENAME] [--] KEY=VALUE...
 *
 * The plugin's path (the first word after required/optional) is not an
 * argument.  Prints "ok" and exits 0 when accepted; prints the plugin's
 * message ("joulestep: plugstack.conf: ...") on stderr and exits 1 when
 * refused; 2 on a usage error.  Reads and writes nothing else. */
#include <stdio.h>
#include <string.h>

#include "js_parse.h"

int main(int argc, char **argv)
{
	const char *node = "";
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--")) {
			i++;
			break;
		}
		if (!strcmp(argv[i], "-n") && i + 1 < argc) {
			node = argv[++i];
			continue;
		}
		fprintf(stderr, "usage: joulestep-plugstack-check [-n NODENAME] [--] KEY=VALUE...\n");
		return 2;
	}
	static struct js_conf conf;
	char err[400];
	if (js_conf_parse(argc - i, argv + i, &conf, err, sizeof(err)) ||
	    js_conf_expand_node(&conf, node, err, sizeof(err))) {
		fprintf(stderr, "joulestep: plugstack.conf: %s; plugin disabled\n", err);
		return 1;
	}
	printf("ok\n");
	return 0;
}
