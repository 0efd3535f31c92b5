-- joulestep schema, migration 016 on PostgreSQL: row-level security
-- (sql/016_row_security.sql says what and why).  Run by store/engines.py
-- before sql/016_row_security.sql, in the same transaction.
ALTER TABLE jobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE steps ENABLE ROW LEVEL SECURITY;
ALTER TABLE slurm_steps ENABLE ROW LEVEL SECURITY;
ALTER TABLE phases ENABLE ROW LEVEL SECURITY;
ALTER TABLE step_tags ENABLE ROW LEVEL SECURITY;
ALTER TABLE step_gpus ENABLE ROW LEVEL SECURITY;
ALTER TABLE step_zones ENABLE ROW LEVEL SECURITY;
ALTER TABLE step_packages ENABLE ROW LEVEL SECURITY;
ALTER TABLE phase_gpus ENABLE ROW LEVEL SECURITY;
ALTER TABLE phase_ranks ENABLE ROW LEVEL SECURITY;
ALTER TABLE step_conflicts ENABLE ROW LEVEL SECURITY;
ALTER TABLE lost_records ENABLE ROW LEVEL SECURITY;

CREATE POLICY own_rows ON jobs FOR SELECT USING (
    user_name = current_user
    OR EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = 'joulestep_read_all' AND pg_has_role(r.oid, 'USAGE')));
CREATE POLICY own_rows ON steps FOR SELECT USING (
    EXISTS (SELECT 1 FROM jobs j WHERE j.job_pk = steps.job_pk));
CREATE POLICY own_rows ON slurm_steps FOR SELECT USING (
    EXISTS (SELECT 1 FROM jobs j WHERE j.job_pk = slurm_steps.job_pk));
CREATE POLICY own_rows ON phases FOR SELECT USING (
    EXISTS (SELECT 1 FROM steps s WHERE s.step_pk = phases.step_pk));
CREATE POLICY own_rows ON step_tags FOR SELECT USING (
    EXISTS (SELECT 1 FROM steps s WHERE s.step_pk = step_tags.step_pk));
CREATE POLICY own_rows ON step_gpus FOR SELECT USING (
    EXISTS (SELECT 1 FROM steps s WHERE s.step_pk = step_gpus.step_pk));
CREATE POLICY own_rows ON step_zones FOR SELECT USING (
    EXISTS (SELECT 1 FROM steps s WHERE s.step_pk = step_zones.step_pk));
CREATE POLICY own_rows ON step_packages FOR SELECT USING (
    EXISTS (SELECT 1 FROM steps s WHERE s.step_pk = step_packages.step_pk));
CREATE POLICY own_rows ON phase_gpus FOR SELECT USING (
    EXISTS (SELECT 1 FROM steps s WHERE s.step_pk = phase_gpus.step_pk));
CREATE POLICY own_rows ON phase_ranks FOR SELECT USING (
    EXISTS (SELECT 1 FROM steps s WHERE s.step_pk = phase_ranks.step_pk));
CREATE POLICY own_rows ON step_conflicts FOR SELECT USING (
    EXISTS (SELECT 1 FROM jobs j WHERE j.cluster = step_conflicts.cluster
            AND j.job_id = step_conflicts.job_id));
CREATE POLICY own_rows ON lost_records FOR SELECT USING (
    EXISTS (SELECT 1 FROM jobs j WHERE j.cluster = lost_records.cluster
            AND j.job_id = lost_records.job_id));
