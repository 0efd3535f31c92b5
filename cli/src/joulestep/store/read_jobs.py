"""The store's rows of one job, as `joulestep job` and `joulestep jobs`
read them: the job, its steps and phases (by position: STEP_COLS,
PHASE_COLS), its tags, GPUs, uncore caps and what Slurm's accounting has,
the power models, and the listing of a user's jobs.  Plain rows, no
figures: jobsummary.py computes those."""
from __future__ import annotations

JOB_FIELDS = ("job_pk", "cluster", "job_id", "submit_time_ns", "start_time_ns",
              "name", "user", "uid", "gid", "account", "partition",
              "first_seen_ns", "last_seen_ns", "qos")
_JOB_SELECT = (
    "SELECT job_pk, cluster, job_id, submit_time_ns, start_time_ns, name, "
    "user_name, uid, gid, account, partition, first_seen_ns, last_seen_ns, qos "
    "FROM jobs WHERE job_id = ?")

# The step and phase rows job summaries read (by position), also read by
# the exporter (read_exporter.py) for its saving estimate. Position 7 held
# steps.exclusive, dropped with record version 4 (migration 019): NULL keeps
# the positions after it.
STEP_COLS = (
    "s.step_pk, s.step_id, s.het_component, n.name, s.node_model, "
    "s.ntasks, s.ncpus, NULL, s.policy, s.base_freq_khz, s.start_ns, "
    "s.end_ns, s.duration_ns, s.energy_cpu_uj, s.energy_dram_uj, "
    "s.energy_total_uj, s.exit_code, s.wrap_uncertain, s.errors_json, "
    "s.backend, s.inside_step_pk, s.counted_cpu_uj, s.counted_dram_uj, "
    "s.counted_total_uj, s.nominal_freq_khz, s.fixed_freq_khz, s.freq_control, "
    "s.freq_min_ratio, s.counted_duration_ns, s.min_phase_ns, s.energy_resolution_uj, "
    "s.dram_not_measured, s.energy_node_uj, s.node_meter_sources, "
    "s.node_meter_integrated, s.incarnation_ns, s.smt_aside_cpus, s.total_includes")
#: STEP_COLS position of steps.dram_not_measured (why DRAM is not measured)
NO_DRAM_AT = 31
#: STEP_COLS position of steps.incarnation_ns (a requeued job's run)
INC_AT = 35
#: STEP_COLS position of steps.smt_aside_cpus (SMT cores left at their clock)
SMT_AT = 36
#: STEP_COLS position of steps.total_includes (whether its total has its GPUs)
INCLUDES_AT = 37
STEPS_FROM = "steps s JOIN nodes n ON n.node_pk = s.node_pk"
PHASE_COLS = (
    "p.step_pk, p.seq, p.kind, p.label, p.depth, p.parent_seq, "
    "p.duration_ns, p.freq_khz, p.energy_cpu_uj, p.energy_dram_uj, p.bytes, "
    "p.nranks")


def jobs_with_id(conn, job_id: int, cluster: str | None) -> list[tuple]:
    """The jobs with this ID (JOB_FIELDS), latest first."""
    q, args = _JOB_SELECT, [job_id]
    if cluster:
        q += " AND cluster = ?"
        args.append(cluster)
    return conn.execute(q + " ORDER BY first_seen_ns DESC, cluster", args).fetchall()


def first_seen_runs(conn, job_id: int, cluster: str | None) -> list[int]:
    """first_seen_ns of every job with this ID, in order."""
    q, args = "SELECT DISTINCT first_seen_ns FROM jobs WHERE job_id = ?", [job_id]
    if cluster:
        q += " AND cluster = ?"
        args.append(cluster)
    return sorted(r[0] for r in conn.execute(q, args))


def tags(conn, job_pk: int) -> dict:
    return dict(conn.execute(
        "SELECT DISTINCT t.key, t.value FROM step_tags t JOIN steps s "
        "ON s.step_pk = t.step_pk WHERE s.job_pk = ? ORDER BY t.key, t.value",
        (job_pk,)))


def power_models(conn) -> dict:
    """{(node_model, phase_kind): the power_models row as a dict}."""
    cur = conn.execute("SELECT * FROM power_models")
    names = [d[0] for d in cur.description]
    return {(r["node_model"], r["phase_kind"]): r
            for r in (dict(zip(names, row)) for row in cur.fetchall())}


def step_rows(conn, job_pk: int) -> list[tuple]:
    return conn.execute(f"SELECT {STEP_COLS} FROM {STEPS_FROM} WHERE "
                        "s.job_pk = ?", (job_pk,)).fetchall()


def phase_rows(conn, job_pk: int) -> dict:
    """{step_pk: [PHASE_COLS rows in seq order]}."""
    out: dict = {}
    for r in conn.execute(f"SELECT {PHASE_COLS} FROM phases p JOIN steps s ON "
                          "s.step_pk = p.step_pk WHERE s.job_pk = ? ORDER BY "
                          "p.step_pk, p.seq", (job_pk,)):
        out.setdefault(r[0], []).append(r)
    return out


def uncore_caps(conn, job_pk: int) -> dict:
    """{(step_pk, seq): the uncore cap (kHz) a phase set} (+uncore-io)."""
    return {(spk, seq): khz for spk, seq, khz in conn.execute(
        "SELECT p.step_pk, p.seq, p.uncore_max_khz FROM phases p JOIN steps s ON "
        "s.step_pk = p.step_pk WHERE s.job_pk = ? AND p.uncore_max_khz IS NOT NULL",
        (job_pk,))}


def gpu_step_rows(conn, job_pk: int) -> list[tuple]:
    """(step_pk, energy_gpu_uj, total_includes, gpus_unmeasured) per step."""
    return conn.execute("SELECT step_pk, energy_gpu_uj, total_includes, gpus_unmeasured "
                        "FROM steps WHERE job_pk = ?", (job_pk,)).fetchall()


def gpu_rows(conn, job_pk: int) -> list[tuple]:
    """(step_pk, index, uuid, model, energy_uj, reason, integrated, resets)."""
    return conn.execute(
        "SELECT g.step_pk, g.gpu_index, g.uuid, g.model, g.energy_uj, g.reason, "
        "g.integrated, g.resets FROM step_gpus g JOIN steps s ON s.step_pk = "
        "g.step_pk WHERE s.job_pk = ? ORDER BY g.step_pk, g.gpu_index, g.uuid",
        (job_pk,)).fetchall()


def gpu_phase_rows(conn, job_pk: int) -> list[tuple]:
    """(step_pk, seq, energy_gpu_uj, gpu_clock_mhz) of phases with either."""
    return conn.execute(
        "SELECT p.step_pk, p.seq, p.energy_gpu_uj, p.gpu_clock_mhz FROM phases p "
        "JOIN steps s ON s.step_pk = p.step_pk WHERE s.job_pk = ? AND "
        "(p.energy_gpu_uj IS NOT NULL OR p.gpu_clock_mhz IS NOT NULL)",
        (job_pk,)).fetchall()


def slurm_job(conn, job_pk: int):
    """(sacct_ns, state, exit code, elapsed ns, nodes, energy µJ) or None."""
    return conn.execute(
        "SELECT sacct_ns, slurm_state, slurm_exit_code, slurm_elapsed_ns, slurm_nnodes, "
        "slurm_energy_uj FROM jobs WHERE job_pk = ?", (job_pk,)).fetchone()


def slurm_steps(conn, job_pk: int) -> list[tuple]:
    """(step_id, state, exit code, elapsed ns, nodes, energy µJ) per step."""
    return conn.execute(
        "SELECT step_id, state, exit_code, elapsed_ns, nnodes, energy_uj FROM "
        "slurm_steps WHERE job_pk = ?", (job_pk,)).fetchall()


def user_jobs(conn, users: list[str], since_ns: int, until_ns: int | None,
              cluster: str | None, limit: int) -> list[tuple]:
    """(cluster, job_id, first_seen_ns, user, account, partition, steps_n) of
    the users' jobs seen in [since, until), latest first."""
    q = ("SELECT cluster, job_id, first_seen_ns, user_name, account, partition, "
         "steps_n FROM jobs WHERE user_name IN (" + ", ".join("?" * len(users))
         + ") AND last_seen_ns >= ?")
    args: list = [*users, since_ns]
    if until_ns is not None:
        q += " AND first_seen_ns < ?"
        args.append(until_ns)
    if cluster:
        q += " AND cluster = ?"
        args.append(cluster)
    q += " ORDER BY first_seen_ns DESC, cluster, job_id LIMIT ?"
    args.append(limit)
    return conn.execute(q, args).fetchall()

