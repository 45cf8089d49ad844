# eo: built with PGXS.  `make installcheck` runs pg_regress, the isolation
# specs and the TAP tests against the server found through PGHOST/PGPORT.

EXTENSION = eo
MODULE_big = eo
OBJS = \
	src/eo.o \
	src/settings.o \
	src/sqlstates.o \
	src/tables.o \
	src/validate.o \
	src/objects.o \
	src/locks.o \
	src/subxact.o \
	src/generations.o \
	src/keystore.o \
	src/tombstones.o \
	src/pending.o \
	src/scope.o \
	src/outcome.o \
	src/fencing.o \
	src/claim.o \
	src/redrive.o \
	src/key_list.o \
	src/maintain.o \
	src/bgworker.o \
	src/worker.o \
	src/stats.o \
	src/outbox_doorbell.o \
	src/outbox_ddl.o \
	src/outbox_cluster.o \
	src/outbox_registry.o \
	src/outbox_emit.o \
	src/outbox_partitions.o \
	src/outbox_relay_partitions.o \
	src/outbox_slots.o \
	src/outbox_relay.o \
	src/outbox_relay_fetch.o \
	src/outbox_relay_status.o \
	src/outbox_standbys.o \
	src/outbox_metrics.o \
	src/outbox_create.o \
	src/session_pin.o \
	src/statement_names.o \
	src/outbox_relay_headers.o

# Install scripts: the released 0.1.0 script (never edited) and one update
# script per later version.  CREATE EXTENSION runs 0.1.0 and then every
# update in turn, so a fresh install and an upgrade end in the same state.
DATA = eo--0.1.0.sql eo--0.1.0--0.2.0.sql eo--0.2.0--0.3.0.sql eo--0.3.0--0.4.0.sql

PGFILEDESC = "eo - effectively-once processing"

REGRESS = test_setup claim fingerprint lease fail_retry status privileges bad_input maintain \
	outbox outbox_privileges outbox_bad_input outbox_retention relay_bounds partitions plans key_indexes deferred stats http scopes outcomes tombstones recovery redrive \
	security traps list_keys comments session_pin statement_names relay_headers
REGRESS_OPTS = --load-extension=eo

ISOLATION = claim-commit claim-rollback claim-scopes claim-rejected scope-recreated tombstone-retire claim-deferred claim-isolation-levels \
	claim-narrow-window lease-takeover-late-complete claim-twice-same-xact reclaim-late-complete \
	outbox-late-commit outbox-relay-own-xact outbox-relay-moved outbox-relay-group-reused outbox-relay-blocked outbox-relay-new-partition outbox-two-relays outbox-ack-expiry outbox-notify \
	outbox-retention-race outbox-drop-during-maintain partition-boundary partition-drop status-prepared \
	status-snapshot redrive-race generation-read-drop
ISOLATION_OPTS = --inputdir=test/isolation --load-extension=eo

TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

PG_CPPFLAGS = -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare \
	-Wno-missing-field-initializers -Wmissing-prototypes

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# Every object depends on the shared headers (PGXS does not track them):
# a struct that changes must not be read by an object built before.
$(OBJS): src/eo.h src/compat.h src/outbox.h

# eo_nats: the forwarder of a consumer group to NATS JetStream and its
# consumer side (src/nats/).  A client program, not part of the server: it
# links libpq and the NATS C client (Debian's libnats-dev), and is built
# and installed next to pg_ctl whenever libnats is there.
NATS_OBJS = src/nats/eo_nats.o src/nats/cli.o src/nats/log.o src/nats/process.o \
	src/nats/json.o src/nats/errors.o src/nats/natsconn.o src/nats/pgconn.o \
	src/nats/natsmsg.o src/nats/forward.o src/nats/apply.o src/nats/admin.o \
	src/nats/pgpipe.o src/nats/linger.o
# HAVE_LIBNATS=no (on the command line or in the environment) builds the
# extension alone, as debian/rules does for each PostgreSQL version.
ifeq ($(origin HAVE_LIBNATS),undefined)
HAVE_LIBNATS := $(shell pkg-config --exists libnats 2>/dev/null && echo yes)
endif
EXTRA_CLEAN = eo_nats $(NATS_OBJS)

ifeq ($(HAVE_LIBNATS),yes)
all: eo_nats
install: install-eo_nats
endif

# eo_nats --version: the version of eo it ships with (eo.control's)
EO_VERSION := $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" eo.control)
$(NATS_OBJS): CPPFLAGS = $(PG_CPPFLAGS) -I$(shell $(PG_CONFIG) --includedir) $(shell pkg-config --cflags libnats) \
	-DEO_VERSION='"$(EO_VERSION)"'

$(NATS_OBJS): src/nats/eo_nats.h

eo_nats: $(NATS_OBJS)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(NATS_OBJS) -L$(shell $(PG_CONFIG) --libdir) -lpq \
		$(shell pkg-config --libs libnats) -lpthread

install-eo_nats: eo_nats
	$(MKDIR_P) '$(DESTDIR)$(bindir)'
	$(INSTALL_PROGRAM) eo_nats '$(DESTDIR)$(bindir)/eo_nats'

.PHONY: install-eo_nats

# make dist: eo-VERSION.zip in this directory, the distribution PGXN takes
# (issue 37): one top directory eo-VERSION/ holding the tree, its META.json
# at the top, tests included (`make installcheck` runs from it).  In a git
# checkout it is HEAD as committed (git archive); a tree without .git, such
# as the copies tools/matrix.sh tests, is zipped as it stands, less its
# build products.  Either way .gitattributes' export-ignore entries stay
# out.  tools/pgxn-check.sh checks the zip and installs it with pgxnclient.
DIST = eo-$(EO_VERSION)
DIST_BUILT = '*.o' '*.so' '*.bc' ./eo_nats ./results ./tmp_check ./output_iso ./log \
	./.released ./regression.diffs ./regression.out ./bench/results './eo-*.zip'

dist:
	rm -f $(DIST).zip
	@if [ -e .git ]; then \
		git status --porcelain --untracked-files=no | grep -q . && \
			echo "note: $(DIST).zip holds HEAD; uncommitted changes are not in it"; \
		git archive --format=zip --prefix=$(DIST)/ -o $(DIST).zip HEAD; \
	else \
		command -v zip >/dev/null || { echo "make dist: outside git it needs zip (apt-get install zip)" >&2; exit 1; }; \
		tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && mkdir "$$tmp/$(DIST)" && \
		tar -cf - $(addprefix --exclude=,$(DIST_BUILT)) \
			$$(sed -n 's/^\([^#[:space:]][^[:space:]]*\)[[:space:]].*export-ignore.*/--exclude=\1/p' .gitattributes) . | \
			tar -C "$$tmp/$(DIST)" -xf - && \
		(cd "$$tmp" && zip -qrX - $(DIST)) > $(DIST).zip; \
	fi
	@echo "made $(DIST).zip"

.PHONY: dist
