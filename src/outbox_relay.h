/*-------------------------------------------------------------------------
 * outbox_relay.h
 *	  What the relay's three files share: a consumer group's slot row and
 *	  how it is read, locked and written (outbox_slots.c), the page
 *	  statements and their receiver (outbox_relay.c), for eo_relay_fetch
 *	  and eo_relay_wait (outbox_relay_fetch.c).  The design is in
 *	  outbox_relay.c's header.
 *-------------------------------------------------------------------------
 */
#ifndef EO_OUTBOX_RELAY_H
#define EO_OUTBOX_RELAY_H

#include "access/transam.h"
#include "executor/spi.h"
#include "tcop/dest.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "outbox.h"

/* (next txid, seq) pairs a slot remembers for lo(); see above. */
#define HIST 8

/* page_state of a slot: the last page handed out */
#define PAGE_OUT		'o'		/* outstanding: leased, maybe expired */
#define PAGE_ACKED		'a'
#define PAGE_RELEASED	'r'

/* One row of eo_outbox_slots. */
typedef struct Slot
{
	int32		slot;
	Datum		pos_snap;		/* P */
	int64		pos_lo;			/* lo(P) */
	bool		has_batch;
	Datum		batch_snap;		/* S of the batch being handed out */
	int64		batch_hi;		/* hi(S) */
	int64		batch_lo;		/* lo(S) */
	bool		has_acked;
	int64		acked_seq;		/* last acknowledged seq inside the batch */
	char		page_state;		/* '\0' before the first page */
	int64		page_end;		/* last seq of the page handed out */
	bool		page_last;		/* ... and it ends the batch */
	int32		page_count;
	bool		has_token;
	int64		lease_token;
	bool		leased;
	TimestampTz lease_expires_at;
	int			nhist;
	FullTransactionId hist_xid[HIST];
	int64		hist_seq[HIST];
	bool		has_fetched;
	TimestampTz fetched_at;
	bool		has_acked_at;
	TimestampTz acked_at;
	/* the events of an earlier cluster not yet delivered (outbox_cluster.c) */
	bool		has_old;
	int64		old_hi;			/* they have seq <= old_hi ... */
	int64		old_seq;		/* ... and > old_seq (acknowledged so far) */
	Datum		old_pos_snap;	/* the rest is the slot's state there */
	int64		old_pos_lo;
	bool		has_old_batch;
	Datum		old_batch_snap;
	int64		old_acked_seq;
	bool		page_old;		/* the page handed out is of those */
	int64		sysid;			/* the cluster of its snapshots (outbox_cluster.c) */
	/* counters for eo_outbox_metrics, written with the row anyway */
	int64		fetched_events;
	int64		acked_events;
	int64		redelivered_events;
	int32		holder_pid;		/* the backend that took the lease; 0 if none */
	ItemPointerData tid;		/* the version locked (invalid: not locked) */
	ItemPointerData seen_tid;	/* the version a scan read (relay_lock_seen) */
} Slot;

/*
 * A relay's lease token: a value of eo_outbox_token_seq, strictly
 * increasing, also across promotions (an epoch above its 40 low bits,
 * fencing.c), below 2^53: exact for a relay that reads numbers as doubles
 * (JavaScript, many JSON parsers).  Before 0.3.0 the group's id took the
 * high bits; the update starts the epochs above every group id then in
 * use, so tokens still only grow.  Group ids stay below 2^13
 * (eo_outbox_group_id_seq's MAXVALUE).
 */
#define TOKEN_MAX_GROUPS 8191	/* group ids 1 .. this */

extern int64 eo_relay_new_token(Oid token_seq);

/* Statements on eo's own tables, prepared once per backend. */
typedef struct RelayPlans
{
	bool		ready;
	SPIPlanPtr	cut;
	SPIPlanPtr	group_tokens;
} RelayPlans;

extern RelayPlans relay_plans;

/*
 * What a page statement returns of each event (%s: the slot expression),
 * the columns of eo_relay_fetch after lease_token: check_page_columns.
 */
#define PAGE_COLUMNS \
	"%s, e.seq, e.id, e.aggregatetype, e.aggregateid, e.type, e.payload, e.headers, e.created_at"

/* One page of a batch, straight into eo_relay_fetch's result. */
typedef struct PageReceiver
{
	DestReceiver pub;
	Tuplestorestate *store;
	TupleDesc	desc;			/* eo_relay_fetch's result */
	Oid			token_seq;
	int32		max;
	bool		count_only;		/* count and find the last seq, return nothing */
	int32		count;
	bool		more;			/* a row past max exists */
	int64		token;			/* drawn at the first row */
	int64		last_seq;
} PageReceiver;

/* outbox_slots.c */
extern Slot *relay_read_group_slots(const char *outbox, const char *grp, int *n);
typedef bool (*EoTokenFilter) (bool has_token, int64 token, const void *arg);
extern Slot *relay_read_token_slots(const char *outbox, const char *grp, EoTokenFilter keep,
									const void *arg, int *n);
extern bool relay_find_group(const char *outbox, const char *grp, Snapshot snapshot, int32 *id,
							 Oid *owner, struct ArrayType **standby_slots);
extern bool relay_group_still(const EoRelayCall *call);
extern int	relay_lock_seen(const Slot *c, int n, bool skip_locked,
							bool (*still) (const Slot *seen, const Slot *row, const void *arg),
							const void *arg, Slot *out);
extern void relay_write_slot(const char *outbox, const char *grp, const Slot *s);
extern void relay_write_slots(const char *outbox, const char *grp, const Slot *slots, int n);
/* outbox_relay.c */
extern EoOutbox *relay_outbox(Datum value, bool isnull);
extern void relay_as_caller(EoRelayCall *call, EoIdentity *owner);
extern void relay_init_receiver(PageReceiver *r, Tuplestorestate *store, TupleDesc desc, int32 max);
extern void relay_check_page_columns(TupleDesc typeinfo, int first);
extern int32 relay_run_statement(EoRelayCall *call, SPIPlanPtr plan, int nparams, const Oid *types,
								 const Datum *values, const bool *nulls, PageReceiver *r);
extern int32 relay_run_page(EoRelayCall *call, const Slot *s, int64 lower, int64 upper,
							Datum p_snap, Datum s_snap, PageReceiver *r);
extern int32 relay_run_old_page(EoRelayCall *call, const Slot *s, int64 upper, PageReceiver *r);
extern int64 relay_batch_lower(const Slot *s);

#endif							/* EO_OUTBOX_RELAY_H */
