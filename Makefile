# eo: built with PGXS.  `make installcheck` runs pg_regress, the isolation
# specs and the TAP tests against the server found through PGHOST/PGPORT.

EXTENSION = eo
MODULE_big = eo
OBJS = \
	src/eo.o \
	src/validate.o \
	src/objects.o \
	src/locks.o \
	src/generations.o \
	src/keystore.o \
	src/tombstones.o \
	src/pending.o \
	src/scope.o \
	src/outcome.o \
	src/claim.o \
	src/maintain.o \
	src/worker.o \
	src/doorbell.o \
	src/stats.o \
	src/ddl.o \
	src/cluster.o \
	src/outbox.o \
	src/emit.o \
	src/outbox_partitions.o \
	src/relay.o \
	src/outbox_metrics.o

# Install scripts: the released 0.1.0 script (never edited) and one update
# script per later version.  CREATE EXTENSION runs 0.1.0 and then every
# update in turn, so a fresh install and an upgrade end in the same state.
DATA = eo--0.1.0.sql eo--0.1.0--0.2.0.sql

PGFILEDESC = "eo - effectively-once processing"

REGRESS = test_setup claim fingerprint lease fail_retry status privileges bad_input maintain \
	outbox outbox_privileges outbox_bad_input outbox_retention partitions plans deferred stats http scopes outcomes tombstones \
	security
REGRESS_OPTS = --load-extension=eo

ISOLATION = claim-commit claim-rollback claim-scopes claim-rejected scope-recreated tombstone-retire claim-deferred claim-isolation-levels \
	claim-narrow-window lease-takeover-late-complete claim-twice-same-xact reclaim-late-complete \
	outbox-late-commit outbox-two-relays outbox-ack-expiry outbox-notify \
	outbox-retention-race outbox-drop-during-maintain partition-boundary partition-drop
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
