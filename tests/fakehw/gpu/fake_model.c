/* The fakehw GPU model (see fake_model.h and fake_nvml.c). Test code only. */
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_model.h"

#define MAXEV 4096

/* $FAKEHW_GPU_ROOT, else the first line of "<this library's path>.root":
 * for processes whose environment a test cannot set (the job prolog and
 * epilog slurmd starts with an environment of its own). */
const char *fm_root(void)
{
	static char from_file[PATH_MAX];
	const char *env = getenv("FAKEHW_GPU_ROOT");
	Dl_info di;
	char p[PATH_MAX];
	FILE *fp;

	if (env || from_file[0])
		return env ? env : from_file;
	if (!dladdr((void *)fm_root, &di) || !di.dli_fname ||
	    snprintf(p, sizeof(p), "%s.root", di.dli_fname) >= (int)sizeof(p) || !(fp = fopen(p, "re")))
		return NULL;
	if (!fgets(from_file, sizeof(from_file), fp))
		from_file[0] = 0;
	fclose(fp);
	from_file[strcspn(from_file, "\n")] = 0;
	return from_file[0] ? from_file : NULL;
}
#define root fm_root

int fm_path(char *buf, size_t len, int g, const char *f)
{
	return snprintf(buf, len, "%s/gpu%d/%s", root(), g, f) < (int)len ? 0 : -1;
}

int fm_str(int g, const char *f, char *out, size_t len)
{
	char p[PATH_MAX];
	FILE *fp;
	size_t n;

	if (fm_path(p, sizeof(p), g, f) || !(fp = fopen(p, "re")))
		return -1;
	n = fread(out, 1, len - 1, fp);
	fclose(fp);
	out[n] = '\0';
	while (n && (out[n - 1] == '\n' || out[n - 1] == ' '))
		out[--n] = '\0';
	return 0;
}

double fm_num(int g, const char *f, double dflt)
{
	char b[64];

	return fm_str(g, f, b, sizeof(b)) ? dflt : strtod(b, NULL);
}

/* Up to MAXEV lines of up to 3 numbers each. */
static int read_events(int g, const char *f, double ev[][3])
{
	char p[PATH_MAX], line[256];
	FILE *fp;
	int n = 0;

	if (fm_path(p, sizeof(p), g, f) || !(fp = fopen(p, "re")))
		return 0;
	while (n < MAXEV && fgets(line, sizeof(line), fp)) {
		ev[n][1] = ev[n][2] = 0;
		if (sscanf(line, "%lf %lf %lf", &ev[n][0], &ev[n][1], &ev[n][2]) >= 1)
			n++;
	}
	fclose(fp);
	return n;
}

double fm_now_ns(void)
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
	m->idle = fm_num(g, "idle_mw", 60000);
	m->max = fm_num(g, "max_mw", 700000);
	m->fmax = fm_num(g, "max_mhz", 1980);
	m->fmin = fm_num(g, "min_mhz", 345);
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


int fm_list(const char *vendor, int *out)
{
	char p[PATH_MAX], v[32];
	int n = 0;

	if (!fm_root())
		return -1;
	for (int g = 0; g < MAXG; g++) {
		snprintf(p, sizeof(p), "%s/gpu%d", fm_root(), g);
		if (access(p, F_OK))
			break;
		if (fm_str(g, "vendor", v, sizeof(v)) || strcmp(v, vendor))
			continue;
		out[n++] = g;
	}
	return n;
}

double fm_counter_mj(int g)
{
	double ev[MAXEV][3], t = fm_now_ns(), t0 = fm_num(g, "t0_ns", 0), base = t0, period, e, wrap;
	struct model *m = malloc(sizeof(*m));
	int n;

	if (!m)
		return 0;
	model_load(g, m);
	n = read_events(g, "resets", ev);
	for (int k = 0; k < n && ev[k][0] <= t; k++)
		base = ev[k][0];
	period = fm_num(g, "period_ms", 10) * 1e6;
	t = base + (period > 0 ? (double)(long long)((t - base) / period) * period : t - base);
	e = energy_mj(m, base, t) + (base == t0 ? fm_num(g, "offset_mj", 0) : 0);
	wrap = fm_num(g, "wrap_mj", 0);
	free(m);
	if (wrap > 0)
		e = (double)((unsigned long long)e % (unsigned long long)wrap);
	return e;
}

double fm_power_mw(int g)
{
	struct model *m = malloc(sizeof(*m));
	double p;

	if (!m)
		return 0;
	model_load(g, m);
	p = power_at(m, fm_now_ns());
	free(m);
	return p;
}

double fm_sm_mhz(int g)
{
	struct model *m = malloc(sizeof(*m));
	double t = fm_now_ns(), f;

	if (!m)
		return 0;
	model_load(g, m);
	f = at(m->load, m->nload, t, 1, 0) > 0 ? clock_at(m, t) : m->fmin;
	free(m);
	return f;
}

int fm_append_lock(int g, unsigned lo, unsigned hi)
{
	char p[PATH_MAX], line[96];
	int fd, n;

	fm_path(p, sizeof(p), g, "locks");
	fd = open(p, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	n = snprintf(line, sizeof(line), "%.0f %u %u\n", fm_now_ns(), lo, hi);
	if (write(fd, line, (size_t)n) != n) {
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}
