/* Private to the accounting library: backend ops table and file helpers. */
#ifndef JOULESTEP_INTERNAL_H
#define JOULESTEP_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "joulestep/energy.h"
#include "joulestep/freq.h"

#define JS_SYSFS_DEFAULT "/sys"
#define JS_ORDER_DEFAULT "powercap,papi,sysfs"

/* ---- backends ------------------------------------------------------------ */
struct js_energy;

struct js_backend_ops {
	const char *name;
	/* Fill e->zones and e->priv; on failure return -errno and write the
	 * reason (without the backend name) into why. */
	int (*open)(struct js_energy *e, const char *sysfs_root, char *why, size_t whylen);
	int (*read)(struct js_energy *e, uint64_t *raw_uj, int *err);
	void (*close)(struct js_energy *e);
};

struct js_energy {
	const struct js_backend_ops *ops;
	struct js_zone_set zones;
	void *priv;
	const char *papi_components; /* opts->papi_components, during open only */
};

extern const struct js_backend_ops js_backend_sysfs;
extern const struct js_backend_ops js_backend_powercap;
extern const struct js_backend_ops js_backend_papi;
extern const struct js_backend_ops js_backend_amd_energy;

/* amd_energy hwmon (backend_amd_energy.c): pure label parsing, and the
 * discovery of the socket counters as package zones (ids amd_energy:S). */
int js_amd_energy_label(const char *label, int *socket, int *core);
int js_amd_energy_discover(const char *sysfs_root, struct js_zone_set *zs);

/* Readings taken, by the background thread and snapshots (tests). */
uint64_t js_meter_nsamples(struct js_meter *m);

/* ---- pure helpers used by several files --------------------------------- */
/* "package-N" / "package-N-die-M": 0 and sets pkg/die (-1 if no die). */
int js_zone_parse_package(const char *name, int *pkg, int *die);
/* Sort zones and skipped entries by control type and numeric indices. */
void js_zone_set_sort(struct js_zone_set *zs);
/* Append a skip record (silently dropped when the list is full). */
void js_zone_set_skip(struct js_zone_set *zs, const char *id, const char *name,
		      const char *why);
/* Parse an unsigned decimal with optional trailing whitespace. */
int js_parse_u64(const char *buf, size_t len, uint64_t *out);
/* Bounded snprintf that never fails (truncates). */
void js_fmt(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- file helpers (all O_CLOEXEC) ---------------------------------------- */
/* Read a small file (at most len-1 bytes) and NUL-terminate; strips one
 * trailing newline. Returns bytes read or -errno. */
ssize_t js_read_file(const char *path, char *buf, size_t len);
ssize_t js_read_fileat(int dirfd, const char *name, char *buf, size_t len);
int js_read_u64_file(const char *path, uint64_t *out);
/* /proc/sys/kernel/random/boot_id: 36 characters of [0-9a-f-]
 * (JS_BOOT_ID_LEN - 1). js_boot_id: 0, or -errno with buf "". */
bool js_boot_id_ok(const char *b);
int js_boot_id(char *buf, size_t len);
/* pread an energy_uj counter held open in fd and parse it strictly:
 * 0, or -errno (read error, -EINVAL garbage, -ERANGE too long / over max_uj). */
int js_read_counter_fd(int fd, uint64_t max_uj, uint64_t *out_uj);
/* The reason a backend gives when a zone's energy_uj cannot be opened
 * (rc = -errno): "no permission: energy counters are root-only (what)" for
 * EACCES/EPERM, else "unavailable: cannot open what: <strerror>". */
void js_open_why(char *why, size_t whylen, int rc, const char *what);
/* One reading of every zone of e through fds[i]; returns the first error. */
int js_read_counters(const struct js_energy *e, const int *fds, uint64_t *raw_uj, int *err);
/* Write a whole string into an existing file, in place (never empty in between). */
int js_write_file(const char *path, const char *s);
/* Write into <sysfs_root>/devices/system/cpu/cpuN/cpufreq/<file>. */
int js_cpufreq_write(const char *sysfs_root, int cpu, const char *file, const char *val);
int js_cpufreq_write_khz(const char *sysfs_root, int cpu, const char *file, uint32_t khz);
/* The journal's I/O on a clock domain by its key (policy number): through
 * <sysfs_root>/devices/system/cpu/cpufreq/policyN when it exists (it stays
 * while the domain's CPUs are unplugged), else cpuN/cpufreq. */
int js_cpufreq_read_domain(const char *sysfs_root, int key, struct js_cpufreq *out);
int js_domain_write(const char *sysfs_root, int key, const char *file, const char *val);
int js_domain_write_khz(const char *sysfs_root, int key, const char *file, uint32_t khz);
int js_path(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
