/* joulestep SPANK plugin: phase bookkeeping. See js_phase.h and
 * docs/phase-protocol.md ("Collective phases", "Clock level"). */
#include "js_phase.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every lookup is a hash probe, never a scan of the phases (or ranks, or
 * kinds) seen so far: BEGIN and END cost O(1) however many phases the step
 * has (issue 23, defect 7). The tables hold index + 1 into the arrays they
 * index (0 = empty) and the key's hash (32 bits: the array entry is read
 * only when they match, and growing needs no rehash of the keys), open
 * addressing with linear probing, at most half full; they are grown before
 * anything is recorded, so that a refused BEGIN changes nothing. */
struct islot {
	uint32_t ix1, hash;
};
struct itab {
	struct islot *slot;
	size_t cap, n;                      /* cap: 0 or a power of two        */
};

struct kind_count {                         /* one per (rank, kind, depth)     */
	uint32_t rank_ix;                   /* index into rs[]                 */
	unsigned depth;
	uint32_t n;
	char kind[JS_KIND_LEN + 1];
};

#define NO_DETAIL SIZE_MAX
#define NO_LINK UINT32_MAX

struct rank_state {
	int rank;
	unsigned depth;
	uint32_t stack[JS_DEPTH_LIMIT];     /* seq of open phases              */
	size_t timing[JS_DEPTH_LIMIT];      /* index into ranks[] or NO_DETAIL */
	uint64_t start[JS_DEPTH_LIMIT];     /* the entry's start (client t)    */
	/* skipped BEGINs (js_phases_skip) not yet matched by an END, stacked
	 * above real level d (0 = below every open phase); saturating */
	uint32_t skipped[JS_DEPTH_LIMIT + 1];
};

struct open_link {                          /* per phase: the open list       */
	uint32_t prev, next;                /* seq, NO_LINK                    */
};

struct js_phases {
	struct js_phase_ops ops;
	unsigned max_phases, max_depth;
	uint64_t step_start_ns;
	struct js_sphase *ph;
	size_t n, cap;
	struct open_link *link;             /* parallel to ph[]                */
	size_t linkcap;
	struct itab ph_ix;                  /* (kind, depth, nth, parent)      */
	struct rank_state *rs;
	size_t nrs, rscap;
	struct itab rs_ix;                  /* rank                            */
	struct kind_count *kc;
	size_t nkc, kccap;
	struct itab kc_ix;                  /* (rank, kind, depth)             */
	/* open step phases in the order they (last) opened: a doubly linked
	 * list through link[], the clock follows its tail */
	uint32_t open_head, open_tail;
	size_t nopen;
	size_t nentries;                    /* rank entries, all phases        */
	size_t ndetail;                     /* of which with their own timing  */
	double level;
	uint32_t cur_khz;
	bool closing;
	bool gpu_low;                       /* the GPUs' clock is lowered now  */
	bool uncore_low;                    /* the uncore clock is lowered now */
	/* GPU marks asked of the meter and not yet resolved, in the order
	 * asked (their times' order): seq * 2 + (0: g0, 1: g1) */
	uint32_t *gq;
	size_t gq_head, gq_n, gq_cap;
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

static uint64_t mix(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	return h ^ (h >> 33);
}

static uint64_t hash_str(uint64_t h, const char *s)
{
	for (; *s; s++) /* FNV-1a */
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	return h;
}

static uint32_t ph_hash(const char *kind, unsigned depth, uint32_t nth, int parent)
{
	uint64_t h = hash_str(0xcbf29ce484222325ULL, kind);
	return (uint32_t)mix(h ^ mix(((uint64_t)depth << 32 | nth) ^ ((uint64_t)(uint32_t)parent << 17)));
}

static uint32_t rank_hash(int rank) { return (uint32_t)mix((uint64_t)(uint32_t)rank); }

static uint32_t kc_hash(uint32_t rank_ix, const char *kind, unsigned depth)
{
	return (uint32_t)mix(hash_str(0xcbf29ce484222325ULL, kind) ^ mix((uint64_t)rank_ix << 32 | depth));
}

static void itab_put(struct itab *t, uint32_t h, uint32_t i)
{
	size_t k = h & (t->cap - 1);
	while (t->slot[k].ix1)
		k = (k + 1) & (t->cap - 1);
	t->slot[k].ix1 = i + 1;
	t->slot[k].hash = h;
	t->n++;
}

/* Room for one more entry (at most half full). 0 or -ENOMEM (the table
 * unchanged). */
static int itab_reserve(struct itab *t)
{
	if (2 * (t->n + 1) <= t->cap)
		return 0;
	size_t nc = t->cap ? 2 * t->cap : 16;
	struct islot *ns = calloc(nc, sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	struct itab nt = {.slot = ns, .cap = nc, .n = 0};
	for (size_t k = 0; k < t->cap; k++)
		if (t->slot[k].ix1)
			itab_put(&nt, t->slot[k].hash, t->slot[k].ix1 - 1);
	free(t->slot);
	*t = nt;
	return 0;
}

/* The probe sequence of hash h: every slot to look at, up to an empty one. */
#define ITAB_FOR(t, h, k) \
	for (size_t k = (t)->cap ? (h) & ((t)->cap - 1) : 0; (t)->cap && (t)->slot[k].ix1; \
	     k = (k + 1) & ((t)->cap - 1))

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
	ps->open_head = ps->open_tail = NO_LINK;
	return ps;
}

void js_phases_free(struct js_phases *ps)
{
	if (!ps)
		return;
	for (size_t i = 0; i < ps->n; i++)
		free(ps->ph[i].ranks);
	free(ps->ph);
	free(ps->link);
	free(ps->ph_ix.slot);
	free(ps->rs);
	free(ps->rs_ix.slot);
	free(ps->kc);
	free(ps->kc_ix.slot);
	free(ps->gq);
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
	const struct itab *t = &ps->rs_ix;
	uint32_t h = rank_hash(rank);
	ITAB_FOR(t, h, k)
		if (t->slot[k].hash == h && ps->rs[t->slot[k].ix1 - 1].rank == rank)
			return &ps->rs[t->slot[k].ix1 - 1];
	return NULL;
}

static struct rank_state *rank_get(struct js_phases *ps, int rank)
{
	struct rank_state *f = rank_find(ps, rank);
	if (f)
		return f;
	if (grow((void **)&ps->rs, &ps->rscap, ps->nrs + 1, sizeof(*ps->rs)) ||
	    itab_reserve(&ps->rs_ix))
		return NULL;
	struct rank_state *r = &ps->rs[ps->nrs];
	memset(r, 0, sizeof(*r));
	r->rank = rank;
	itab_put(&ps->rs_ix, rank_hash(rank), (uint32_t)ps->nrs++);
	return r;
}

static uint32_t rank_ix(const struct js_phases *ps, const struct rank_state *r)
{
	return (uint32_t)(r - ps->rs);
}

static struct kind_count *count_find(struct js_phases *ps, struct rank_state *r, const char *kind,
				     unsigned depth)
{
	const struct itab *t = &ps->kc_ix;
	uint32_t ri = rank_ix(ps, r), h = kc_hash(ri, kind, depth);
	ITAB_FOR(t, h, k) {
		struct kind_count *c = &ps->kc[t->slot[k].ix1 - 1];
		if (t->slot[k].hash == h && c->rank_ix == ri && c->depth == depth &&
		    !strcmp(c->kind, kind))
			return c;
	}
	return NULL;
}

/* Room for count_new: called before anything of a BEGIN is recorded. */
static int count_reserve(struct js_phases *ps)
{
	if (grow((void **)&ps->kc, &ps->kccap, ps->nkc + 1, sizeof(*ps->kc)) ||
	    itab_reserve(&ps->kc_ix))
		return -ENOMEM;
	return 0;
}

/* Called only once the phase is joined: a refused BEGIN leaves nothing. */
static struct kind_count *count_new(struct js_phases *ps, struct rank_state *r, const char *kind,
				    unsigned depth)
{
	struct kind_count *c = &ps->kc[ps->nkc];
	c->rank_ix = rank_ix(ps, r);
	snprintf(c->kind, sizeof(c->kind), "%s", kind);
	c->depth = depth;
	c->n = 0;
	itab_put(&ps->kc_ix, kc_hash(c->rank_ix, kind, depth), (uint32_t)ps->nkc++);
	return c;
}

static struct js_sphase *phase_find(struct js_phases *ps, const char *kind, unsigned depth,
				    uint32_t nth, int parent)
{
	const struct itab *t = &ps->ph_ix;
	uint32_t h = ph_hash(kind, depth, nth, parent);
	ITAB_FOR(t, h, k) {
		struct js_sphase *p = &ps->ph[t->slot[k].ix1 - 1];
		if (t->slot[k].hash == h && p->depth == depth && p->nth == nth &&
		    p->parent_seq == parent && !strcmp(p->kind, kind))
			return p;
	}
	return NULL;
}

/* The open list: append when a phase opens, unlink when it closes. */
static void open_push(struct js_phases *ps, uint32_t seq)
{
	ps->link[seq].prev = ps->open_tail;
	ps->link[seq].next = NO_LINK;
	if (ps->open_tail != NO_LINK)
		ps->link[ps->open_tail].next = seq;
	else
		ps->open_head = seq;
	ps->open_tail = seq;
	ps->nopen++;
}

static void open_unlink(struct js_phases *ps, uint32_t seq)
{
	struct open_link *l = &ps->link[seq];
	if (l->prev != NO_LINK)
		ps->link[l->prev].next = l->next;
	else
		ps->open_head = l->next;
	if (l->next != NO_LINK)
		ps->link[l->next].prev = l->prev;
	else
		ps->open_tail = l->prev;
	l->prev = l->next = NO_LINK;
	ps->nopen--;
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
bool js_io_kind(const char *kind)
{
	return !strcmp(kind, "checkpoint") || !strcmp(kind, "flush") || !strcmp(kind, "write");
}

bool js_gpu_io_kind(const char *kind)
{
	return !strcmp(kind, "checkpoint") || !strcmp(kind, "flush") || !strcmp(kind, "write");
}

bool js_uncore_io_kind(const char *kind)
{
	return !strcmp(kind, "flush") || !strcmp(kind, "write");
}

/* +gpu-io: the GPUs follow the innermost open phase too, lowered while it
 * is (or is inside) a checkpoint, flush or write phase. */
static void regpu(struct js_phases *ps, struct js_sphase *trigger)
{
	bool low = ps->nopen && ps->ph[ps->open_tail].gpu_low;
	if (!ps->ops.set_gpu || low == ps->gpu_low || ps->closing)
		return;
	uint32_t mhz = 0;
	int rc = ps->ops.set_gpu(ps->ops.ctx, low, &mhz);
	ps->gpu_low = low;
	if (trigger && low) {
		trigger->gpu_mhz = mhz;
		trigger->gpu_err = rc;
	}
}

/* +uncore-io: the uncore follows the innermost open phase, lowered while
 * it is (or is inside) a flush or write phase. */
static void reuncore(struct js_phases *ps, struct js_sphase *trigger)
{
	bool low = ps->nopen && ps->ph[ps->open_tail].uncore_low;
	if (!ps->ops.set_uncore || low == ps->uncore_low || ps->closing)
		return;
	uint32_t khz = 0;
	int rc = ps->ops.set_uncore(ps->ops.ctx, low, &khz);
	ps->uncore_low = low;
	if (trigger && low) {
		trigger->uncore_khz = khz;
		trigger->uncore_err = rc;
	}
}

static void relevel_cpu(struct js_phases *ps, struct js_sphase *trigger, uint64_t t_ns)
{
	double want = ps->nopen ? ps->ph[ps->open_tail].eff_ratio : JS_RATIO_BASE;
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

/* The CPU clock first (pwrites on descriptors already open: microseconds),
 * then the GPUs and the uncore (a journal pass and a library call each): a
 * boundary's CPU clock never waits for the others. */
static void relevel(struct js_phases *ps, struct js_sphase *trigger, uint64_t t_ns)
{
	relevel_cpu(ps, trigger, t_ns);
	regpu(ps, trigger);
	reuncore(ps, trigger);
}

/* Move resolved GPU marks from the meter into their phases, oldest first
 * (wait: until every one is). A boundary only asks the meter (snap_gpu)
 * and never waits for a GPU; marks are resolved by the meter's thread. */
static void gpu_collect(struct js_phases *ps, bool wait)
{
	while (ps->gq_head < ps->gq_n) {
		uint32_t q = ps->gq[ps->gq_head];
		struct js_sphase *p = &ps->ph[q / 2];
		if (!ps->ops.snap_gpu(ps->ops.ctx, 0, q & 1 ? &p->g1 : &p->g0,
				      wait ? JS_GPU_WAIT : JS_GPU_POLL))
			return;
		ps->gq_head++;
	}
	ps->gq_head = ps->gq_n = 0;
}

static void gpu_mark(struct js_phases *ps, struct js_sphase *p, bool end, uint64_t at_ns)
{
	struct js_gpu_mark *m = end ? &p->g1 : &p->g0;
	if (!ps->ops.snap_gpu)
		return;
	ps->ops.snap_gpu(ps->ops.ctx, at_ns, m, JS_GPU_ASK);
	if (ps->gq_head && ps->gq_n == ps->gq_cap) { /* room from the collected head */
		memmove(ps->gq, ps->gq + ps->gq_head, (ps->gq_n - ps->gq_head) * sizeof(*ps->gq));
		ps->gq_n -= ps->gq_head;
		ps->gq_head = 0;
	}
	if (grow((void **)&ps->gq, &ps->gq_cap, ps->gq_n + 1, sizeof(*ps->gq)) == 0)
		ps->gq[ps->gq_n++] = p->seq * 2 + end;
	else
		ps->ops.snap_gpu(ps->ops.ctx, 0, m, JS_GPU_WAIT); /* no room to queue: now */
	gpu_collect(ps, false);
}

void js_phases_gpu_settle(struct js_phases *ps)
{
	if (ps->ops.snap_gpu)
		gpu_collect(ps, true);
}

/* A new step-level phase, its meter read now; NULL (nothing recorded) when
 * out of memory. */
static struct js_sphase *phase_new(struct js_phases *ps, const char *kind, const char *label,
				   unsigned d, uint32_t nth, int parent, double own_ratio,
				   uint64_t t, bool detail)
{
	if (grow((void **)&ps->ph, &ps->cap, ps->n + 1, sizeof(*ps->ph)) ||
	    grow((void **)&ps->link, &ps->linkcap, ps->n + 1, sizeof(*ps->link)) ||
	    itab_reserve(&ps->ph_ix))
		return NULL;
	struct js_sphase *p = &ps->ph[ps->n];
	memset(p, 0, sizeof(*p));
	if (detail && grow((void **)&p->ranks, &p->cap, 1, sizeof(*p->ranks)))
		return NULL;
	p->seq = (uint32_t)ps->n;
	snprintf(p->kind, sizeof(p->kind), "%s", kind);
	snprintf(p->label, sizeof(p->label), "%s", label ? label : "");
	p->depth = d;
	p->parent_seq = parent;
	p->nth = nth;
	p->marker_start_ns = t;
	p->bytes = -1;
	/* one rule for every clock (docs/phase-protocol.md, "Blocking and
	 * overlapping I/O"): an I/O phase inherits its enclosing phase's lowered
	 * clocks; a phase of any other kind runs at the base clocks whatever
	 * encloses it, unless the policy names its kind */
	bool io = js_io_kind(kind);
	const struct js_sphase *up = io && parent >= 0 ? &ps->ph[parent] : NULL;
	p->gpu_low = js_gpu_io_kind(kind) || (up && up->gpu_low);
	p->uncore_low = js_uncore_io_kind(kind) || (up && up->uncore_low);
	if (own_ratio != JS_RATIO_INHERIT)
		p->eff_ratio = own_ratio;
	else
		p->eff_ratio = up ? up->eff_ratio : JS_RATIO_BASE;
	/* the energy interval starts when the meter is read */
	p->start_ns = ps->ops.now_ns(ps->ops.ctx);
	ps->ops.snap(ps->ops.ctx, &p->e_cpu0_uj, &p->e_dram0_uj, &p->uncertain);
	ps->link[p->seq].prev = ps->link[p->seq].next = NO_LINK;
	itab_put(&ps->ph_ix, ph_hash(kind, d, nth, parent), p->seq);
	ps->n++;
	gpu_mark(ps, p, false, p->start_ns);
	return p;
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
	struct kind_count *kc = count_find(ps, r, kind, d);
	uint32_t nth = kc ? kc->n : 0;
	int parent = d ? (int)r->stack[d - 1] : -1;

	/* Ranks whose enclosing phases merged share the parent; if they did
	 * not (different parents) the phase is distinct. */
	struct js_sphase *p = phase_find(ps, kind, d, nth, parent);
	bool detail = ps->ndetail < JS_RANK_DETAIL_MAX;
	if (!p && ps->n >= ps->max_phases)
		return -ENOSPC;
	/* all the room this BEGIN needs, before anything is recorded */
	if (!kc && count_reserve(ps))
		return -ENOMEM;
	if (p && detail && grow((void **)&p->ranks, &p->cap, p->ndetail + 1, sizeof(*p->ranks)))
		return -ENOMEM;
	if (!p && !(p = phase_new(ps, kind, label, d, nth, parent, own_ratio, t, detail)))
		return -ENOMEM;
	if (!kc)
		kc = count_new(ps, r, kind, d);
	if (p->nopen == 0)
		open_push(ps, p->seq);
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
		gpu_mark(ps, p, true, p->end_ns);
		p->uncertain = p->uncertain || unc;
		open_unlink(ps, p->seq);
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
	js_phases_gpu_settle(ps);
}
