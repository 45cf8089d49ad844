#!/bin/bash
# T7: a publisher sends three messages --sql cannot read (payload n not a
# number) before good ones: apply (fresh start) stops, exit 3, which the
# packaged unit does not restart (RestartPreventExitStatus=2 3).
. /tmp/attack2-tests/env.sh
SQLTXT="INSERT INTO public.ledger (id, n) VALUES (\$1, (\$3->>'n')::int) ON CONFLICT (id) DO UPDATE SET applied = ledger.applied + 1"
S=t7$RANDOM
/tmp/attack2-tests/pub.py att.$S $S-p1 '{"n":"x"}' $S-p2 '{"n":"x"}' $S-p3 '{"n":"x"}' $S-g1 '{"n":1}' $S-g2 '{"n":2}'
for run in 1 2; do
timeout 60 $EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S" --scope att --ack-wait 1000 --batch 100 --once --sql "$SQLTXT" 2>&1 | grep -E 'stopping'; echo "rc=${PIPESTATUS[0]}"
q "SELECT count(*) FROM public.ledger WHERE id LIKE '$S-%'"
done
