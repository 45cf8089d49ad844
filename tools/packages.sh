#!/usr/bin/env bash
# tools/packages.sh -- eo's Debian packages for every supported PostgreSQL
# major: built where Debian packages that major (15 on the host's bookworm,
# 17 and 18 in the chroots tools/matrix.sh makes), checked with lintian,
# then installed with apt into a clean chroot of the same suite, which has
# PostgreSQL's server packages and nothing else of eo, and tested there
# (test/packages/check.sh).
#
#   bash tools/packages.sh          # 15, 17 and 18
#   bash tools/packages.sh 17       # one version (or several)
#
# As root.  The packages are left in $EO_PACKAGES_OUT (default
# /var/cache/eo-packages)/<suite>/; the logs in $EO_PACKAGES_LOGS (default a new
# /tmp/eo-packages-logs.XXXXXX).  Ends with one line per version and exits
# non-zero if any failed.  Environment: EO_CHROOT_DIR, EO_MIRROR and
# EO_MATRIX_CHROOT as for tools/matrix.sh.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# root's alone: the packages left here are installed as root
OUT=${EO_PACKAGES_OUT:-/var/cache/eo-packages}
EO_TOOL=packages
# shellcheck source=tools/chroot.sh
. "$REPO_ROOT/tools/chroot.sh"

# The upstream version, and the Debian version of the packages.
upstream_version() { sed -n "s/^default_version = '\(.*\)'/\1/p" "$REPO_ROOT/eo.control"; }
debian_version() { sed -n '1s/^eo (\([^)]*\)).*/\1/p' "$REPO_ROOT/debian/changelog"; }

on_host() {   # on_host <suite>: the host's own suite builds there
    [ "$1" = "$(host_codename)" ] && [ "${EO_MATRIX_CHROOT:-0}" != 1 ]
}

# Build the packages of <major> in <root> (/ for the host), from a copy of
# the tree in a new directory of <root>'s /tmp, and put the .deb files in
# $OUT/<suite>.  Every directory root builds in or installs from is made by
# root under a name nobody can know beforehand (mktemp): a local user who
# made it first could swap the tree or the packages root then uses.
build_in() {
    local major=$1 suite=$2 root=$3 build src
    # (called where set -e does not hold: every failure returns by hand)
    build=$(mktemp -d "${root%/}/tmp/eo-package-build.XXXXXX") || return 1
    chmod 755 "$build"   # the build's test cluster runs as postgres
    src=${build#"${root%/}"}/eo-$(upstream_version)
    copy_source "$build/eo-$(upstream_version)" || return 1
    chmod -R a+rX "$build"
    if [ "$root" = / ]; then
        bash "$src/test/packages/build.sh" "$src" || return 1
    else
        in_chroot "$root" bash "$src/test/packages/build.sh" "$src" || return 1
    fi
    rm -rf --one-file-system "${OUT:?}/$suite"
    mkdir -p "$OUT/$suite"
    cp "$build/"*.deb "$OUT/$suite/" || return 1
    rm -rf --one-file-system "$build"
}

build_version() {
    local major=$1 suite=$2 dir
    if on_host "$suite"; then
        build_in "$major" "$suite" /
        return
    fi
    dir=$CHROOT_DIR/$suite
    lock_chroot "$suite"
    make_chroot_cleanly "$suite" "$major" "$dir" || { unlock_chroot; return 1; }
    mount_chroot "$dir"
    local rc=0
    build_in "$major" "$suite" "$dir" || rc=$?
    umount_all
    unlock_chroot
    return "$rc"
}

# A clean chroot of <suite>: PostgreSQL's server, systemd and man-db (for
# systemd-analyze verify, which also looks up the units' man: page) and
# nats-server (for the units' test), then eo's packages with apt, then the
# checks.  Removed afterwards.
test_version() {
    local major=$1 suite=$2 rc=0
    local dir=$CHROOT_DIR/$suite-clean
    lock_chroot "$suite-clean"
    [ ! -e "$dir" ] || remove_tree "$dir"
    (
        trap umount_all EXIT
        bootstrap_mounted "$suite" "$dir"
        in_chroot "$dir" apt-get -q install -y --no-install-recommends \
            "postgresql-$major" systemd man-db nats-server >/dev/null ||
            die "installing PostgreSQL $major in the clean $suite chroot failed"
        # under the chroot's /root (0700), where no other user reaches
        mkdir -p "$dir/root/eo-debs" "$dir/root/eo-package-test"
        find "$OUT/$suite" -name '*.deb' ! -name '*-dbgsym_*' -exec cp {} "$dir/root/eo-debs/" \;
        echo "installing: $(cd "$dir/root/eo-debs" && echo *.deb)"
        # shellcheck disable=SC2016  # expanded in the chroot
        in_chroot "$dir" sh -c 'apt-get -q install -y /root/eo-debs/*.deb' ||
            die "apt install of the packages failed"
        cp "$REPO_ROOT"/test/packages/check.sh "$REPO_ROOT"/test/packages/service.sh \
            "$dir/root/eo-package-test/"
        in_chroot "$dir" bash /root/eo-package-test/check.sh "$major" "$(debian_version)"
    ) || rc=$?
    remove_tree "$dir"
    unlock_chroot
    return "$rc"
}

run_version() {
    local major=$1 suite logf start status=passed result
    suite=$(suite_for "$major")
    logf=$LOGS/pg$major.log
    start=$SECONDS
    log "PostgreSQL $major: packages built on $suite"
    if ! logged "$logf.build" build_version "$major" "$suite"; then
        status=FAILED; result="build (see $logf.build)"
    else
        log "PostgreSQL $major: packages installed into a clean $suite chroot"
        if logged "$logf" test_version "$major" "$suite"; then
            result=$(grep -E '^all [0-9]+ checks passed$' "$logf" | tail -n 1)
        else
            status=FAILED
            result=$(grep -E '^[0-9]+ of [0-9]+ checks failed$' "$logf" | tail -n 1 || true)
            result="${result:-the clean chroot test failed} (see $logf)"
        fi
    fi
    SUMMARY+=("$(printf 'PostgreSQL %-3s %-7s %s, %s' "$major" "$status" "$result" \
        "$(fmt_time $((SECONDS - start)))")")
    [ "$status" = passed ] || ANY_FAILED=1
}

main() {
    local v versions total=$SECONDS
    versions=$(start_run "$@")
    trap umount_all EXIT
    trap 'exit 130' INT TERM
    mkdir -p "$OUT"
    if [ "$(stat -c %u "$OUT")" != 0 ] || [ -n "$(find "$OUT" -maxdepth 0 -perm /022)" ]; then
        die "$OUT is not root's alone (another user could swap the packages root installs)"
    fi
    LOGS=${EO_PACKAGES_LOGS:-$(mktemp -d /tmp/eo-packages-logs.XXXXXX)}
    mkdir -p "$LOGS"
    for v in $versions; do run_version "$v"; done
    finish_run "logs in $LOGS, packages in $OUT, $(fmt_time $((SECONDS - total))) in all"
}

main "$@"
