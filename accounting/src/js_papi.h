/* PAPI backend, private: the pure decision between the energy sources PAPI
 * may offer, kept apart from the probing (PAPI calls) so that every branch is
 * unit-tested whatever the host has (tests/unit/test_papi.c). */
#ifndef JOULESTEP_PAPI_H
#define JOULESTEP_PAPI_H

#include <stdbool.h>
#include <stddef.h>

/* The energy sources, in the order they are preferred. */
enum js_papi_src {
	JS_PAPI_POWERCAP = 0, /* powercap component: powercap:::ENERGY_UJ:ZONEn */
	JS_PAPI_RAPL,         /* rapl component: rapl:::PACKAGE_ENERGY:PACKAGEn */
	JS_PAPI_UNCORE,       /* perf_event_uncore, rapl PMU: rapl::RAPL_ENERGY_PKG */
	JS_PAPI_NSRC
};

#define JS_PAPI_COMPONENTS_DEFAULT "powercap,rapl,perf_event_uncore"
#define JS_PAPI_ALL_SRC ((1u << JS_PAPI_NSRC) - 1)
/* Longest reason js_papi_decide writes (without the "papi: " prefix). */
#define JS_PAPI_WHY_MAX 120
/* The "reads 0" probe: after PAPI_start the package events are read every
 * JS_PAPI_POLL_US until all have advanced, for at most JS_PAPI_WAIT_US.
 * RAPL package counters advance about every millisecond on real hardware, so
 * a working source costs 1-2 ms and a dead one at most 10 ms. */
#define JS_PAPI_POLL_US 1000
#define JS_PAPI_WAIT_US 10000
#define JS_PAPI_DISABLED_LEN 64

/* PAPI's component name of a source ("powercap", "rapl", "perf_event_uncore"). */
const char *js_papi_src_name(enum js_papi_src s);

/* Pure: a comma list of component names -> bit mask (1 << src). "none" is the
 * empty selection. Unknown, repeated or empty names: -EINVAL and why. NULL
 * means JS_PAPI_COMPONENTS_DEFAULT. */
int js_papi_parse_components(const char *list, unsigned *mask, char *why, size_t whylen);

/* What was found out about one source. The counts are of the package
 * energy events (one per package), which decide; DRAM events are optional. */
struct js_papi_src_probe {
	bool selected;           /* named in the component list                  */
	bool compiled;           /* PAPI knows the component                     */
	bool enabled;            /* ... and did not disable it at init           */
	char disabled_reason[JS_PAPI_DISABLED_LEN]; /* PAPI's, when disabled      */
	bool probed;             /* its events were looked up (selected+enabled) */
	unsigned listed;         /* package events PAPI knows by name            */
	unsigned added;          /* ... that could be added to an event set      */
	bool started;            /* PAPI_start succeeded                         */
	bool read_ok;            /* PAPI_read succeeded after it                 */
	unsigned nonzero;        /* package events that advanced while polled    */
};

struct js_papi_probe {
	const char *lib_error;   /* libpapi could not be loaded or initialised   */
	char version[24];        /* "7.0.0.0"                                    */
	struct js_papi_src_probe src[JS_PAPI_NSRC];
};

enum js_papi_verdict {
	JS_PAPI_USE_POWERCAP = JS_PAPI_POWERCAP,
	JS_PAPI_USE_RAPL = JS_PAPI_RAPL,
	JS_PAPI_USE_UNCORE = JS_PAPI_UNCORE,
	JS_PAPI_PROBE,           /* the root is fine: go and probe PAPI          */
	JS_PAPI_UNAVAILABLE,     /* why says what is missing and what was found  */
};

/* Pure: true when a probed source can be used (every listed package event
 * added, started, read, and advanced). */
bool js_papi_src_usable(const struct js_papi_src_probe *sp);

/* Pure: the verdict. A sysfs root other than /sys is refused first, whatever
 * was probed (PAPI's components read the real /sys, MSRs and PMUs only).
 * probe NULL: nothing probed yet -> JS_PAPI_PROBE when the root is fine.
 * Otherwise the first usable source, else JS_PAPI_UNAVAILABLE with a one-line
 * reason of at most JS_PAPI_WHY_MAX characters in why ("" on success). */
enum js_papi_verdict js_papi_decide(const char *sysfs_root, const struct js_papi_probe *probe,
				    char *why, size_t whylen);

#endif
