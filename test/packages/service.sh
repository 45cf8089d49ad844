#!/bin/bash
# test/packages/service.sh -- the eo-nats package's service units, as
# installed, run as systemd would run them.
#
# Run as root where the built packages are installed (/usr/bin/eo_nats, the
# units in /lib/systemd/system or /usr/lib/systemd/system, the eo-nats
# user), with a PostgreSQL server that has eo reachable as a superuser by
# PGHOST (a socket directory), PGPORT and PGUSER, nats-server installed,
# and systemd-analyze (systemd need not be running).  It:
# - verifies both units instantiated (systemd-analyze verify
#   eo-nats-forward@test.service), and that verify does find a broken copy;
# - sets up an instance "test" of each as README.Debian says: roles with
#   only the grants of docs/nats.md, /etc/eo-nats/test.conf (root, 0600:
#   systemd reads it as root; eo-nats may not) and a pgpass file (eo-nats,
#   0600) with the roles' passwords, which the server asks for when
#   pg_hba.conf can be edited (else it trusts);
# - starts nats-server (JetStream, a scratch store, a free port, as nobody)
#   and makes the stream with eo_nats stream-add;
# - runs each unit's ExecStart the way systemd does: ExecStart, User, Group,
#   Environment and EnvironmentFile read from the installed unit, %i
#   substituted, the file read with systemd's rules for KEY=VALUE and
#   quoted values, $VAR split into words and ${VAR} one argument, run as the
#   unit's user with runuser and env -i;
# - checks that the events emitted reach the stream (eo_nats dump), that
#   apply applies each once, that no password is on a command line
#   (/proc/PID/cmdline, ps), and that both stop on SIGTERM with exit 0.
# TAP-style output ("ok N - ..."); exits 1 if anything failed.

set -uo pipefail

: "${PGHOST:?PGHOST (a socket directory) is needed}" "${PGPORT:?PGPORT is needed}"
export PGHOST PGPORT PGUSER=${PGUSER:-postgres}
unset PGDATABASE PGPASSWORD PGPASSFILE NATS_PASSWORD NATS_TOKEN

INSTANCE='test'
N_EVENTS=25
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $*"; failed=1; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else not_ok "$what"; fi; }
diag() { sed 's/^/# /'; }
bail() { echo "Bail out! $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || bail "run as root"
UNITDIR=
for d in /usr/lib/systemd/system /lib/systemd/system; do
	[ -f "$d/eo-nats-forward@.service" ] && { UNITDIR=$d; break; }
done
[ -n "$UNITDIR" ] || bail "eo-nats-forward@.service is not installed"
NATS_SERVER=$(command -v nats-server || ls /usr/bin/nats-server /usr/sbin/nats-server 2>/dev/null | head -1)
[ -n "$NATS_SERVER" ] || bail "nats-server is not installed"
getent passwd eo-nats >/dev/null || bail "the eo-nats user does not exist"

TMP=$(mktemp -d /tmp/eo-nats-service.XXXXXX)
chmod 755 "$TMP"
PIDS=()
HBA=
cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
	sleep 0.5
	for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
	if [ -n "$HBA" ] && [ -f "$TMP/pg_hba.conf.orig" ]; then
		cat "$TMP/pg_hba.conf.orig" >"$HBA"
		psql -XAtq -d postgres -c 'SELECT pg_reload_conf()' >/dev/null 2>&1
	fi
	rm -f "/etc/eo-nats/$INSTANCE.conf" "/etc/eo-nats/$INSTANCE.pgpass" \
		"/etc/eo-nats/$INSTANCE-apply.conf" "/etc/eo-nats/$INSTANCE-apply.pgpass"
	[ "${EO_KEEP:-0}" = 1 ] && echo "# kept $TMP" || rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- (a) systemd-analyze verify -------------------------------------------

# Verified by the instance's path: systemd-analyze loads the template
# beside it, with %i = test.  Exit 0 and not a line of output.
verify() {
	local out rc
	out=$(cd / && systemd-analyze verify "$1" 2>&1)
	rc=$?
	[ -z "$out" ] || printf '%s\n' "$out" | diag
	[ "$rc" -eq 0 ] && [ -z "$out" ]
}
for unit in eo-nats-forward eo-nats-apply; do
	check "systemd-analyze verify $unit@$INSTANCE.service ($UNITDIR)" \
		verify "$UNITDIR/$unit@$INSTANCE.service"
done
# ... and the same check finds a broken unit: a missing program, an unknown key.
mkdir -p "$TMP/broken1" "$TMP/broken2"
sed 's|^ExecStart=/usr/bin/eo_nats |ExecStart=/usr/bin/eo_nats_missing |' \
	"$UNITDIR/eo-nats-forward@.service" >"$TMP/broken1/eo-nats-forward@.service"
sed 's|^RestartPreventExitStatus=|RestartPreventExitStatuss=|' \
	"$UNITDIR/eo-nats-forward@.service" >"$TMP/broken2/eo-nats-forward@.service"
check "verify fails on a copy whose ExecStart names a missing program" \
	bash -c "! (cd / && systemd-analyze verify '$TMP/broken1/eo-nats-forward@$INSTANCE.service' >/dev/null 2>&1)"
check "verify says something about a copy with an unknown key" \
	bash -c "(cd / && systemd-analyze verify '$TMP/broken2/eo-nats-forward@$INSTANCE.service' 2>&1) | grep -q RestartPreventExitStatuss"

# ---- reading a unit as systemd does ----------------------------------------

# The [Service] values of `key` in unit file $1 (one per line), %i and %% done.
unit_values() {
	local file=$1 key=$2 line section=
	while IFS= read -r line || [ -n "$line" ]; do
		case $line in
			\[*\]) section=$line ;;
			"$key="*)
				[ "$section" = "[Service]" ] || continue
				line=${line#"$key="}
				line=${line//%i/$INSTANCE}
				line=${line//%%/%}
				case $line in *%*) echo "unsupported specifier in $key=$line" >&2; return 1 ;; esac
				printf '%s\n' "$line" ;;
		esac
	done <"$file"
}

# Split $1 into WORDS at white space, with '...' and "..." quoting and
# backslash escapes removed (systemd's EXTRACT_UNQUOTE|EXTRACT_RELAX).
split_words() {
	local s=$1 i c word='' inword=0 quote=''
	WORDS=()
	for ((i = 0; i < ${#s}; i++)); do
		c=${s:i:1}
		if [ -n "$quote" ]; then
			if [ "$c" = "$quote" ]; then quote=
			elif [ "$c" = '\' ] && [ "$quote" = '"' ]; then i=$((i + 1)); word+=${s:i:1}
			else word+=$c; fi
		elif [ "$c" = "'" ] || [ "$c" = '"' ]; then quote=$c; inword=1
		elif [ "$c" = '\' ]; then i=$((i + 1)); word+=${s:i:1}; inword=1
		elif [[ $c == [[:space:]] ]]; then
			[ "$inword" = 1 ] && WORDS+=("$word")
			word=; inword=0
		else word+=$c; inword=1; fi
	done
	[ "$inword" = 1 ] && WORDS+=("$word")
	return 0
}

# Read an EnvironmentFile into ENVS (KEY=VALUE entries) with systemd's rules
# for one-line values: # and ; comment lines, lines without = ignored,
# white space around the value dropped; a value in '...' verbatim, in "..."
# with \" \\ \` \$ escapes; unquoted, backslash escapes the next character.
read_env_file() {
	local line key value v i c
	while IFS= read -r line || [ -n "$line" ]; do
		line=${line#"${line%%[![:space:]]*}"}
		case $line in '' | '#'* | ';'*) continue ;; *=*) ;; *) continue ;; esac
		key=${line%%=*}
		key=${key%"${key##*[![:space:]]}"}
		value=${line#*=}
		value=${value#"${value%%[![:space:]]*}"}
		value=${value%"${value##*[![:space:]]}"}
		[[ $key =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || { echo "bad variable name: $key" >&2; return 1; }
		if [[ $value == \'*\' ]]; then
			v=${value:1:${#value}-2}
		elif [[ $value == \"*\" ]]; then
			value=${value:1:${#value}-2}
			v=
			for ((i = 0; i < ${#value}; i++)); do
				c=${value:i:1}
				if [ "$c" = '\' ] && [[ ${value:i+1:1} == [\"\\\`\$] ]]; then i=$((i + 1)); c=${value:i:1}; fi
				v+=$c
			done
		else
			v=
			for ((i = 0; i < ${#value}; i++)); do
				c=${value:i:1}
				[ "$c" = '\' ] && { i=$((i + 1)); c=${value:i:1}; }
				v+=$c
			done
		fi
		ENVS+=("$key=$v")
	done <"$1"
}

# The value of variable $1 in ENVS (the last assignment wins).
env_get() {
	local e found=1
	for e in "${ENVS[@]}"; do
		[ "${e%%=*}" = "$1" ] && { VALUE=${e#*=}; found=0; }
	done
	return $found
}

# Start instance $2 of unit $1 as systemd would; its log in $TMP/$1.log.
# Sets STARTED (the pid of runuser, whose child is eo_nats).
start_unit() {
	local unit=$1 file="$UNITDIR/$1@.service" exec user group envfile w name
	local INSTANCE=$2
	local -a argv
	exec=$(unit_values "$file" ExecStart) || return 1
	user=$(unit_values "$file" User)
	group=$(unit_values "$file" Group)
	[ "$(printf '%s\n' "$exec" | wc -l)" -eq 1 ] || { echo "not one ExecStart in $file" >&2; return 1; }
	case $exec in [-@+!:]*) echo "ExecStart prefixes are not handled: $exec" >&2; return 1 ;; esac
	# the manager's environment for a service with User=, then Environment=,
	# then EnvironmentFile= (which overrides it)
	ENVS=("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
		"HOME=$(getent passwd "$user" | cut -d: -f6)" "USER=$user" "LOGNAME=$user"
		"SHELL=$(getent passwd "$user" | cut -d: -f7)")
	while IFS= read -r w; do
		[ -n "$w" ] || continue
		split_words "$w"
		ENVS+=("${WORDS[@]}")
	done < <(unit_values "$file" Environment)
	while IFS= read -r envfile; do
		[ -n "$envfile" ] || continue
		if [ "${envfile#-}" != "$envfile" ]; then
			[ -f "${envfile#-}" ] && read_env_file "${envfile#-}"
		else
			read_env_file "$envfile" || return 1
		fi
	done < <(unit_values "$file" EnvironmentFile)
	split_words "$exec"
	argv=()
	for w in "${WORDS[@]}"; do
		if [[ $w =~ ^\$([A-Za-z_][A-Za-z0-9_]*)$ ]]; then
			# $VAR alone: its value split into words (none if unset)
			env_get "${BASH_REMATCH[1]}" && { split_words "$VALUE"; argv+=("${WORDS[@]}"); }
			continue
		fi
		# ${VAR} in a word: its value, as is
		while [[ $w =~ \$\{([A-Za-z_][A-Za-z0-9_]*)\} ]]; do
			name=${BASH_REMATCH[1]}
			VALUE=
			env_get "$name"
			w=${w/"\${$name}"/$VALUE}
		done
		argv+=("$w")
	done
	printf '%s\n' "$unit: as $user:$group: ${argv[*]}" >>"$TMP/commands"
	(cd / && exec runuser -u "$user" -g "${group:-$user}" -- env -i "${ENVS[@]}" "${argv[@]}") \
		>"$TMP/$unit.log" 2>&1 &
	STARTED=$!
	PIDS+=("$STARTED")
}

# The eo_nats process under runuser's pid $1.
eo_nats_pid() {
	local p
	for p in /proc/[0-9]*; do
		[ "$(awk '{print $4}' "$p/stat" 2>/dev/null)" = "$1" ] &&
			[ "$(cat "$p/comm" 2>/dev/null)" = eo_nats ] && { echo "${p#/proc/}"; return 0; }
	done
	return 1
}

# Wait up to $1 seconds for the command that follows to succeed.
wait_for() {
	local secs=$1 i
	shift
	for ((i = 0; i < secs * 5; i++)); do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}

# ---- (b) the databases, roles and grants of docs/nats.md -------------------

sql() { PGOPTIONS='-c client_min_messages=warning' psql -X -v ON_ERROR_STOP=1 -qAt "$@"; }
RELAY_PW=relay-$RANDOM$RANDOM$RANDOM
CONSUMER_PW=consumer-$RANDOM$RANDOM$RANDOM
NATS_PW=nats-$RANDOM$RANDOM$RANDOM

sql -d postgres -c 'SELECT 1' >/dev/null || bail "cannot connect to PostgreSQL as $PGUSER at $PGHOST:$PGPORT"
sql -d postgres >/dev/null <<EOF || bail "could not make the databases and roles"
DROP DATABASE IF EXISTS eo_svc_shop;
DROP DATABASE IF EXISTS eo_svc_ledger;
DROP ROLE IF EXISTS eo_svc_relay;
DROP ROLE IF EXISTS eo_svc_consumer;
CREATE ROLE eo_svc_relay LOGIN PASSWORD '$RELAY_PW';
CREATE ROLE eo_svc_consumer LOGIN PASSWORD '$CONSUMER_PW';
CREATE DATABASE eo_svc_shop;
CREATE DATABASE eo_svc_ledger;
EOF
sql -d eo_svc_shop >/dev/null <<'EOF' || bail "could not set up the outbox"
CREATE SCHEMA eo;
CREATE EXTENSION eo SCHEMA eo;
SELECT eo.eo_outbox_create('billing_outbox', slots => 4);
GRANT USAGE ON SCHEMA eo TO eo_svc_relay;
GRANT EXECUTE ON FUNCTION eo.eo_relay_fetch(text, text, int, interval, int, boolean),
      eo.eo_relay_ack(text, text, bigint), eo.eo_relay_ack(text, text, bigint, bigint),
      eo.eo_relay_ack_pages(text, text, bigint[]),
      eo.eo_relay_wait(text, interval), eo.eo_relay_wait(text, interval, text, interval) TO eo_svc_relay;
GRANT SELECT ON eo.billing_outbox TO eo_svc_relay;
SELECT eo.eo_group_create('billing_outbox', 'nats', owner => 'eo_svc_relay');
EOF
sql -d eo_svc_ledger >/dev/null <<'EOF' || bail "could not set up the consumer"
CREATE SCHEMA eo;
CREATE EXTENSION eo SCHEMA eo;
GRANT CONNECT ON DATABASE eo_svc_ledger TO eo_svc_consumer;
GRANT USAGE ON SCHEMA eo TO eo_svc_consumer;
GRANT EXECUTE ON FUNCTION eo.eo_claim(text, text, interval, text),
      eo.eo_fail(text, text, bigint, interval, text, text, boolean) TO eo_svc_consumer;
SELECT eo.eo_scope_create('eo-svc-consumer', owner => 'eo_svc_consumer');
CREATE SCHEMA ledger;
CREATE TABLE ledger.applied (event_id text, subject text, payload jsonb);
GRANT USAGE ON SCHEMA ledger TO eo_svc_consumer;
GRANT INSERT ON ledger.applied TO eo_svc_consumer;
EOF
ok "databases, roles with the grants of docs/nats.md, an outbox, a group and a scope"

# The server asks these two roles for their password on the socket, if we
# may edit pg_hba.conf; otherwise the pgpass files are there but unused.
HBA_ENFORCED=0
hba=$(sql -d postgres -c 'SHOW hba_file')
if [ -n "$hba" ] && [ -w "$hba" ]; then
	HBA=$hba
	cp "$HBA" "$TMP/pg_hba.conf.orig"
	{
		echo "local eo_svc_shop eo_svc_relay scram-sha-256"
		echo "local eo_svc_ledger eo_svc_consumer scram-sha-256"
		cat "$TMP/pg_hba.conf.orig"
	} >"$HBA"
	sql -d postgres -c 'SELECT pg_reload_conf()' >/dev/null && sleep 1
	if ! psql -X -w -d eo_svc_shop -U eo_svc_relay -c 'SELECT 1' >/dev/null 2>&1 &&
		PGPASSWORD=$RELAY_PW psql -X -w -d eo_svc_shop -U eo_svc_relay -c 'SELECT 1' >/dev/null 2>&1; then
		HBA_ENFORCED=1
		ok "the server asks eo_svc_relay for its password (scram-sha-256 in $HBA)"
	else
		not_ok "the server asks eo_svc_relay for its password (scram-sha-256 in $HBA)"
	fi
else
	echo "# pg_hba.conf ($hba) cannot be edited: the socket's own rule applies (the pgpass files are written all the same)"
fi

# ---- nats-server, as nobody ------------------------------------------------

free_port() {
	local port
	for port in $(seq 14222 14322); do
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "$port"; return 0; }
	done
	return 1
}
NATS_PORT=$(free_port) || bail "no free port for nats-server"
NATS_URL=nats://127.0.0.1:$NATS_PORT
mkdir -p "$TMP/nats/store"
cat >"$TMP/nats/nats.conf" <<EOF
listen: 127.0.0.1:$NATS_PORT
jetstream { store_dir: "$TMP/nats/store" }
authorization { user: eosvc, password: "$NATS_PW" }
EOF
chown -R nobody "$TMP/nats"
chmod 700 "$TMP/nats"
setpriv --reuid=nobody --regid="$(id -gn nobody)" --clear-groups -- \
	"$NATS_SERVER" -c "$TMP/nats/nats.conf" >"$TMP/nats-server.log" 2>&1 &
NATS_PID=$!
PIDS+=("$NATS_PID")
check "nats-server (JetStream) listens on port $NATS_PORT, as nobody" \
	wait_for 10 bash -c "(exec 3<>/dev/tcp/127.0.0.1/$NATS_PORT) 2>/dev/null"
[ "$(awk '/^Uid:/ {print $2}' "/proc/$NATS_PID/status" 2>/dev/null)" = "$(id -u nobody)" ] ||
	not_ok "nats-server runs as nobody"

NATS_ARGS=(--nats "$NATS_URL" --user eosvc)
eo_nats_admin() { (cd / && env NATS_PASSWORD="$NATS_PW" /usr/bin/eo_nats "$1" "${NATS_ARGS[@]}" "${@:2}" 2>>"$TMP/admin.log"); }
stream_add() {
	eo_nats_admin stream-add --stream EOSVC --subjects 'billing_outbox.>' --duplicate-window 300 >>"$TMP/admin.log"
}
check "eo_nats stream-add makes the stream EOSVC" stream_add

# ---- the instance's configuration, as README.Debian says -------------------

# $1 conf name, $2 the options, $3 database, $4 role, $5 password, $6 --sql
write_config() {
	local conf=/etc/eo-nats/$1.conf pgpass=/etc/eo-nats/$1.pgpass
	{
		echo "# written by test/packages/service.sh, after the package's examples"
		echo "EO_NATS_OPTIONS=$2"
		[ -z "${6:-}" ] || echo "EO_NATS_SQL='$6'"
		echo "PGHOST=$PGHOST"
		echo "PGPORT=$PGPORT"
		echo "PGDATABASE=$3"
		echo "PGUSER=$4"
		echo "PGPASSFILE=$pgpass"
		echo "NATS_PASSWORD='$NATS_PW'"
	} >"$conf"
	chown root:root "$conf"
	chmod 0600 "$conf"
	install -m 0600 -o eo-nats -g eo-nats /dev/null "$pgpass"
	# libpq looks up "localhost" for its default socket directory (as
	# README.Debian says), the path for any other
	local host=$PGHOST
	[ "$host" != /var/run/postgresql ] || host=localhost
	echo "$host:$PGPORT:$3:$4:$5" >"$pgpass"
}
write_config "$INSTANCE" "${NATS_ARGS[*]} --outbox billing_outbox --group nats --stream EOSVC" \
	eo_svc_shop eo_svc_relay "$RELAY_PW"

emit() {
	sql -d eo_svc_shop -c "SELECT count(eo.eo_emit('billing_outbox', 'order', 'agg-' || (g % 5), 'created',
		jsonb_build_object('n', g, 'tag', '$1'))) FROM generate_series(1, $2) g" >/dev/null
}
HALF=$((N_EVENTS / 2))
emit before "$HALF"

# ---- forward, as the unit runs it ------------------------------------------

start_unit eo-nats-forward "$INSTANCE" || bail "could not read eo-nats-forward@.service"
FWD_RUNUSER=$STARTED
wait_for 10 eo_nats_pid "$FWD_RUNUSER" >/dev/null
FWD=$(eo_nats_pid "$FWD_RUNUSER")
check "eo-nats-forward@$INSTANCE's ExecStart runs (pid ${FWD:-none})" test -n "$FWD"
check "... as the unit's user" \
	test "$(awk '/^Uid:/ {print $2}' "/proc/$FWD/status" 2>/dev/null)" = "$(id -u eo-nats)"
emit after $((N_EVENTS - HALF))

in_stream() { [ "$(eo_nats_admin dump --stream EOSVC 2>/dev/null | grep -c .)" -ge "$N_EVENTS" ]; }
check "the $N_EVENTS events reach the stream within 30 s" wait_for 30 in_stream
eo_nats_admin dump --stream EOSVC >"$TMP/dump.json" 2>/dev/null
missing=0
while read -r id; do
	[ "$(grep -c -- "$id" "$TMP/dump.json")" -eq 1 ] || missing=$((missing + 1))
done < <(sql -d eo_svc_shop -c 'SELECT id FROM eo.billing_outbox')
check "each event is in the stream once, under its id ($(grep -c . "$TMP/dump.json") messages)" \
	test "$missing" -eq 0 -a "$(grep -c . "$TMP/dump.json")" -eq "$N_EVENTS"

# ---- apply, as the unit runs it --------------------------------------------

# (both units read /etc/eo-nats/NAME.conf: an applier needs a name of its own)
APPLY_INSTANCE=$INSTANCE-apply
write_config "$APPLY_INSTANCE" \
	"${NATS_ARGS[*]} --stream EOSVC --durable ledger --scope eo-svc-consumer" \
	eo_svc_ledger eo_svc_consumer "$CONSUMER_PW" \
	'INSERT INTO ledger.applied VALUES ($1, $2, $3)'
start_unit eo-nats-apply "$APPLY_INSTANCE" || bail "could not read eo-nats-apply@.service"
APPLY_RUNUSER=$STARTED
wait_for 10 eo_nats_pid "$APPLY_RUNUSER" >/dev/null
APPLY=$(eo_nats_pid "$APPLY_RUNUSER")
check "eo-nats-apply@$APPLY_INSTANCE's ExecStart runs (pid ${APPLY:-none})" test -n "$APPLY"
applied() { [ "$(sql -d eo_svc_ledger -c 'SELECT count(*) FROM ledger.applied')" -ge "$N_EVENTS" ]; }
check "apply applies the $N_EVENTS messages within 30 s" wait_for 30 applied
sleep 2
counts=$(sql -d eo_svc_ledger -c "SELECT count(*) || ' ' || count(DISTINCT event_id) || ' ' ||
	count(*) FILTER (WHERE subject = 'billing_outbox.order' AND payload ? 'n') FROM ledger.applied")
check "each event applied once, with its subject and payload (rows, ids, well-formed: $counts)" \
	test "$counts" = "$N_EVENTS $N_EVENTS $N_EVENTS"
sql -d eo_svc_shop -c 'SELECT id FROM eo.billing_outbox ORDER BY 1' >"$TMP/ids.shop"
sql -d eo_svc_ledger -c 'SELECT event_id FROM ledger.applied ORDER BY 1' >"$TMP/ids.ledger"
check "the ids applied are the outbox's" cmp -s "$TMP/ids.shop" "$TMP/ids.ledger"

# ---- the settings are root's ------------------------------------------------

# systemd reads NAME.conf as root (README.Debian: mode 0600, owner root);
# the instances, all of them eo-nats, ran without reading it.
check "eo-nats cannot read /etc/eo-nats/$INSTANCE.conf nor $APPLY_INSTANCE.conf (root's, 0600)" \
	bash -c "! runuser -u eo-nats -- cat /etc/eo-nats/$INSTANCE.conf /etc/eo-nats/$APPLY_INSTANCE.conf >/dev/null 2>&1 &&
		[ \"\$(stat -c %U:%a /etc/eo-nats/$INSTANCE.conf)\" = root:600 ]"
check "nor can another local user read /etc/eo-nats or the environment of the instances" \
	bash -c "! runuser -u nobody -- ls /etc/eo-nats >/dev/null 2>&1 &&
		! runuser -u nobody -- cat /proc/$FWD/environ /proc/$APPLY/environ >/dev/null 2>&1"

# ---- no password on a command line -----------------------------------------

secrets_in() { grep -q -F -e "$RELAY_PW" -e "$CONSUMER_PW" -e "$NATS_PW"; }
for pid in "$FWD" "$APPLY"; do
	check "no password in /proc/$pid/cmdline ($(tr '\0' ' ' <"/proc/$pid/cmdline" | cut -c1-60)...)" \
		bash -c "[ -n '$pid' ] && ! tr '\0' ' ' </proc/$pid/cmdline | grep -q -F -e '$RELAY_PW' -e '$CONSUMER_PW' -e '$NATS_PW'"
	check "... its NATS password and PGPASSFILE come from the environment" \
		bash -c "tr '\0' '\n' </proc/$pid/environ | grep -q -x -F -e 'NATS_PASSWORD=$NATS_PW' &&
			tr '\0' '\n' </proc/$pid/environ | grep -q '^PGPASSFILE=/etc/eo-nats/'"
done
if command -v ps >/dev/null; then
	ps -C eo_nats -o user=,args= >"$TMP/ps"
	check "ps shows both eo_nats, as eo-nats, and no password ($(grep -c . "$TMP/ps") processes)" \
		eval '[ "$(grep -c "^eo-nats .*/usr/bin/eo_nats" "$TMP/ps")" -eq 2 ] && ! secrets_in <"$TMP/ps"'
fi
[ "$HBA_ENFORCED" = 1 ] &&
	check "both logged in with the password of their pgpass file (the server asked for it)" \
		eval 'grep -q "connected to PostgreSQL database \"eo_svc_shop\" as \"eo_svc_relay\"" "$TMP/eo-nats-forward.log" &&
			grep -q "connected to PostgreSQL database \"eo_svc_ledger\" as \"eo_svc_consumer\"" "$TMP/eo-nats-apply.log"'

# ---- stop as systemd does: SIGTERM, exit 0 ---------------------------------

for unit in eo-nats-forward eo-nats-apply; do
	[ "$unit" = eo-nats-forward ] && { pid=$FWD; rpid=$FWD_RUNUSER; } || { pid=$APPLY; rpid=$APPLY_RUNUSER; }
	kill -TERM "$pid"
	rc=
	for ((i = 0; i < 50; i++)); do
		kill -0 "$rpid" 2>/dev/null || { wait "$rpid"; rc=$?; break; }
		sleep 0.2
	done
	check "$unit@NAME stops on SIGTERM with exit 0 (exit ${rc:-none within 10 s})" test "${rc:-x}" = 0
done
check "their logs say what they did (stopping: ...)" \
	bash -c "grep -q 'stopping: ' '$TMP/eo-nats-forward.log' && grep -q 'stopping: ' '$TMP/eo-nats-apply.log'"
check "no password in their logs" bash -c "! cat '$TMP/eo-nats-forward.log' '$TMP/eo-nats-apply.log' | grep -q -F -e '$RELAY_PW' -e '$CONSUMER_PW' -e '$NATS_PW'"

if [ "$failed" -ne 0 ]; then
	echo "# the commands run:"; diag <"$TMP/commands"
	for f in eo-nats-forward eo-nats-apply; do
		echo "# $f's log:"; tail -n 20 "$TMP/$f.log" | diag
	done
fi
echo "1..$n"
sql -d postgres -c 'DROP DATABASE eo_svc_shop' -c 'DROP DATABASE eo_svc_ledger' \
	-c 'DROP ROLE eo_svc_relay' -c 'DROP ROLE eo_svc_consumer' >/dev/null 2>&1
exit "$failed"
