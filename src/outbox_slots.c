/*-------------------------------------------------------------------------
 * outbox_slots.c
 *	  The rows of consumer groups and of their slots (eo_internal's
 *	  eo_outbox_groups and eo_outbox_slots), for the relay: a group looked
 *	  up, a group's slots read, slots locked as SELECT ... FOR UPDATE [SKIP
 *	  LOCKED] would lock them, and written in place; all of it through the
 *	  primary keys, without the executor, whose start cost a fetch more than
 *	  the rows (outbox_relay.c and outbox_relay_fetch.c call it).
 *
 * Columns are found by name (slot_attnums), so a table an update gave
 * another column order is read and written right.  These tables belong to
 * the extension owner, in eo_internal, where only that role can create or
 * change anything; there is no trigger or rule on them for a statement to
 * run, and no SQL here, so no search_path.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/xid8.h"

#include "compat.h"
#include "eo.h"
#include "outbox.h"
#include "outbox_relay.h"

/*
 * The columns of eo_outbox_slots, in the order this file knows them by
 * (SC_*; the table's own order may differ: slot_attnums).  The fourth
 * field says whether relay_write_slot writes the column; the sections of
 * an earlier cluster are written by outbox_cluster.c alone.
 */
#define SLOT_COLUMNS(X) \
	X(SC_OUTBOX, "outbox", TEXTOID, false) \
	X(SC_GRP, "grp", TEXTOID, false) \
	X(SC_SLOT, "slot", INT4OID, false) \
	X(SC_POS_SNAP, "pos_snap", PG_SNAPSHOTOID, true) \
	X(SC_POS_LO, "pos_lo", INT8OID, true) \
	X(SC_BATCH_SNAP, "batch_snap", PG_SNAPSHOTOID, true) \
	X(SC_BATCH_HI, "batch_hi", INT8OID, true) \
	X(SC_BATCH_LO, "batch_lo", INT8OID, true) \
	X(SC_ACKED_SEQ, "acked_seq", INT8OID, true) \
	X(SC_PAGE_STATE, "page_state", CHAROID, true) \
	X(SC_PAGE_END, "page_end", INT8OID, true) \
	X(SC_PAGE_LAST, "page_last", BOOLOID, true) \
	X(SC_PAGE_COUNT, "page_count", INT4OID, true) \
	X(SC_LEASE_TOKEN, "lease_token", INT8OID, true) \
	X(SC_LEASE_EXPIRES_AT, "lease_expires_at", TIMESTAMPTZOID, true) \
	X(SC_HIST_XID, "hist_xid", XID8ARRAYOID, true) \
	X(SC_HIST_SEQ, "hist_seq", INT8ARRAYOID, true) \
	X(SC_FETCHED_AT, "fetched_at", TIMESTAMPTZOID, true) \
	X(SC_ACKED_AT, "acked_at", TIMESTAMPTZOID, true) \
	X(SC_OLD_HI, "old_hi", INT8OID, true) \
	X(SC_OLD_SEQ, "old_seq", INT8OID, true) \
	X(SC_OLD_POS_SNAP, "old_pos_snap", PG_SNAPSHOTOID, false) \
	X(SC_OLD_POS_LO, "old_pos_lo", INT8OID, false) \
	X(SC_OLD_BATCH_SNAP, "old_batch_snap", PG_SNAPSHOTOID, false) \
	X(SC_OLD_ACKED_SEQ, "old_acked_seq", INT8OID, false) \
	X(SC_PAGE_OLD, "page_old", BOOLOID, true) \
	X(SC_SYSID, "sysid", INT8OID, false) \
	X(SC_FETCHED_EVENTS, "fetched_events", INT8OID, true) \
	X(SC_ACKED_EVENTS, "acked_events", INT8OID, true) \
	X(SC_REDELIVERED_EVENTS, "redelivered_events", INT8OID, true) \
	X(SC_HOLDER_PID, "holder_pid", INT4OID, true)

enum
{
	SC_NONE = 0,
	SLOT_COLUMNS(EO_COLUMN_ENUM)
	SLOT_NCOLS_PLUS_1
};
#define SLOT_NCOLS (SLOT_NCOLS_PLUS_1 - 1)
#define SLOT_WRITTEN(pos, name, type, written) written,

static const EoColumn slot_columns[] = {SLOT_COLUMNS(EO_COLUMN_DESC)};
static const bool slot_written[] = {SLOT_COLUMNS(SLOT_WRITTEN)};

static const AttrNumber *slot_attnums(Oid relid, TupleDesc desc);

/*
 * A slot row, deformed once: its columns in SLOT_COLUMNS order (column
 * positions start at 1, as SC_* do).
 */
typedef struct SlotRow
{
	Datum		values[SLOT_NCOLS];
	bool		nulls[SLOT_NCOLS];
} SlotRow;

static Datum
column(const SlotRow *row, int col, bool *isnull)
{
	*isnull = row->nulls[col - 1];
	return row->values[col - 1];
}

/*
 * A snapshot column, with a 4-byte header: stored short, it would be
 * detoasted (copied) by pg_visible_in_snapshot for every event of a page.
 */
static Datum
snapshot_column(const SlotRow *row, int col, bool *isnull)
{
	Datum		d = column(row, col, isnull);

	return *isnull ? d : PointerGetDatum(PG_DETOAST_DATUM(d));
}

/* The slot's (next txid, seq) history, for lo(). */
static void
read_history(const SlotRow *row, Slot *s)
{
	bool		isnull;
	Datum		d;

	d = column(row, SC_HIST_XID, &isnull);
	if (!isnull)
	{
		Datum	   *xids;
		Datum	   *seqs;
		int			nx,
					ns;

		deconstruct_array(DatumGetArrayTypeP(d), XID8OID, sizeof(uint64),
						  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &xids, NULL, &nx);
		deconstruct_array(DatumGetArrayTypeP(column(row, SC_HIST_SEQ, &isnull)),
						  INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
						  &seqs, NULL, &ns);
		s->nhist = Min(Min(nx, ns), HIST);
		for (int i = 0; i < s->nhist; i++)
		{
			s->hist_xid[i] = DatumGetFullTransactionId(xids[i]);
			s->hist_seq[i] = DatumGetInt64(seqs[i]);
		}
	}
}

/* The slot's section of an earlier cluster's events (outbox_cluster.c). */
static void
read_old_section(const SlotRow *row, Slot *s)
{
	bool		isnull;
	Datum		d;

	d = column(row, SC_OLD_HI, &isnull);
	s->has_old = !isnull;
	if (s->has_old)
	{
		s->old_hi = DatumGetInt64(d);
		s->old_seq = DatumGetInt64(column(row, SC_OLD_SEQ, &isnull));
		s->old_pos_snap = snapshot_column(row, SC_OLD_POS_SNAP, &isnull);
		s->old_pos_lo = DatumGetInt64(column(row, SC_OLD_POS_LO, &isnull));
		s->old_batch_snap = snapshot_column(row, SC_OLD_BATCH_SNAP, &isnull);
		s->has_old_batch = !isnull;
		d = column(row, SC_OLD_ACKED_SEQ, &isnull);
		s->old_acked_seq = isnull ? 0 : DatumGetInt64(d);
		s->has_old_batch &= !isnull;	/* the acked part needs both */
	}
}

/* The slot whose row is `row`. */
static void
read_slot_row(const SlotRow *row, Slot *s)
{
	bool		isnull;
	Datum		d;

	memset(s, 0, sizeof(*s));
	s->slot = DatumGetInt32(column(row, SC_SLOT, &isnull));
	s->pos_snap = snapshot_column(row, SC_POS_SNAP, &isnull);
	s->pos_lo = DatumGetInt64(column(row, SC_POS_LO, &isnull));
	s->batch_snap = snapshot_column(row, SC_BATCH_SNAP, &isnull);
	s->has_batch = !isnull;
	s->batch_hi = s->has_batch ? DatumGetInt64(column(row, SC_BATCH_HI, &isnull)) : 0;
	s->batch_lo = s->has_batch ? DatumGetInt64(column(row, SC_BATCH_LO, &isnull)) : 0;
	d = column(row, SC_ACKED_SEQ, &isnull);
	s->has_acked = !isnull;
	s->acked_seq = isnull ? 0 : DatumGetInt64(d);
	d = column(row, SC_PAGE_STATE, &isnull);
	s->page_state = isnull ? '\0' : DatumGetChar(d);
	d = column(row, SC_PAGE_END, &isnull);
	s->page_end = isnull ? 0 : DatumGetInt64(d);
	d = column(row, SC_PAGE_LAST, &isnull);
	s->page_last = isnull ? false : DatumGetBool(d);
	d = column(row, SC_PAGE_COUNT, &isnull);
	s->page_count = isnull ? 0 : DatumGetInt32(d);
	d = column(row, SC_LEASE_TOKEN, &isnull);
	s->has_token = !isnull;
	s->lease_token = isnull ? 0 : DatumGetInt64(d);
	d = column(row, SC_LEASE_EXPIRES_AT, &isnull);
	s->leased = !isnull;
	s->lease_expires_at = isnull ? 0 : DatumGetTimestampTz(d);
	read_history(row, s);
	d = column(row, SC_FETCHED_AT, &isnull);
	s->has_fetched = !isnull;
	s->fetched_at = isnull ? 0 : DatumGetTimestampTz(d);
	d = column(row, SC_ACKED_AT, &isnull);
	s->has_acked_at = !isnull;
	s->acked_at = isnull ? 0 : DatumGetTimestampTz(d);
	read_old_section(row, s);
	d = column(row, SC_PAGE_OLD, &isnull);
	s->page_old = !isnull && DatumGetBool(d);
	d = column(row, SC_SYSID, &isnull);
	s->sysid = isnull ? 0 : DatumGetInt64(d);
	s->fetched_events = DatumGetInt64(column(row, SC_FETCHED_EVENTS, &isnull));
	s->acked_events = DatumGetInt64(column(row, SC_ACKED_EVENTS, &isnull));
	s->redelivered_events = DatumGetInt64(column(row, SC_REDELIVERED_EVENTS, &isnull));
	d = column(row, SC_HOLDER_PID, &isnull);
	s->holder_pid = isnull ? 0 : DatumGetInt32(d);
	ItemPointerSetInvalid(&s->tid);
	ItemPointerSetInvalid(&s->seen_tid);
}

/*
 * The slot whose stored row is `tup` (of eo_outbox_slots, described by
 * desc; attnums from slot_attnums), tid invalid.
 */
static void
slot_from_tuple(HeapTuple tup, TupleDesc desc, const AttrNumber *attnums, Slot *s)
{
	Datum	   *values = palloc(sizeof(Datum) * desc->natts);
	bool	   *nulls = palloc(sizeof(bool) * desc->natts);
	SlotRow		row;

	heap_deform_tuple(tup, desc, values, nulls);
	for (int i = 0; i < SLOT_NCOLS; i++)
	{
		row.values[i] = values[attnums[i] - 1];
		row.nulls[i] = nulls[attnums[i] - 1];
	}
	read_slot_row(&row, s);
	pfree(values);
	pfree(nulls);
}

/* Never fetched first (NULLS FIRST), then least recently fetched, then by slot. */
static int
cmp_oldest_served(const void *a, const void *b)
{
	const Slot *x = *(const Slot *const *) a;
	const Slot *y = *(const Slot *const *) b;

	if (x->has_fetched != y->has_fetched)
		return x->has_fetched ? 1 : -1;
	if (x->has_fetched && x->fetched_at != y->fetched_at)
		return x->fetched_at < y->fetched_at ? -1 : 1;
	return (x->slot > y->slot) - (x->slot < y->slot);
}

/*
 * A scan of idx, an index of rel whose first two columns are text, for
 * the rows with those equal to outbox and name (key: room for two keys).
 */
static IndexScanDesc
begin_name_scan(Relation rel, Relation idx, Snapshot snapshot, const char *outbox,
				const char *name, ScanKeyData *key)
{
	IndexScanDesc scan;

	ScanKeyEntryInitialize(&key[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   idx->rd_indcollation[0], F_TEXTEQ, CStringGetTextDatum(outbox));
	ScanKeyEntryInitialize(&key[1], 0, 2, BTEqualStrategyNumber, InvalidOid,
						   idx->rd_indcollation[1], F_TEXTEQ, CStringGetTextDatum(name));
	scan = eo_index_beginscan(rel, idx, snapshot, 2, 0);
	index_rescan(scan, key, 2, NULL, 0);
	return scan;
}

/*
 * The slots of group grp of outbox `outbox`, unlocked (tid invalid),
 * oldest-served first, so that one relay walks all slots in turn; *n of
 * them.  Read through the primary key (outbox, grp, slot) with a snapshot
 * taken now, as a statement would, but without the executor, whose start
 * cost a fetch more than the read: the rows are copied, so the slots'
 * values outlive the scan.
 */
Slot *
relay_read_group_slots(const char *outbox, const char *grp, int *n)
{
	return relay_read_token_slots(outbox, grp, NULL, NULL, n);
}

/*
 * The same, of those slots only the ones whose lease token `keep`
 * accepts, if `keep` is given: an acknowledgement looks for its
 * tokens' slots, and reading the token alone passes over the others
 * without copying and reading their rows.
 */
Slot *
relay_read_token_slots(const char *outbox, const char *grp, EoTokenFilter keep, const void *arg,
					   int *n)
{
	Relation	rel = table_open(get_relname_relid("eo_outbox_slots", eo_catalog()->schema),
								 AccessShareLock);
	TupleDesc	desc = RelationGetDescr(rel);
	const AttrNumber *attnums = slot_attnums(RelationGetRelid(rel), desc);
	Relation	idx = index_open(eo_primary_key_index(rel), AccessShareLock);
	Snapshot	snapshot = RegisterSnapshot(GetTransactionSnapshot());
	TupleTableSlot *ts = table_slot_create(rel, NULL);
	int			cap = 8;
	Slot	   *slots = palloc(sizeof(Slot) * cap);
	Slot	  **order;
	Slot	   *sorted;
	ScanKeyData key[2];
	IndexScanDesc scan;

	if (idx->rd_index->indnkeyatts < 2 ||
		idx->rd_index->indkey.values[0] != attnums[SC_OUTBOX - 1] ||
		idx->rd_index->indkey.values[1] != attnums[SC_GRP - 1])
		elog(ERROR, "eo: the primary key of eo_outbox_slots does not start with (outbox, grp)");
	scan = begin_name_scan(rel, idx, snapshot, outbox, grp, key);
	*n = 0;
	while (index_getnext_slot(scan, ForwardScanDirection, ts))
	{
		if (keep != NULL)
		{
			bool		isnull;
			Datum		token = slot_getattr(ts, attnums[SC_LEASE_TOKEN - 1], &isnull);

			if (!keep(!isnull, isnull ? 0 : DatumGetInt64(token), arg))
				continue;
		}
		if (*n == cap)
			slots = repalloc(slots, sizeof(Slot) * (cap *= 2));
		slot_from_tuple(ExecCopySlotHeapTuple(ts), desc, attnums, &slots[*n]);
		slots[(*n)++].seen_tid = ts->tts_tid;
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(ts);
	UnregisterSnapshot(snapshot);
	index_close(idx, NoLock);
	table_close(rel, NoLock);
	/* sorted by pointer: a Slot is large to move */
	order = palloc(sizeof(Slot *) * Max(*n, 1));
	for (int i = 0; i < *n; i++)
		order[i] = &slots[i];
	qsort(order, *n, sizeof(Slot *), cmp_oldest_served);
	sorted = palloc(sizeof(Slot) * Max(*n, 1));
	for (int i = 0; i < *n; i++)
		sorted[i] = *order[i];
	pfree(order);
	pfree(slots);
	return sorted;
}

/*
 * The id and owner of consumer group grp of outbox `outbox` as `snapshot`
 * shows it, read through the primary key (outbox, name) without the
 * executor; false if there is none.
 */
bool
relay_find_group(const char *outbox, const char *grp, Snapshot snapshot, int32 *id, Oid *owner,
				 ArrayType **standby_slots)
{
	Relation	rel = table_open(get_relname_relid("eo_outbox_groups", eo_catalog()->schema),
								 AccessShareLock);
	Oid			relid = RelationGetRelid(rel);
	AttrNumber	id_att = get_attnum(relid, "id");
	AttrNumber	owner_att = get_attnum(relid, "owner");
	AttrNumber	standby_att = get_attnum(relid, "standby_slots");
	Relation	idx = index_open(eo_primary_key_index(rel), AccessShareLock);
	TupleTableSlot *ts = table_slot_create(rel, NULL);
	ScanKeyData key[2];
	IndexScanDesc scan;
	bool		found;

	snapshot = RegisterSnapshot(snapshot);
	if (idx->rd_index->indnkeyatts != 2 ||
		idx->rd_index->indkey.values[0] != get_attnum(relid, "outbox") ||
		idx->rd_index->indkey.values[1] != get_attnum(relid, "name") ||
		id_att <= 0 || TupleDescAttr(RelationGetDescr(rel), id_att - 1)->atttypid != INT4OID ||
		owner_att <= 0 || TupleDescAttr(RelationGetDescr(rel), owner_att - 1)->atttypid != REGROLEOID ||
		(standby_att > 0 &&
		 TupleDescAttr(RelationGetDescr(rel), standby_att - 1)->atttypid != NAMEARRAYOID))
		elog(ERROR, "eo: eo_outbox_groups is not as eo made it");
	scan = begin_name_scan(rel, idx, snapshot, outbox, grp, key);
	found = index_getnext_slot(scan, ForwardScanDirection, ts);
	if (found)
	{
		bool		isnull;

		*id = DatumGetInt32(slot_getattr(ts, id_att, &isnull));
		*owner = DatumGetObjectId(slot_getattr(ts, owner_att, &isnull));
		if (standby_slots != NULL)
		{
			/* none before the update to 0.3.0 adds the column */
			Datum		v = standby_att > 0 ? slot_getattr(ts, standby_att, &isnull) : (Datum) 0;

			*standby_slots = standby_att <= 0 || isnull ? NULL : DatumGetArrayTypePCopy(v);
		}
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(ts);
	UnregisterSnapshot(snapshot);
	index_close(idx, NoLock);
	table_close(rel, NoLock);
	return found;
}

/*
 * Is the call's group still the one eo_relay_begin looked up and checked
 * the caller's rights on?  Checked before slots are locked, with the
 * latest snapshot (the call's own may be old): a group its outbox's owner
 * dropped and made again under the same name has other rows and, unless
 * its id came round again, another id; and its owner must still be a
 * role whose privileges the caller has.  Once locked, the rows cannot be
 * dropped under the call.
 */
bool
relay_group_still(const EoRelayCall *call)
{
	int32		id;
	Oid			owner;

	return relay_find_group(call->ob->name, call->grp, GetLatestSnapshot(), &id, &owner, NULL) &&
		id == call->group_id && has_privs_of_role(call->caller.userid, owner);
}

/* Raised where a SELECT ... FOR UPDATE would raise it. */
static void
lock_serialization_failure(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not serialize access due to concurrent update")));
}

/*
 * Lock the slot rows that a scan saw (c[i].seen_tid, from
 * relay_read_group_slots), in c's order, as SELECT ... FOR UPDATE [SKIP
 * LOCKED] locks rows, without the executor: a version updated since is
 * followed to the newest (at READ COMMITTED), and only a row for which
 * still(&c[i], row, arg) holds once locked, the statement's recheck, goes
 * into out[] with the tid of the version locked.  With skip_locked, a row
 * another transaction has locked is passed over; without, waited for.
 * Returns how many went into out[].  The caller checked that the group
 * is still the one it looked up (a group made again under the same name
 * has other rows; the rows of one dropped since come back deleted).
 */
int
relay_lock_seen(const Slot *c, int n, bool skip_locked,
				bool (*still) (const Slot *seen, const Slot *row, const void *arg),
				const void *arg, Slot *out)
{
	Relation	rel = table_open(get_relname_relid("eo_outbox_slots", eo_catalog()->schema),
								 RowShareLock);
	TupleDesc	desc = RelationGetDescr(rel);
	const AttrNumber *attnums = slot_attnums(RelationGetRelid(rel), desc);
	TupleTableSlot *ts = table_slot_create(rel, NULL);
	uint8		flags = TUPLE_LOCK_FLAG_LOCK_UPDATE_IN_PROGRESS |
		(IsolationUsesXactSnapshot() ? 0 : TUPLE_LOCK_FLAG_FIND_LAST_VERSION);
	int			nout = 0;

	for (int i = 0; i < n; i++)
	{
		ItemPointerData tid = c[i].seen_tid;
		TM_FailureData tmfd;
		TM_Result	result;
		Slot		row;

		CHECK_FOR_INTERRUPTS();
		if (!ItemPointerIsValid(&tid))
			elog(ERROR, "eo: slot %d was not read by a scan", c[i].slot);
		result = table_tuple_lock(rel, &tid,
								  ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot(),
								  ts, GetCurrentCommandId(true),
								  LockTupleExclusive, skip_locked ? LockWaitSkip : LockWaitBlock,
								  flags, &tmfd);
		switch (result)
		{
			case TM_Ok:
				break;
			case TM_WouldBlock:	/* SKIP LOCKED */
			case TM_SelfModified:	/* as a statement would, treated as gone */
				continue;
			case TM_Deleted:
				if (IsolationUsesXactSnapshot())
					lock_serialization_failure();
				continue;
			case TM_Updated:
				if (IsolationUsesXactSnapshot())
					lock_serialization_failure();
				elog(ERROR, "eo: unexpected result locking slot %d", c[i].slot);
				break;
			default:
				elog(ERROR, "eo: unexpected result %d locking slot %d", (int) result, c[i].slot);
		}
		slot_from_tuple(ExecCopySlotHeapTuple(ts), desc, attnums, &row);
		if (row.slot != c[i].slot || !still(&c[i], &row, arg))
			continue;
		row.tid = ts->tts_tid;
		row.seen_tid = ts->tts_tid;
		out[nout++] = row;
	}
	ExecDropSingleTupleTableSlot(ts);
	table_close(rel, NoLock);
	return nout;
}

/* Values by column position, for the UPDATE (a parameter per column). */
#define PARAM(col, value, isnull) \
	(values[(col) - 1] = (value), nulls[(col) - 1] = (isnull) ? 'n' : ' ')

/* Slot s's row by column position, as the UPDATEs take it. */
static void
slot_values(const char *outbox, const char *grp, const Slot *s, Datum *values, char *nulls)
{
	Datum		xids[HIST];
	Datum		seqs[HIST];

	memset(nulls, 'n', sizeof(char) * SLOT_NCOLS);	/* the columns not written */
	for (int i = 0; i < s->nhist; i++)
	{
		xids[i] = FullTransactionIdGetDatum(s->hist_xid[i]);
		seqs[i] = Int64GetDatum(s->hist_seq[i]);
	}
	PARAM(SC_OUTBOX, CStringGetTextDatum(outbox), false);
	PARAM(SC_GRP, CStringGetTextDatum(grp), false);
	PARAM(SC_SLOT, Int32GetDatum(s->slot), false);
	PARAM(SC_POS_SNAP, s->pos_snap, false);
	PARAM(SC_POS_LO, Int64GetDatum(s->pos_lo), false);
	PARAM(SC_BATCH_SNAP, s->batch_snap, !s->has_batch);
	PARAM(SC_BATCH_HI, Int64GetDatum(s->batch_hi), !s->has_batch);
	PARAM(SC_BATCH_LO, Int64GetDatum(s->batch_lo), !s->has_batch);
	PARAM(SC_ACKED_SEQ, Int64GetDatum(s->acked_seq), !s->has_acked);
	PARAM(SC_PAGE_STATE, CharGetDatum(s->page_state), s->page_state == '\0');
	PARAM(SC_PAGE_END, Int64GetDatum(s->page_end), s->page_state != PAGE_OUT);
	PARAM(SC_PAGE_LAST, BoolGetDatum(s->page_last), s->page_state != PAGE_OUT);
	PARAM(SC_PAGE_COUNT, Int32GetDatum(s->page_count), s->page_state == '\0');
	PARAM(SC_LEASE_TOKEN, Int64GetDatum(s->lease_token), !s->has_token);
	PARAM(SC_LEASE_EXPIRES_AT, TimestampTzGetDatum(s->lease_expires_at), !s->leased);
	PARAM(SC_HIST_XID, PointerGetDatum(construct_array(xids, s->nhist, XID8OID, sizeof(uint64),
													   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)), false);
	PARAM(SC_HIST_SEQ, PointerGetDatum(construct_array(seqs, s->nhist, INT8OID, sizeof(int64),
													   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)), false);
	PARAM(SC_FETCHED_AT, TimestampTzGetDatum(s->fetched_at), !s->has_fetched);
	PARAM(SC_ACKED_AT, TimestampTzGetDatum(s->acked_at), !s->has_acked_at);
	PARAM(SC_OLD_HI, Int64GetDatum(s->old_hi), !s->has_old);
	PARAM(SC_OLD_SEQ, Int64GetDatum(s->old_seq), !s->has_old);
	PARAM(SC_PAGE_OLD, BoolGetDatum(s->page_old), false);
	PARAM(SC_FETCHED_EVENTS, Int64GetDatum(s->fetched_events), false);
	PARAM(SC_ACKED_EVENTS, Int64GetDatum(s->acked_events), false);
	PARAM(SC_REDELIVERED_EVENTS, Int64GetDatum(s->redelivered_events), false);
	PARAM(SC_HOLDER_PID, Int32GetDatum(s->holder_pid), !s->leased || s->holder_pid == 0);
}

/* Is column i of SLOT_COLUMNS at position att of eo_outbox_slots (desc)? */
static bool
slot_column_is(TupleDesc desc, AttrNumber att, int i)
{
	Form_pg_attribute a;

	if (att <= 0 || att > desc->natts)
		return false;
	a = TupleDescAttr(desc, att - 1);
	return !a->attisdropped && a->atttypid == slot_columns[i].type &&
		strcmp(NameStr(a->attname), slot_columns[i].name) == 0;
}

/*
 * Where each column of SLOT_COLUMNS is in eo_outbox_slots (relid, desc):
 * found by name, so that a table an update gave another column order is
 * read and written right; remembered, and checked against the table as
 * it is now at every call.
 */
static const AttrNumber *
slot_attnums(Oid relid, TupleDesc desc)
{
	static Oid	known_relid = InvalidOid;
	static AttrNumber attnums[SLOT_NCOLS];
	bool		known = known_relid == relid;

	for (int i = 0; i < SLOT_NCOLS && known; i++)
		known = slot_column_is(desc, attnums[i], i);
	if (known)
		return attnums;
	for (int j = 0; j < SLOT_NCOLS; j++)
	{
		attnums[j] = get_attnum(relid, slot_columns[j].name);
		if (!slot_column_is(desc, attnums[j], j))
		{
			known_relid = InvalidOid;
			elog(ERROR, "eo: eo_outbox_slots has no column \"%s\" of type %s",
				 slot_columns[j].name, format_type_be(slot_columns[j].type));
		}
	}
	known_relid = relid;
	return attnums;
}

/*
 * The new version of a slot's row, in place of the one at s->tid that
 * this transaction locked, without the executor: the stored version with
 * the columns write_slot writes replaced (found by name, so a table that
 * an update gave another column order is written right), then the
 * indexes if the update was not HOT, and the command counter moved on as
 * after a statement.  eo_outbox_slots has no trigger or rule that a
 * statement would run (only the extension owner could add one; the
 * CHECK of page_state holds for the values written here).  An UPDATE
 * statement and its executor start were most of what a slot cost a
 * fetch and an acknowledgement.
 */
static void
write_slot_in_place(const Slot *s, const Datum *values, const char *nulls)
{
	Relation	rel = table_open(get_relname_relid("eo_outbox_slots", eo_catalog()->schema),
								 RowExclusiveLock);
	TupleDesc	desc = RelationGetDescr(rel);
	EState	   *estate = CreateExecutorState();
	TupleTableSlot *old = table_slot_create(rel, NULL);
	TupleTableSlot *new = MakeSingleTupleTableSlot(desc, &TTSOpsVirtual);
	ItemPointerData tid = s->tid;
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	EoUpdateIndexes update_indexes;
	TM_Result	result;
	const AttrNumber *attnums;

	if (!table_tuple_fetch_row_version(rel, &tid, SnapshotAny, old))
		elog(ERROR, "eo: the locked row of slot %d is gone", s->slot);
	slot_getallattrs(old);
	ExecClearTuple(new);
	memcpy(new->tts_values, old->tts_values, sizeof(Datum) * desc->natts);
	memcpy(new->tts_isnull, old->tts_isnull, sizeof(bool) * desc->natts);
	attnums = slot_attnums(RelationGetRelid(rel), desc);
	for (int i = 0; i < SLOT_NCOLS; i++)
	{
		AttrNumber	att = attnums[i];

		if (!slot_written[i])
			continue;
		new->tts_values[att - 1] = values[i];
		new->tts_isnull[att - 1] = nulls[i] == 'n';
	}
	ExecStoreVirtualTuple(new);
	result = table_tuple_update(rel, &tid, new, GetCurrentCommandId(true), InvalidSnapshot,
								InvalidSnapshot, true, &tmfd, &lockmode, &update_indexes);
	if (result != TM_Ok)
		elog(ERROR, "eo: unexpected result %d writing the locked row of slot %d", (int) result, s->slot);
	if (EO_UPDATE_NEEDS_INDEXES(update_indexes))
	{
		ResultRelInfo *rri = makeNode(ResultRelInfo);

		InitResultRelInfo(rri, rel, 0, NULL, 0);
		ExecOpenIndices(rri, false);
		eo_insert_index_tuples(rri, new, estate, EO_UPDATE_ONLY_SUMMARIZING(update_indexes));
		ExecCloseIndices(rri);
	}
	ExecDropSingleTupleTableSlot(old);
	ExecDropSingleTupleTableSlot(new);
	FreeExecutorState(estate);
	table_close(rel, NoLock);
	CommandCounterIncrement();
}

void
relay_write_slot(const char *outbox, const char *grp, const Slot *s)
{
	Datum		values[SLOT_NCOLS];
	char		nulls[SLOT_NCOLS];

	if (!ItemPointerIsValid(&s->tid))
		elog(ERROR, "eo: slot %d is written without being locked", s->slot);
	slot_values(outbox, grp, s, values, nulls);
	write_slot_in_place(s, values, nulls);
}

/* The rows of n slots, each locked. */
void
relay_write_slots(const char *outbox, const char *grp, const Slot *slots, int n)
{
	for (int i = 0; i < n; i++)
		relay_write_slot(outbox, grp, &slots[i]);
}

