#!/bin/bash
# T11: the owner's trigger makes apply's session LISTEN; then any role that
# can connect NOTIFYs it (NOTIFY needs no privilege).  eo_nats never calls
# PQnotifies: does its memory grow with every notification?
. /tmp/attack2-tests/env.sh
$PSQL -d inbox <<'SQL' 2>&1 | grep -v NOTICE
SET ROLE owner;
DROP TRIGGER IF EXISTS t11 ON public.ledger;
CREATE OR REPLACE FUNCTION public.t11() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  LISTEN junk;
  RETURN NEW;
END $f$;
CREATE TRIGGER t11 BEFORE INSERT ON public.ledger FOR EACH ROW EXECUTE FUNCTION public.t11();
SQL
SQLTXT="INSERT INTO public.ledger (id, n) VALUES (\$1, (\$3->>'n')::int) ON CONFLICT (id) DO UPDATE SET applied = ledger.applied + 1"
S=t11$RANDOM
/tmp/attack2-tests/pub.py att.$S $S-1 '{"n":1}'
$EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S" --scope att --ack-wait 2000 --batch 10 --sql "$SQLTXT" > /tmp/attack2-tests/t11.log 2>&1 &
AP=$!
sleep 2
echo "RSS after the first message: $(grep VmRSS /proc/$AP/status)"
echo "listeners: $($PSQL -d inbox -Atc "SELECT count(*) FROM pg_stat_activity WHERE usename='consumer'")"
for round in 1 2 3; do
  # as a role of no standing: consumer? no: a fresh role with nothing but CONNECT
  $PSQL -d inbox -U nobody -Atc "SELECT count(pg_notify('junk', repeat('x', 7900) || g)) FROM generate_series(1, 3000) g" >/dev/null
  /tmp/attack2-tests/pub.py att.$S $S-w$round '{"n":100}'
  sleep 3
  echo "RSS after ~24 MB of notifications round $round: $(grep VmRSS /proc/$AP/status)"
done
kill -INT $AP; wait $AP
grep -E 'stopping' /tmp/attack2-tests/t11.log
$PSQL -d inbox -c "SET ROLE owner; DROP TRIGGER t11 ON public.ledger" >/dev/null
