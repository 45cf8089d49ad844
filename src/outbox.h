/*-------------------------------------------------------------------------
 * outbox.h
 *	  Declarations shared by the outbox files, src/outbox_*.c, listed
 *	  here from the bottom up: each calls only those above it in this
 *	  header (and eo.h).
 *
 * outbox_registry.c owns the registry (eo_internal.eo_outboxes) and a
 * per-backend cache of one entry per outbox, each verified to be the
 * table eo made (see objects.c for why); the others ask it for an
 * outbox's entry.  None of them calls claim.c or keystore.c.
 *-------------------------------------------------------------------------
 */
#ifndef EO_OUTBOX_H
#define EO_OUTBOX_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "storage/lockdefs.h"
#include "utils/acl.h"
#include "utils/jsonb.h"
#include "utils/uuid.h"

/* Outbox modes, as stored in eo_outboxes.mode. */
#define EO_OUTBOX_TABLE 't'
#define EO_OUTBOX_WAL	'w'

/* Limits, documented in the README. */
#define EO_OUTBOX_MAX_NAME	40		/* leaves room for partition suffixes */
#define EO_OUTBOX_MAX_SLOTS 1024
#define EO_GROUP_MAX_NAME	63
#define EO_RELAY_MAX_EVENTS 100000

/* SQLSTATEs of the relay's refusals (same codes as the claim API). */
#define EO_ERRCODE_RELAY_STALE		ERRCODE_OBJECT_IN_USE	/* 55006 */
#define EO_ERRCODE_RELAY_NOT_HELD	ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE	/* 55000 */

/*
 * What this backend's last fetch of one consumer group saw
 * (outbox_relay_fetch.c): eo_relay_wait sleeps on it.  A few groups per
 * outbox, so that a session serving several groups of it waits on each
 * one's own; a group not among them gets "fetch now".
 */
#define EO_BELLS 4

typedef struct EoBell
{
	int32		group_id;		/* 0: unused (group ids start at 1) */
	bool		known;			/* that fetch handed out all it could */
	bool		blocked;		/* ... it passed over slots it could not lock */
	uint64		seen;			/* the doorbell before that fetch */
	uint64		standby_lsn;	/* held back until standbys flush this; 0: not */
	uint64		order;			/* when, in bell_clock ticks (0: unused) */
} EoBell;

/* One outbox, as cached by this backend. */
typedef struct EoOutbox
{
	char		name[NAMEDATALEN];	/* hash key */
	bool		valid;
	char		mode;
	int32		slots;
	Oid			relid;			/* the outbox table, as recorded */
	Oid			seqid;			/* the sequence of its seq column (table mode) */
	Oid			owner;			/* the role that created it */
	Interval	every;			/* partition_interval */
	int32		premake;
	Interval	retention;
	char	   *qualname;		/* schema.table, quoted, as named now (messages) */
	Oid			view;			/* eo_internal.<name>_v: statements name this */
	char	   *view_name;		/* ... eo_internal."<name>_v", quoted */
	char	   *wal_prefix;		/* logical message prefix (WAL mode) */
	SPIPlanPtr	emit_plan;		/* INSERT of one event, run as the caller */
	SPIPlanPtr	page_plan;		/* one page of a batch, run as the caller */
	SPIPlanPtr	old_plan;		/* one page of an earlier cluster's events */
	SPIPlanPtr	probe_plan;		/* which of a fetch's slots have new events */
	SPIPlanPtr	pages_plan;		/* a page of each of several slots */
	EoBell		bells[EO_BELLS];	/* this backend's last fetches, by group */
	int			bell_last;		/* ... the index of the latest */
	uint64		bell_clock;		/* fetches counted, for EoBell.order */
} EoOutbox;

/*
 * One call of the relay API (outbox_relay.c, outbox_relay_status.c): the outbox, the
 * group, and who called.  eo_relay_begin checks the caller's rights on
 * both and connects SPI as the extension owner; eo_relay_end undoes it.
 */
typedef struct EoRelayCall
{
	EoOutbox   *ob;
	char	   *grp;
	int32		group_id;
	Oid			group_owner;
	struct ArrayType *standby_slots;	/* name[] to wait for (NULL: none) */
	bool		held_back;		/* they did not have this call's snapshot */
	uint64		held_lsn;		/* ... which needs the WAL up to here (XLogRecPtr) */
	EoIdentity	caller;			/* restored by eo_relay_end */
} EoRelayCall;

/* outbox_standbys.c: groups that wait for standbys */
#define EO_STANDBY_WAIT_MS 100	/* a fetch waits this long for them, or ... */
#define EO_STANDBY_WAIT_MAX_MS 1000	/* ... twice their flush lag, up to this */
#define EO_MAX_STANDBY_SLOTS 64	/* standbys a group may wait for */
extern bool eo_standbys_have_snapshot(struct ArrayType *slots, const char *grp, uint64 *lsn);
extern bool eo_standbys_wait(struct ArrayType *slots, uint64 lsn, long timeout_ms);

/*
 * outbox_ddl.c: DDL on relations named by OID, never by a name someone
 * could swap
 */
extern void eo_attach_partition(Oid parent, const char *partition,
								const char *lo, const char *hi);
extern void eo_move_relation(Oid relid, Oid nsp, const char *newname);
extern void eo_drop_relation(Oid relid, bool cascade);

/*
 * outbox_cluster.c: positions taken in another cluster (the database was
 * restored from a dump into this one) turned into this cluster's terms,
 * once, before anything reads or draws.  SPI connected, as the owner.
 */
extern void eo_cluster_check(EoOutbox *ob);
extern void eo_cluster_check_seq(Oid seqid);
extern void eo_cluster_check_slot(int64 sysid, const char *outbox);

/*
 * outbox_registry.c.  eo_ob_lookup() finds, locks (with `lockmode`) and
 * verifies an outbox; it may be called with or without SPI connected, as
 * anyone.  eo_ob_read_registry reads a row as it is, unverified, for
 * eo_outbox_create and eo_outbox_drop.
 */
typedef struct EoRegistryRow
{
	Oid			relid;
	char		mode;
	int32		slots;
	Oid			owner;
	Oid			seq;
	Interval	every;
	int32		premake;
	Interval	retention;
} EoRegistryRow;

extern bool eo_ob_read_registry(const char *name, EoRegistryRow *row);
extern void eo_ob_registry_changed(void);
extern void eo_ob_forget_fetches(void);
extern void eo_ob_verify(const EoOutbox *ob);
extern void eo_ob_verify_columns(const EoOutbox *ob);
extern void eo_ob_check_member(Oid owner, const char *action, const char *object);
extern EoOutbox *eo_ob_lookup(const char *name, LOCKMODE lockmode, bool missing_ok);
extern Oid	eo_ob_token_seq(void);
extern void eo_ob_check_privilege(EoOutbox *ob, AclMode mode, const char *action);
extern void eo_ob_check_owner(EoOutbox *ob, const char *action);
extern void eo_ob_check_plan(EoOutbox *ob, SPIPlanPtr plan);
extern List *eo_ob_names(char mode);
extern char *eo_ob_slot_expr(const EoOutbox *ob, const char *alias);
extern char *eo_ob_slot_expr_for(int32 slots, const char *column);
extern char *eo_ob_row_check_expr(const EoOutbox *ob);
extern void eo_ob_note_seq_drawn(void);
extern bool eo_ob_xact_drew_seq(void);

/*
 * outbox_partitions.c: the partitions of a table-mode outbox, all in
 * eo_internal.  eo_ob_partitions lists them (oldest first), verified.
 */
typedef struct EoPartition
{
	Oid			relid;
	char	   *name;			/* eo_internal.name, quoted */
	bool		has_lo;
	TimestampTz lo;
	bool		has_hi;
	TimestampTz hi;
} EoPartition;

typedef void (*EoMaintainReport) (const char *outbox, const char *action,
								  const char *partition, void *arg);

extern List *eo_ob_partitions(EoOutbox *ob);
extern List *eo_ob_make_partitions(EoOutbox *ob);
typedef bool (*EoDelivered) (EoOutbox *ob, const EoPartition *part);
extern int	eo_ob_maintain_all(EoDelivered delivered, EoMaintainReport report, void *arg);
extern bool eo_ob_retention_cutoff(EoOutbox *ob, TimestampTz *cutoff);

/*
 * outbox_relay_partitions.c: a fetch's view of the partitions, current as
 * of its snapshot, and the created_at bound of the events it can see.
 */
extern void eo_ob_await_partition_list(EoOutbox *ob);
extern TimestampTz eo_ob_created_limit(EoOutbox *ob);

/* outbox_relay.c: whether every consumer group has acknowledged every event of
 * a partition */
extern bool eo_relay_partition_delivered(EoOutbox *ob, const EoPartition *part);
extern char *eo_relay_unacked_sql(const EoOutbox *ob, const char *e, const char *s);
extern void eo_relay_begin(EoRelayCall *call, Datum outbox, bool outbox_null, const char *grp);
extern void eo_relay_end(EoRelayCall *call);
extern bool eo_relay_holder_gone(int32 pid);

/* outbox_relay_status.c: eo_relay_status (SQL only); outbox_emit.c: eo_emit
 * and the outbox trigger (SQL only); outbox_create.c: eo_outbox_create and
 * eo_outbox_drop (SQL only), the top. */

#endif							/* EO_OUTBOX_H */
