#!/usr/bin/env bash
# test/packages/build.sh <source dir> -- build eo's Debian packages from a
# copy of the source tree, as root, where they are built (the host for
# bookworm, the chroot tools/matrix.sh made for trixie and sid): install
# the build dependencies debian/control names, expand debian/control for
# the PostgreSQL versions this suite supports, run dpkg-buildpackage (whose
# test step runs the regression suite with eo preloaded), then lintian.
# Run by tools/packages.sh.
set -euo pipefail
src=$1
cd "$src"
export DEBIAN_FRONTEND=noninteractive

echo "== build dependencies"
apt-get -q update >/dev/null
# postgresql-server-dev-all brings pg_buildext (in postgresql-common-dev
# since trixie) and the debhelper sequence: debian/control is written by it
apt-get -q install -y --no-install-recommends dpkg-dev lintian postgresql-server-dev-all >/dev/null
pg_buildext updatecontrol
apt-get -q build-dep -y --no-install-recommends . >/dev/null

echo "== dpkg-buildpackage (debian/control: $(grep -c '^Package:' debian/control) packages)"
grep '^Package:' debian/control
dpkg-buildpackage -us -uc -b

echo "== lintian"
# Errors and warnings fail the build; each tag left is explained in an
# override (debian/*.lintian-overrides) or in docs/packaging.md.
changes=$(ls ../eo_*_"$(dpkg --print-architecture)".changes)
lintian --info --fail-on error,warning "$changes"
echo "lintian: no error or warning"

echo "== contents"
for deb in ../*.deb; do
    case $deb in *-dbgsym_*) continue ;; esac
    echo "-- $(basename "$deb")"
    dpkg-deb --field "$deb" Depends | sed 's/^/   Depends: /'
    dpkg-deb --contents "$deb" | awk '$6 !~ /\/$/ { print "   " $6 }'
done
