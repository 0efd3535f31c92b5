"""What a user's own PostgreSQL role reads: views in the schema
``joulestep_user`` (docs/security.md, "Who sees which jobs (the store)"; docs/design.md,
"The user view in the database").

A user's role has no grant on the tables.  It reads views named as the
tables, in the schema ``joulestep_user``, which show the rows of the user's
own jobs only (``jobs.user_name = current_user``) and round and hide
energies as ``joulestep job`` shows them to users (:mod:`joulestep.userview`):
a step or phase shorter than its record's ``min_phase_ns`` has no energy,
every other energy is rounded to the record's ``energy_resolution_uj``.
The views are ``security_barrier`` views owned by the tables' owner: a
user's own function in a WHERE clause cannot see the rows they leave out.
The CLI, connected as such a role, reads them by its search path
(:func:`search_path`), so its queries stay the tables'.

The views are made from the tables' live columns after every migration
(:func:`refresh`, called by the migration runner): a column added later
appears in them, and an energy column (``*_uj``) this module does not know
is NULL there until a rule for it is written here.  A table without an
entry in OWN has no view: a user's role reads nothing of it.
"""
from __future__ import annotations

#: a record's min_phase_ns and energy_resolution_uj where it has none: the
#: one pair the views and the CLI's user view (joulestep.userview) round by
DEFAULT_MIN_PHASE_NS = 10_000_000
DEFAULT_RESOLUTION_UJ = 61

SCHEMA = "joulestep_user"
#: the role users' own roles are members of (docs/admin-guide.md, "Users'
#: own roles (PostgreSQL)"): granted SELECT on the views, when it exists
USERS_ROLE = "joulestep_users"

_MINE = "EXISTS (SELECT 1 FROM public.jobs j WHERE j.job_pk = t.job_pk AND " \
        "j.user_name = current_user)"
_MY_STEP = "EXISTS (SELECT 1 FROM public.steps s JOIN public.jobs j ON j.job_pk = " \
           "s.job_pk WHERE s.step_pk = t.step_pk AND j.user_name = current_user)"
_MY_JOB_ID = "EXISTS (SELECT 1 FROM public.jobs j WHERE j.cluster = t.cluster AND " \
             "j.job_id = t.job_id AND j.user_name = current_user)"
#: table -> which of its rows a user reads (t: the table's row)
OWN = {
    "jobs": "t.user_name = current_user",
    "steps": _MINE, "slurm_steps": _MINE,
    "phases": _MY_STEP, "step_tags": _MY_STEP, "step_gpus": _MY_STEP,
    "step_zones": _MY_STEP, "phase_gpus": _MY_STEP, "phase_ranks": _MY_STEP,
    # a package's busy time is the neighbours' activity: none of it; the
    # estimate of the step's share, stored by ingest (shares.py), instead
    "step_packages": "false", "step_shares": _MY_STEP,
    "step_conflicts": _MY_JOB_ID, "lost_records": _MY_JOB_ID,
    "nodes": "true", "power_models": "true", "joulestep_schema": "true",
    # the grid's imported CO2 and prices: no one's jobs (gridfigures.py)
    "grid_intensity": "true",
}

#: a step's rules: the step (st) shown, its resolution
_ST_SHOWN = f"st.duration_ns >= COALESCE(st.min_phase_ns, {DEFAULT_MIN_PHASE_NS})"
_ST_RES = f"COALESCE(st.energy_resolution_uj, {DEFAULT_RESOLUTION_UJ})"


def _r(expr: str, res: str = _ST_RES) -> str:
    return f"{SCHEMA}.round_uj({expr}, {res})"


def _step_energy(cpu: str, dram: str, total: str) -> dict:
    """A step's (cpu, dram, total) as userview.step_row shows them: none
    when the step is short or its CPU energy is unknown; the total the
    rounded parts' sum, the GPUs' part (the total's rest) rounded too."""
    shown = f"{_ST_SHOWN} AND st.{cpu} IS NOT NULL"
    gpu = (f"CASE WHEN st.total_includes LIKE '%gpu%' AND st.{total} IS NOT NULL THEN "
           f"{_r(f'st.{total} - st.{cpu} - COALESCE(st.{dram}, 0)')} ELSE 0 END")
    return {cpu: f"CASE WHEN {shown} THEN {_r(f'st.{cpu}')} END",
            dram: f"CASE WHEN {shown} THEN {_r(f'st.{dram}')} END",
            total: f"CASE WHEN {shown} THEN {_r(f'st.{cpu}')} + "
                   f"COALESCE({_r(f'st.{dram}')}, 0) + {gpu} END"}


def _shown_step(col: str) -> str:
    return f"CASE WHEN {_ST_SHOWN} THEN {_r(col)} END"


#: the phase (t) shown: at least its step's min_phase_ns
_PH_SHOWN = f"t.duration_ns >= COALESCE(st.min_phase_ns, {DEFAULT_MIN_PHASE_NS})"
_PH = f"(SELECT p.duration_ns FROM public.phases p WHERE p.step_pk = t.step_pk " \
      f"AND p.seq = t.seq)"

#: table -> (FROM clause, {energy column: its expression}); st: the step
RULES = {
    "steps": ("public.steps st", {
        **_step_energy("energy_cpu_uj", "energy_dram_uj", "energy_total_uj"),
        **_step_energy("counted_cpu_uj", "counted_dram_uj", "counted_total_uj"),
        "energy_gpu_uj": _shown_step("st.energy_gpu_uj"),
        "energy_node_uj": _shown_step("st.energy_node_uj")}),
    "phases": ("public.phases t JOIN public.steps st ON st.step_pk = t.step_pk", {
        "energy_cpu_uj": f"CASE WHEN {_PH_SHOWN} THEN {_r('t.energy_cpu_uj')} END",
        "energy_dram_uj": f"CASE WHEN {_PH_SHOWN} THEN {_r('t.energy_dram_uj')} END",
        "energy_gpu_uj": f"CASE WHEN {_PH_SHOWN} THEN {_r('t.energy_gpu_uj')} END"}),
    "step_gpus": ("public.step_gpus t JOIN public.steps st ON st.step_pk = t.step_pk", {
        "energy_uj": _shown_step("t.energy_uj")}),
    "step_zones": ("public.step_zones t JOIN public.steps st ON st.step_pk = t.step_pk", {
        "energy_uj": _shown_step("t.energy_uj")}),
    "step_shares": ("public.step_shares t JOIN public.steps st ON st.step_pk = t.step_pk", {
        "cpu_uj": _shown_step("t.cpu_uj"), "dram_uj": _shown_step("t.dram_uj")}),
    "phase_gpus": ("public.phase_gpus t JOIN public.steps st ON st.step_pk = t.step_pk", {
        "energy_uj": f"CASE WHEN {_PH} >= COALESCE(st.min_phase_ns, "
                     f"{DEFAULT_MIN_PHASE_NS}) THEN {_r('t.energy_uj')} END"}),
    # a job's sums: rounded to the counter's unit
    "jobs": ("public.jobs t", {c: _r(f"t.{c}", str(DEFAULT_RESOLUTION_UJ)) for c in (
        "counted_cpu_uj", "counted_dram_uj", "counted_total_uj", "policy_total_uj")}),
}
#: energies that are Slurm's own (sacct shows them to the user): as stored
SLURMS = {("jobs", "slurm_energy_uj"), ("slurm_steps", "energy_uj")}

ROUND_FN = f"""CREATE OR REPLACE FUNCTION {SCHEMA}.round_uj(v bigint, res bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN v IS NULL OR res IS NULL OR res <= 1 THEN v
       ELSE (v / res + CASE WHEN v % res >= res - v % res THEN 1 ELSE 0 END) * res END
$$"""


def view_sql(table: str, columns: list[str]) -> str:
    """The CREATE VIEW of one table's user view."""
    frm, energy = RULES.get(table, (f"public.{table} t", {}))
    if table == "steps":     # the step is the row itself: one alias
        frm, energy = "public.steps t", {c: e.replace("st.", "t.") for c, e in energy.items()}
    cols = []
    for c in columns:
        if c in energy:
            expr = energy[c]
        elif c.endswith("_uj") and (table, c) not in SLURMS:
            expr = "NULL::bigint"       # an energy without a rule: not shown
        else:
            expr = f"t.{c}"
        cols.append(f"{expr} AS {c}")
    return (f"CREATE VIEW {SCHEMA}.{table} WITH (security_barrier) AS SELECT "
            + ", ".join(cols) + f" FROM {frm} WHERE {OWN[table]}")


def refresh(conn) -> None:
    """(Re)make the user views from the tables' columns, and grant them to
    joulestep_users when that role exists.  Run by the tables' owner at the
    end of every PostgreSQL migration, in its transaction."""
    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    conn.execute(ROUND_FN)
    for (name,) in conn.execute(
            "SELECT table_name FROM information_schema.views WHERE table_schema = ?",
            (SCHEMA,)).fetchall():
        conn.execute(f"DROP VIEW IF EXISTS {SCHEMA}.{name}")
    tables = {r[0]: [] for r in conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = "
        "'public' AND table_type = 'BASE TABLE'").fetchall()}
    for t, c in conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE "
            "table_schema = 'public' ORDER BY table_name, ordinal_position").fetchall():
        if t in tables:
            tables[t].append(c)
    made = [t for t in OWN if t in tables]
    for t in made:
        conn.execute(view_sql(t, tables[t]))
    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = ?", (USERS_ROLE,)).fetchone():
        conn.execute(f"GRANT USAGE ON SCHEMA {SCHEMA} TO {USERS_ROLE}")
        conn.execute(f"GRANT EXECUTE ON FUNCTION {SCHEMA}.round_uj(bigint, bigint) "
                     f"TO {USERS_ROLE}")
        for t in made:
            conn.execute(f"GRANT SELECT ON {SCHEMA}.{t} TO {USERS_ROLE}")


def search_path(conn) -> None:
    """A role that reads through the user views (no grant on the tables,
    USAGE on joulestep_user) gets them first on its search path: the CLI's
    queries then read the views."""
    row = conn.execute(
        f"SELECT has_schema_privilege(current_user, '{SCHEMA}', 'USAGE') AND NOT "
        "has_table_privilege(current_user, 'public.steps', 'SELECT') "
        f"FROM pg_namespace WHERE nspname = '{SCHEMA}'").fetchone()
    if row and row[0]:
        conn.execute(f"SET search_path = {SCHEMA}, public")
