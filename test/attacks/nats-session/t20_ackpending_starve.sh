#!/bin/bash
# R2-1: a publisher alone starves apply: 2*--batch poison messages (payloads
# --sql fails on, 22P02) fill MaxAckPending (nak'd with 5 s delay, still
# pending); no good message published after them is ever delivered, so
# --sql never "works" (PRIME=1: one good message first; EXTRA=--terminate-dead: no help), nothing is recorded, none dies: a livelock.
. /tmp/attack2-tests/env.sh
BATCH=${BATCH:-3}
RUN=${RUN:-45}
S=st$RANDOM
q "TRUNCATE app.mine"
SQLTXT="INSERT INTO app.mine (id, n) VALUES (\$1, (\$3->>'n')::int)"
[ -n "$PRIME" ] && /tmp/attack2-tests/pub.py att.$S $S-prime '{"n":0}'
args=(); for i in $(seq 1 $((2*BATCH))); do args+=("$S-bad$i" '{"n":"x"}'); done
/tmp/attack2-tests/pub.py att.$S "${args[@]}"
args=(); for i in $(seq 1 5); do args+=("$S-good$i" "{\"n\":$i}"); done
/tmp/attack2-tests/pub.py att.$S "${args[@]}"
timeout $RUN $EO $NATS --pg "$CONS" apply --stream ATT --durable $S --filter "att.$S" --scope att \
  --batch $BATCH $EXTRA --sql "$SQLTXT" > /tmp/attack2-tests/t20.log 2>&1
echo "apply ran ${RUN}s (rc=$?); log lines by kind:"
sed -E 's/^[^ ]+ //; s/event [^ ]+/event X/; s/[0-9]+ messages/N messages/' /tmp/attack2-tests/t20.log | sort | uniq -c | sort -rn | head -8
echo "good rows applied: $(q "SELECT count(*) FROM app.mine WHERE id LIKE '$S-good%'") of 5"
echo "prime applied: $(q "SELECT count(*) FROM app.mine WHERE id = '$S-prime'")"
for k in bad1 bad2 bad3; do echo "eo_status($S-$k): $(q "SELECT eo.eo_status('$S-$k', 'att')" 2>&1 | head -1)"; done
$EO $NATS consumer-info --stream ATT --durable $S 2>&1 | grep -iE 'pending|redeliver|delivered'
