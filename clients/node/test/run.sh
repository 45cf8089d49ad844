#!/bin/sh
# clients/node/test/run.sh: builds the Node client and runs its tests against
# the PostgreSQL named by PGHOST, PGPORT and PGUSER (a superuser; eo must be
# installed in that server). Each test file makes a database of its own and
# drops it. Exits non-zero on failure.
#
# dist/ is committed (npm 11 does not run a directory dependency's build
# scripts unless approved, so `npm install ./clients/node` must find it
# built): the build here must leave it as committed.
set -eu
cd "$(dirname "$0")/.."
[ -d node_modules ] || npm ci --no-audit --no-fund
npm run --silent build
if git rev-parse --git-dir >/dev/null 2>&1 && ! git diff --quiet -- dist; then
    echo "clients/node/dist differs from a build of src: run npm run build and commit dist" >&2
    git diff --stat -- dist >&2
    exit 1
fi
exec node --test --test-concurrency=2 test/*.test.js
