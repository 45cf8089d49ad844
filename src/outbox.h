/*-------------------------------------------------------------------------
 * outbox.h
 *	  Declarations shared by outbox.c (outboxes, eo_emit, partitions) and
 *	  relay.c (consumer groups, batches, leases).
 *
 * outbox.c owns the registry (eo_outboxes) and a per-backend cache of one
 * entry per outbox; relay.c asks it for an outbox's entry and for the
 * statements of its own tables.  Neither calls claim.c or keystore.c.
 *-------------------------------------------------------------------------
 */
#ifndef EO_OUTBOX_H
#define EO_OUTBOX_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "utils/acl.h"

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

/* One outbox, as cached by this backend. */
typedef struct EoOutbox
{
	char		name[NAMEDATALEN];	/* hash key */
	bool		valid;
	char		mode;
	int32		slots;
	Oid			relid;			/* the outbox table */
	Oid			seqid;			/* its identity sequence (table mode) */
	char	   *qualname;		/* schema.table, quoted */
	char	   *channel;		/* NOTIFY channel (table mode) */
	char	   *wal_prefix;		/* logical message prefix (WAL mode) */
	SPIPlanPtr	emit_plan;		/* INSERT of one event */
	SPIPlanPtr	page_plan;		/* one page of a batch (relay.c) */
	bool		bell_known;		/* bell_seen is set (relay.c) */
	uint64		bell_seen;		/* doorbell before this backend's last fetch */
} EoOutbox;

/*
 * outbox.c: the registry and the identity switch.  eo_ob_open() connects
 * SPI and acts as the owner of eo's tables (the extension owner); every
 * statement run between it and eo_ob_close() is fully schema-qualified.
 */
extern void eo_ob_open(void);
extern void eo_ob_close(void);
extern Oid	eo_ob_token_seq(void);
extern const char *eo_ob_schema(void);
extern EoOutbox *eo_ob_lookup(const char *name, bool missing_ok);
extern char *eo_ob_check_name(Datum value, bool isnull, const char *what);
extern void eo_ob_check_privilege(EoOutbox *ob, AclMode mode, const char *action);
extern void eo_ob_invalidate_all(void);
extern char *eo_ob_slot_expr(const EoOutbox *ob, const char *alias);
extern bool eo_ob_retention_cutoff(EoOutbox *ob, Interval *retention,
								   TimestampTz *cutoff);

/* relay.c: whether every consumer group has acknowledged every event of a
 * partition (given as schema.table, quoted) */
extern bool eo_relay_partition_delivered(EoOutbox *ob, const char *partition);

#endif							/* EO_OUTBOX_H */
