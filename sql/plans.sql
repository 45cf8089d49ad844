--
-- eo's statements keep generic plans.  A generation made ahead can be
-- analysed while still empty (a database-wide ANALYZE does it); a plan
-- built from those statistics would scan the generation sequentially for
-- every claim while it fills.  eo builds its plans with sequential scans
-- discouraged, so a claim probes the unique index however the statistics
-- look.
--
SET eo.partition_interval = 1;
SELECT switched >= 0 AS pass_ran FROM eo_maintain();   -- a generation made ahead
ANALYZE;                                              -- ... analysed while empty
SELECT pg_sleep(1.1);
SELECT switched FROM eo_maintain();                   -- ... and now current
SELECT c.reltuples AS current_reltuples_at_switch
FROM eo_internal.eo_generations g JOIN pg_class c ON c.oid = g.relid WHERE g.state = 'c';

SELECT count(*) FILTER (WHERE c.status = 'claimed') AS claimed
FROM generate_series(1, 300) g, LATERAL eo_claim('plans:' || g) c;

-- Counters of this backend reach pg_stat_user_tables after the next flush.
SELECT pg_stat_force_next_flush();
SELECT 1 AS flushed;
SELECT pg_stat_clear_snapshot();
SELECT s.seq_tup_read AS rows_read_sequentially, s.idx_scan >= 300 AS index_probed
FROM pg_stat_user_tables s JOIN eo_internal.eo_generations g ON g.relid = s.relid
WHERE g.state = 'c';

RESET eo.partition_interval;
