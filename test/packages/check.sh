#!/usr/bin/env bash
# test/packages/check.sh <major> <version> -- inside a clean chroot where
# eo's packages were installed with apt (and nothing else of eo: no source,
# no compiler, no server headers), check what a user gets: the extension
# is created and its worker runs with the preload, an 0.2.0 installation
# updates, eo_nats answers, and its service units run (service.sh).  Prints
# TAP-style lines; exits non-zero on any failure.  Run by tools/packages.sh.
set -uo pipefail
major=$1 version=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
n=0 failed=0

ok() {   # ok <description> <command...>
    local what=$1; shift
    n=$((n + 1))
    if "$@"; then echo "ok $n - $what"
    else echo "not ok $n - $what"; failed=$((failed + 1))
    fi
}

psql_q() {   # psql_q <db> <sql>: one value, as the postgres user
    runuser -u postgres -- psql -X -At -v ON_ERROR_STOP=1 -p "$PGPORT" -d "$1" -c "$2"
}

absent() { ! command -v "$1" >/dev/null 2>&1; }
installed_at() { [ "$(dpkg-query -W -f '${Version}' "$1" 2>/dev/null)" = "$2" ]; }
equals() { [ "$1" = "$2" ] || { echo "   got '$1', expected '$2'"; return 1; }; }

# The launcher runs, and the worker made a maintenance pass in the
# database (nobody called eo_maintain()), within <seconds>.
worker_runs() {
    local tries=$1
    while [ "$tries" -gt 0 ]; do
        tries=$((tries - 1))
        [ "$(psql_q postgres "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'eo launcher'")" = 1 ] &&
        [ "$(psql_q postgres "SELECT passes > 0 FROM eo_metrics.maintenance")" = t ] &&
            return 0
        sleep 1
    done
    psql_q postgres "SELECT backend_type FROM pg_stat_activity"
    psql_q postgres "SELECT * FROM eo_metrics.maintenance"
    return 1
}

ok "no compiler is installed" absent gcc
ok "no C compiler of any name" absent cc
ok "no server headers (postgresql-server-dev-$major)" test ! -d "/usr/include/postgresql/$major/server"
ok "postgresql-$major-eo $version is installed" installed_at "postgresql-$major-eo" "$version"
ok "eo-nats $version is installed" installed_at eo-nats "$version"

export PGPORT=5432 PGHOST=/var/run/postgresql
# Local connections are trusted (root runs service.sh's psql as postgres);
# service.sh asks its own roles for passwords in pg_hba.conf.
# No TCP: the chroot shares the host's network, where another server may
# listen on the port (written to conf.d: sid's pg_createcluster dropped an
# empty -o listen_addresses=).
pg_createcluster "$major" main -p "$PGPORT" -- --auth-local=trust >/dev/null
cat >"/etc/postgresql/$major/main/conf.d/eo-test.conf" <<'CONF'
listen_addresses = ''
shared_preload_libraries = 'eo'
eo.naptime = 1
CONF
ok "the cluster starts with shared_preload_libraries = 'eo'" pg_ctlcluster "$major" main start

upstream=${version%-*}
ok "CREATE EXTENSION eo" psql_q postgres "CREATE EXTENSION eo"
ok "... installs $upstream" equals "$(psql_q postgres "SELECT extversion FROM pg_extension WHERE extname = 'eo'")" "$upstream"
ok "... and a key is claimed" equals "$(psql_q postgres "SELECT status FROM eo_claim('package-test')")" claimed
ok "the launcher runs, and the worker made a pass in the database" worker_runs 30

runuser -u postgres -- createdb -p "$PGPORT" updated
ok "CREATE EXTENSION eo VERSION '0.2.0'" psql_q updated "CREATE EXTENSION eo VERSION '0.2.0'"
psql_q updated "SELECT status FROM eo_claim('before-update')" >/dev/null
ok "ALTER EXTENSION eo UPDATE" psql_q updated "ALTER EXTENSION eo UPDATE"
ok "... to $upstream" equals "$(psql_q updated "SELECT extversion FROM pg_extension WHERE extname = 'eo'")" "$upstream"
ok "... and a key claimed under 0.2.0 is a duplicate" \
    equals "$(psql_q updated "SELECT status FROM eo_claim('before-update')")" duplicate

ok "eo_nats --version answers $upstream" equals "$(eo_nats --version 2>&1 | grep -o '[0-9][0-9.]*[0-9]' | head -n 1)" "$upstream"
ok "eo_nats has a manual page" test -f /usr/share/man/man1/eo_nats.1.gz

if [ -f "$here/service.sh" ]; then
    n=$((n + 1))
    if PGUSER=postgres bash "$here/service.sh"; then echo "ok $n - the service units (service.sh)"
    else echo "not ok $n - the service units (service.sh)"; failed=$((failed + 1))
    fi
fi

pg_ctlcluster "$major" main stop -m fast || true
echo "1..$n"
[ "$failed" -eq 0 ] || { echo "$failed of $n checks failed"; exit 1; }
echo "all $n checks passed"
