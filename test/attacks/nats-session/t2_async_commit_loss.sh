#!/bin/bash
# T2: T1's trigger (synchronous_commit off for the session) turns apply's
# commits asynchronous; a crash before the WAL reaches disk (simulated:
# the walwriter stopped, then an immediate shutdown) loses messages that
# JetStream was told were applied.  CONTROL=1 runs the same without the trigger.
. /tmp/attack2-tests/env.sh
PGBIN=/usr/lib/postgresql/15/bin
/tmp/attack2-tests/t1_session_state.sh >/dev/null 2>&1   # (re)creates app.mine, trigger t1, operator
$PSQL -d inbox -c "SET ROLE owner; DROP OPERATOR public.->> (jsonb, text);"
if [ -n "$CONTROL" ]; then $PSQL -d inbox -c "DROP TRIGGER t1 ON public.ledger"; fi
$PSQL -d inbox -c "TRUNCATE app.mine"
S=t2$RANDOM
/tmp/attack2-tests/pub.py att.$S.own $S-own '{"n":1}'
/tmp/attack2-tests/pub.py att.$S.app $S-a2 '{"n":2}' $S-a3 '{"n":3}' $S-a4 '{"n":4}'
SQLTXT="WITH o AS (INSERT INTO public.ledger (id, n) SELECT \$1, (\$3->>'n')::int WHERE \$2 LIKE '%.own' RETURNING 1)
 INSERT INTO app.mine (id, n, sc, sp) SELECT \$1, (\$3->>'n')::int, pg_catalog.current_setting('synchronous_commit'),
 pg_catalog.current_setting('search_path') WHERE \$2 NOT LIKE '%.own'"
WW=$(ps -o pid= --ppid $(head -1 /tmp/attack2-pg/data/postmaster.pid) -o cmd= | awk '/walwriter/{print $1}')
echo "walwriter pid $WW: SIGSTOP (stands for a crash before the WAL reaches disk)"
kill -STOP $WW
$EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S.>" --scope att --ack-wait 2000 --batch 1 --once --sql "$SQLTXT" 2>&1 | grep -E 'stopping|error'
echo "--- before the crash:"; q "SELECT id, sc FROM app.mine ORDER BY id"
su postgres -c "$PGBIN/pg_ctl -D /tmp/attack2-pg/data -m immediate stop" >/dev/null
su postgres -c "$PGBIN/pg_ctl -D /tmp/attack2-pg/data -o '-p 5497 -k /tmp/attack2-pg -c shared_preload_libraries=eo' -l /tmp/attack2-pg/log -w start" >/dev/null
echo "--- after the crash, app.mine:"; q "SELECT id, sc FROM app.mine ORDER BY id"
echo "--- claims in scope att for $S:"; q "SELECT count(*) FROM eo.eo_keys WHERE key LIKE '$S%'" 2>/dev/null || true
echo "--- apply again (same durable): what JetStream still offers"
$EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S.>" --scope att --ack-wait 2000 --batch 1 --once --sql "$SQLTXT" 2>&1 | grep -E 'stopping|error'
echo "--- app.mine now:"; q "SELECT id, sc FROM app.mine ORDER BY id"
$EO $NATS consumer-info --stream ATT --durable $S 2>&1 | grep -iE 'ack|pending|deliver' | head -5
