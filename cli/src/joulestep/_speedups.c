/*
 * joulestep._speedups: store._parse_fast in C (docs/design.md, "Ingest
 * speed", sixth round).
 *
 * parse(rec) returns the Parsed of a decoded v1 record of the common shape,
 * or None for anything else: store.parse_record then takes its Python
 * paths, which accept or refuse the record and name the bad field.  This
 * code only ever declines; it never refuses.  So it may be stricter than
 * the Python fast path (a version of 1.0, a phase without every key, a
 * non-ASCII step id: all declined), but what it accepts it must accept with
 * exactly the rows store._parse_checked gives (tests/fuzz/test_parse_paths.py
 * checks both over mutated and varied records).
 *
 * No Python code runs while a value is borrowed: every value taken from a
 * record is held by a new reference (in a row tuple or vals[]) before it is
 * checked.  Errors inside (an int too big for int64) are cleared and mean
 * "declined"; only MemoryError propagates.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030A0000         /* Python 3.9 (RHEL 9) */
static inline PyObject *Py_NewRef(PyObject *o)
{
	Py_INCREF(o);
	return o;
}
#endif

/* what a field may hold (store._FAST_SPEC) */
enum kind { K_S, K_SN, K_I0, K_I0N, K_I1N, K_IN, K_B, K_BN, K_NN, K_ANY };

struct field {
	const char *name;
	enum kind kind;
	PyObject *key;          /* interned at module init */
};

static struct field job_f[] = {
	{"job_id", K_I0}, {"submit_time_ns", K_I0N}, {"first_seen_ns", K_I0N},
	{"start_time_ns", K_IN}, {"name", K_SN}, {"user", K_SN}, {"uid", K_I0N},
	{"gid", K_I0N}, {"account", K_SN}, {"partition", K_SN}, {"tags", K_ANY},
};
enum { J_ID, J_SUBMIT, J_FIRST, J_START, J_NAME, J_USER, J_UID, J_GID,
       J_ACCOUNT, J_PARTITION, J_TAGS, J_N };

static struct field step_f[] = {
	{"step_id", K_ANY}, {"het_component", K_I0}, {"node", K_S},
	{"node_model", K_SN}, {"ntasks", K_I0N}, {"nnodes", K_I0N}, {"cpus", K_SN},
	{"ncpus", K_I0N}, {"exclusive", K_BN}, {"policy", K_SN},
	{"base_freq_khz", K_I1N}, {"freq_min_ratio", K_NN}, {"start_ns", K_I0},
	{"end_ns", K_I0}, {"duration_ns", K_I0}, {"energy_cpu_uj", K_I0},
	{"energy_dram_uj", K_I0N}, {"energy_total_uj", K_I0N}, {"exit_code", K_IN},
	{"nominal_freq_khz", K_I1N}, {"fixed_freq_khz", K_I1N},
};
enum { S_ID, S_HET, S_NODE, S_MODEL, S_NTASKS, S_NNODES, S_CPUS, S_NCPUS,
       S_EXCL, S_POLICY, S_BASE, S_FMIN, S_START, S_END, S_DUR, S_CPU, S_DRAM,
       S_TOTAL, S_EXIT, S_NOMINAL, S_FIXED, S_N };

static struct field prov_f[] = {
	{"backend", K_SN}, {"wrap_uncertain", K_B}, {"sample_period_ns", K_I0N},
	{"errors", K_ANY}, {"plugin_version", K_SN}, {"job_source", K_SN},
	{"freq_control", K_SN}, {"min_phase_ns", K_I0N},
	{"energy_resolution_uj", K_I1N},
};
enum { P_BACKEND, P_WRAP, P_SAMPLE, P_ERRORS, P_VERSION, P_SOURCE, P_FCTL,
       P_MINPH, P_ERES, P_N };

/* a phase row: store._PHASE_GET's order */
static struct field phase_f[] = {
	{"seq", K_I0}, {"kind", K_S}, {"label", K_SN}, {"depth", K_I0},
	{"parent_seq", K_IN}, {"start_ns", K_I0}, {"end_ns", K_I0},
	{"duration_ns", K_I0}, {"freq_khz", K_I1N}, {"freq_change_ns", K_IN},
	{"energy_cpu_uj", K_I0N}, {"energy_dram_uj", K_I0N}, {"bytes", K_I0N},
	{"nranks", K_IN},
};
enum { PH_SEQ, PH_KIND, PH_LABEL, PH_DEPTH, PH_PARENT, PH_START, PH_END,
       PH_N = 14 };

/* a zone row: store._ZONE_GET's order */
static struct field zone_f[] = {
	{"name", K_S}, {"id", K_S}, {"kind", K_SN}, {"energy_uj", K_I0},
	{"wraps", K_I0},
};
enum { Z_ID = 1, Z_N = 5 };

#define NFIELDS(a) ((Py_ssize_t)(sizeof(a) / sizeof((a)[0])))
/* records with more zones than this go the Python way (ids compared
 * pairwise here) */
#define MAX_ZONES 64

static PyObject *k_format, *k_version, *k_cluster, *k_job, *k_step, *k_prov,
	*k_zones, *k_phases, *v_format, *v_empty_errors;
/* set by setup(): store.Parsed, store.INACTIVE_POLICIES, json.dumps */
static PyObject *parsed_cls, *inactive, *dumps;

/* v is an exact int within int64: 1 and *out; else 0 (no error set) */
static int get_i64(PyObject *v, long long *out)
{
	int overflow;
	long long x;

	if (!PyLong_CheckExact(v))
		return 0;
	x = PyLong_AsLongLongAndOverflow(v, &overflow);
	if (overflow)
		return 0;
	if (x == -1 && PyErr_Occurred()) {
		PyErr_Clear();
		return 0;
	}
	*out = x;
	return 1;
}

static int ascii_text(PyObject *v, int empty_ok)
{
	return PyUnicode_CheckExact(v) && PyUnicode_IS_ASCII(v) &&
	       (empty_ok || PyUnicode_GET_LENGTH(v) > 0);
}

/* v holds what kind allows (as store._fast_checks and _column_ok check) */
static int kind_ok(PyObject *v, enum kind kind)
{
	long long x;

	if (v == Py_None)
		return kind == K_SN || kind == K_I0N || kind == K_I1N || kind == K_IN ||
		       kind == K_BN || kind == K_NN || kind == K_ANY;
	switch (kind) {
	case K_S:
		return ascii_text(v, 0);
	case K_SN:
		return ascii_text(v, 1);
	case K_I0:
	case K_I0N:
		return get_i64(v, &x) && x >= 0;
	case K_I1N:
		return get_i64(v, &x) && x >= 1;
	case K_IN:
		return get_i64(v, &x);
	case K_B:
	case K_BN:
		return PyBool_Check(v);
	case K_NN:
		return PyFloat_CheckExact(v) || get_i64(v, &x);
	case K_ANY:
		return 1;
	}
	return 0;
}

/* k is key: the same object, or the same ASCII text (json.loads does not
 * intern the keys it reads) */
static int same_key(PyObject *k, PyObject *key)
{
	Py_ssize_t n = PyUnicode_GET_LENGTH(key);

	return k == key ||
	       (PyUnicode_CheckExact(k) && PyUnicode_IS_ASCII(k) &&
		PyUnicode_GET_LENGTH(k) == n &&
		!memcmp(PyUnicode_1BYTE_DATA(k), PyUnicode_1BYTE_DATA(key), (size_t)n));
}

/*
 * Borrowed d[key]; NULL when missing (or on error, set).  Records list
 * their keys in the order of the field tables (the plugin writes them so),
 * so the entry after *pos is tried first: a step through the dict's
 * entries instead of a hash lookup.  Out of order, a lookup gives the
 * same value.
 */
static PyObject *field_at(PyObject *d, Py_ssize_t *pos, PyObject *key)
{
	Py_ssize_t at = *pos;
	PyObject *k, *v;

	if (PyDict_Next(d, pos, &k, &v) && same_key(k, key))
		return v;
	*pos = at;
	return PyDict_GetItemWithError(d, key);
}

/* new reference to d[key], Py_None when missing; NULL on error (set) */
static PyObject *lookup(PyObject *d, PyObject *key)
{
	PyObject *v = d ? PyDict_GetItemWithError(d, key) : NULL;

	if (v == NULL) {
		if (PyErr_Occurred())
			return NULL;
		v = Py_None;
	}
	Py_INCREF(v);
	return v;
}

/*
 * Fill vals[0..n) with new references to d's fields (d NULL: all null); 1
 * when each holds what its kind allows, 0 when one does not, -1 on error.
 * Slots not reached stay NULL; release() frees what was taken either way.
 */
static int take_fields(PyObject *d, struct field *f, Py_ssize_t n, PyObject **vals)
{
	Py_ssize_t pos = 0;

	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *v = d ? field_at(d, &pos, f[i].key) : NULL;

		if (v == NULL && PyErr_Occurred())
			return -1;
		vals[i] = Py_NewRef(v ? v : Py_None);
		if (!kind_ok(vals[i], f[i].kind))
			return 0;
	}
	return 1;
}

static void release(PyObject **vals, Py_ssize_t n)
{
	for (Py_ssize_t i = 0; i < n; i++)
		Py_CLEAR(vals[i]);
}

/*
 * A row tuple of dict d's fields, each present; *ok = 0 when a field is
 * missing or not what its kind allows.  NULL with *ok = 0 when declined,
 * NULL with an error set on error.
 */
static PyObject *row_of(PyObject *d, struct field *f, Py_ssize_t n, int *ok)
{
	PyObject *row;
	Py_ssize_t pos = 0;

	*ok = 0;
	if (!PyDict_CheckExact(d))
		return NULL;
	row = PyTuple_New(n);
	if (row == NULL)
		return NULL;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *v = field_at(d, &pos, f[i].key);

		if (v == NULL)
			goto out;       /* missing (or an error, left set) */
		Py_INCREF(v);
		PyTuple_SET_ITEM(row, i, v);
	}
	for (Py_ssize_t i = 0; i < n; i++)
		if (!kind_ok(PyTuple_GET_ITEM(row, i), f[i].kind))
			goto out;
	*ok = 1;
	return row;
out:
	Py_DECREF(row);
	return NULL;
}

/* the list at key in d (missing or null: empty); NULL + no error: declined */
static PyObject *list_at(PyObject *d, PyObject *key)
{
	PyObject *v = lookup(d, key);

	if (v == NULL)
		return NULL;
	if (v == Py_None) {
		Py_DECREF(v);
		return PyList_New(0);
	}
	if (!PyList_CheckExact(v)) {
		Py_DECREF(v);
		return NULL;
	}
	return v;
}

static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return (x > y) - (x < y);
}

/* the zone rows of list zl; NULL + no error: declined */
static PyObject *zone_rows(PyObject *zl)
{
	Py_ssize_t n = PyList_GET_SIZE(zl);
	PyObject *rows;
	int ok;

	if (n > MAX_ZONES)
		return NULL;
	rows = PyList_New(n);
	if (rows == NULL)
		return NULL;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *row = row_of(PyList_GET_ITEM(zl, i), zone_f, Z_N, &ok);

		if (row == NULL)
			goto fail;
		PyList_SET_ITEM(rows, i, row);
		/* ids unique within the record (ASCII: compare the bytes) */
		PyObject *id = PyTuple_GET_ITEM(row, Z_ID);
		for (Py_ssize_t j = 0; j < i; j++) {
			PyObject *o = PyTuple_GET_ITEM(PyList_GET_ITEM(rows, j), Z_ID);
			if (PyUnicode_GET_LENGTH(o) == PyUnicode_GET_LENGTH(id) &&
			    !memcmp(PyUnicode_1BYTE_DATA(o), PyUnicode_1BYTE_DATA(id),
				    PyUnicode_GET_LENGTH(id)))
				goto fail;
		}
	}
	return rows;
fail:
	Py_DECREF(rows);
	return NULL;
}

/* the phase checks across a record's phases: seq unique, each parent_seq
 * one of them; seqs[] and parents[] are scratch of n each */
static int phases_linked(PyObject *rows, long long *seqs, long long *parents)
{
	Py_ssize_t n = PyList_GET_SIZE(rows), np = 0;

	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *row = PyList_GET_ITEM(rows, i);
		PyObject *p = PyTuple_GET_ITEM(row, PH_PARENT);

		seqs[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(row, PH_SEQ));
		if (p != Py_None)
			parents[np++] = PyLong_AsLongLong(p);
	}
	qsort(seqs, (size_t)n, sizeof(*seqs), cmp_ll);
	for (Py_ssize_t i = 1; i < n; i++)
		if (seqs[i] == seqs[i - 1])
			return 0;
	for (Py_ssize_t i = 0; i < np; i++)
		if (!bsearch(&parents[i], seqs, (size_t)n, sizeof(*seqs), cmp_ll))
			return 0;
	return 1;
}

/* the phase rows of list pl; NULL + no error: declined */
static PyObject *phase_rows(PyObject *pl)
{
	Py_ssize_t n = PyList_GET_SIZE(pl);
	long long stack[2 * 64], *scratch = stack, start, end;
	PyObject *rows;
	int ok;

	rows = PyList_New(n);
	if (rows == NULL)
		return NULL;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *ph = PyList_GET_ITEM(pl, i);
		PyObject *row;

		/* every key the plugin writes and no other (no ranks) */
		if (!PyDict_CheckExact(ph) || PyDict_GET_SIZE(ph) != PH_N)
			goto fail;
		row = row_of(ph, phase_f, PH_N, &ok);
		if (row == NULL)
			goto fail;
		PyList_SET_ITEM(rows, i, row);
		get_i64(PyTuple_GET_ITEM(row, PH_START), &start);
		get_i64(PyTuple_GET_ITEM(row, PH_END), &end);
		if (end < start)
			goto fail;
	}
	if (n > 64) {
		scratch = PyMem_Malloc(2 * (size_t)n * sizeof(*scratch));
		if (scratch == NULL) {
			PyErr_NoMemory();
			goto fail;
		}
	}
	ok = phases_linked(rows, scratch, scratch + n);
	if (scratch != stack)
		PyMem_Free(scratch);
	if (ok)
		return rows;
fail:
	Py_DECREF(rows);
	return NULL;
}

/* job.tags as [(key, value)]; NULL + no error: declined */
static PyObject *tag_rows(PyObject *tags)
{
	PyObject *rows, *k, *v;
	Py_ssize_t pos = 0;

	if (tags == Py_None)
		return PyList_New(0);
	if (!PyDict_CheckExact(tags))
		return NULL;
	rows = PyList_New(0);
	if (rows == NULL)
		return NULL;
	while (PyDict_Next(tags, &pos, &k, &v)) {
		PyObject *kv;

		if (!ascii_text(k, 0) || !ascii_text(v, 1))
			goto fail;
		kv = PyTuple_Pack(2, k, v);
		if (kv == NULL)
			goto fail;
		if (PyList_Append(rows, kv) < 0) {
			Py_DECREF(kv);
			goto fail;
		}
		Py_DECREF(kv);
	}
	return rows;
fail:
	Py_DECREF(rows);
	return NULL;
}

/* provenance.errors as JSON text; NULL + no error: declined */
static PyObject *errors_json(PyObject *errors)
{
	if (errors == Py_None ||
	    (PyList_CheckExact(errors) && PyList_GET_SIZE(errors) == 0)) {
		Py_INCREF(v_empty_errors);
		return v_empty_errors;
	}
	if (!PyList_CheckExact(errors))
		return NULL;
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(errors); i++)
		if (!PyUnicode_CheckExact(PyList_GET_ITEM(errors, i)))
			return NULL;
	return PyObject_CallOneArg(dumps, errors);
}

/* the step id as text (store._STEP_ID); NULL + no error: declined */
static PyObject *step_id_text(PyObject *id)
{
	PyObject *s;
	Py_ssize_t n, digits = 0;
	const unsigned char *c;

	if (PyLong_CheckExact(id))
		s = PyObject_Str(id);
	else if (PyUnicode_CheckExact(id) && PyUnicode_IS_ASCII(id))
		s = Py_NewRef(id);
	else
		return NULL;
	if (s == NULL)
		return NULL;
	n = PyUnicode_GET_LENGTH(s);
	c = PyUnicode_1BYTE_DATA(s);
	for (Py_ssize_t i = 0; i < n; i++) {
		if (c[i] >= '0' && c[i] <= '9')
			digits++;
		else if (!((c[i] >= 'a' && c[i] <= 'z') || (c[i] >= 'A' && c[i] <= 'Z') ||
			   c[i] == '_' || c[i] == '.' || c[i] == '+' || c[i] == '-'))
			goto declined;
	}
	if (n >= 1 && (digits == n || n <= 64))
		return s;
declined:
	Py_DECREF(s);
	return NULL;
}

static PyObject *flag(int set)
{
	return PyLong_FromLong(set);
}

struct rec {
	PyObject *cluster, *job[J_N], *step[S_N], *prov[P_N];
};

/* the jobs row (after job_pk) */
static PyObject *job_row(struct rec *r, PyObject *first)
{
	long long f, s;
	PyObject *lo;

	get_i64(first, &f);
	get_i64(r->step[S_START], &s);
	lo = f <= s ? first : r->step[S_START];
	return PyTuple_Pack(12, r->cluster, r->job[J_ID], lo, r->step[S_END],
			    r->job[J_SUBMIT], r->job[J_START], r->job[J_NAME],
			    r->job[J_USER], r->job[J_UID], r->job[J_GID],
			    r->job[J_ACCOUNT], r->job[J_PARTITION]);
}

/* the steps row (after job_pk, node_pk: store.TABLES["steps"]) */
static PyObject *step_row(struct rec *r, PyObject *id, PyObject *total,
			  PyObject *errs)
{
	PyObject *excl = NULL, *active = NULL, *fmin = NULL, *wrap = NULL, *row = NULL;
	PyObject **s = r->step, **p = r->prov;
	int inact = 0;

	if (s[S_POLICY] != Py_None) {
		inact = PySet_Contains(inactive, s[S_POLICY]);
		if (inact < 0)
			return NULL;
	}
	excl = s[S_EXCL] == Py_None ? Py_NewRef(Py_None) : flag(s[S_EXCL] == Py_True);
	active = flag(s[S_POLICY] != Py_None && !inact);
	if (s[S_FMIN] == Py_None || PyFloat_CheckExact(s[S_FMIN]))
		fmin = Py_NewRef(s[S_FMIN]);
	else
		fmin = PyFloat_FromDouble(PyLong_AsDouble(s[S_FMIN]));
	wrap = flag(p[P_WRAP] == Py_True);
	if (excl && active && fmin && wrap)
		row = PyTuple_Pack(
			33, id, s[S_HET], s[S_MODEL], s[S_NTASKS], s[S_NNODES], s[S_CPUS],
			s[S_NCPUS], excl, s[S_POLICY], active, s[S_BASE], fmin,
			s[S_START], s[S_END], s[S_DUR], s[S_CPU], s[S_DRAM], total,
			s[S_EXIT], p[P_BACKEND], wrap, p[P_SAMPLE], errs, p[P_VERSION],
			s[S_CPU], s[S_DRAM], total, s[S_DUR], s[S_NOMINAL], s[S_FIXED],
			p[P_FCTL], p[P_MINPH], p[P_ERES]);
	Py_XDECREF(excl);
	Py_XDECREF(active);
	Py_XDECREF(fmin);
	Py_XDECREF(wrap);
	return row;
}

/* energy_total_uj, or cpu + dram when null; NULL + no error: declined */
static PyObject *total_of(struct rec *r)
{
	long long cpu, dram = 0;

	if (r->step[S_TOTAL] != Py_None)
		return Py_NewRef(r->step[S_TOTAL]);
	get_i64(r->step[S_CPU], &cpu);
	if (r->step[S_DRAM] != Py_None)
		get_i64(r->step[S_DRAM], &dram);
	if (cpu > LLONG_MAX - dram)
		return NULL;
	return PyLong_FromLongLong(cpu + dram);
}

/* the record's parts, then Parsed; NULL + no error: declined */
static PyObject *build(PyObject *rec, struct rec *r)
{
	PyObject *id = NULL, *total = NULL, *errs = NULL, *tags = NULL, *zl = NULL,
		 *zones = NULL, *pl = NULL, *phases = NULL, *jrow = NULL, *srow = NULL,
		 *ranks = NULL, *out = NULL, *first = r->job[J_FIRST];
	long long start, end;

	get_i64(r->step[S_START], &start);
	get_i64(r->step[S_END], &end);
	if (end < start)
		return NULL;
	if (first == Py_None)
		first = r->job[J_SUBMIT];
	if (first == Py_None)
		return NULL;
	if (!(id = step_id_text(r->step[S_ID])) || !(total = total_of(r)) ||
	    !(errs = errors_json(r->prov[P_ERRORS])) || !(tags = tag_rows(r->job[J_TAGS])))
		goto out;
	if (!(zl = list_at(rec, k_zones)) || !(zones = zone_rows(zl)))
		goto out;
	if (!(pl = list_at(rec, k_phases)) || !(phases = phase_rows(pl)))
		goto out;
	if (!(jrow = job_row(r, first)) || !(srow = step_row(r, id, total, errs)) ||
	    !(ranks = PyList_New(0)))
		goto out;
	out = PyObject_CallFunctionObjArgs(parsed_cls, r->cluster, jrow, tags,
					   r->step[S_NODE], srow, zones, phases, ranks,
					   NULL);
out:
	Py_XDECREF(id);
	Py_XDECREF(total);
	Py_XDECREF(errs);
	Py_XDECREF(tags);
	Py_XDECREF(zl);
	Py_XDECREF(zones);
	Py_XDECREF(pl);
	Py_XDECREF(phases);
	Py_XDECREF(jrow);
	Py_XDECREF(srow);
	Py_XDECREF(ranks);
	return out;
}

/* an exact dict at key in rec (prov: missing or null is empty, passed as
 * NULL); 1 ok, 0 declined, -1 error */
static int dict_at(PyObject *rec, PyObject *key, int may_miss, PyObject **out)
{
	PyObject *v = lookup(rec, key);

	*out = NULL;
	if (v == NULL)
		return -1;
	if (v == Py_None && may_miss) {
		Py_DECREF(v);
		return 1;
	}
	if (!PyDict_CheckExact(v)) {
		Py_DECREF(v);
		return 0;
	}
	*out = v;
	return 1;
}

/* Parsed, Py_None when declined, NULL on error */
static PyObject *parse_one(PyObject *rec)
{
	struct rec r = {0};
	PyObject *fmt = NULL, *ver = NULL, *job = NULL, *step = NULL, *prov = NULL,
		 *out = NULL;
	long long v;
	int ok;

	if (!PyDict_CheckExact(rec))
		Py_RETURN_NONE;
	if (!(fmt = lookup(rec, k_format)) || !(ver = lookup(rec, k_version)) ||
	    !(r.cluster = lookup(rec, k_cluster)))
		goto out;
	if (!PyUnicode_CheckExact(fmt) || PyUnicode_Compare(fmt, v_format) != 0 ||
	    !get_i64(ver, &v) || v != 1 || !kind_ok(r.cluster, K_S))
		goto declined;
	if ((ok = dict_at(rec, k_job, 0, &job)) <= 0 ||
	    (ok = dict_at(rec, k_step, 0, &step)) <= 0 ||
	    (ok = dict_at(rec, k_prov, 1, &prov)) <= 0)
		goto check;
	if ((ok = take_fields(job, job_f, J_N, r.job)) > 0 &&
	    (ok = take_fields(step, step_f, S_N, r.step)) > 0 &&
	    (ok = take_fields(prov, prov_f, P_N, r.prov)) > 0)
		out = build(rec, &r);
	release(r.job, J_N);
	release(r.step, S_N);
	release(r.prov, P_N);
check:
	if (ok < 0 || PyErr_Occurred())
		goto out;
	if (out == NULL)
		goto declined;
	goto done;
declined:
	out = Py_NewRef(Py_None);
	goto done;
out:
	Py_CLEAR(out);
	if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_MemoryError)) {
		/* anything but memory: declined (the Python paths judge it) */
		PyErr_Clear();
		out = Py_NewRef(Py_None);
	}
done:
	Py_XDECREF(fmt);
	Py_XDECREF(ver);
	Py_XDECREF(r.cluster);
	Py_XDECREF(job);
	Py_XDECREF(step);
	Py_XDECREF(prov);
	return out;
}

static PyObject *sp_parse(PyObject *self, PyObject *rec)
{
	(void)self;
	if (parsed_cls == NULL) {
		PyErr_SetString(PyExc_RuntimeError, "joulestep._speedups: setup() first");
		return NULL;
	}
	return parse_one(rec);
}

static PyObject *sp_parse_list(PyObject *self, PyObject *recs)
{
	PyObject *out;
	Py_ssize_t n;

	(void)self;
	if (parsed_cls == NULL) {
		PyErr_SetString(PyExc_RuntimeError, "joulestep._speedups: setup() first");
		return NULL;
	}
	if (!PyList_CheckExact(recs)) {
		PyErr_SetString(PyExc_TypeError, "joulestep._speedups.parse_list: a list");
		return NULL;
	}
	n = PyList_GET_SIZE(recs);
	out = PyList_New(n);
	if (out == NULL)
		return NULL;
	for (Py_ssize_t i = 0; i < n; i++) {
		/* the list cannot change under us: no Python code runs but
		 * json.dumps and Parsed(), which never see it */
		PyObject *rec = PyList_GET_ITEM(recs, i), *p;

		Py_INCREF(rec);
		p = parse_one(rec);
		Py_DECREF(rec);
		if (p == NULL) {
			Py_DECREF(out);
			return NULL;
		}
		PyList_SET_ITEM(out, i, p);
	}
	return out;
}

static PyObject *sp_setup(PyObject *self, PyObject *args)
{
	PyObject *cls, *inact, *dumps_fn;

	(void)self;
	if (!PyArg_ParseTuple(args, "OO!O:setup", &cls, &PyFrozenSet_Type, &inact,
			      &dumps_fn))
		return NULL;
	Py_XSETREF(parsed_cls, Py_NewRef(cls));
	Py_XSETREF(inactive, Py_NewRef(inact));
	Py_XSETREF(dumps, Py_NewRef(dumps_fn));
	Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
	{"setup", sp_setup, METH_VARARGS,
	 "setup(Parsed, INACTIVE_POLICIES, json.dumps): what parse builds with."},
	{"parse", sp_parse, METH_O,
	 "parse(rec) -> Parsed of a well-formed record of the common shape, or None"},
	{"parse_list", sp_parse_list, METH_O,
	 "parse_list(recs) -> [parse(r) for r in recs]"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "joulestep._speedups",
	"store._parse_fast in C (docs/design.md, \"Ingest speed\")", -1, methods,
	NULL, NULL, NULL, NULL,
};

static int intern_keys(struct field *f, Py_ssize_t n)
{
	for (Py_ssize_t i = 0; i < n; i++)
		if (!(f[i].key = PyUnicode_InternFromString(f[i].name)))
			return -1;
	return 0;
}

PyMODINIT_FUNC PyInit__speedups(void)
{
	if (intern_keys(job_f, NFIELDS(job_f)) || intern_keys(step_f, NFIELDS(step_f)) ||
	    intern_keys(prov_f, NFIELDS(prov_f)) || intern_keys(phase_f, NFIELDS(phase_f)) ||
	    intern_keys(zone_f, NFIELDS(zone_f)))
		return NULL;
	if (!(k_format = PyUnicode_InternFromString("format")) ||
	    !(k_version = PyUnicode_InternFromString("version")) ||
	    !(k_cluster = PyUnicode_InternFromString("cluster")) ||
	    !(k_job = PyUnicode_InternFromString("job")) ||
	    !(k_step = PyUnicode_InternFromString("step")) ||
	    !(k_prov = PyUnicode_InternFromString("provenance")) ||
	    !(k_zones = PyUnicode_InternFromString("zones")) ||
	    !(k_phases = PyUnicode_InternFromString("phases")) ||
	    !(v_format = PyUnicode_InternFromString("joulestep-record")) ||
	    !(v_empty_errors = PyUnicode_InternFromString("[]")))
		return NULL;
	return PyModule_Create(&module);
}
