-- joulestep schema, migration 017 on PostgreSQL: the users' views' schema
-- (sql/017_user_views.sql says what and why; the views themselves are made
-- by store/userviews.py after the migrations, from the tables' columns).
CREATE SCHEMA IF NOT EXISTS joulestep_user;
