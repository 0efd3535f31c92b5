/* Helpers for unit tests: build small sysfs-shaped trees in a temp dir with
 * plain C file I/O (the kernel's layout, as tests/fakehw builds it). */
#ifndef JS_TEST_TREE_H
#define JS_TEST_TREE_H

/* Test paths come from mkdtemp and are short; silence the size heuristics. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PKG_MAX_UJ 262143328850ULL
#define DRAM_MAX_UJ 65712999613ULL

static inline void tt_die(const char *what, const char *path)
{
	fprintf(stderr, "test tree: %s %s: %s\n", what, path, strerror(errno));
	abort();
}

static inline void tt_mkdirs(const char *path)
{
	char buf[1024];
	char *p;

	snprintf(buf, sizeof(buf), "%s", path);
	for (p = buf + 1; *p; p++) {
		if (*p == '/') {
			*p = '\0';
			if (mkdir(buf, 0755) < 0 && errno != EEXIST)
				tt_die("mkdir", buf);
			*p = '/';
		}
	}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		tt_die("mkdir", buf);
}

/* Write in place (open, truncate, write): readers keep fds open. */
static inline void tt_write(const char *path, const char *content)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	size_t len = strlen(content);

	if (fd < 0 || write(fd, content, len) != (ssize_t)len)
		tt_die("write", path);
	close(fd);
}

static inline void tt_writef(const char *path, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static inline void tt_writef(const char *path, const char *fmt, ...)
{
	char buf[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	tt_write(path, buf);
}

static inline char *tt_read(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		tt_die("open", path);
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		tt_die("read", path);
	buf[n] = '\0';
	if (n > 0 && buf[n - 1] == '\n')
		buf[n - 1] = '\0';
	return buf;
}

/* Under a directory root may write into (docs/design.md, "Directories root
 * writes into": every component root-owned, not group/world-writable), so
 * that a state directory made here passes the journal's walk: /run/js-unit
 * as root, not /tmp (world-writable). */
static inline char *tt_mkdtemp(void)
{
	const char *base = "/run/js-unit";
	char tmpl[256];
	struct stat st;

	if (geteuid() == 0) {
		if (mkdir(base, 0755) < 0 && errno != EEXIST)
			tt_die("mkdir", base);
		if (lstat(base, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 || chmod(base, 0755) < 0)
			tt_die("a root-owned directory", base);
	} else {
		base = "/tmp";
	}
	snprintf(tmpl, sizeof(tmpl), "%s/js-unit.XXXXXX", base);
	char *d = strdup(tmpl);

	if (!d || !mkdtemp(d))
		tt_die("mkdtemp", tmpl);
	return d;
}

static int tt_rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static inline void tt_rmrf(char *dir)
{
	if (dir) {
		nftw(dir, tt_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
		free(dir);
	}
}

/* ---- RAPL zones ---------------------------------------------------------------- */

/* One zone: ctype:i (sub < 0) or ctype:i:sub, under devices/virtual/powercap,
 * plus the flat class/powercap symlink when flat is set. max_power_uw 0 means
 * "no constraint_0_max_power_uw file". */
static inline void tt_zone(const char *root, const char *ct, int i, int sub, const char *name,
			   uint64_t energy_uj, uint64_t max_uj, uint64_t max_power_uw, int flat)
{
	char id[64], rel[512], dir[1024], path[1200], link[1024];

	if (sub < 0) {
		snprintf(id, sizeof(id), "%s:%x", ct, i);
		snprintf(rel, sizeof(rel), "devices/virtual/powercap/%s/%s", ct, id);
	} else {
		snprintf(id, sizeof(id), "%s:%x:%x", ct, i, sub);
		snprintf(rel, sizeof(rel), "devices/virtual/powercap/%s/%s:%x/%s", ct, ct, i, id);
	}
	snprintf(dir, sizeof(dir), "%s/%s", root, rel);
	tt_mkdirs(dir);
	snprintf(path, sizeof(path), "%s/name", dir);
	tt_writef(path, "%s\n", name);
	snprintf(path, sizeof(path), "%s/energy_uj", dir);
	tt_writef(path, "%" PRIu64 "\n", energy_uj);
	snprintf(path, sizeof(path), "%s/max_energy_range_uj", dir);
	tt_writef(path, "%" PRIu64 "\n", max_uj);
	if (max_power_uw) {
		snprintf(path, sizeof(path), "%s/constraint_0_max_power_uw", dir);
		tt_writef(path, "%" PRIu64 "\n", max_power_uw);
	}
	snprintf(path, sizeof(path), "%s/class/powercap", root);
	tt_mkdirs(path);
	snprintf(path, sizeof(path), "%s/class/powercap/%s", root, ct);
	snprintf(link, sizeof(link), "../../devices/virtual/powercap/%s", ct);
	if (symlink(link, path) < 0 && errno != EEXIST)
		tt_die("symlink", path);
	if (flat) {
		snprintf(path, sizeof(path), "%s/class/powercap/%s", root, id);
		snprintf(link, sizeof(link), "../../%s", rel);
		if (symlink(link, path) < 0)
			tt_die("symlink", path);
	}
}

/* Path of a zone's file (device path, not the symlink). */
static inline void tt_zone_file(char *buf, size_t len, const char *root, int i, int sub,
				const char *file)
{
	if (sub < 0)
		snprintf(buf, len, "%s/devices/virtual/powercap/intel-rapl/intel-rapl:%x/%s", root, i,
			 file);
	else
		snprintf(buf, len,
			 "%s/devices/virtual/powercap/intel-rapl/intel-rapl:%x/intel-rapl:%x:%x/%s",
			 root, i, i, sub, file);
}

static inline void tt_set_energy(const char *root, int i, int sub, uint64_t uj)
{
	char path[1024];

	tt_zone_file(path, sizeof(path), root, i, sub, "energy_uj");
	tt_writef(path, "%" PRIu64 "\n", uj);
}

/* The standard Intel layout: packages with dram (:0) and core (:1) subzones,
 * a psys top-level zone and the intel-rapl-mmio duplicate. */
static inline void tt_rapl_intel(const char *root, int npkg, int dram, int flat)
{
	int p;
	char name[32];

	for (p = 0; p < npkg; p++) {
		snprintf(name, sizeof(name), "package-%d", p);
		tt_zone(root, "intel-rapl", p, -1, name, 1000, PKG_MAX_UJ, 150000000, flat);
		if (dram)
			tt_zone(root, "intel-rapl", p, 0, "dram", 500, DRAM_MAX_UJ, 0, flat);
		tt_zone(root, "intel-rapl", p, 1, "core", 300, PKG_MAX_UJ, 0, flat);
	}
	tt_zone(root, "intel-rapl", npkg, -1, "psys", 7, PKG_MAX_UJ, 0, flat);
	tt_zone(root, "intel-rapl-mmio", 0, -1, "package-0", 11, PKG_MAX_UJ, 0, flat);
}

/* ---- cpufreq ------------------------------------------------------------------- */

static inline void tt_cpufile(const char *root, int cpu, const char *file, const char *val)
{
	char path[1024];

	snprintf(path, sizeof(path), "%s/devices/system/cpu/cpu%d/cpufreq/%s", root, cpu, file);
	tt_write(path, val);
}

static inline char *tt_cpuread(const char *root, int cpu, const char *file, char *buf, size_t len)
{
	char path[1024];

	snprintf(path, sizeof(path), "%s/devices/system/cpu/cpu%d/cpufreq/%s", root, cpu, file);
	return tt_read(path, buf, len);
}

/* acpi: acpi-cpufreq with userspace governor, 0.8-2.4 GHz in 100 MHz steps.
 * pstate: intel_pstate, continuous, no setspeed. */
static inline void tt_cpufreq(const char *root, int cpu, int acpi)
{
	char dir[1024];

	snprintf(dir, sizeof(dir), "%s/devices/system/cpu/cpu%d/cpufreq", root, cpu);
	tt_mkdirs(dir);
	tt_cpufile(root, cpu, "scaling_driver", acpi ? "acpi-cpufreq\n" : "intel_pstate\n");
	tt_cpufile(root, cpu, "scaling_governor", acpi ? "schedutil\n" : "powersave\n");
	tt_cpufile(root, cpu, "scaling_available_governors",
		   acpi ? "conservative ondemand userspace powersave performance schedutil\n"
			: "performance powersave\n");
	tt_cpufile(root, cpu, "cpuinfo_min_freq", "800000\n");
	tt_cpufile(root, cpu, "cpuinfo_max_freq", "2400000\n");
	tt_cpufile(root, cpu, "scaling_min_freq", "800000\n");
	tt_cpufile(root, cpu, "scaling_max_freq", "2400000\n");
	tt_cpufile(root, cpu, "scaling_cur_freq", "2400000\n");
	tt_cpufile(root, cpu, "related_cpus", cpu % 2 ? "0 1\n" : "0 1\n");
	if (acpi) {
		/* the kernel lists acpi-cpufreq steps in descending order */
		tt_cpufile(root, cpu, "scaling_available_frequencies",
			   "2400000 2300000 2200000 2100000 2000000 1900000 1800000 1700000 "
			   "1600000 1500000 1400000 1300000 1200000 1100000 1000000 900000 800000 \n");
		tt_cpufile(root, cpu, "scaling_setspeed", "<unsupported>\n");
	}
}

#endif
