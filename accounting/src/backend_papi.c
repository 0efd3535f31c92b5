/* PAPI backend. Uses whichever energy source the PAPI build offers:
 *   1. the powercap component  (powercap:::ENERGY_UJ:ZONEn[_SUBZONEm], uJ)
 *   2. the rapl component      (rapl:::PACKAGE_ENERGY:PACKAGEn, DRAM_ENERGY, nJ)
 *   3. perf_event_uncore's rapl PMU (rapl::RAPL_ENERGY_PKG/DRAM:cpu=c, 2^-32 J)
 * PAPI returns 64-bit counts since PAPI_start; we report them modulo the
 * zone's max_energy_range_uj so the meter's wrap arithmetic applies unchanged.
 * Only the "not available" path can be exercised without RAPL hardware. */
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <papi.h>

#include "js_internal.h"

/* A typical package counter range (2^32 units of 61 uJ): used as the modulus
 * and for the sampling period when zones do not come from powercap sysfs. */
#define PAPI_SYNTH_RANGE_UJ 262143328850ULL

enum papi_src { SRC_POWERCAP, SRC_RAPL, SRC_UNCORE };

struct papi_priv {
	int eventset;
	enum papi_src src;
	long long values[JS_MAX_ZONES];
};

/* libpapi is loaded with dlopen when this backend is first tried, not
 * linked: it pulls in libpfm (~40k relocations), and srun and slurmstepd load
 * the plugin for every step, so linking it cost several ms per step launch
 * even on nodes where PAPI is never used. The header is the one we compiled
 * against, so we open exactly its soname. */
#ifndef JS_PAPI_SONAME
#define JS_PAPI_SONAME "libpapi.so"
#endif

static struct {
	void *handle;
	__typeof__(&PAPI_add_event) add_event;
	__typeof__(&PAPI_cleanup_eventset) cleanup_eventset;
	__typeof__(&PAPI_create_eventset) create_eventset;
	__typeof__(&PAPI_destroy_eventset) destroy_eventset;
	__typeof__(&PAPI_disable_component) disable_component;
	__typeof__(&PAPI_event_name_to_code) event_name_to_code;
	__typeof__(&PAPI_get_component_index) get_component_index;
	__typeof__(&PAPI_get_component_info) get_component_info;
	__typeof__(&PAPI_get_opt) get_opt;
	__typeof__(&PAPI_is_initialized) is_initialized;
	__typeof__(&PAPI_library_init) library_init;
	__typeof__(&PAPI_num_components) num_components;
	__typeof__(&PAPI_read) read;
	__typeof__(&PAPI_start) start;
	__typeof__(&PAPI_stop) stop;
	__typeof__(&PAPI_strerror) strerror;
} P;

static pthread_mutex_t papi_load_lock = PTHREAD_MUTEX_INITIALIZER;

static int papi_load(char *why, size_t whylen)
{
	void *h;
	int rc = 0;

	pthread_mutex_lock(&papi_load_lock);
	if (P.handle)
		goto out;
	h = dlopen(JS_PAPI_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		js_fmt(why, whylen, "unavailable: cannot load " JS_PAPI_SONAME " (%s)", dlerror());
		rc = -ENOENT;
		goto out;
	}
	if (
	    !(P.add_event = (__typeof__(P.add_event))dlsym(h, "PAPI_add_event")) ||
	    !(P.cleanup_eventset = (__typeof__(P.cleanup_eventset))dlsym(h, "PAPI_cleanup_eventset")) ||
	    !(P.create_eventset = (__typeof__(P.create_eventset))dlsym(h, "PAPI_create_eventset")) ||
	    !(P.destroy_eventset = (__typeof__(P.destroy_eventset))dlsym(h, "PAPI_destroy_eventset")) ||
	    !(P.disable_component = (__typeof__(P.disable_component))dlsym(h, "PAPI_disable_component")) ||
	    !(P.event_name_to_code = (__typeof__(P.event_name_to_code))dlsym(h, "PAPI_event_name_to_code")) ||
	    !(P.get_component_index = (__typeof__(P.get_component_index))dlsym(h, "PAPI_get_component_index")) ||
	    !(P.get_component_info = (__typeof__(P.get_component_info))dlsym(h, "PAPI_get_component_info")) ||
	    !(P.get_opt = (__typeof__(P.get_opt))dlsym(h, "PAPI_get_opt")) ||
	    !(P.is_initialized = (__typeof__(P.is_initialized))dlsym(h, "PAPI_is_initialized")) ||
	    !(P.library_init = (__typeof__(P.library_init))dlsym(h, "PAPI_library_init")) ||
	    !(P.num_components = (__typeof__(P.num_components))dlsym(h, "PAPI_num_components")) ||
	    !(P.read = (__typeof__(P.read))dlsym(h, "PAPI_read")) ||
	    !(P.start = (__typeof__(P.start))dlsym(h, "PAPI_start")) ||
	    !(P.stop = (__typeof__(P.stop))dlsym(h, "PAPI_stop")) ||
	    !(P.strerror = (__typeof__(P.strerror))dlsym(h, "PAPI_strerror")) ||
	    0) {
		js_fmt(why, whylen, "unavailable: " JS_PAPI_SONAME " lacks a PAPI symbol (%s)", dlerror());
		dlclose(h);
		memset(&P, 0, sizeof(P));
		rc = -ENOTSUP;
		goto out;
	}
	P.handle = h;
out:
	pthread_mutex_unlock(&papi_load_lock);
	return rc;
}

static void papi_close(struct js_energy *e)
{
	struct papi_priv *p = e->priv;
	long long v[JS_MAX_ZONES];

	if (!p)
		return;
	if (p->eventset != PAPI_NULL) {
		P.stop(p->eventset, v);
		P.cleanup_eventset(p->eventset);
		P.destroy_eventset(&p->eventset);
	}
	free(p);
	e->priv = NULL;
}

static int papi_init(char *why, size_t whylen)
{
	int i, n, rc;

	rc = papi_load(why, whylen);
	if (rc < 0)
		return rc;
	if (P.is_initialized() != PAPI_NOT_INITED)
		return 0;
	/* Only the components that can carry energy: others (GPU, SDE) probe
	 * hardware and print to stderr, which must not happen in slurmstepd. */
	n = P.num_components();
	for (i = 0; i < n; i++) {
		const PAPI_component_info_t *ci = P.get_component_info(i);

		if (ci && strcmp(ci->name, "powercap") && strcmp(ci->name, "rapl") &&
		    strcmp(ci->name, "perf_event") && strcmp(ci->name, "perf_event_uncore"))
			P.disable_component(i);
	}
	rc = P.library_init(PAPI_VER_CURRENT);
	if (rc != PAPI_VER_CURRENT) {
		js_fmt(why, whylen, "unavailable: PAPI_library_init failed: %s",
		       rc > 0 ? "version mismatch" : P.strerror(rc));
		return -ENOTSUP;
	}
	return 0;
}

/* Enabled component index, or -1 with a note on why not. */
static int component(const char *name, char *note, size_t nlen)
{
	int cidx = P.get_component_index(name);
	const PAPI_component_info_t *ci;

	if (cidx < 0) {
		js_fmt(note, nlen, "no %s component compiled in", name);
		return -1;
	}
	ci = P.get_component_info(cidx);
	if (!ci || ci->disabled) {
		js_fmt(note, nlen, "%s component disabled: %s", name,
		       ci && ci->disabled_reason[0] ? ci->disabled_reason : "no reason given");
		return -1;
	}
	return cidx;
}

static int add_event(struct papi_priv *p, const char *ev)
{
	int code;

	if (P.event_name_to_code(ev, &code) != PAPI_OK)
		return -ENOENT;
	return P.add_event(p->eventset, code) == PAPI_OK ? 0 : -EIO;
}

static struct js_zone_info *synth_zone(struct js_zone_set *zs, enum js_zone_kind kind,
				       int pkg, const char *ev)
{
	struct js_zone_info *z;

	if (zs->nzones >= JS_MAX_ZONES)
		return NULL;
	z = &zs->zones[zs->nzones++];
	memset(z, 0, sizeof(*z));
	if (kind == JS_ZONE_PACKAGE)
		js_fmt(z->name, sizeof(z->name), "package-%d", pkg);
	else
		js_fmt(z->name, sizeof(z->name), "dram");
	js_fmt(z->id, sizeof(z->id), "%s", ev);
	js_fmt(z->path, sizeof(z->path), "papi:%s", ev);
	z->kind = kind;
	z->package = pkg;
	z->die = -1;
	z->depth = kind == JS_ZONE_PACKAGE ? 1 : 2;
	z->index[0] = (uint32_t)pkg;
	z->max_energy_range_uj = PAPI_SYNTH_RANGE_UJ;
	z->max_power_uw = JS_DEFAULT_MAX_POWER_UW;
	return z;
}

/* First CPU of each package, from topology/physical_package_id. */
static int first_cpu_of(const char *sysfs_root, int pkg)
{
	int cpu;

	for (cpu = 0; cpu < JS_MAX_CPUS; cpu++) {
		char path[JS_PATH_LEN];
		uint64_t v;
		int rc;

		js_fmt(path, sizeof(path), "%s/devices/system/cpu/cpu%d/topology/physical_package_id",
		       sysfs_root, cpu);
		rc = js_read_u64_file(path, &v);
		if (rc == -ENOENT)
			return -1;
		if (rc == 0 && v == (uint64_t)pkg)
			return cpu;
	}
	return -1;
}

static int try_powercap(struct js_energy *e, struct papi_priv *p, const char *sysfs_root)
{
	size_t i;

	if (js_zones_discover(sysfs_root, &e->zones) < 0)
		return -ENOENT;
	for (i = 0; i < e->zones.nzones; i++) {
		const struct js_zone_info *z = &e->zones.zones[i];
		char ev[128];

		if (z->depth == 1)
			js_fmt(ev, sizeof(ev), "powercap:::ENERGY_UJ:ZONE%u", z->index[0]);
		else
			js_fmt(ev, sizeof(ev), "powercap:::ENERGY_UJ:ZONE%u_SUBZONE%u",
			       z->index[0], z->index[1]);
		if (add_event(p, ev) < 0)
			return -ENOENT;
	}
	p->src = SRC_POWERCAP;
	return 0;
}

static int try_rapl(struct js_energy *e, struct papi_priv *p, bool uncore, const char *sysfs_root)
{
	int pkg;

	memset(&e->zones, 0, sizeof(e->zones));
	for (pkg = 0; pkg < JS_MAX_ZONES / 2; pkg++) {
		char ev[128];
		int cpu = 0;

		if (uncore) {
			cpu = first_cpu_of(sysfs_root, pkg);
			if (cpu < 0)
				break;
			js_fmt(ev, sizeof(ev), "rapl::RAPL_ENERGY_PKG:cpu=%d", cpu);
		} else {
			js_fmt(ev, sizeof(ev), "rapl:::PACKAGE_ENERGY:PACKAGE%d", pkg);
		}
		if (add_event(p, ev) < 0)
			break;
		if (!synth_zone(&e->zones, JS_ZONE_PACKAGE, pkg, ev))
			return -E2BIG;
		if (uncore)
			js_fmt(ev, sizeof(ev), "rapl::RAPL_ENERGY_DRAM:cpu=%d", cpu);
		else
			js_fmt(ev, sizeof(ev), "rapl:::DRAM_ENERGY:PACKAGE%d", pkg);
		if (add_event(p, ev) == 0 && !synth_zone(&e->zones, JS_ZONE_DRAM, pkg, ev))
			return -E2BIG;
	}
	if (e->zones.nzones == 0)
		return -ENOENT;
	p->src = uncore ? SRC_UNCORE : SRC_RAPL;
	return 0;
}

static int new_eventset(struct papi_priv *p)
{
	if (p->eventset != PAPI_NULL) {
		P.cleanup_eventset(p->eventset);
		P.destroy_eventset(&p->eventset);
	}
	p->eventset = PAPI_NULL;
	return P.create_eventset(&p->eventset) == PAPI_OK ? 0 : -EIO;
}

static int papi_open(struct js_energy *e, const char *sysfs_root, char *why, size_t whylen)
{
	char n1[128] = "", n2[128] = "", n3[128] = "";
	struct papi_priv *p;
	int rc, ver;
	bool have_pc, have_rapl, have_unc;

	if (!sysfs_root)
		sysfs_root = JS_SYSFS_DEFAULT;
	rc = papi_init(why, whylen);
	if (rc < 0)
		return rc;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->eventset = PAPI_NULL;
	e->priv = p;
	rc = -ENOENT;
	have_pc = component("powercap", n1, sizeof(n1)) >= 0;
	have_rapl = component("rapl", n2, sizeof(n2)) >= 0;
	have_unc = component("perf_event_uncore", n3, sizeof(n3)) >= 0;
	if ((have_pc || have_rapl || have_unc) && strcmp(sysfs_root, "/sys") &&
	    strcmp(sysfs_root, "/sys/")) {
		/* PAPI's components read the real /sys (and MSRs, PMUs) only */
		js_fmt(why, whylen, "unavailable: PAPI reads only the real /sys");
		papi_close(e);
		return -ENOTSUP;
	}
	if (have_pc && new_eventset(p) == 0)
		rc = try_powercap(e, p, sysfs_root);
	if (rc < 0 && have_rapl && new_eventset(p) == 0)
		rc = try_rapl(e, p, false, sysfs_root);
	if (rc < 0 && have_unc && new_eventset(p) == 0)
		rc = try_rapl(e, p, true, sysfs_root);
	if (rc < 0) {
		ver = P.get_opt(PAPI_LIB_VERSION, NULL);
		if (!n1[0] && !n2[0] && !n3[0])
			js_fmt(why, whylen, "unavailable: PAPI %d.%d.%d.%d: no energy events found",
			       PAPI_VERSION_MAJOR(ver), PAPI_VERSION_MINOR(ver),
			       PAPI_VERSION_REVISION(ver), PAPI_VERSION_INCREMENT(ver));
		else
			js_fmt(why, whylen,
			       "unavailable: PAPI %d.%d.%d.%d has no powercap or rapl component "
			       "compiled in and perf_event_uncore offers no rapl PMU (%s; %s; %s)",
			       PAPI_VERSION_MAJOR(ver), PAPI_VERSION_MINOR(ver),
			       PAPI_VERSION_REVISION(ver), PAPI_VERSION_INCREMENT(ver),
			       n1[0] ? n1 : "powercap: no events",
			       n2[0] ? n2 : "rapl: no events",
			       n3[0] ? n3 : "perf_event_uncore: no rapl events");
		memset(&e->zones, 0, sizeof(e->zones));
		papi_close(e);
		return -ENOTSUP;
	}
	/* zones stay in event order: values[i] belongs to zones[i] */
	if (P.start(p->eventset) != PAPI_OK) {
		js_fmt(why, whylen, "unavailable: PAPI_start failed on the energy events");
		papi_close(e);
		return -EIO;
	}
	return 0;
}

static uint64_t to_uj(enum papi_src src, long long v)
{
	if (v < 0)
		v = 0;
	switch (src) {
	case SRC_RAPL:
		return (uint64_t)v / 1000; /* nJ */
	case SRC_UNCORE:
		/* 2^-32 J units: uJ = v * 10^6 / 2^32 = v * 15625 / 2^26 */
		return (uint64_t)(((unsigned __int128)(uint64_t)v * 15625u) >> 26);
	case SRC_POWERCAP:
	default:
		return (uint64_t)v;
	}
}

static int papi_read(struct js_energy *e, uint64_t *raw_uj, int *err)
{
	struct papi_priv *p = e->priv;
	size_t i;
	int rc = P.read(p->eventset, p->values);

	for (i = 0; i < e->zones.nzones; i++) {
		uint64_t max = e->zones.zones[i].max_energy_range_uj;

		err[i] = rc == PAPI_OK ? 0 : -EIO;
		raw_uj[i] = rc == PAPI_OK ? to_uj(p->src, p->values[i]) % (max ? max : UINT64_MAX) : 0;
	}
	return rc == PAPI_OK ? 0 : -EIO;
}

const struct js_backend_ops js_backend_papi = {
	.name = "papi",
	.open = papi_open,
	.read = papi_read,
	.close = papi_close,
};
