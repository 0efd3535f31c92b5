/* A stand-in for NVIDIA's libnvidia-ml.so.1 on machines without a GPU.
 *
 * It implements only the calls joulestep makes, with NVML's ABI (an int
 * status, opaque device handles, the same argument types), written here
 * from the public documentation. The GPUs live in a fakehw tree named by
 * $FAKEHW_NVML_ROOT (tests/fakehw/fakehw.py: gpu_create), one directory per
 * GPU, and follow fakehw's GPU model (tests/fakehw/README.md, "GPUs"):
 *
 *   P(u, f) = idle_mw + (max_mw - idle_mw) * u * (f / max_mhz)^2
 *
 * where u is the utilisation a test appends to `load` ("mono_ns util"
 * lines) and f the graphics clock: max_mhz, or the locked maximum after
 * nvmlDeviceSetGpuLockedClocks (appended to `locks` as "mono_ns min max";
 * "mono_ns 0 0" on reset). The energy counter is the integral of P since
 * the driver loaded (`t0_ns`) or since the last line of `resets`, seen in
 * steps of `period_ms`, plus `offset_mj` before any reset. Test code only.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAXG 16
#define MAXEV 4096

struct fgpu { int idx; };
static struct fgpu devs[MAXG];
static int ndevs = -1;

enum { OK = 0, UNINIT = 1, INVAL = 2, NOTSUP = 3, NOPERM = 4, NOTFOUND = 6, SMALL = 7, NODRV = 9 };

static const char *root(void) { return getenv("FAKEHW_NVML_ROOT"); }

static int path(char *buf, size_t len, int g, const char *f)
{
	return snprintf(buf, len, "%s/gpu%d/%s", root(), g, f) < (int)len ? 0 : -1;
}

static int read_str(int g, const char *f, char *out, size_t len)
{
	char p[PATH_MAX];
	FILE *fp;
	size_t n;

	if (path(p, sizeof(p), g, f) || !(fp = fopen(p, "re")))
		return -1;
	n = fread(out, 1, len - 1, fp);
	fclose(fp);
	out[n] = '\0';
	while (n && (out[n - 1] == '\n' || out[n - 1] == ' '))
		out[--n] = '\0';
	return 0;
}

static double read_num(int g, const char *f, double dflt)
{
	char b[64];

	return read_str(g, f, b, sizeof(b)) ? dflt : strtod(b, NULL);
}

/* Up to MAXEV lines of up to 3 numbers each. */
static int read_events(int g, const char *f, double ev[][3])
{
	char p[PATH_MAX], line[256];
	FILE *fp;
	int n = 0;

	if (path(p, sizeof(p), g, f) || !(fp = fopen(p, "re")))
		return 0;
	while (n < MAXEV && fgets(line, sizeof(line), fp)) {
		ev[n][1] = ev[n][2] = 0;
		if (sscanf(line, "%lf %lf %lf", &ev[n][0], &ev[n][1], &ev[n][2]) >= 1)
			n++;
	}
	fclose(fp);
	return n;
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

struct model {
	double idle, max, fmax, fmin;
	int nload, nlock;
	double load[MAXEV][3], lock[MAXEV][3];
};

static void model_load(int g, struct model *m)
{
	m->idle = read_num(g, "idle_mw", 60000);
	m->max = read_num(g, "max_mw", 700000);
	m->fmax = read_num(g, "max_mhz", 1980);
	m->fmin = read_num(g, "min_mhz", 345);
	m->nload = read_events(g, "load", m->load);
	m->nlock = read_events(g, "locks", m->lock);
}

/* The last value of ev at or before t (column c), or dflt. */
static double at(const double ev[][3], int n, double t, int c, double dflt)
{
	double v = dflt;

	for (int k = 0; k < n && ev[k][0] <= t; k++)
		v = ev[k][c];
	return v;
}

static double clock_at(const struct model *m, double t)
{
	double lmax = at(m->lock, m->nlock, t, 2, 0);

	return lmax > 0 && lmax < m->fmax ? lmax : m->fmax;
}

static double power_at(const struct model *m, double t)
{
	double u = at(m->load, m->nload, t, 1, 0), f = clock_at(m, t) / m->fmax;

	return m->idle + (m->max - m->idle) * u * f * f;
}

/* Integral of P over [t0, t1] in mJ (mW * ns / 1e9). Both event lists are in
 * time order (appended as they happen): one merged pass. */
static double energy_mj(const struct model *m, double t0, double t1)
{
	double e = 0, t = t0, u = 0, lmax = 0;
	int a = 0, b = 0;

	for (; a < m->nload && m->load[a][0] <= t0; a++)
		u = m->load[a][1];
	for (; b < m->nlock && m->lock[b][0] <= t0; b++)
		lmax = m->lock[b][2];
	while (t < t1) {
		double next = t1, f;

		if (a < m->nload && m->load[a][0] < next)
			next = m->load[a][0];
		if (b < m->nlock && m->lock[b][0] < next)
			next = m->lock[b][0];
		f = (lmax > 0 && lmax < m->fmax ? lmax : m->fmax) / m->fmax;
		e += (m->idle + (m->max - m->idle) * u * f * f) * (next - t) / 1e9;
		t = next;
		for (; a < m->nload && m->load[a][0] <= t; a++)
			u = m->load[a][1];
		for (; b < m->nlock && m->lock[b][0] <= t; b++)
			lmax = m->lock[b][2];
	}
	return e;
}

static int dev_of(void *h)
{
	struct fgpu *d = h;

	if (ndevs < 0)
		return -UNINIT;
	if (!d || d < devs || d >= devs + ndevs)
		return -INVAL;
	return d->idx;
}

int nvmlInit_v2(void)
{
	char p[PATH_MAX];

	if (!root())
		return NODRV;
	for (ndevs = 0; ndevs < MAXG; ndevs++) {
		snprintf(p, sizeof(p), "%s/gpu%d", root(), ndevs);
		if (access(p, F_OK))
			break;
		devs[ndevs].idx = ndevs;
	}
	return OK;
}

int nvmlShutdown(void) { ndevs = -1; return OK; }

const char *nvmlErrorString(int st)
{
	switch (st) {
	case OK: return "Success";
	case UNINIT: return "Uninitialized";
	case INVAL: return "Invalid Argument";
	case NOTSUP: return "Not Supported";
	case NOPERM: return "Insufficient Permissions";
	case NOTFOUND: return "Not Found";
	case SMALL: return "Insufficient Size";
	case NODRV: return "Driver Not Loaded";
	default: return "Unknown Error";
	}
}

int nvmlDeviceGetCount_v2(unsigned *n)
{
	if (ndevs < 0)
		return UNINIT;
	*n = (unsigned)ndevs;
	return OK;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h)
{
	if (ndevs < 0)
		return UNINIT;
	if ((int)i >= ndevs)
		return INVAL;
	*h = &devs[i];
	return OK;
}

static int get_str(void *h, const char *f, char *out, unsigned len)
{
	char b[256];
	int g = dev_of(h);

	if (g < 0)
		return -g;
	if (read_str(g, f, b, sizeof(b)))
		return NOTSUP;
	if (strlen(b) + 1 > len)
		return SMALL;
	strcpy(out, b);
	return OK;
}

int nvmlDeviceGetUUID(void *h, char *out, unsigned len) { return get_str(h, "uuid", out, len); }
int nvmlDeviceGetName(void *h, char *out, unsigned len) { return get_str(h, "name", out, len); }

int nvmlDeviceGetTotalEnergyConsumption(void *h, unsigned long long *mj)
{
	double ev[MAXEV][3], t = now_ns(), base, period, e, wrap;
	int g = dev_of(h), n;
	struct model *m;

	if (g < 0)
		return -g;
	if (read_num(g, "counter", 1) == 0)
		return NOTSUP;
	m = malloc(sizeof(*m));
	if (!m)
		return 999;
	model_load(g, m);
	n = read_events(g, "resets", ev);
	base = read_num(g, "t0_ns", 0);
	for (int k = 0; k < n && ev[k][0] <= t; k++)
		base = ev[k][0];
	period = read_num(g, "period_ms", 10) * 1e6;
	t = base + (period > 0 ? (double)(long long)((t - base) / period) * period : t - base);
	e = energy_mj(m, base, t) + (base == read_num(g, "t0_ns", 0) ? read_num(g, "offset_mj", 0) : 0);
	wrap = read_num(g, "wrap_mj", 0);
	free(m);
	*mj = (unsigned long long)e;
	if (wrap > 0)
		*mj %= (unsigned long long)wrap;
	return OK;
}

int nvmlDeviceGetPowerUsage(void *h, unsigned *mw)
{
	int g = dev_of(h);
	struct model *m;

	if (g < 0)
		return -g;
	m = malloc(sizeof(*m));
	if (!m)
		return 999;
	model_load(g, m);
	*mw = (unsigned)power_at(m, now_ns());
	free(m);
	return OK;
}

int nvmlDeviceGetPowerManagementLimitConstraints(void *h, unsigned *lo, unsigned *hi)
{
	int g = dev_of(h);

	if (g < 0)
		return -g;
	*lo = (unsigned)read_num(g, "idle_mw", 60000);
	*hi = (unsigned)read_num(g, "max_mw", 700000);
	return OK;
}

int nvmlDeviceGetClockInfo(void *h, int type, unsigned *mhz)
{
	int g = dev_of(h);
	struct model *m;
	double t = now_ns();

	if (g < 0)
		return -g;
	if (type == 2) { /* NVML_CLOCK_MEM */
		*mhz = (unsigned)read_num(g, "mem_mhz", 2619);
		return OK;
	}
	m = malloc(sizeof(*m));
	if (!m)
		return 999;
	model_load(g, m);
	*mhz = (unsigned)(at(m->load, m->nload, t, 1, 0) > 0 ? clock_at(m, t) : m->fmin);
	free(m);
	return OK;
}

int nvmlDeviceGetMaxClockInfo(void *h, int type, unsigned *mhz)
{
	int g = dev_of(h);

	if (g < 0)
		return -g;
	*mhz = (unsigned)(type == 2 ? read_num(g, "mem_mhz", 2619) : read_num(g, "max_mhz", 1980));
	return OK;
}

int nvmlDeviceGetSupportedGraphicsClocks(void *h, unsigned mem, unsigned *count, unsigned *clk)
{
	int g = dev_of(h);
	unsigned lo, hi, n = 0;

	(void)mem;
	if (g < 0)
		return -g;
	lo = (unsigned)read_num(g, "min_mhz", 345);
	hi = (unsigned)read_num(g, "max_mhz", 1980);
	for (unsigned f = hi; f >= lo && f <= hi; f -= 15) {
		if (n < *count)
			clk[n] = f;
		n++;
	}
	if (n > *count) {
		*count = n;
		return SMALL;
	}
	*count = n;
	return OK;
}

int nvmlDeviceGetMigMode(void *h, unsigned *cur, unsigned *pend)
{
	int g = dev_of(h);

	if (g < 0)
		return -g;
	*cur = *pend = (unsigned)read_num(g, "mig", 0);
	return OK;
}

static int append_lock(void *h, unsigned lo, unsigned hi)
{
	char p[PATH_MAX], line[96];
	int g = dev_of(h), fd, n;

	if (g < 0)
		return -g;
	if (read_num(g, "lock_permission", 1) == 0)
		return NOPERM;
	if (hi && (lo > hi || hi < read_num(g, "min_mhz", 345)))
		return INVAL;
	path(p, sizeof(p), g, "locks");
	fd = open(p, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return 999;
	n = snprintf(line, sizeof(line), "%.0f %u %u\n", now_ns(), lo, hi);
	if (write(fd, line, (size_t)n) != n) {
		close(fd);
		return 999;
	}
	close(fd);
	return OK;
}

int nvmlDeviceSetGpuLockedClocks(void *h, unsigned lo, unsigned hi)
{
	return hi ? append_lock(h, lo, hi) : INVAL;
}

int nvmlDeviceResetGpuLockedClocks(void *h) { return append_lock(h, 0, 0); }
