/* joulestep SPANK plugin: phase bookkeeping. See js_phase.h and
 * docs/phase-protocol.md ("Collective phases", "Clock level"). */
#include "js_phase.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kind_count {
	char kind[JS_KIND_LEN + 1];
	unsigned depth;
	uint32_t n;
};

#define NO_DETAIL SIZE_MAX

struct rank_state {
	int rank;
	unsigned depth;
	uint32_t stack[JS_DEPTH_LIMIT];     /* seq of open phases              */
	size_t timing[JS_DEPTH_LIMIT];      /* index into ranks[] or NO_DETAIL */
	uint64_t start[JS_DEPTH_LIMIT];     /* the entry's start (client t)    */
	/* skipped BEGINs (js_phases_skip) not yet matched by an END, stacked
	 * above real level d (0 = below every open phase); saturating */
	uint32_t skipped[JS_DEPTH_LIMIT + 1];
	size_t ncounts, ccap;
	struct kind_count *counts;
};

struct js_phases {
	struct js_phase_ops ops;
	unsigned max_phases, max_depth;
	uint64_t step_start_ns;
	struct js_sphase *ph;
	size_t n, cap;
	struct rank_state *rs;
	size_t nrs, rscap;
	uint32_t *open;                     /* open step phases, opening order */
	size_t nopen, opencap;
	size_t nentries;                    /* rank entries, all phases        */
	size_t ndetail;                     /* of which with their own timing  */
	double level;
	uint32_t cur_khz;
	bool closing;
};

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 8;
	while (nc < need)
		nc *= 2;
	void *q = realloc(*p, nc * elem);
	if (!q)
		return -ENOMEM;
	memset((char *)q + *cap * elem, 0, (nc - *cap) * elem);
	*p = q;
	*cap = nc;
	return 0;
}

struct js_phases *js_phases_new(unsigned max_phases, unsigned max_depth,
				const struct js_phase_ops *ops, uint64_t step_start_ns)
{
	struct js_phases *ps = calloc(1, sizeof(*ps));
	if (!ps)
		return NULL;
	ps->ops = *ops;
	ps->max_phases = max_phases;
	ps->max_depth = max_depth > JS_DEPTH_LIMIT ? JS_DEPTH_LIMIT : max_depth;
	ps->step_start_ns = step_start_ns;
	ps->level = JS_RATIO_BASE;
	return ps;
}

void js_phases_free(struct js_phases *ps)
{
	if (!ps)
		return;
	for (size_t i = 0; i < ps->n; i++)
		free(ps->ph[i].ranks);
	for (size_t i = 0; i < ps->nrs; i++)
		free(ps->rs[i].counts);
	free(ps->ph);
	free(ps->rs);
	free(ps->open);
	free(ps);
}

size_t js_phases_count(const struct js_phases *ps) { return ps->n; }
const struct js_sphase *js_phases_get(const struct js_phases *ps, size_t i)
{
	return i < ps->n ? &ps->ph[i] : NULL;
}
double js_phases_level(const struct js_phases *ps) { return ps->level; }

static struct rank_state *rank_find(struct js_phases *ps, int rank)
{
	for (size_t i = 0; i < ps->nrs; i++)
		if (ps->rs[i].rank == rank)
			return &ps->rs[i];
	return NULL;
}

static struct rank_state *rank_get(struct js_phases *ps, int rank)
{
	struct rank_state *f = rank_find(ps, rank);
	if (f)
		return f;
	if (grow((void **)&ps->rs, &ps->rscap, ps->nrs + 1, sizeof(*ps->rs)))
		return NULL;
	struct rank_state *r = &ps->rs[ps->nrs++];
	memset(r, 0, sizeof(*r));
	r->rank = rank;
	return r;
}

static struct kind_count *count_find(struct rank_state *r, const char *kind, unsigned depth)
{
	for (size_t i = 0; i < r->ncounts; i++)
		if (r->counts[i].depth == depth && !strcmp(r->counts[i].kind, kind))
			return &r->counts[i];
	return NULL;
}

/* Called only once the phase is joined: a refused BEGIN leaves nothing. */
static struct kind_count *count_new(struct rank_state *r, const char *kind, unsigned depth)
{
	if (grow((void **)&r->counts, &r->ccap, r->ncounts + 1, sizeof(*r->counts)))
		return NULL;
	struct kind_count *c = &r->counts[r->ncounts++];
	snprintf(c->kind, sizeof(c->kind), "%s", kind);
	c->depth = depth;
	c->n = 0;
	return c;
}

static void mm_add(struct js_minmax *m, uint64_t v)
{
	if (m->n == 0 || v < m->min)
		m->min = v;
	if (m->n == 0 || v > m->max)
		m->max = v;
	m->n++;
	m->sum += v;
}

static uint64_t clamp_t(struct js_phases *ps, uint64_t t, uint64_t now)
{
	if (t == 0 || t > now)
		return now;
	return t < ps->step_start_ns ? ps->step_start_ns : t;
}

/* Bring the clock to the level of the most recently opened open phase. */
static void relevel(struct js_phases *ps, struct js_sphase *trigger, uint64_t t_ns)
{
	double want = ps->nopen ? ps->ph[ps->open[ps->nopen - 1]].eff_ratio : JS_RATIO_BASE;
	if (want == ps->level || ps->closing)
		return;
	uint32_t khz = 0;
	uint64_t took = 0;
	int rc = ps->ops.set_ratio(ps->ops.ctx, want, &khz, &took);
	ps->level = want;
	ps->cur_khz = khz;
	if (trigger) {
		uint64_t now = ps->ops.now_ns(ps->ops.ctx);
		trigger->freq_change_ns = took;
		trigger->freq_lag_ns = now > t_ns ? now - t_ns : 0;
		trigger->freq_err = rc;
	}
}

int js_phases_begin(struct js_phases *ps, int rank, const char *kind, const char *label,
		    double own_ratio, uint64_t t_ns, uint32_t *seq, uint32_t *khz)
{
	uint64_t now = ps->ops.now_ns(ps->ops.ctx);
	uint64_t t = clamp_t(ps, t_ns, now);
	/* Untrusted input: bound what a client can make the server keep. */
	if (!rank_find(ps, rank) && ps->nrs >= JS_MAX_RANKS)
		return -EUSERS;
	if (ps->nentries >= JS_MAX_RANK_ENTRIES)
		return -ENOSPC;
	struct rank_state *r = rank_get(ps, rank);
	if (!r)
		return -ENOMEM;
	if (r->depth >= ps->max_depth)
		return -ERANGE;
	unsigned d = r->depth;
	struct kind_count *kc = count_find(r, kind, d);
	uint32_t nth = kc ? kc->n : 0;
	int parent = d ? (int)r->stack[d - 1] : -1;

	size_t idx = ps->n;
	for (size_t i = ps->n; i-- > 0;) {
		struct js_sphase *p = &ps->ph[i];
		if (p->depth == d && p->nth == nth && p->parent_seq == parent &&
		    !strcmp(p->kind, kind)) {
			idx = i;
			break;
		}
	}
	/* Ranks whose enclosing phases merged share the parent; if they did
	 * not (different parents) the phase is distinct: matched above. */
	if (idx == ps->n) {
		if (ps->n >= ps->max_phases)
			return -ENOSPC;
		if (grow((void **)&ps->ph, &ps->cap, ps->n + 1, sizeof(*ps->ph)))
			return -ENOMEM;
		struct js_sphase *p = &ps->ph[ps->n];
		memset(p, 0, sizeof(*p));
		p->seq = (uint32_t)ps->n;
		snprintf(p->kind, sizeof(p->kind), "%s", kind);
		snprintf(p->label, sizeof(p->label), "%s", label ? label : "");
		p->depth = d;
		p->parent_seq = parent;
		p->nth = nth;
		p->marker_start_ns = t;
		p->bytes = -1;
		if (own_ratio != JS_RATIO_INHERIT)
			p->eff_ratio = own_ratio;
		else
			p->eff_ratio = parent >= 0 ? ps->ph[parent].eff_ratio : JS_RATIO_BASE;
		/* the energy interval starts when the meter is read */
		p->start_ns = ps->ops.now_ns(ps->ops.ctx);
		ps->ops.snap(ps->ops.ctx, &p->e_cpu0_uj, &p->e_dram0_uj, &p->uncertain);
		ps->n++;
	}
	struct js_sphase *p = &ps->ph[idx];
	bool detail = ps->ndetail < JS_RANK_DETAIL_MAX;
	if (detail && grow((void **)&p->ranks, &p->cap, p->ndetail + 1, sizeof(*p->ranks)))
		return -ENOMEM;
	if (p->nopen == 0 && grow((void **)&ps->open, &ps->opencap, ps->nopen + 1, sizeof(*ps->open)))
		return -ENOMEM;
	if (!kc && !(kc = count_new(r, kind, d)))
		return -ENOMEM;
	if (p->nopen == 0)
		ps->open[ps->nopen++] = p->seq;
	r->stack[d] = p->seq;
	r->timing[d] = NO_DETAIL;
	r->start[d] = t;
	if (detail) {
		struct js_rank_timing *rt = &p->ranks[p->ndetail];
		rt->rank = rank;
		rt->start_ns = t;
		rt->end_ns = 0;
		rt->bytes = -1;
		r->timing[d] = p->ndetail++;
		ps->ndetail++;
	}
	mm_add(&p->stats.start_ns, t);
	p->nranks++;
	ps->nentries++;
	p->nopen++;
	if (t < p->marker_start_ns)
		p->marker_start_ns = t;
	kc->n++;
	r->depth++;

	relevel(ps, p, t);
	if (p->eff_ratio != JS_RATIO_BASE && !p->freq_khz)
		p->freq_khz = ps->cur_khz;
	if (seq)
		*seq = p->seq;
	if (khz)
		*khz = p->freq_khz;
	return 0;
}

static void end_one(struct js_phases *ps, struct rank_state *r, long long bytes, uint64_t t,
		    uint32_t *seq)
{
	unsigned d = --r->depth;
	struct js_sphase *p = &ps->ph[r->stack[d]];
	uint64_t end = t < r->start[d] ? r->start[d] : t;
	if (r->timing[d] != NO_DETAIL) {
		struct js_rank_timing *rt = &p->ranks[r->timing[d]];
		rt->end_ns = end;
		rt->bytes = bytes;
	}
	mm_add(&p->stats.end_ns, end);
	if (bytes >= 0) { /* saturating: clients send any value up to INT64_MAX */
		long long sum = p->bytes < 0 ? 0 : p->bytes;
		p->bytes = bytes > LLONG_MAX - sum ? LLONG_MAX : sum + bytes;
		mm_add(&p->stats.bytes, (uint64_t)bytes);
	}
	if (end > p->marker_end_ns)
		p->marker_end_ns = end;
	if (seq)
		*seq = p->seq;
	if (--p->nopen == 0) {
		bool unc = false;
		/* the energy interval ends when the meter is read */
		p->end_ns = ps->ops.now_ns(ps->ops.ctx);
		ps->ops.snap(ps->ops.ctx, &p->e_cpu1_uj, &p->e_dram1_uj, &unc);
		p->uncertain = p->uncertain || unc;
		for (size_t i = 0; i < ps->nopen; i++)
			if (ps->open[i] == p->seq) {
				memmove(&ps->open[i], &ps->open[i + 1],
					(ps->nopen - i - 1) * sizeof(*ps->open));
				ps->nopen--;
				break;
			}
		relevel(ps, NULL, t);
	}
}

int js_phases_skip(struct js_phases *ps, int rank)
{
	if (!rank_find(ps, rank) && ps->nrs >= JS_MAX_RANKS)
		return -EUSERS;
	struct rank_state *r = rank_get(ps, rank);
	if (!r)
		return -ENOMEM;
	if (r->skipped[r->depth] < UINT32_MAX)
		r->skipped[r->depth]++;
	return 0;
}

int js_phases_end(struct js_phases *ps, int rank, long long bytes, uint64_t t_ns, uint32_t *seq)
{
	uint64_t now = ps->ops.now_ns(ps->ops.ctx);
	struct rank_state *r = rank_find(ps, rank);
	if (!r)
		return -ENOENT;
	if (r->skipped[r->depth]) { /* the latest BEGIN of this rank was skipped */
		r->skipped[r->depth]--;
		return JS_PHASE_SKIPPED;
	}
	if (r->depth == 0)
		return -ENOENT;
	end_one(ps, r, bytes, clamp_t(ps, t_ns, now), seq);
	return 0;
}

void js_phases_hold_clock(struct js_phases *ps)
{
	ps->closing = true;
}

void js_phases_close_all(struct js_phases *ps, uint64_t t_ns)
{
	ps->closing = true; /* the caller restores the clock itself */
	for (size_t i = 0; i < ps->nrs; i++) {
		struct rank_state *r = &ps->rs[i];
		memset(r->skipped, 0, sizeof(r->skipped));
		while (r->depth) {
			ps->ph[r->stack[r->depth - 1]].closed_by_step_end = true;
			end_one(ps, r, -1, t_ns, NULL);
		}
	}
	ps->level = JS_RATIO_BASE;
}
