#!/bin/bash
# T4: a fetch of 30 messages of ~900 kB each, whose --sql also returns many
# rows (publisher-chosen count, up to 200000 per message): no hang, each applied once.
. /tmp/attack2-tests/env.sh
$PSQL -d inbox -c "SET ROLE owner; DROP TRIGGER IF EXISTS t3 ON public.ledger; DROP TRIGGER IF EXISTS t1 ON public.ledger;" 2>&1 | grep -v NOTICE
S=t4$RANDOM
python3 - "$S" <<'PY'
import sys, json
s = sys.argv[1]
for i in range(1, 31):
    open(f"/tmp/attack2-tests/big{i}.json", "w").write(json.dumps({"n": i, "rows": 200000 if i % 5 == 0 else 10, "pad": "x" * 900000}))
PY
args=(); for i in $(seq 1 30); do args+=("$S-$i" "@/tmp/attack2-tests/big$i.json"); done
/tmp/attack2-tests/pub.py att.$S "${args[@]}"
SQLTXT="WITH w AS (INSERT INTO public.ledger (id, n) VALUES (\$1, (\$3->>'n')::int) ON CONFLICT (id) DO UPDATE SET applied = ledger.applied + 1 RETURNING n)
 SELECT w.n, g, pg_catalog.length(\$3::text) FROM w, pg_catalog.generate_series(1, (\$3->>'rows')::int) g"
/usr/bin/time -f "apply: %e s, max RSS %M kB" $EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S" --scope att --ack-wait 20000 --batch 100 --once --verbose --sql "$SQLTXT" 2>&1 | grep -vE 'info: connected|applying|debug: eo'
echo "--- ledger:"; q "SELECT count(*), sum(applied), min(n), max(n) FROM public.ledger WHERE id LIKE '$S-%'"
rm -f /tmp/attack2-tests/big*.json
