#!/usr/bin/env bash
# tools/pgxn-check.sh -- the PGXN distribution, end to end (issue 37).
#
# As root on Debian 12, from anywhere in the repo:  bash tools/pgxn-check.sh
# Makes eo-VERSION.zip (make dist), checks META.json (the tree's and the
# zip's) against the PGXN Meta Spec with test/tools/pgxn_meta.py, checks the
# zip's layout, installs it with pgxnclient (`pgxn install ./eo-VERSION.zip`)
# into the system PostgreSQL (EO_PG_MAJOR, default 15: the same files
# `make install` puts there), then starts a throwaway server that preloads
# eo and runs CREATE EXTENSION and a claim.  One "ok"/"not ok" line per
# check; exits 1 if any failed.
set -euo pipefail
# shellcheck source=tools/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"
PY=/usr/bin/python3          # the system's, not pyenv's
FAILED=0

ok() { echo "ok - $*"; }
not_ok() { echo "not ok - $*"; FAILED=$((FAILED + 1)); }
# check DESCRIPTION COMMAND...: runs it, its output shown only if it fails
check() {
    local what=$1 out; shift
    if out=$("$@" 2>&1); then ok "$what"; else not_ok "$what"; printf '%s\n' "$out" | sed 's/^/    /'; fi
}
# Whatever the later checks stand on: stop here if it failed.
need() { [ "$FAILED" -eq 0 ] || die "$FAILED check(s) failed: stopping before $1"; }

[ "$(id -u)" -eq 0 ] || die "run as root: it installs packages and eo into $PG_CONFIG's PostgreSQL"
[ -x "$PG_CONFIG" ] || die "no $PG_CONFIG: apt-get install postgresql-$EO_PG_MAJOR postgresql-server-dev-$EO_PG_MAJOR"
missing=""
command -v pgxn >/dev/null || missing+=" pgxnclient"
command -v unzip >/dev/null || missing+=" unzip"
[ -e .git ] || command -v zip >/dev/null || missing+=" zip"     # make dist outside git
if [ -n "$missing" ]; then
    log "installing$missing"
    # shellcheck disable=SC2086  # a list of names
    { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $missing; } >/tmp/eo-apt.log 2>&1 ||
        { cat /tmp/eo-apt.log >&2; die "apt-get failed"; }
fi
# shellcheck disable=SC2034  # lib.sh's as_pg runs the server's programs from it
PGBIN=$("$PG_CONFIG" --bindir)
make_scratch                 # $EO_TMP, removed (server stopped) on exit

VERSION=$(sed -n "s/^default_version = '\(.*\)'/\1/p" eo.control)
DIST=eo-$VERSION
log "make dist ($DIST.zip) and META.json"
check "the validator refuses broken documents (test/tools/pgxn_meta_selftest.py)" \
    "$PY" test/tools/pgxn_meta_selftest.py
check "META.json is valid" "$PY" test/tools/pgxn_meta.py --dist-root . META.json
check "META.json's version is eo.control's default_version ($VERSION)" \
    "$PY" -c 'import json, sys
m = json.load(open("META.json"))
versions = {m["version"], *(e["version"] for e in m["provides"].values())}
sys.exit(versions != {sys.argv[1]} and "META.json has %s" % sorted(versions))' "$VERSION"
check "make dist" make PG_CONFIG="$PG_CONFIG" dist
need "the zip's layout"

log "the layout of $DIST.zip"
top=$(unzip -Z1 "$DIST.zip" | cut -d/ -f1 | sort -u | paste -sd' ')
if [ "$top" = "$DIST" ]; then ok "one top directory, $DIST/"; else not_ok "top directories: $top (want $DIST/)"; fi
unzip -q "$DIST.zip" -d "$EO_TMP/unzipped"
dist=$EO_TMP/unzipped/$DIST
need "reading the zip"
# DATA as the zip's own Makefile says (what `make install` installs from it)
# shellcheck disable=SC2016  # $(DATA) is make's
data=$(make -s -C "$dist" PG_CONFIG="$PG_CONFIG" --eval 'print-data: ; @echo $(DATA)' print-data)
for f in META.json Makefile eo.control $data src/eo.c; do
    if [ -f "$dist/$f" ]; then ok "the zip has $f"; else not_ok "the zip lacks $f"; fi
done
check "the zip's META.json is valid, its files there" \
    "$PY" test/tools/pgxn_meta.py --dist-root "$dist" "$dist/META.json"
leftovers=$(unzip -Z1 "$DIST.zip" | grep -E '\.(o|so|bc)$|/(results|tmp_check|output_iso)/|^[^/]*/eo_nats$' || true)
if [ -z "$leftovers" ]; then ok "no build products in the zip"; else not_ok "build products in the zip: $leftovers"; fi
need "pgxn install"

log "pgxn install $REPO_ROOT/$DIST.zip (output in $EO_TMP/pgxn-install.log)"
pkglibdir=$("$PG_CONFIG" --pkglibdir)
extdir=$("$PG_CONFIG" --sharedir)/extension
touch "$EO_TMP/before-install"
if pgxn install --yes --pg_config "$PG_CONFIG" "$REPO_ROOT/$DIST.zip" >"$EO_TMP/pgxn-install.log" 2>&1; then
    ok "pgxn install $DIST.zip"
else
    not_ok "pgxn install $DIST.zip"; tail -n 30 "$EO_TMP/pgxn-install.log" | sed 's/^/    /'
fi
for f in "$pkglibdir/eo.so" eo.control $data; do
    case $f in /*) ;; *) f=$extdir/$f ;; esac
    if [ -n "$(find "$f" -newer "$EO_TMP/before-install" 2>/dev/null)" ]; then
        ok "installed by pgxn: $f"
    else
        not_ok "not installed by pgxn: $f"
    fi
done
check "the installed eo.control is the zip's" cmp "$dist/eo.control" "$extdir/eo.control"
need "the server"

start_server                 # lib.sh: shared_preload_libraries = 'eo', Unix socket only
check "CREATE EXTENSION eo" run_psql -c 'CREATE EXTENSION eo'
got=$(run_psql -Atc "SELECT extversion FROM pg_extension WHERE extname = 'eo'" 2>&1 || true)
if [ "$got" = "$VERSION" ]; then ok "eo $got is installed in the database"; else not_ok "extversion: $got"; fi
got=$(run_psql -Atc "SELECT status FROM eo_claim('k')" 2>&1 || true)
if [ "$got" = claimed ]; then ok "eo_claim('k') is claimed"; else not_ok "eo_claim('k'): $got"; fi
# the launcher (src/worker.c) starts once recovery is over
for _ in $(seq 30); do
    got=$(run_psql -Atc "SELECT backend_type FROM pg_stat_activity WHERE backend_type = 'eo launcher'" || true)
    [ -z "$got" ] || break
    sleep 1
done
if [ "$got" = "eo launcher" ]; then ok "the eo launcher runs"; else not_ok "no eo launcher in pg_stat_activity"; fi

if [ "$FAILED" -eq 0 ]; then
    echo "PGXN check passed: $DIST.zip"
else
    echo "PGXN check FAILED: $FAILED check(s) failed"
    exit 1
fi
