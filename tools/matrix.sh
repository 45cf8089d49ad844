#!/usr/bin/env bash
# tools/matrix.sh -- the whole test suite (tools/test.sh) on every PostgreSQL
# major version eo supports, built with -Werror.
#
#   bash tools/matrix.sh          # 15, 17 and 18
#   bash tools/matrix.sh 17       # one version (or several: 15 18)
#
# Each version runs where Debian packages it: 15 on bookworm, 17 on trixie,
# 18 on sid.  A version whose suite is the host's own runs on the host; the
# others run in a chroot made with debootstrap from the Debian mirror the
# host's apt sources name, kept in $EO_CHROOT_DIR (default
# /var/cache/eo-chroots/<suite>) and reused by the next run.  No Debian suite
# reachable here packages PostgreSQL 16, so 16 is not in the matrix.
#
# As root (it installs debootstrap, makes chroots and mounts /proc and /dev
# in them).  Versions run one after the other; each gets a fresh copy of the
# working tree (uncommitted changes included) and a clean build.  Ends with
# one line per version and exits non-zero if any version failed.
#
# Environment:
#   EO_CHROOT_DIR     where the chroots live (default /var/cache/eo-chroots)
#   EO_MATRIX_CHROOT  1: run every version in a chroot, the host's too (leaves
#                     the host's PostgreSQL installation alone)
#   EO_MIRROR         Debian mirror URI (default: read from the apt sources)
#   EO_MATRIX_LOGS    directory for the per-version logs (default: a new
#                     /tmp/eo-matrix.XXXXXX, kept)
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
EO_TOOL=matrix
# shellcheck source=tools/chroot.sh
. "$REPO_ROOT/tools/chroot.sh"

on_exit() {
    local rc=$?
    umount_all
    [ -z "${WORK:-}" ] || rm -rf --one-file-system "$WORK"
    exit "$rc"
}

# --- runs -----------------------------------------------------------------

# The working tree, and the sources of the released versions.
copy_tree() {
    copy_source "$1"
    released_sources "$1"
}

# The copy has no git history: put the source of each released version
# there (.released/eo-<version>), for the upgrade test (tools/test.sh).
released_sources() {
    local dest=$1 version commit
    while read -r version commit; do
        case $version in ''|'#'*) continue ;; esac
        git -C "$REPO_ROOT" cat-file -e "$commit^{commit}" 2>/dev/null || continue
        mkdir -p "$dest/.released/eo-$version"
        git -C "$REPO_ROOT" archive "$commit" | tar -C "$dest/.released/eo-$version" -xf -
    done <"$REPO_ROOT/tools/releases"
}

test_on_host() {
    (cd "$WORK/eo" && EO_PG_MAJOR=$1 COPT=-Werror bash tools/test.sh)
}

test_in_chroot() {
    in_chroot "$2" env EO_PG_MAJOR="$1" COPT=-Werror bash /root/eo/tools/test.sh
}

add_summary() {   # add_summary <major> <status> <result> <where>
    SUMMARY+=("$(printf 'PostgreSQL %-3s %-7s %-36s %s' "$1" "$2" "$3" "$4")")
    [ "$2" = passed ] || ANY_FAILED=1
}

run_version() {
    local major=$1 suite where dir logf start rc=0 result status made=""
    suite=$(suite_for "$major")
    logf=$LOGS/pg$major.log
    if [ "$suite" = "$(host_codename)" ] && [ "${EO_MATRIX_CHROOT:-0}" != 1 ]; then
        where="host ($suite)"
        log "PostgreSQL $major on the host ($suite)"
        start=$SECONDS
        copy_tree "$WORK/eo"
        logged "$logf" test_on_host "$major" || rc=$?
    else
        dir=$CHROOT_DIR/$suite
        where="chroot $dir"
        log "PostgreSQL $major in a $suite chroot"
        lock_chroot "$suite"
        if ! logged "$logf.chroot" make_chroot_cleanly "$suite" "$major" "$dir"; then
            unlock_chroot
            add_summary "$major" FAILED "could not make the $suite chroot" "see $logf.chroot"
            return 0
        fi
        made=$(sed -n 's/^chroot .* made in //p' "$logf.chroot")
        start=$SECONDS
        copy_tree "$dir/root/eo"
        # The chroot's /tmp holds only what earlier (perhaps killed) runs left.
        find "$dir/tmp" -xdev -mindepth 1 -delete
        mount_chroot "$dir"
        logged "$logf" test_in_chroot "$major" "$dir" || rc=$?
        umount_all
        unlock_chroot
    fi
    result=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$logf" | tail -n 1 || true)
    [ -n "$result" ] || result=$(grep -E '^error: ' "$logf" | tail -n 1 || true)
    [ -n "$result" ] || result="exit status $rc"
    status=passed
    [ "$rc" -eq 0 ] || status=FAILED
    # -Werror covers gcc; the LLVM bitcode that PGXS also builds with clang
    # does not get COPT, so its warnings are caught here.
    if grep -qE '^[^ :]+:[0-9]+:[0-9]+: warning:' "$logf"; then
        status=FAILED; result="compiler warnings; $result"
    fi
    add_summary "$major" "$status" "$result, $(fmt_time $((SECONDS - start)))" \
        "$where${made:+, chroot made in $made}"
}

main() {
    local v versions total=$SECONDS
    versions=$(start_run "$@")
    trap on_exit EXIT
    trap 'exit 130' INT TERM
    LOGS=${EO_MATRIX_LOGS:-$(mktemp -d /tmp/eo-matrix.XXXXXX)}
    mkdir -p "$LOGS"
    WORK=$(mktemp -d /tmp/eo-matrix-src.XXXXXX)
    chmod 755 "$WORK"   # test.sh runs initdb and pg_ctl from in there as postgres
    for v in $versions; do run_version "$v"; done
    finish_run "logs in $LOGS, $(fmt_time $((SECONDS - total))) in all"
}

main "$@"
