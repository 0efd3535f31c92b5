/* PAPI backend. Uses whichever energy source the PAPI build offers:
 *   1. the powercap component  (powercap:::ENERGY_UJ:ZONEn[_SUBZONEm], uJ)
 *   2. the rapl component      (rapl:::PACKAGE_ENERGY:PACKAGEn, DRAM_ENERGY, nJ)
 *   3. perf_event_uncore's rapl PMU (rapl::RAPL_ENERGY_PKG/DRAM:cpu=c, 2^-32 J)
 * PAPI returns 64-bit counts since PAPI_start; we report them modulo the
 * zone's max_energy_range_uj so the meter's wrap arithmetic applies unchanged.
 *
 * Two halves: papi_open() only probes (which components exist and are
 * enabled, which energy events are listed, can be added, started, read, and
 * advance during a short poll) and js_papi_decide() -- pure, no PAPI call --
 * chooses the source and words the reason from what was probed, so every
 * branch is unit-tested on any host (tests/unit/test_papi.c). */
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <papi.h>

#include "js_internal.h"
#include "js_papi.h"

/* A typical package counter range (2^32 units of 61 uJ): used as the modulus
 * and for the sampling period when zones do not come from powercap sysfs. */
#define PAPI_SYNTH_RANGE_UJ 262143328850ULL

struct papi_priv {
	int eventset;
	enum js_papi_src src;
	bool required[JS_MAX_ZONES]; /* package events decide; DRAM is optional */
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
		js_fmt(why, whylen, "cannot load " JS_PAPI_SONAME " (%s)", dlerror());
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
		js_fmt(why, whylen, JS_PAPI_SONAME " lacks a PAPI symbol (%s)", dlerror());
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

/* ---- pure: component list, verdict and reason ---------------------------- */

const char *js_papi_src_name(enum js_papi_src s)
{
	static const char *const names[JS_PAPI_NSRC] = {"powercap", "rapl", "perf_event_uncore"};

	return (unsigned)s < JS_PAPI_NSRC ? names[s] : "?";
}

int js_papi_parse_components(const char *list, unsigned *mask, char *why, size_t whylen)
{
	const char *p;
	unsigned m = 0;

	if (why && whylen)
		why[0] = '\0';
	if (!list)
		list = JS_PAPI_COMPONENTS_DEFAULT;
	if (!strcmp(list, "none")) {
		*mask = 0;
		return 0;
	}
	for (p = list;;) {
		size_t len = strcspn(p, ",");
		int s, found = -1;

		for (s = 0; s < JS_PAPI_NSRC; s++)
			if (strlen(js_papi_src_name(s)) == len && !strncmp(p, js_papi_src_name(s), len))
				found = s;
		if (found < 0) {
			js_fmt(why, whylen, "unknown PAPI component '%.*s' (allowed: powercap, rapl, "
			       "perf_event_uncore, or none)", (int)(len < 40 ? len : 40), p);
			return -EINVAL;
		}
		if (m & (1u << found)) {
			js_fmt(why, whylen, "PAPI component '%s' named twice", js_papi_src_name(found));
			return -EINVAL;
		}
		m |= 1u << found;
		p += len;
		if (!*p)
			break;
		p++; /* a trailing comma leaves an empty name: refused above */
	}
	*mask = m;
	return 0;
}

/* How far a source got, least first; the reason lists the furthest first. */
enum src_state {
	ST_NOT_SELECTED, ST_NOT_COMPILED, ST_DISABLED, ST_NOT_PROBED, ST_NO_EVENTS,
	ST_NONE_ADDED, ST_SOME_ADDED, ST_NO_START, ST_NO_READ, ST_ALL_ZERO, ST_SOME_ZERO,
	ST_USABLE,
};

static enum src_state src_state(const struct js_papi_src_probe *sp)
{
	if (!sp->selected)
		return ST_NOT_SELECTED;
	if (!sp->compiled)
		return ST_NOT_COMPILED;
	if (!sp->enabled)
		return ST_DISABLED;
	if (!sp->probed)
		return ST_NOT_PROBED;
	if (sp->listed == 0)
		return ST_NO_EVENTS;
	if (sp->added == 0)
		return ST_NONE_ADDED;
	if (sp->added < sp->listed)
		return ST_SOME_ADDED;
	if (!sp->started)
		return ST_NO_START;
	if (!sp->read_ok)
		return ST_NO_READ;
	if (sp->nonzero == 0)
		return ST_ALL_ZERO;
	if (sp->nonzero < sp->added)
		return ST_SOME_ZERO;
	return ST_USABLE;
}

bool js_papi_src_usable(const struct js_papi_src_probe *sp)
{
	return src_state(sp) == ST_USABLE;
}

/* Copy s into out (size n), control characters as '?', at most max chars,
 * ending in "..." when cut. */
static void clean_copy(char *out, size_t n, const char *s, size_t max)
{
	size_t i, len = strlen(s);

	if (!n)
		return;
	if (max >= n)
		max = n - 1;
	for (i = 0; i < len && i < max; i++)
		out[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	out[i] = '\0';
	if (len > max && max >= 3)
		memcpy(out + max - 3, "...", 4);
}

static void state_text(enum src_state st, const struct js_papi_src_probe *sp, bool full,
		       char *out, size_t n)
{
	char reason[JS_PAPI_DISABLED_LEN];
	int wait_ms = JS_PAPI_WAIT_US / 1000;

	switch (st) {
	case ST_NOT_SELECTED: js_fmt(out, n, "not selected"); break;
	case ST_NOT_COMPILED: js_fmt(out, n, "not compiled in"); break;
	case ST_DISABLED:
		clean_copy(reason, sizeof(reason), sp->disabled_reason, 48);
		if (full && reason[0])
			js_fmt(out, n, "disabled (%s)", reason);
		else
			js_fmt(out, n, "disabled");
		break;
	case ST_NOT_PROBED: js_fmt(out, n, "not probed"); break;
	case ST_NO_EVENTS: js_fmt(out, n, "no energy events"); break;
	case ST_NONE_ADDED: js_fmt(out, n, "%u listed, none can be added", sp->listed); break;
	case ST_SOME_ADDED:
		js_fmt(out, n, "%u listed, only %u can be added", sp->listed, sp->added);
		break;
	case ST_NO_START: js_fmt(out, n, "%u added, PAPI_start fails", sp->added); break;
	case ST_NO_READ: js_fmt(out, n, "%u started, PAPI_read fails", sp->added); break;
	case ST_ALL_ZERO: js_fmt(out, n, "%u read 0 for %d ms", sp->added, wait_ms); break;
	case ST_SOME_ZERO:
		js_fmt(out, n, "%u of %u read 0 for %d ms", sp->added - sp->nonzero, sp->added,
		       wait_ms);
		break;
	case ST_USABLE: js_fmt(out, n, "usable"); break;
	}
}

/* Sources with the same short text share one part: "powercap, rapl: ...". */
struct part {
	unsigned mask;
	enum src_state st;
	char names[64];
	char brief[64], full[96];
	bool in, use_full;
};

static size_t parts_len(const struct part *pt, size_t np)
{
	size_t i, len = 0, k = 0;

	for (i = 0; i < np; i++) {
		if (!pt[i].in)
			continue;
		len += (k++ ? 2 : 0) + strlen(pt[i].names) + 2 +
		       strlen(pt[i].use_full ? pt[i].full : pt[i].brief);
	}
	return len;
}

static void unavailable_reason(const struct js_papi_probe *pr, char *why, size_t whylen)
{
	struct part pt[JS_PAPI_NSRC];
	char head[80], body[JS_PAPI_WHY_MAX + 1] = "";
	size_t np = 0, i, j, fixed;
	bool active = false;
	int s;

	memset(pt, 0, sizeof(pt));
	for (s = 0; s < JS_PAPI_NSRC; s++) {
		const struct js_papi_src_probe *sp = &pr->src[s];
		enum src_state st = src_state(sp);
		char brief[64], full[96];

		if (st >= ST_NOT_PROBED)
			active = true;
		state_text(st, sp, false, brief, sizeof(brief));
		state_text(st, sp, true, full, sizeof(full));
		for (i = 0; i < np && strcmp(pt[i].brief, brief); i++)
			;
		if (i == np) {
			pt[np].st = st;
			js_fmt(pt[np].brief, sizeof(pt[np].brief), "%s", brief);
			js_fmt(pt[np].full, sizeof(pt[np].full), "%s", full);
			np++;
		} else if (strcmp(pt[i].full, full)) {
			js_fmt(pt[i].full, sizeof(pt[i].full), "%s", brief);
		}
		pt[i].mask |= 1u << s;
	}
	for (i = 0; i < np; i++) {
		size_t used = 0;

		for (s = 0; s < JS_PAPI_NSRC; s++)
			if (pt[i].mask & (1u << s)) {
				js_fmt(pt[i].names + used, sizeof(pt[i].names) - used, "%s%s",
				       used ? ", " : "", js_papi_src_name(s));
				used = strlen(pt[i].names);
			}
	}
	/* furthest first (stable: equal states keep the source order) */
	for (i = 1; i < np; i++)
		for (j = i; j > 0 && pt[j].st > pt[j - 1].st; j--) {
			struct part t = pt[j];

			pt[j] = pt[j - 1];
			pt[j - 1] = t;
		}
	js_fmt(head, sizeof(head), "unavailable: PAPI%s%s has no %s (", pr->version[0] ? " " : "",
	       pr->version, active ? "usable energy events" : "energy component");
	fixed = strlen(head) + 1; /* and the closing parenthesis */
	/* the parts, furthest first, in brief, up to the first that does not fit
	 * (so a source left out never got further than one named); then the
	 * details that fit */
	for (i = 0; i < np; i++) {
		pt[i].in = true;
		if (fixed + parts_len(pt, np) > JS_PAPI_WHY_MAX && i > 0) {
			pt[i].in = false;
			break;
		}
	}
	for (i = 0; i < np; i++) {
		if (!pt[i].in || !strcmp(pt[i].brief, pt[i].full))
			continue;
		pt[i].use_full = true;
		if (fixed + parts_len(pt, np) > JS_PAPI_WHY_MAX)
			pt[i].use_full = false;
	}
	for (i = 0; i < np; i++) {
		size_t used = strlen(body);

		if (pt[i].in)
			js_fmt(body + used, sizeof(body) - used, "%s%s: %s", used ? "; " : "",
			       pt[i].names, pt[i].use_full ? pt[i].full : pt[i].brief);
	}
	js_fmt(why, whylen, "%s%s)", head, body);
}

static bool real_sysfs(const char *root)
{
	size_t n;

	if (!root)
		return true;
	n = strlen(root);
	while (n > 1 && root[n - 1] == '/')
		n--;
	return n == 4 && !strncmp(root, "/sys", 4);
}

enum js_papi_verdict js_papi_decide(const char *sysfs_root, const struct js_papi_probe *pr,
				    char *why, size_t whylen)
{
	static const char not_sys[] = "unavailable: PAPI reads only the real /sys, not ";
	char tmp[JS_PAPI_WHY_MAX + 1], lib[2 * JS_PAPI_WHY_MAX];
	int s;

	if (why && whylen)
		why[0] = '\0';
	/* first, and whatever PAPI offers: its components read the real /sys
	 * (and MSRs, PMUs) only, so a fake tree's numbers cannot come from it */
	if (!real_sysfs(sysfs_root)) {
		size_t room = JS_PAPI_WHY_MAX - (sizeof(not_sys) - 1), len = strlen(sysfs_root);

		if (len > room) /* keep the end of a long path: it tells more */
			js_fmt(tmp, sizeof(tmp), "...%s", sysfs_root + len - (room - 3));
		else
			js_fmt(tmp, sizeof(tmp), "%s", sysfs_root);
		clean_copy(tmp, sizeof(tmp), tmp, room);
		js_fmt(why, whylen, "%s%s", not_sys, tmp);
		return JS_PAPI_UNAVAILABLE;
	}
	if (!pr)
		return JS_PAPI_PROBE;
	if (pr->lib_error) {
		js_fmt(lib, sizeof(lib), "unavailable: %s", pr->lib_error);
		clean_copy(why, whylen, lib, JS_PAPI_WHY_MAX);
		return JS_PAPI_UNAVAILABLE;
	}
	for (s = 0; s < JS_PAPI_NSRC; s++)
		if (js_papi_src_usable(&pr->src[s]))
			return (enum js_papi_verdict)s;
	unavailable_reason(pr, why, whylen);
	return JS_PAPI_UNAVAILABLE;
}

/* ---- probing (PAPI calls) ------------------------------------------------- */

static int papi_init(char *why, size_t whylen)
{
	int i, n, rc;

	rc = papi_load(why, whylen);
	if (rc < 0)
		return rc;
	if (P.is_initialized() != PAPI_NOT_INITED)
		return 0;
	/* Only the components that can carry energy: others (GPU, SDE) probe
	 * hardware and print to stderr, which must not happen in slurmstepd.
	 * The component list (opts) only chooses among these per open, since
	 * PAPI is initialised once per process. */
	n = P.num_components();
	for (i = 0; i < n; i++) {
		const PAPI_component_info_t *ci = P.get_component_info(i);

		if (ci && strcmp(ci->name, "powercap") && strcmp(ci->name, "rapl") &&
		    strcmp(ci->name, "perf_event") && strcmp(ci->name, "perf_event_uncore"))
			P.disable_component(i);
	}
	rc = P.library_init(PAPI_VER_CURRENT);
	if (rc != PAPI_VER_CURRENT) {
		js_fmt(why, whylen, "PAPI_library_init failed: %s",
		       rc > 0 ? "version mismatch" : P.strerror(rc));
		return -ENOTSUP;
	}
	return 0;
}

static struct js_zone_info *synth_zone(struct js_zone_info *z, enum js_zone_kind kind,
				       int pkg, const char *ev)
{
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
static int first_cpu_of(int pkg)
{
	int cpu;

	for (cpu = 0; cpu < JS_MAX_CPUS; cpu++) {
		char path[JS_PATH_LEN];
		uint64_t v;
		int rc;

		js_fmt(path, sizeof(path), JS_SYSFS_DEFAULT
		       "/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
		rc = js_read_u64_file(path, &v);
		if (rc == -ENOENT)
			return -1;
		if (rc == 0 && v == (uint64_t)pkg)
			return cpu;
	}
	return -1;
}

static void drop_eventset(struct papi_priv *p)
{
	long long v[JS_MAX_ZONES];

	if (p->eventset == PAPI_NULL)
		return;
	P.stop(p->eventset, v); /* PAPI_ENOTRUN when not started: harmless */
	P.cleanup_eventset(p->eventset);
	P.destroy_eventset(&p->eventset);
	p->eventset = PAPI_NULL;
}

/* Add the event of zone z (already known to PAPI as code) to the source's
 * event set; zones stay in event order: values[i] belongs to zones[i]. */
static void add_zone(struct js_energy *e, struct papi_priv *p, struct js_papi_src_probe *sp,
		     const struct js_zone_info *z, int code, bool required)
{
	if (required)
		sp->listed++;
	if (e->zones.nzones >= JS_MAX_ZONES)
		return;
	if (p->eventset == PAPI_NULL && P.create_eventset(&p->eventset) != PAPI_OK) {
		p->eventset = PAPI_NULL;
		return;
	}
	if (P.add_event(p->eventset, code) != PAPI_OK)
		return;
	if (required)
		sp->added++;
	p->required[e->zones.nzones] = required;
	e->zones.zones[e->zones.nzones++] = *z;
}

static void list_powercap(struct js_energy *e, struct papi_priv *p, struct js_papi_src_probe *sp)
{
	struct js_zone_set *d = calloc(1, sizeof(*d));
	size_t i;

	if (!d)
		return;
	if (js_zones_discover(JS_SYSFS_DEFAULT, d) == 0) {
		for (i = 0; i < d->nzones; i++) {
			const struct js_zone_info *z = &d->zones[i];
			char ev[128];
			int code;

			if (z->depth == 1)
				js_fmt(ev, sizeof(ev), "powercap:::ENERGY_UJ:ZONE%u", z->index[0]);
			else
				js_fmt(ev, sizeof(ev), "powercap:::ENERGY_UJ:ZONE%u_SUBZONE%u",
				       z->index[0], z->index[1]);
			if (P.event_name_to_code(ev, &code) == PAPI_OK)
				add_zone(e, p, sp, z, code, z->kind == JS_ZONE_PACKAGE);
		}
	}
	free(d);
}

/* rapl component or perf_event_uncore's rapl PMU: one package event per
 * package (listing stops at the first package PAPI does not know), DRAM
 * where PAPI has it. */
static void list_rapl(struct js_energy *e, struct papi_priv *p, struct js_papi_src_probe *sp,
		      bool uncore)
{
	int pkg;

	for (pkg = 0; pkg < JS_MAX_ZONES / 2; pkg++) {
		struct js_zone_info z;
		char ev[128];
		int cpu = 0, code;

		if (uncore) {
			cpu = first_cpu_of(pkg);
			if (cpu < 0)
				break;
			js_fmt(ev, sizeof(ev), "rapl::RAPL_ENERGY_PKG:cpu=%d", cpu);
		} else {
			js_fmt(ev, sizeof(ev), "rapl:::PACKAGE_ENERGY:PACKAGE%d", pkg);
		}
		if (P.event_name_to_code(ev, &code) != PAPI_OK)
			break;
		add_zone(e, p, sp, synth_zone(&z, JS_ZONE_PACKAGE, pkg, ev), code, true);
		if (uncore)
			js_fmt(ev, sizeof(ev), "rapl::RAPL_ENERGY_DRAM:cpu=%d", cpu);
		else
			js_fmt(ev, sizeof(ev), "rapl:::DRAM_ENERGY:PACKAGE%d", pkg);
		if (P.event_name_to_code(ev, &code) == PAPI_OK)
			add_zone(e, p, sp, synth_zone(&z, JS_ZONE_DRAM, pkg, ev), code, false);
	}
}

/* List, add, start, then poll until every package event has advanced (RAPL
 * package energy always does on real hardware) or JS_PAPI_WAIT_US passed.
 * Leaves the event set running when the source is usable. */
static void probe_src(struct js_energy *e, struct papi_priv *p, enum js_papi_src s,
		      struct js_papi_src_probe *sp)
{
	const struct timespec poll = {0, JS_PAPI_POLL_US * 1000L};
	unsigned waited_us;
	size_t i;

	memset(&e->zones, 0, sizeof(e->zones));
	drop_eventset(p);
	sp->probed = true;
	if (s == JS_PAPI_POWERCAP)
		list_powercap(e, p, sp);
	else
		list_rapl(e, p, sp, s == JS_PAPI_UNCORE);
	if (sp->added == 0 || sp->added < sp->listed)
		return;
	if (P.start(p->eventset) != PAPI_OK)
		return;
	sp->started = true;
	for (waited_us = 0; waited_us < JS_PAPI_WAIT_US; waited_us += JS_PAPI_POLL_US) {
		nanosleep(&poll, NULL);
		sp->read_ok = P.read(p->eventset, p->values) == PAPI_OK;
		if (!sp->read_ok)
			return;
		sp->nonzero = 0;
		for (i = 0; i < e->zones.nzones; i++)
			if (p->required[i] && p->values[i] > 0)
				sp->nonzero++;
		if (sp->nonzero == sp->added)
			return;
	}
}

static int papi_open(struct js_energy *e, const char *sysfs_root, char *why, size_t whylen)
{
	struct js_papi_probe pr;
	char lib_error[JS_WHY_LEN];
	enum js_papi_verdict v;
	struct papi_priv *p;
	unsigned mask;
	bool found = false;
	int rc, s, ver;

	if (js_papi_decide(sysfs_root, NULL, why, whylen) == JS_PAPI_UNAVAILABLE)
		return -ENOTSUP;
	rc = js_papi_parse_components(e->papi_components, &mask, why, whylen);
	if (rc < 0)
		return rc;
	memset(&pr, 0, sizeof(pr));
	rc = papi_init(lib_error, sizeof(lib_error));
	if (rc < 0) {
		pr.lib_error = lib_error;
		js_papi_decide(sysfs_root, &pr, why, whylen);
		return rc;
	}
	ver = P.get_opt(PAPI_LIB_VERSION, NULL);
	js_fmt(pr.version, sizeof(pr.version), "%d.%d.%d.%d", PAPI_VERSION_MAJOR(ver),
	       PAPI_VERSION_MINOR(ver), PAPI_VERSION_REVISION(ver), PAPI_VERSION_INCREMENT(ver));
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->eventset = PAPI_NULL;
	e->priv = p;
	for (s = 0; s < JS_PAPI_NSRC; s++) {
		struct js_papi_src_probe *sp = &pr.src[s];
		int cidx = P.get_component_index(js_papi_src_name(s));
		const PAPI_component_info_t *ci = cidx >= 0 ? P.get_component_info(cidx) : NULL;

		sp->selected = mask & (1u << s);
		sp->compiled = cidx >= 0;
		sp->enabled = ci && !ci->disabled;
		if (ci && ci->disabled)
			js_fmt(sp->disabled_reason, sizeof(sp->disabled_reason), "%s",
			       ci->disabled_reason);
		if (!sp->selected || !sp->enabled || found)
			continue;
		probe_src(e, p, s, sp);
		if (js_papi_src_usable(sp)) {
			found = true;
			p->src = s;
		}
	}
	v = js_papi_decide(sysfs_root, &pr, why, whylen);
	if (v == JS_PAPI_UNAVAILABLE || !found || (int)v != (int)p->src) {
		memset(&e->zones, 0, sizeof(e->zones));
		papi_close(e);
		return -ENOTSUP;
	}
	return 0;
}

static uint64_t to_uj(enum js_papi_src src, long long v)
{
	if (v < 0)
		v = 0;
	switch (src) {
	case JS_PAPI_RAPL:
		return (uint64_t)v / 1000; /* nJ */
	case JS_PAPI_UNCORE:
		/* 2^-32 J units: uJ = v * 10^6 / 2^32 = v * 15625 / 2^26 */
		return (uint64_t)(((unsigned __int128)(uint64_t)v * 15625u) >> 26);
	case JS_PAPI_POWERCAP:
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
