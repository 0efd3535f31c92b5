-- joulestep schema, migration 021: what the step's cgroup told the plugin
-- (docs/design.md, "The step's cgroup"; docs/accounting.md, "Shared nodes").
--   steps.cpu_time_source      where steps.cpu_time_ns comes from:
--                              cgroup-percpu, cgroup (the step's cgroup CPU
--                              accounting) or children (slurmstepd's reaped
--                              tasks); NULL: an older record
--   steps.cpuset_check         with task/cgroup: agrees, or why the step's
--                              cpuset and the plugin's CPUs disagree (the
--                              plugin then changed no clock); NULL: no cpuset
--   step_packages.step_cpu_ns  the step's CPU time on the package, from the
--                              cgroup's per-CPU accounting; NULL: split by
--                              the step's CPUs there
-- Engine-neutral SQL (SQLite and PostgreSQL).

ALTER TABLE steps ADD COLUMN cpu_time_source TEXT;
ALTER TABLE steps ADD COLUMN cpuset_check TEXT;
ALTER TABLE step_packages ADD COLUMN step_cpu_ns BIGINT CHECK (step_cpu_ns >= 0);

PRAGMA user_version = 21;
