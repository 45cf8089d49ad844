# shellcheck shell=bash
# tools/chroot.sh -- Debian chroots for tools/matrix.sh (the test suite per
# PostgreSQL major) and tools/packages.sh (the Debian packages, built and
# installed into clean chroots).  Sourced, not run; callers have done
# `set -euo pipefail` and run as root.  EO_CHROOT_DIR: where the chroots
# live (default /var/cache/eo-chroots).
#
# Each major version is where Debian packages it: 15 on bookworm, 17 on
# trixie, 18 on sid.  A suite's first debootstrap is kept as a tarball
# ($CHROOT_DIR/<suite>.base.tar), so that a clean chroot of it costs an
# unpacking, not a download.

CHROOT_DIR=${EO_CHROOT_DIR:-/var/cache/eo-chroots}
DEFAULT_VERSIONS="15 17 18"   # the majors a run covers when given none
MOUNTS=()          # mount points we made, unmounted in reverse by umount_all
SUMMARY=()         # one line per version, printed by finish_run
ANY_FAILED=0

log() { printf '\n== %s\n' "$*"; }
die() { printf '%s: error: %s\n' "${EO_TOOL:-chroot}" "$*" >&2; exit 1; }

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
            echo "${EO_TOOL:-chroot}: could not unmount ${MOUNTS[i]}" >&2
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

# The working tree at <dest> without git metadata and build or test
# products (uncommitted changes included).
copy_source() {
    local dest=$1
    rm -rf --one-file-system "$dest"
    mkdir -p "$dest"
    tar -C "$REPO_ROOT" --exclude=.git --exclude=results --exclude=output_iso \
        --exclude=tmp_check --exclude=log --exclude='*.o' --exclude='*.so' --exclude=./eo_nats \
        --exclude='*.bc' --exclude=.released --exclude='./eo-*.zip' -cf - . | tar -C "$dest" -xf -
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

# A minbase debootstrap of <suite> in <dir>: unpacked from the suite's base
# tarball when an earlier run left one, else downloaded and the tarball kept.
bootstrap() {
    local suite=$1 dir=$2 base=$CHROOT_DIR/$1.base.tar mirror
    mkdir -p "$dir"
    if [ -f "$base" ]; then
        tar -C "$dir" -xf "$base" || die "unpacking $base failed"
        return 0
    fi
    mirror=$(debian_mirror)
    log "debootstrap of $suite from $mirror"
    debootstrap --variant=minbase "$suite" "$dir" "$mirror" >"$CHROOT_DIR/$suite.debootstrap.log" 2>&1 ||
        { tail -n 30 "$CHROOT_DIR/$suite.debootstrap.log" >&2; die "debootstrap $suite failed"; }
    { tar -C "$dir" -cf "$base.new" . && mv "$base.new" "$base"; } || die "could not keep $base"
}

# A chroot of the host's own suite gets the host's apt sources, with their
# security and point updates: packages built on the host depend on the
# server versions the host has.
copy_host_sources() {
    local dir=$1 f
    : >"$dir/etc/apt/sources.list"
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] && cp "$f" "$dir$f"
    done
    return 0
}

# Bootstrap <suite> into <dir> and mount it (umount_all unmounts), ready
# for apt: packages must not start services in it (the host's servers and
# ports are shared), and PostgreSQL's packages make no default cluster (the
# tests make their own).
bootstrap_mounted() {
    local suite=$1 dir=$2
    bootstrap "$suite" "$dir"
    cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
    printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
    chmod 755 "$dir/usr/sbin/policy-rc.d"
    [ "$suite" != "$(host_codename)" ] || copy_host_sources "$dir"
    mount_chroot "$dir"
    # A mirror (or snapshot) may serve a suite whose Release file is past its
    # Valid-Until date (sid here): accept it, for this chroot only.
    if ! in_chroot "$dir" apt-get -q update; then
        echo "${EO_TOOL:-chroot}: apt-get update failed; retrying with Acquire::Check-Valid-Until=false"
        echo 'Acquire::Check-Valid-Until "false";' >"$dir/etc/apt/apt.conf.d/99eo-valid-until"
        in_chroot "$dir" apt-get -q update || die "apt-get update in the $suite chroot failed"
    fi
    in_chroot "$dir" apt-get -q install -y --no-install-recommends postgresql-common ||
        die "installing postgresql-common in the $suite chroot failed"
    sed -i 's/^#* *create_main_cluster.*/create_main_cluster = false/' \
        "$dir/etc/postgresql-common/createcluster.conf" || die "createcluster.conf not found"
}

# A chroot of <suite> with PostgreSQL <major> and the build and test tools,
# made once and reused while its ready marker is there.  It is built under
# <dir>.new and renamed when complete, so a failed attempt never looks ready.
make_chroot() {
    local suite=$1 major=$2 dir=$3 new=$3.new start
    if [ -f "$dir/.eo-ready" ] && grep -qx "postgresql-$major" "$dir/.eo-ready" &&
       grep -qx nats "$dir/.eo-ready"; then
        # A chroot made before a package was added to the list below gets
        # it from tools/test.sh (ensure_packages installs what
        # missing_tools names), without being made again.
        echo "reusing the chroot $dir"
        return 0
    fi
    start=$SECONDS
    log "making a $suite chroot in $dir"
    [ ! -e "$new" ] || remove_tree "$new"
    [ ! -e "$dir" ] || remove_tree "$dir"
    mkdir -p "$CHROOT_DIR"
    bootstrap_mounted "$suite" "$new"
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

fmt_time() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

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


# The start of a run over major versions <versions...> (default
# $DEFAULT_VERSIONS): as root, every version known, on_exit as the trap;
# prints the versions to run.
start_run() {
    local v versions
    [ "$(id -u)" -eq 0 ] || die "run as root (debootstrap, chroot and mount need it)"
    versions=${*:-$DEFAULT_VERSIONS}
    for v in $versions; do suite_for "$v" >/dev/null; done
    ensure_host_tools >&2
    echo "$versions"
}

# Its end: one line per version (SUMMARY), and the exit status.
finish_run() {   # finish_run <where the logs are...>
    log "$EO_TOOL summary ($*)"
    printf '%s\n' "${SUMMARY[@]}"
    [ "$ANY_FAILED" -eq 0 ] || { echo "$EO_TOOL: FAILED"; exit 1; }
    echo "$EO_TOOL: all passed"
}
