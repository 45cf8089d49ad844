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
CHROOT_DIR=${EO_CHROOT_DIR:-/var/cache/eo-chroots}
DEFAULT_VERSIONS="15 17 18"
MOUNTS=()          # mount points we made, unmounted in reverse by the trap
SUMMARY=()
ANY_FAILED=0

log() { printf '\n== %s\n' "$*"; }
die() { printf 'matrix: error: %s\n' "$*" >&2; exit 1; }

# The Debian suite that packages a PostgreSQL major version.
suite_for() {
    case $1 in
        15) echo bookworm ;;
        17) echo trixie ;;
        18) echo sid ;;
        16) die "no Debian suite reachable from here packages PostgreSQL 16" ;;
        *) die "unsupported PostgreSQL version: $1 (supported: $DEFAULT_VERSIONS)" ;;
    esac
}

host_codename() {
    # shellcheck disable=SC1091
    (. /etc/os-release && echo "${VERSION_CODENAME:-}")
}

# The Debian mirror the host's apt already uses: the first "deb" source of a
# release suite (not -security, -updates, ...), from deb822 .sources files
# or classic sources.list lines.
debian_mirror() {
    local f uri
    if [ -n "${EO_MIRROR:-}" ]; then echo "$EO_MIRROR"; return 0; fi
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        uri=$(awk '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && suites ~ /(^| )[a-z]+( |$)/ && uris != "")
                    { split(uris, u, " "); print u[1]; found = 1; exit }
                types = uris = suites = ""
            }
            /^[ \t]*$/ { flush(); next }
            /^[ \t]*#/ { next }
            tolower($1) == "types:"  { $1 = ""; types = $0 " " }
            tolower($1) == "uris:"   { $1 = ""; uris = $0 }
            tolower($1) == "suites:" { $1 = ""; suites = $0 " " }
            END { if (!found) flush() }' "$f")
        [ -z "$uri" ] || { echo "$uri"; return 0; }
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        uri=$(sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
              awk '$1 == "deb" && $3 ~ /^[a-z]+$/ { print $2; exit }')
        [ -z "$uri" ] || { echo "$uri"; return 0; }
    done
    die "found no Debian mirror in /etc/apt/sources*; set EO_MIRROR"
}

ensure_host_tools() {
    command -v debootstrap >/dev/null && return 0
    log "installing debootstrap"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y debootstrap
}

# --- mounts ---------------------------------------------------------------

do_mount() {   # do_mount <target> <mount args...>
    local target=$1; shift
    mount "$@" "$target" || die "mount $* $target failed"
    MOUNTS+=("$target")
}

# What PostgreSQL needs in a chroot: /proc, /dev, and a /dev/shm for its
# dynamic shared memory.  Private, so nothing we mount reaches the host's /dev.
mount_chroot() {
    local root=$1
    do_mount "$root/proc" -t proc proc
    do_mount "$root/dev" --bind /dev
    mount --make-private "$root/dev"
    do_mount "$root/dev/shm" -t tmpfs -o mode=1777,nosuid,nodev tmpfs
    do_mount "$root/dev/pts" -t devpts -o newinstance,ptmxmode=0666 devpts
}

umount_all() {
    local i
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
        umount "${MOUNTS[i]}" 2>/dev/null || umount -l "${MOUNTS[i]}" ||
            echo "matrix: could not unmount ${MOUNTS[i]}" >&2
    done
    MOUNTS=()
}

# Anything still mounted at or below a directory (ours or left by a killed
# run), deepest first.
mounts_under() {
    awk -v d="$1" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/mounts | sort -r
}

# Remove a chroot directory: never while anything is mounted in it, and never
# crossing into another file system.
remove_tree() {
    local dir=$1 m
    for m in $(mounts_under "$dir"); do umount "$m" || umount -l "$m"; done
    [ -z "$(mounts_under "$dir")" ] || die "still mounted under $dir; not removing it"
    rm -rf --one-file-system "$dir"
}

on_exit() {
    local rc=$?
    umount_all
    [ -z "${WORK:-}" ] || rm -rf --one-file-system "$WORK"
    exit "$rc"
}

# --- chroots --------------------------------------------------------------

# in_chroot <root> <command...>: with a clean environment, and without the
# chroot's lock (a server the command starts must not hold it).
in_chroot() {
    local root=$1; shift
    chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        DEBIAN_FRONTEND=noninteractive "$@" 9>&-
}

# A chroot of <suite> with PostgreSQL <major> and the build and test tools,
# made once and reused while its ready marker is there.  It is built under
# <dir>.new and renamed when complete, so a failed attempt never looks ready.
make_chroot() {
    local suite=$1 major=$2 dir=$3 new=$3.new mirror start
    if [ -f "$dir/.eo-ready" ] && grep -qx "postgresql-$major" "$dir/.eo-ready" &&
       grep -qx nats "$dir/.eo-ready"; then
        # A chroot made before a package was added to the list below gets
        # it from tools/test.sh (ensure_packages installs what
        # missing_tools names), without being made again.
        echo "reusing the chroot $dir"
        return 0
    fi
    start=$SECONDS
    mirror=$(debian_mirror)
    log "making a $suite chroot in $dir from $mirror"
    [ ! -e "$new" ] || remove_tree "$new"
    [ ! -e "$dir" ] || remove_tree "$dir"
    mkdir -p "$CHROOT_DIR"
    debootstrap --variant=minbase "$suite" "$new" "$mirror" >"$CHROOT_DIR/$suite.debootstrap.log" 2>&1 ||
        { tail -n 30 "$CHROOT_DIR/$suite.debootstrap.log" >&2; die "debootstrap $suite failed"; }
    cp /etc/resolv.conf "$new/etc/resolv.conf" 2>/dev/null || true
    # Packages must not start services in the chroot (the host's servers and
    # ports are shared), and no default cluster is wanted: the tests make
    # their own.
    printf '#!/bin/sh\nexit 101\n' >"$new/usr/sbin/policy-rc.d"
    chmod 755 "$new/usr/sbin/policy-rc.d"
    mount_chroot "$new"
    # A mirror (or snapshot) may serve a suite whose Release file is past its
    # Valid-Until date (sid here): accept it, for this chroot only.
    if ! in_chroot "$new" apt-get -q update; then
        echo "matrix: apt-get update failed; retrying with Acquire::Check-Valid-Until=false"
        echo 'Acquire::Check-Valid-Until "false";' >"$new/etc/apt/apt.conf.d/99eo-valid-until"
        in_chroot "$new" apt-get -q update || die "apt-get update in the $suite chroot failed"
    fi
    in_chroot "$new" apt-get -q install -y --no-install-recommends postgresql-common ||
        die "installing postgresql-common in the $suite chroot failed"
    sed -i 's/^#* *create_main_cluster.*/create_main_cluster = false/' \
        "$new/etc/postgresql-common/createcluster.conf" || die "createcluster.conf not found"
    in_chroot "$new" apt-get -q install -y --no-install-recommends \
        "postgresql-$major" "postgresql-server-dev-$major" make gcc libc6-dev \
        libipc-run-perl perl pkg-config libnats-dev nats-server python3 python3-psycopg python3-psycopg2 \
        "postgresql-$major-auto-failover" pg-auto-failover-cli ||
        die "installing PostgreSQL $major in the $suite chroot failed"
    in_chroot "$new" apt-get -q clean
    umount_all
    printf 'postgresql-%s\nnats\n' "$major" >"$new/.eo-ready"
    mv "$new" "$dir" || die "could not rename $new"
    echo "chroot $dir made in $(fmt_time $((SECONDS - start)))"
}

# --- runs -----------------------------------------------------------------

fmt_time() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# The working tree without git metadata and build or test products.
copy_tree() {
    local dest=$1
    rm -rf --one-file-system "$dest"
    mkdir -p "$dest"
    tar -C "$REPO_ROOT" --exclude=.git --exclude=results --exclude=output_iso \
        --exclude=tmp_check --exclude=log --exclude='*.o' --exclude='*.so' --exclude=./eo_nats \
        --exclude='*.bc' --exclude=.released -cf - . | tar -C "$dest" -xf -
    released_sources "$dest"
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

# Run a command with its output on the terminal and in a log file.  The
# command stays a child of this shell, so on INT or TERM this shell waits for
# it (test.sh then stops its server) before its own trap unmounts anything;
# tee ignores those signals and logs to the end.
logged() {
    local logf=$1 rc=0
    shift
    "$@" > >(trap '' INT TERM; exec tee "$logf" 9>&-) 2>&1 || rc=$?
    wait "$!" 2>/dev/null || true
    return "$rc"
}

# make_chroot in a subshell with its own trap: a failure unmounts what it
# mounted.
make_chroot_cleanly() {
    (trap umount_all EXIT; trap 'exit 130' INT TERM; make_chroot "$@")
}

test_on_host() {
    (cd "$WORK/eo" && EO_PG_MAJOR=$1 COPT=-Werror bash tools/test.sh)
}

test_in_chroot() {
    in_chroot "$2" env EO_PG_MAJOR="$1" COPT=-Werror bash /root/eo/tools/test.sh
}

# One chroot, one run at a time (a second run would unmount under the
# first), locked on file descriptor 9.
lock_chroot() {
    mkdir -p "$CHROOT_DIR"
    exec 9>"$CHROOT_DIR/$1.lock"
    flock -n 9 || {
        echo "waiting for another run that uses the $1 chroot"
        flock 9
    }
}

unlock_chroot() {
    exec 9>&-
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
    local v versions
    [ "$(id -u)" -eq 0 ] || die "run as root (debootstrap, chroot and mount need it)"
    versions=${*:-$DEFAULT_VERSIONS}
    for v in $versions; do suite_for "$v" >/dev/null; done
    trap on_exit EXIT
    trap 'exit 130' INT TERM
    ensure_host_tools
    LOGS=${EO_MATRIX_LOGS:-$(mktemp -d /tmp/eo-matrix.XXXXXX)}
    mkdir -p "$LOGS"
    WORK=$(mktemp -d /tmp/eo-matrix-src.XXXXXX)
    chmod 755 "$WORK"   # test.sh runs initdb and pg_ctl from in there as postgres
    local total=$SECONDS
    for v in $versions; do run_version "$v"; done
    log "matrix summary (logs in $LOGS, $(fmt_time $((SECONDS - total))) in all)"
    printf '%s\n' "${SUMMARY[@]}"
    [ "$ANY_FAILED" -eq 0 ] || { echo "matrix: FAILED"; exit 1; }
    echo "matrix: all passed"
}

main "$@"
