# common env for attack2 tests
export PGHOST=/tmp/attack2-pg PGPORT=5497 PGUSER=postgres
PSQL="/usr/lib/postgresql/15/bin/psql -X -q -v ON_ERROR_STOP=1"
EO=/tmp/attack2-wt/eo_nats
NATS="--nats nats://127.0.0.1:4297"
CONS="host=/tmp/attack2-pg port=5497 dbname=inbox user=consumer"
SHOP="host=/tmp/attack2-pg port=5497 dbname=shop user=postgres"
# apply DURABLE SQL [extra args]
apply() { local d=$1 sql=$2; shift 2; $EO $NATS --pg "$CONS" apply --stream ATT --durable "$d" --scope att --ack-wait 2000 --batch 100 --once --sql "$sql" "$@"; echo "rc=$?"; }
q() { $PSQL -d inbox -At -c "$1"; }
