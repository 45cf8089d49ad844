#!/usr/bin/env bash
# tools/test.sh -- the whole test suite: build, install, then pg_regress, the
# isolation specs, the TAP tests (all as the Makefile defines them) and the
# stress test, against a scratch server.  Ends with "N passed, M failed"
# counting those four groups; exits 1 if any failed.
set -euo pipefail
# shellcheck source=tools/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PASSED=0 FAILED=0 FAILED_NAMES=""

# Value of a Makefile variable, to skip a group the Makefile does not define.
# shellcheck disable=SC2016  # $($*) is for make, not the shell
make_var() {
    make -s --no-print-directory -C "$EO_TMP/src" PG_CONFIG="$PG_CONFIG" \
        --eval 'print-%: ; @echo $($*)' "print-$1"
}

# `make installcheck` runs the groups in turn and stops at the first failure;
# emptying the other groups' variables runs one group at a time, so every
# group runs and gets counted.
installcheck_only() {
    local keep=$1 args=() v
    for v in REGRESS ISOLATION TAP_TESTS; do
        [ "$v" = "$keep" ] || args+=("$v=")
    done
    as_pg make -C "$EO_TMP/src" PG_CONFIG="$PG_CONFIG" installcheck "${args[@]}"
}

run_group() {
    local name=$1; shift
    log "$name"
    if (cd "$EO_TMP/src" && "$@"); then
        PASSED=$((PASSED + 1))
    else
        FAILED=$((FAILED + 1)); FAILED_NAMES+=" $name"
        show_failure_output "$name"
    fi
}

run_makefile_group() {
    local name=$1 var=$2
    if [ -z "$(make_var "$var")" ]; then
        log "$name: skipped, $var is not set in the Makefile"
        return 0
    fi
    run_group "$name" installcheck_only "$var"
}

# What pg_regress, pg_isolation_regress and prove left behind for a group
# (the stress test prints its own findings).
show_failure_output() {
    local f files=()
    case $1 in
        regress) files=("$EO_TMP/src/regression.diffs") ;;
        isolation) files=("$EO_TMP/src/output_iso/regression.diffs") ;;
        tap) files=("$EO_TMP/src"/tmp_check/log/*) ;;
    esac
    for f in "${files[@]}"; do
        [ -s "$f" ] && { log "$f (last 300 lines)"; tail -n 300 "$f"; }
    done
    return 0
}

# The source of every released version (tools/releases names each one's
# commit) under $EO_RELEASED/eo-<version>: put there by tools/matrix.sh
# (.released/), or from git history when this is a clone that has it.
# test/t/111 upgrades from eo-0.1.0 (EO_OLD_SOURCE); test/t/000 checks
# that no released script was edited since.
released_sources() {
    local version commit dir
    export EO_RELEASED=$EO_TMP/released
    while read -r version commit; do
        case $version in ''|'#'*) continue ;; esac
        dir=$EO_RELEASED/eo-$version
        if [ -d "$REPO_ROOT/.released/eo-$version" ]; then
            mkdir -p "$dir" && cp -a "$REPO_ROOT/.released/eo-$version/." "$dir/"
        elif git -C "$REPO_ROOT" cat-file -e "$commit^{commit}" 2>/dev/null; then
            mkdir -p "$dir"
            git -C "$REPO_ROOT" archive "$commit" | tar -C "$dir" -xf -
        else
            log "neither .released/ nor git history with $commit: eo $version is not checked"
        fi
    done <"$REPO_ROOT/tools/releases"
    [ ! -d "$EO_RELEASED/eo-0.1.0" ] || export EO_OLD_SOURCE=$EO_RELEASED/eo-0.1.0
    [ -n "${EO_OLD_SOURCE:-}" ] || log "no source of 0.1.0: the upgrade test is skipped"
}

main() {
    ensure_packages
    # ensure_packages installed nats-server and libnats: the NATS test
    # (test/t/120_nats.pl) must run, not skip
    export EO_REQUIRE_NATS=1
    # ... and python3-psycopg: the Python examples (test/t/041_python_examples.pl)
    # must run, not skip
    export EO_REQUIRE_PYTHON=1
    # ... and pg_auto_failover: the HA test (test/t/130_ha_auto_failover.pl)
    # must run, not skip
    export EO_REQUIRE_AUTO_FAILOVER=1
    build_install
    make_scratch
    copy_repo
    released_sources
    start_server
    run_makefile_group regress REGRESS
    run_makefile_group isolation ISOLATION
    run_makefile_group tap TAP_TESTS
    run_group stress as_pg bash test/stress/run.sh
    # The summary goes last, after anything that explains a failure.
    [ "$FAILED" -eq 0 ] || { show_server_log; log "failed:$FAILED_NAMES"; }
    echo "$PASSED passed, $FAILED failed"
    [ "$FAILED" -eq 0 ]
}

main "$@"
