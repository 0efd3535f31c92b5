/* joulestep accounting library: node-level energy beside RAPL (issue 24).
 *
 * Two sources, each read under a sysfs root (default "/sys"):
 *  - pm_counters (HPE/Cray): <root>/cray/pm_counters/{energy, cpu_energy,
 *    memory_energy, accelN_energy} in joules ("123 J 1700000000000000 us"),
 *    with `freshness` (bumped at every update) and `generation` (bumped when
 *    the counters restart: a reset).
 *  - hwmon power sensors (NVIDIA Grace): <root>/class/hwmon/hwmonH/
 *    power1_average (uW) labelled by power1_oem_info ("Module Power Socket 0",
 *    "CPU Power Socket 0", "SysIO Power Socket 0", "Grace Power Socket 0").
 *    Power only: the meter integrates it (figures marked `integrated`).
 *
 * Overlaps are never added: pm_counters `energy` is the node and includes
 * cpu/memory/accel; a Grace socket's Module power includes its CPU, SysIO and
 * GPU. The total says which channels make it (js_node_interval.total_sources).
 * Conventions as energy.h: 0 or -errno, never a log line.
 */
#ifndef JOULESTEP_NODE_H
#define JOULESTEP_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "joulestep/energy.h"

#ifdef __cplusplus
extern "C" {
#endif

#define JS_NODE_MAX_CH 16
#define JS_NODE_SOURCES_LEN 256

enum js_node_source { JS_NODE_PM_COUNTERS = 0, JS_NODE_HWMON_POWER = 1 };

/* What a channel measures, and whether it is a total (includes the others
 * of its scope: the node for pm_counters, its socket for Grace). */
struct js_node_channel {
	char name[JS_NAME_LEN];  /* "energy", "accel0_energy", "Module Power Socket 0" */
	char what[JS_NAME_LEN];  /* "node", "cpu", "memory", "accel0"; "module", "cpu", "sysio", "grace" */
	int socket;              /* Grace: the socket; -1 for pm_counters            */
	bool total;              /* node (pm energy) or socket (Grace Module) total  */
	char path[JS_PATH_LEN];  /* the file read                                    */
};

/* ---- pure ------------------------------------------------------------------ */

/* A pm_counters energy file: "<J> J[ <t> us]". 0 and *joules (and *t_us, 0
 * when absent); -EINVAL for anything else, -ERANGE when it does not fit. */
int js_pm_parse_energy(const char *buf, size_t len, uint64_t *joules, uint64_t *t_us);
/* A pm_counters file name: 0 with *what and *total for energy, cpu_energy,
 * memory_energy, accelN_energy; -ENOENT (not an energy counter) otherwise. */
int js_pm_classify(const char *file, char *what, size_t wlen, bool *total);
/* A Grace power1_oem_info: "<Kind> Power Socket <N>" with Kind Module, CPU,
 * SysIO or Grace: 0, *what (lower case), *socket, *total (Module); else -EINVAL. */
int js_grace_label(const char *label, char *what, size_t wlen, int *socket, bool *total);
/* Energy (uJ) of power going from p0_uw to p1_uw over dt_ns (trapezoid). */
uint64_t js_power_integrate_uj(uint64_t p0_uw, uint64_t p1_uw, uint64_t dt_ns);

/* ---- sources ----------------------------------------------------------------- */

struct js_node; /* one opened source */

/* Open the first source of `order` (comma list of pm_counters, hwmon; NULL =
 * "pm_counters,hwmon") that has channels under sysfs_root. -ENOENT with one
 * "source: reason" line each in why when none has; -EINVAL for an unknown name. */
int js_node_open(const char *sysfs_root, const char *order, struct js_node **out,
		 char *why, size_t whylen);
void js_node_close(struct js_node *n);
enum js_node_source js_node_source_of(const struct js_node *n);
const char *js_node_source_name(const struct js_node *n);
size_t js_node_nchannels(const struct js_node *n);
const struct js_node_channel *js_node_channel(const struct js_node *n, size_t i);

/* ---- meter ------------------------------------------------------------------ */

struct js_node_meter;

struct js_node_snapshot {
	uint64_t mono_ns;
	size_t n;
	uint64_t energy_uj[JS_NODE_MAX_CH]; /* pm: the counter; hwmon: integrated  */
	uint32_t errors[JS_NODE_MAX_CH];    /* cumulative failed reads              */
	uint64_t generation;                /* pm_counters generation (else 0)      */
	bool generation_known;
};

struct js_node_interval {
	size_t n;
	uint64_t energy_uj[JS_NODE_MAX_CH];
	bool uncertain[JS_NODE_MAX_CH];     /* reset (new generation, counter went
	                                       back) or a failed read: not the energy */
	bool total_known;
	uint64_t total_uj;                  /* the node's energy, from total_sources */
	char total_sources[JS_NODE_SOURCES_LEN]; /* "pm_counters:energy",
	                                       "hwmon:Module Power Socket 0+..."; or
	                                       why there is no total                  */
	bool integrated;                    /* from power samples (hwmon)           */
	uint64_t duration_ns;
};

/* Start a meter on an opened source (not owned). period_ns: how often power
 * is sampled (hwmon; 0 = 100 ms); start_thread false: sample by hand. */
int js_node_meter_start(struct js_node *n, uint64_t period_ns, bool start_thread,
			struct js_node_meter **out);
int js_node_meter_snapshot(struct js_node_meter *m, struct js_node_snapshot *out);
void js_node_meter_stop(struct js_node_meter *m);
/* Pure: the interval between two snapshots of one meter, with the total. */
void js_node_interval_of(const struct js_node *n, const struct js_node_snapshot *a,
			 const struct js_node_snapshot *b, struct js_node_interval *out);

#ifdef __cplusplus
}
#endif
#endif
