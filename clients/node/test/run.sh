#!/bin/sh
# clients/node/test/run.sh: builds the Node client and runs its tests against
# the PostgreSQL named by PGHOST, PGPORT and PGUSER (a superuser; eo must be
# installed in the server, shared_preload_libraries not needed). Each test
# file makes a database of its own and drops it. Exits non-zero on failure.
set -eu
cd "$(dirname "$0")/.."
[ -d node_modules ] || npm ci --no-audit --no-fund
npm run --silent build
exec node --test --test-concurrency=2 test/*.test.js
