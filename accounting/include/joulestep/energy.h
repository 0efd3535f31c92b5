/* joulestep accounting library: RAPL energy.
 *
 * Conventions (as libpowercap): every function returns 0 or -errno and never
 * logs; units are in every name; a sysfs root (default "/sys") is an argument
 * to every reader so tests can point it at a fake tree.
 */
#ifndef JOULESTEP_ENERGY_H
#define JOULESTEP_ENERGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define JS_MAX_ZONES 32
#define JS_MAX_SKIPPED 32
#define JS_NAME_LEN 64
#define JS_PATH_LEN 512
#define JS_WHY_LEN 160

enum js_zone_kind {
	JS_ZONE_PACKAGE = 0, /* package-N or package-N-die-M: counted in E_CPU  */
	JS_ZONE_DRAM = 1,    /* dram subzone of a package: counted in E_DRAM    */
};

struct js_zone_info {
	char name[JS_NAME_LEN];     /* content of the zone's `name` file          */
	char id[JS_NAME_LEN];       /* "intel-rapl:0:1"                           */
	char path[JS_PATH_LEN];     /* directory of the zone (absolute)           */
	enum js_zone_kind kind;
	int package;                /* N of package-N, or the parent's for dram   */
	int die;                    /* M of package-N-die-M, else -1              */
	uint32_t depth;             /* 1 for intel-rapl:N, 2 for intel-rapl:N:M   */
	uint32_t index[2];          /* powercap zone indices (libpowercap form)   */
	uint64_t max_energy_range_uj;
	uint64_t max_power_uw;      /* from constraint_0_max_power_uw, or a
	                               conservative default when absent           */
};

struct js_zone_skip {
	char id[JS_NAME_LEN];
	char name[JS_NAME_LEN];
	char why[JS_WHY_LEN];       /* e.g. "psys overlaps the packages"          */
};

struct js_zone_set {
	size_t nzones;
	struct js_zone_info zones[JS_MAX_ZONES];
	size_t nskipped;
	struct js_zone_skip skipped[JS_MAX_SKIPPED];
};

/* Default assumed maximum power when a zone has no constraint_0_max_power_uw */
#define JS_DEFAULT_MAX_POWER_UW (1000ULL * 1000 * 1000) /* 1 kW: errs short */

/* Pure: classify a zone by its control type ("intel-rapl", "intel-rapl-mmio"),
 * its `name` content and its depth. Returns 0 and sets *kind when the zone is
 * counted; returns -ENOENT and sets *why (static string) when it is skipped. */
int js_zone_classify(const char *control_type, const char *name, uint32_t depth,
		     enum js_zone_kind *kind, const char **why);

/* Discover zones under <sysfs_root>/class/powercap (flat intel-rapl:N[:M]
 * entries, or the nested control-type directory when no flat entries exist).
 * sysfs_root NULL means "/sys". Zones are sorted by id. */
int js_zones_discover(const char *sysfs_root, struct js_zone_set *out);

/* Pure: whether the zones measure DRAM. 0 when every package zone has a
 * dram zone of its own; -ENOENT otherwise, with the reason in why: AMD
 * powercap zones (and client parts) give package energy only, and their
 * DRAM energy is "not measured" (null with this reason), never 0. */
int js_zones_dram_why(const struct js_zone_set *zs, char *why, size_t whylen);

/* ---- wrap-safe accumulation (pure) ------------------------------------ */

/* delta = cur - prev; if the counter went down, (max - prev) + cur.
 * Returns 0, or -ERANGE when prev or cur exceed max (impossible reading). */
int js_wrap_delta_uj(uint64_t prev_uj, uint64_t cur_uj, uint64_t max_uj,
		     uint64_t *delta_uj, bool *wrapped);

/* Shortest time in which the counter can wrap at the zone's max power. */
uint64_t js_wrap_time_ns(uint64_t max_energy_range_uj, uint64_t max_power_uw);

/* Sampler period: half the shortest wrap time of all zones, capped by
 * cap_ns (0 = no cap) and never below 1 ms. */
uint64_t js_sample_period_ns(const struct js_zone_set *zs, uint64_t cap_ns);

/* Pure: parse a counter file's content ("123456\n"). -EINVAL when empty or
 * non-numeric, -ERANGE when it does not fit or exceeds max_uj (0 = no max). */
int js_parse_energy_uj(const char *buf, size_t len, uint64_t max_uj, uint64_t *out_uj);

/* ---- backends ------------------------------------------------------------ */

struct js_energy; /* opaque: one opened backend */

struct js_energy_opts {
	const char *sysfs_root;   /* NULL = "/sys"                               */
	const char *order;        /* comma list, NULL = "powercap,papi,sysfs";
	                             also amd_energy (hwmon, never by default)   */
	const char *papi_components; /* PAPI components the papi backend may use:
	                             comma list of powercap, rapl,
	                             perf_event_uncore, or "none";
	                             NULL = "powercap,rapl,perf_event_uncore"    */
};

/* Open the first backend in opts->order that works. On failure returns
 * -errno and writes one "backend: reason" line per tried backend into why.
 * An unknown backend or PAPI component name is -EINVAL before any is tried. */
int js_energy_open(const struct js_energy_opts *opts, struct js_energy **out,
		   char *why, size_t whylen);
void js_energy_close(struct js_energy *e);
const char *js_energy_backend_name(const struct js_energy *e);
const struct js_zone_set *js_energy_zones(const struct js_energy *e);
/* One full reading of all zones (raw counter values, in zone order).
 * A zone that cannot be read gets its error in err[i] (0 when fine). */
int js_energy_read_uj(struct js_energy *e, uint64_t *raw_uj, int *err);

/* Probe a single backend by name: 0 when usable, else -errno and why. */
int js_energy_probe(const char *backend, const char *sysfs_root, char *why, size_t whylen);

/* ---- meter: background sampler + cumulative totals ---------------------- */

struct js_meter;

struct js_snapshot {
	uint64_t t_ns;                       /* CLOCK_REALTIME of the reading     */
	uint64_t mono_ns;                    /* CLOCK_MONOTONIC of the reading    */
	size_t nzones;
	uint64_t energy_uj[JS_MAX_ZONES];    /* cumulative since meter start      */
	uint32_t wraps[JS_MAX_ZONES];        /* cumulative wraps seen             */
	uint32_t uncertain[JS_MAX_ZONES];    /* cumulative gaps too long to trust */
	int err[JS_MAX_ZONES];               /* last read error (0 = fine)        */
	uint64_t energy_cpu_uj, energy_dram_uj;
};

/* Start a meter on an opened backend (the meter does not own it).
 * period_cap_ns caps the sampling period (0 = derived only). With
 * start_thread false no thread is started (callers then sample by hand). */
int js_meter_start(struct js_energy *e, uint64_t period_cap_ns, bool start_thread,
		   struct js_meter **out);
/* Read now (thread-safe) and return the cumulative totals. */
int js_meter_snapshot(struct js_meter *m, struct js_snapshot *out);
uint64_t js_meter_period_ns(const struct js_meter *m);
void js_meter_stop(struct js_meter *m);

/* Interval between two snapshots of one meter: per-zone energy, wraps and
 * whether each zone's value is uncertain: a gap longer than its wrap time,
 * a counter that went back (reset), or a read error at either end (a zone
 * that disappeared). An uncertain zone's energy_uj is not the energy (a
 * lower bound at best): callers must not report it, nor the E_CPU/E_DRAM
 * sum it is part of (cpu_uncertain, dram_uncertain). */
struct js_interval {
	size_t nzones;
	uint64_t energy_uj[JS_MAX_ZONES];
	uint32_t wraps[JS_MAX_ZONES];
	bool zone_uncertain[JS_MAX_ZONES];
	uint64_t energy_cpu_uj, energy_dram_uj, energy_total_uj;
	uint64_t duration_ns;
	bool wrap_uncertain;                 /* any zone uncertain            */
	bool cpu_uncertain, dram_uncertain;  /* a package / dram zone is      */
};
void js_interval_of(const struct js_energy *e, const struct js_snapshot *a,
		    const struct js_snapshot *b, struct js_interval *out);

#ifdef __cplusplus
}
#endif
#endif
