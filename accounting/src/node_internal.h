/* Private to the accounting library: node-level sources (node_sources.c)
 * and their meter (node_meter.c). */
#ifndef JOULESTEP_NODE_INTERNAL_H
#define JOULESTEP_NODE_INTERNAL_H

#include "joulestep/node.h"

struct js_node {
	enum js_node_source src;
	size_t n;
	struct js_node_channel ch[JS_NODE_MAX_CH];
	char dir[JS_PATH_LEN];   /* pm_counters directory (pm only) */
};

/* One reading of every channel: pm_counters in uJ (J * 1e6) with the
 * generation (a consistent set: freshness equal before and after, else
 * read again); hwmon in uW. err[i]: 0 or -errno per channel. */
int js_node_read(const struct js_node *n, uint64_t *val, int *err, uint64_t *generation,
		 bool *gen_known);

#endif
