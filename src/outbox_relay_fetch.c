/*-------------------------------------------------------------------------
 * outbox_relay_fetch.c
 *	  eo_relay_fetch and eo_relay_wait: which slots of a group have events
 *	  (the probe), locking and serving them (one by one, or together in
 *	  three statements), the cut (a new snapshot S with hi(S)), and the
 *	  doorbell wait with the group's leases in view, which sleeps holding
 *	  none of the locks its look took (see eo_relay_wait).  Batches,
 *	  bounds and leases are described at the top of outbox_relay.c.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_sequence.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/resowner.h"
#include "utils/syscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
#include "utils/wait_event.h"
#include "utils/xid8.h"

#include "eo.h"
#include "outbox.h"
#include "outbox_relay.h"

PG_FUNCTION_INFO_V1(eo_relay_fetch);
PG_FUNCTION_INFO_V1(eo_relay_wait);

/* ---- slots: candidates, locks, leases ---- */

static bool
lease_free(const Slot *s, TimestampTz now)
{
	return !s->leased || s->lease_expires_at <= now || eo_relay_holder_gone(s->holder_pid);
}

/* A slot locked is served if its lease is still as the scan read it (free). */
static bool
lease_as_read(const Slot *seen, const Slot *row, const void *arg)
{
	return (seen->has_token ? seen->lease_token : 0) == (row->has_token ? row->lease_token : 0) &&
		(seen->leased ? seen->lease_expires_at : DT_NOBEGIN) ==
		(row->leased ? row->lease_expires_at : DT_NOBEGIN) &&
		seen->holder_pid == row->holder_pid;
}

/*
 * Lock the n slots c[] whose leases are still as read (SKIP LOCKED: one
 * another relay's fetch has locked is left to it): those locked into s[],
 * in c's order.  Returns how many.  Nothing is locked unless the group is
 * still the one checked (relay_group_still).
 */
static int
lock_slots(EoRelayCall *call, const Slot *c, int n, Slot *s)
{
	int			nlocked;

	if (!relay_group_still(call))
		return 0;
	nlocked = relay_lock_seen(c, n, true, lease_as_read, NULL, s);
	for (int i = 0; i < nlocked; i++)
		eo_cluster_check_slot(s[i].sysid, call->ob->name);
	if (nlocked < n)
		call->ob->bells[call->ob->bell_last].blocked = true;	/* eo_relay_wait backs off */
	return nlocked;
}

/* Slot c alone; false if another relay took or holds it meanwhile. */
static bool
lock_slot(EoRelayCall *call, const Slot *c, Slot *s)
{
	return lock_slots(call, c, 1, s) == 1;
}

/* ---- the cut: a new snapshot S with hi(S) and the next txid ---- */

/*
 * How far below what its history allows a caught-up slot's lo(P) may lag
 * before a fetch moves it (probe_slots): seqs that each probe may read
 * again, against one write per this many seqs drawn.
 */
#define LO_SLACK 1000

typedef struct Cut
{
	Datum		snap;
	FullTransactionId unseen;	/* x(S): the oldest txid S does not see */
	int64		hi;
	FullTransactionId next_xid;
} Cut;

/*
 * The bounds rely on seq being drawn in time order across backends, which
 * a sequence cache breaks: refuse rather than skip events.
 */
static void
check_seq_cache(EoOutbox *ob)
{
	HeapTuple	tup = SearchSysCache1(SEQRELID, ObjectIdGetDatum(ob->seqid));
	int64		cache;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "eo: cache lookup failed for sequence %u", ob->seqid);
	cache = ((Form_pg_sequence) GETSTRUCT(tup))->seqcache;
	ReleaseSysCache(tup);
	if (cache != 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the seq column of outbox \"%s\" has a sequence cache of " INT64_FORMAT,
						ob->name, cache),
				 errdetail("Events could be skipped: the relay needs seq values drawn in time order."),
				 errhint("ALTER SEQUENCE %s CACHE 1", get_rel_name(ob->seqid))));
}

/*
 * S as the fetch's own transaction `own` must see it: with `own` in
 * progress.  PostgreSQL leaves a backend's own txid out of its snapshot's
 * in-progress list, so below xmax it would count as committed: the
 * fetch would hand out its own transaction's events before they commit
 * (and they would vanish on ROLLBACK), and those it writes after the
 * fetch would be visible in S, so no later batch, which takes the events
 * invisible in S, would ever hand them out.  Through the text form
 * "xmin:xmax:xip,...", whose list is ascending.
 */
static Datum
with_own_in_progress(Datum snap, FullTransactionId own, FullTransactionId xmax)
{
	char	   *text;
	char	   *list;
	StringInfoData buf;
	uint64		own64 = U64FromFullTransactionId(own);
	bool		placed = false;

	if (!FullTransactionIdIsValid(own) || !FullTransactionIdPrecedes(own, xmax))
		return snap;			/* none, or at or past xmax: in progress already */
	text = DatumGetCString(DirectFunctionCall1(pg_snapshot_out, snap));
	list = strchr(strchr(text, ':') + 1, ':') + 1;
	initStringInfo(&buf);
	appendBinaryStringInfo(&buf, text, list - text);
	for (char *p = list; *p != '\0';)
	{
		char	   *end;
		uint64		xid = strtou64(p, &end, 10);

		if (!placed && own64 < xid)
		{
			appendStringInfo(&buf, UINT64_FORMAT ",", own64);
			placed = true;
		}
		appendStringInfo(&buf, UINT64_FORMAT ",", xid);
		p = *end == ',' ? end + 1 : end;
	}
	if (!placed)
		appendStringInfo(&buf, UINT64_FORMAT ",", own64);
	buf.data[--buf.len] = '\0';	/* the last comma */
	return DirectFunctionCall1(pg_snapshot_in, CStringGetDatum(buf.data));
}

/*
 * x(S) (see the top of outbox_relay.c): the oldest txid S does not see
 * that may hold events.  S's own in-progress list (first_xip, if any)
 * leaves out the fetch's own transaction, which with_own_in_progress puts
 * in; that one holds back x(S) only if it wrote events before the cut
 * (a seq it draws later is above hi(S)).
 */
static FullTransactionId
oldest_unseen(bool has_xip, FullTransactionId first_xip, FullTransactionId xmax,
			  FullTransactionId own)
{
	bool		own_wrote = FullTransactionIdIsValid(own) && eo_ob_xact_drew_seq();
	FullTransactionId x = xmax;

	if (FullTransactionIdEquals(own, xmax) && !own_wrote)
		FullTransactionIdAdvance(&x);
	if (has_xip && FullTransactionIdPrecedes(first_xip, x))
		x = first_xip;
	if (own_wrote && FullTransactionIdPrecedes(own, x))
		x = own;
	return x;
}

static void
take_cut(EoOutbox *ob, Cut *cut)
{
	Datum		values[1];
	bool		xip_null;
	bool		isnull;
	Datum		first_xip;
	Datum		hi;
	HeapTuple	row;
	TupleDesc	desc;
	FullTransactionId own = GetTopFullTransactionIdIfAny();
	FullTransactionId xmax;
	int			rc;

	check_seq_cache(ob);

	values[0] = ObjectIdGetDatum(ob->seqid);
	rc = SPI_execute_plan(relay_plans.cut, values, NULL, false, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "eo: snapshot failed: %s", SPI_result_code_string(rc));
	row = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	first_xip = SPI_getbinval(row, desc, 2, &xip_null);
	xmax = DatumGetFullTransactionId(SPI_getbinval(row, desc, 3, &isnull));
	cut->snap = with_own_in_progress(SPI_getbinval(row, desc, 1, &isnull), own, xmax);
	cut->unseen = oldest_unseen(!xip_null,
							  xip_null ? InvalidFullTransactionId : DatumGetFullTransactionId(first_xip),
							  xmax, own);
	hi = SPI_getbinval(row, desc, 4, &isnull);
	cut->hi = isnull ? 0 : DatumGetInt64(hi);
	/* Read after hi: every txid from here on draws seqs above hi. */
	cut->next_xid = ReadNextFullTransactionId();

	/*
	 * The outbox's partitions as of now, after S: the statements that read
	 * the pages must know every partition that holds an event S sees (see
	 * outbox_relay_partitions.c).
	 */
	eo_ob_await_partition_list(ob);
}

/*
 * A cut to hand out a new batch from: for a group that waits for standbys
 * (outbox_standbys.c), only once they have every transaction S sees;
 * false if they did not in time, and nothing may be handed out of it.
 */
static bool
take_cut_to_serve(EoRelayCall *call, Cut *cut)
{
	if (call->held_back)
		return false;			/* once a call: one wait, one NOTICE */
	take_cut(call->ob, cut);
	if (call->standby_slots != NULL &&
		!eo_standbys_have_snapshot(call->standby_slots, call->grp, &call->held_lsn))
		call->held_back = true;
	return !call->held_back;
}

/* lo(S): see the comment at the top of this file. */
static int64
lower_bound(const Slot *s, FullTransactionId unseen)
{
	int64		lo = s->pos_lo;

	for (int i = 0; i < s->nhist; i++)
	{
		if (FullTransactionIdPrecedesOrEquals(s->hist_xid[i], unseen) &&
			s->hist_seq[i] + 1 > lo)
			lo = s->hist_seq[i] + 1;
	}
	return lo;
}

/*
 * lo(S) for a batch (P, S] starting at the cut: lower_bound with the cut's
 * own pair as well (see the top of outbox_relay.c).
 */
static int64
batch_lower_bound(const Slot *s, const Cut *cut)
{
	int64		lo = lower_bound(s, cut->unseen);

	if (FullTransactionIdPrecedesOrEquals(cut->next_xid, cut->unseen) && cut->hi + 1 > lo)
		lo = cut->hi + 1;
	return lo;
}

static void
remember(Slot *s, const Cut *cut)
{
	if (s->nhist == HIST)
	{
		memmove(&s->hist_xid[0], &s->hist_xid[1], sizeof(FullTransactionId) * (HIST - 1));
		memmove(&s->hist_seq[0], &s->hist_seq[1], sizeof(int64) * (HIST - 1));
		s->nhist--;
	}
	s->hist_xid[s->nhist] = cut->next_xid;
	s->hist_seq[s->nhist] = cut->hi;
	s->nhist++;
}

/* ---- pages ---- */

static bool
serve_old(EoRelayCall *call, Slot *s, PageReceiver *r)
{
	if (relay_run_old_page(call, s, s->old_hi, r) > 0)
		return true;
	s->has_old = false;
	return false;
}

/* ---- eo_relay_fetch ---- */

/*
 * Hand out the rest of a batch: the page after the last acknowledged one.
 * Returns false (and closes the batch) if nothing is left of it.
 */
static bool
serve_batch(EoRelayCall *call, Slot *s, PageReceiver *r)
{
	if (relay_run_page(call, s, relay_batch_lower(s), s->batch_hi, s->pos_snap, s->batch_snap, r) > 0)
		return true;
	s->pos_snap = s->batch_snap;
	s->pos_lo = s->batch_lo;
	s->has_batch = false;
	s->has_acked = false;
	return false;
}

/*
 * Start a batch (P, S] for a slot with none.  If it is empty, the slot
 * moves to S at once and false is returned.
 */
static bool
start_batch(EoRelayCall *call, Slot *s, const Cut *cut, PageReceiver *r)
{
	int64		lo = batch_lower_bound(s, cut);
	bool		found;

	found = relay_run_page(call, s, s->pos_lo - 1, cut->hi, s->pos_snap, cut->snap, r) > 0;
	remember(s, cut);
	if (!found)
	{
		s->pos_snap = cut->snap;
		s->pos_lo = lo;
		return false;
	}
	s->has_batch = true;
	s->batch_snap = cut->snap;
	s->batch_hi = cut->hi;
	s->batch_lo = lo;
	s->has_acked = false;
	return true;
}

/*
 * The probe statement: of the slots given ($1, with $2 = pos_lo - 1 and
 * $3 = pos_snap each), those with an event between their position and
 * the snapshot $5 (seq <= $4).  A LATERAL subquery with LIMIT 1 per slot,
 * so that the executor starts once for all slots and each slot costs one
 * index probe per partition.  Prepared as the owner (it names the view in
 * eo_internal), run as the caller, like the page statement.
 */
static void
prepare_probe_plan(EoOutbox *ob)
{
	Oid			types[5] = {INT4ARRAYOID, INT8ARRAYOID, PG_SNAPSHOTARRAYOID, INT8OID, PG_SNAPSHOTOID};
	char	   *slot;

	if (ob->probe_plan != NULL)
		return;
	slot = eo_ob_slot_expr(ob, "e");
	ob->probe_plan = eo_prepare_kept(psprintf(
											"SELECT p.slot FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2),"
											" pg_catalog.unnest($3)) AS p(slot, lo, snap)"
											" CROSS JOIN LATERAL (SELECT FROM %s e"
											"  WHERE %s OPERATOR(pg_catalog.=) p.slot"
											"  AND e.seq OPERATOR(pg_catalog.>) p.lo AND e.seq OPERATOR(pg_catalog.<=) $4"
											"  AND NOT pg_catalog.pg_visible_in_snapshot(e.txid, p.snap)"
											"  AND pg_catalog.pg_visible_in_snapshot(e.txid, $5) LIMIT 1) x",
											ob->view_name, slot),
									 5, types);
}

/*
 * Which of the n candidate slots c[] might have something to hand out
 * (work[i]): a batch or an earlier cluster's events in progress, or an
 * event committed between its position and a snapshot taken now (after
 * the slots were read, so newer than what was read; start_batch takes its
 * own after the lock).  No false "no" as of that snapshot: a position read
 * can only be older than the slot's, which shows more events, not fewer.
 * Slots whose lease is not free are left out (false).
 */
static void
probe_slots(EoRelayCall *call, const Slot *c, int n, TimestampTz now, bool *work)
{
	Datum	   *slots = palloc(sizeof(Datum) * n);
	Datum	   *los = palloc(sizeof(Datum) * n);
	Datum	   *snaps = palloc(sizeof(Datum) * n);
	int			nprobe = 0;
	Cut			cut;
	Datum		values[5];
	Oid			types[5] = {INT4ARRAYOID, INT8ARRAYOID, PG_SNAPSHOTARRAYOID, INT8OID, PG_SNAPSHOTOID};
	bool		nulls[5] = {false, false, false, false, false};
	EoIdentity	owner;
	ParamListInfo params = makeParamList(5);
	SPIExecuteOptions options;
	int			pinned;
	int			rc;

	take_cut(call->ob, &cut);
	for (int i = 0; i < n; i++)
	{
		work[i] = lease_free(&c[i], now) && (c[i].has_old || c[i].has_batch);
		if (!lease_free(&c[i], now) || work[i])
			continue;

		/*
		 * A slot caught up since a large batch keeps that batch's lo(P) (its
		 * history moves only when a batch starts), and the probe would read
		 * the whole batch again at every fetch.  Once the history allows a lo
		 * well above it, serve the slot: start_batch moves it to this cut,
		 * one write, and the probes after it start there.
		 */
		if (batch_lower_bound(&c[i], &cut) > c[i].pos_lo + LO_SLACK)
		{
			work[i] = true;
			continue;
		}
		slots[nprobe] = Int32GetDatum(c[i].slot);
		los[nprobe] = Int64GetDatum(c[i].pos_lo - 1);
		snaps[nprobe] = c[i].pos_snap;
		nprobe++;
	}
	if (nprobe == 0)
		return;
	values[0] = PointerGetDatum(construct_array(slots, nprobe, INT4OID, sizeof(int32), true, TYPALIGN_INT));
	values[1] = PointerGetDatum(construct_array(los, nprobe, INT8OID, sizeof(int64),
												FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[2] = PointerGetDatum(construct_array(snaps, nprobe, PG_SNAPSHOTOID, -1, false, TYPALIGN_DOUBLE));
	values[3] = Int64GetDatum(cut.hi);
	values[4] = cut.snap;
	for (int i = 0; i < 5; i++)
	{
		params->params[i].value = values[i];
		params->params[i].isnull = nulls[i];
		params->params[i].pflags = PARAM_FLAG_CONST;
		params->params[i].ptype = types[i];
	}
	prepare_probe_plan(call->ob);
	memset(&options, 0, sizeof(options));
	options.params = params;
	options.read_only = false;
	pinned = eo_plan_ready(call->ob->probe_plan);	/* as the owner: it names eo_internal */
	relay_as_caller(call, &owner);
	rc = SPI_execute_plan_extended(call->ob->probe_plan, &options);
	eo_restore_identity(&owner);
	eo_unpin(pinned);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "eo: slot probe failed: %s", SPI_result_code_string(rc));
	eo_ob_check_plan(call->ob, call->ob->probe_plan);
	for (uint64 j = 0; j < SPI_processed; j++)
	{
		bool		isnull;
		int32		slot = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[j], SPI_tuptable->tupdesc, 1, &isnull));

		for (int i = 0; i < n; i++)
			if (c[i].slot == slot)
				work[i] = true;
	}
}

/*
 * Slot s handed out a page of count events (none: nothing was left),
 * the last with seq last_seq, more of them behind it if `more`, under
 * lease token `token`: its page and lease columns.
 */
static void
record_page(Slot *s, int32 count, int64 last_seq, bool more, int64 token, TimestampTz now,
			int64 lease_usecs, bool session_lease)
{
	s->has_fetched = true;
	s->fetched_at = now;
	if (count > 0)
	{
		/* A page not acknowledged comes back first, same events first. */
		if (s->page_state == PAGE_OUT || s->page_state == PAGE_RELEASED)
			s->redelivered_events += Min(count, s->page_count);
		s->fetched_events += count;
		s->page_state = PAGE_OUT;
		s->page_end = last_seq;
		s->page_last = !more;
		s->page_count = count;
		s->has_token = true;
		s->lease_token = token;
		s->leased = true;
		s->lease_expires_at = now + lease_usecs;
		s->holder_pid = session_lease ? MyProcPid : 0;
	}
	else if (s->page_state == PAGE_OUT)
		s->page_state = PAGE_RELEASED;	/* an expired lease, nothing left */
}

/*
 * Serve the locked slot s: its next page into the result (true), or
 * nothing if it has nothing left; its row is written either way.
 * *complete says whether the slot is left with nothing that committed
 * before this fetch's snapshots: only a batch started now, after the
 * doorbell was read, and handed out to its end is (one that began in an
 * earlier fetch ends at that fetch's snapshot).
 */
static bool
serve_slot(EoRelayCall *call, Slot *s, PageReceiver *r, TimestampTz now, int64 lease_usecs,
		   bool session_lease, bool *complete)
{
	EoOutbox   *ob = call->ob;
	Cut			cut;
	bool		served;

	CHECK_FOR_INTERRUPTS();
	*complete = false;
	s->page_old = s->has_old && serve_old(call, s, r);
	if (s->page_old)
		served = true;
	else if (s->has_batch)
		served = serve_batch(call, s, r);
	else
	{
		/*
		 * The snapshot is taken after the slot is locked, for each slot: one
		 * taken earlier in this call (for another slot) can be older than
		 * the position another relay acknowledged for this slot meanwhile,
		 * and moving the slot to it would hand the events in between out
		 * again.
		 */
		if (!take_cut_to_serve(call, &cut))
			return false;		/* held back: the slot stays as it was */
		served = start_batch(call, s, &cut, r);
		*complete = !served || !r->more;
	}
	record_page(s, served ? r->count : 0, r->last_seq, r->more, r->token, now, lease_usecs,
				session_lease);
	relay_write_slot(ob->name, call->grp, s);
	return served;
}

/* ---- several slots served at once ---- */

/* What one slot of a fetch served together got. */
typedef struct SlotPage
{
	int32		count;
	bool		more;
	int64		token;			/* drawn at its first row */
	int64		last_seq;
} SlotPage;

/* A receiver of several slots' pages: each row starts with its slot's ordinal. */
typedef struct PagesReceiver
{
	PageReceiver page;			/* first: the DestReceiver, result and tokens */
	SlotPage   *pages;			/* by ordinal - 1 */
	int			n;
	int			stopped_at;		/* ordinal where max_events was reached, else n + 1 */
	int32		total;
	int64		last_ord;
} PagesReceiver;

static bool
pages_receive(TupleTableSlot *slot, DestReceiver *self)
{
	PagesReceiver *m = (PagesReceiver *) self;
	PageReceiver *r = &m->page;
	Datum		values[10];
	bool		nulls[10];
	int64		ord;
	int64		seq;
	SlotPage   *pg;

	slot_getallattrs(slot);
	ord = DatumGetInt64(slot->tts_values[0]);
	seq = DatumGetInt64(slot->tts_values[2]);
	/* The nested loop yields slot by slot, each in seq order: checked, not assumed. */
	if (ord < m->last_ord || ord < 1 || ord > m->n ||
		(m->pages[ord - 1].count > 0 && seq <= m->pages[ord - 1].last_seq))
		elog(ERROR, "eo: the pages of a fetch came out of order");
	m->last_ord = ord;
	pg = &m->pages[ord - 1];
	if (m->total >= r->max)
	{
		m->stopped_at = (int) ord;
		pg->more = pg->count > 0;
		return false;			/* stop the scan */
	}
	if (pg->count == 0)
		pg->token = eo_relay_new_token(r->token_seq);
	values[0] = Int64GetDatum(pg->token);
	nulls[0] = false;
	memcpy(&values[1], &slot->tts_values[1], sizeof(Datum) * 9);
	memcpy(&nulls[1], &slot->tts_isnull[1], sizeof(bool) * 9);
	tuplestore_putvalues(r->store, r->desc, values, nulls);
	pg->last_seq = seq;
	pg->count++;
	m->total++;
	return true;
}

static void
pages_startup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
	if (typeinfo->natts < 1 || TupleDescAttr(typeinfo, 0)->atttypid != INT8OID)
		elog(ERROR, "eo: the pages statement does not start with the slot's ordinal");
	relay_check_page_columns(typeinfo, 1);
}

/*
 * The pages statement: for slot i of the arrays, the events with
 * lo[i] < seq <= hi[i], invisible in ps[i] and visible in ss[i], in seq
 * order, at most $6; the first slot's rows first, each after its slot's
 * ordinal.  One executor start for all the slots of a fetch, and a rescan
 * per slot; prepared as the owner, run as the caller, like the page
 * statement.  created_at <= $7 (eo_ob_created_limit, after the cut that
 * made the partition list current, which is newer than every ss[i])
 * changes no answer and prunes the empty partitions made ahead before
 * the executor starts.
 */
static void
prepare_pages_plan(EoOutbox *ob)
{
	Oid			types[7] = {INT4ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, PG_SNAPSHOTARRAYOID,
	PG_SNAPSHOTARRAYOID, INT8OID, TIMESTAMPTZOID};
	char	   *slot;

	if (ob->pages_plan != NULL)
		return;
	slot = eo_ob_slot_expr(ob, "e");
	ob->pages_plan = eo_prepare_kept(psprintf(
											"SELECT p.ord, x.* FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2),"
											" pg_catalog.unnest($3), pg_catalog.unnest($4), pg_catalog.unnest($5))"
											" WITH ORDINALITY AS p(slot, lo, hi, ps, ss, ord)"
											" CROSS JOIN LATERAL (SELECT " PAGE_COLUMNS " FROM %s e"
											"  WHERE %s OPERATOR(pg_catalog.=) p.slot"
											"  AND e.seq OPERATOR(pg_catalog.>) p.lo AND e.seq OPERATOR(pg_catalog.<=) p.hi"
											"  AND NOT pg_catalog.pg_visible_in_snapshot(e.txid, p.ps)"
											"  AND pg_catalog.pg_visible_in_snapshot(e.txid, p.ss)"
											"  AND e.created_at OPERATOR(pg_catalog.<=) $7"
											"  ORDER BY e.seq LIMIT $6) x",
											slot, ob->view_name, slot),
									 7, types);
}

static Datum
int8_array(const int64 *v, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * n);

	for (int i = 0; i < n; i++)
		d[i] = Int64GetDatum(v[i]);
	return PointerGetDatum(construct_array(d, n, INT8OID, sizeof(int64), FLOAT8PASSBYVAL,
										   TYPALIGN_DOUBLE));
}

/* The n slots' pages (bounds lo, hi, P, S each) into m. */
static void
run_pages(EoRelayCall *call, const Slot *s, int n, const int64 *lo, const int64 *hi,
		  const Datum *ps, const Datum *ss, PagesReceiver *m)
{
	Oid			types[7] = {INT4ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, PG_SNAPSHOTARRAYOID,
	PG_SNAPSHOTARRAYOID, INT8OID, TIMESTAMPTZOID};
	Datum		values[7];
	bool		nulls[7] = {false, false, false, false, false, false, false};
	Datum	   *slots = palloc(sizeof(Datum) * n);

	for (int i = 0; i < n; i++)
		slots[i] = Int32GetDatum(s[i].slot);
	values[0] = PointerGetDatum(construct_array(slots, n, INT4OID, sizeof(int32), true, TYPALIGN_INT));
	values[1] = int8_array(lo, n);
	values[2] = int8_array(hi, n);
	values[3] = PointerGetDatum(construct_array((Datum *) ps, n, PG_SNAPSHOTOID, -1, false,
												TYPALIGN_DOUBLE));
	values[4] = PointerGetDatum(construct_array((Datum *) ss, n, PG_SNAPSHOTOID, -1, false,
												TYPALIGN_DOUBLE));
	values[5] = Int64GetDatum((int64) m->page.max + 1);
	values[6] = TimestampTzGetDatum(eo_ob_created_limit(call->ob));
	m->pages = palloc0(sizeof(SlotPage) * n);
	m->n = n;
	m->stopped_at = n + 1;
	m->total = 0;
	m->last_ord = 0;
	m->page.pub.receiveSlot = pages_receive;
	m->page.pub.rStartup = pages_startup;
	prepare_pages_plan(call->ob);
	(void) relay_run_statement(call, call->ob->pages_plan, 7, types, values, nulls, &m->page);
}

/*
 * After run_pages: slot s, the ordinal-th served together, moves as
 * serve_batch or start_batch would move it.  *complete as in serve_slot.
 */
static void
move_slot(Slot *s, const SlotPage *pg, const Cut *cut, bool *complete)
{
	s->page_old = false;		/* no earlier cluster's section (serve_together) */
	if (s->has_batch)
	{
		/* the rest of a batch: nothing left closes it (serve_batch) */
		if (pg->count == 0)
		{
			s->pos_snap = s->batch_snap;
			s->pos_lo = s->batch_lo;
			s->has_batch = false;
			s->has_acked = false;
		}
		*complete = false;
		return;
	}
	/* a new batch (P, S] (start_batch) */
	{
		int64		lo = batch_lower_bound(s, cut);

		remember(s, cut);
		if (pg->count == 0)
		{
			s->pos_snap = cut->snap;
			s->pos_lo = lo;
		}
		else
		{
			s->has_batch = true;
			s->batch_snap = cut->snap;
			s->batch_hi = cut->hi;
			s->batch_lo = lo;
			s->has_acked = false;
		}
		*complete = !pg->more;
	}
}

static bool
check_flag(FunctionCallInfo fcinfo, int arg, const char *what)
{
	if (PG_ARGISNULL(arg))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	return PG_GETARG_BOOL(arg);
}

static int32
check_count(FunctionCallInfo fcinfo, int arg, const char *what, int32 max)
{
	if (PG_ARGISNULL(arg) || PG_GETARG_INT32(arg) < 1 || PG_GETARG_INT32(arg) > max)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between 1 and %d", what, max)));
	return PG_GETARG_INT32(arg);
}

/* What a fetch asked for. */
typedef struct FetchArgs
{
	int32		max_events;
	int32		want;			/* slots */
	int64		lease_usecs;
	bool		session_lease;
	TimestampTz now;
} FetchArgs;

/*
 * Must slot s, whose page in a fetch of several slots is pg, be written?
 * If it got events, has a batch to go on with or to close, or is caught
 * up with a lo(P) well below what its history allows (see probe_slots).
 */
static bool
must_write(const Slot *s, const SlotPage *pg, const Cut *cut)
{
	return pg->count > 0 || s->has_batch || batch_lower_bound(s, cut) > s->pos_lo + LO_SLACK;
}

/*
 * Drop from the result the rows of the pages not served: r->store becomes
 * a copy of it with only the rows of the n pages served (their tokens),
 * in the order read.  Rare (another relay took or moved a slot meanwhile),
 * so the common case copies nothing.
 */
static void
drop_unserved_pages(PageReceiver *r, const int64 *tokens, int n)
{
	/* made where the result was: it outlives this call's SPI memory */
	MemoryContext old = MemoryContextSwitchTo(GetMemoryChunkContext(r->store));
	Tuplestorestate *kept = tuplestore_begin_heap(true, false, work_mem);
	TupleTableSlot *ts;

	MemoryContextSwitchTo(old);
	ts = MakeSingleTupleTableSlot(r->desc, &TTSOpsMinimalTuple);

	while (tuplestore_gettupleslot(r->store, true, false, ts))
	{
		bool		isnull;
		int64		token = DatumGetInt64(slot_getattr(ts, 1, &isnull));

		for (int i = 0; i < n; i++)
			if (tokens[i] == token)
			{
				tuplestore_puttupleslot(kept, ts);
				break;
			}
	}
	ExecDropSingleTupleTableSlot(ts);
	tuplestore_end(r->store);
	r->store = kept;
}

/*
 * Fetch from the n free slots f[] (none with an earlier cluster's events)
 * at once: one snapshot S, one statement for all their pages (max_events
 * shared in f's order, slot after slot), read before any lock, so that a
 * slot that is caught up costs its index probes and nothing else, as a
 * probe would; then the slots that got a page or must move anyway locked
 * (SKIP LOCKED), and served those whose row is still the version the scan
 * read.  No relay moved such a slot since, so its page, read from its
 * position as read with S taken after the read, is what serve_slot would
 * hand out after the lock.  The pages of the others are dropped; they
 * come in a later fetch.  Returns whether the fetch handed out
 * everything committed before it (see eo_relay_fetch).
 */
static bool
fetch_together(EoRelayCall *call, const Slot *f, int n, PageReceiver *r, const FetchArgs *a)
{
	PagesReceiver m;
	Cut			cut;
	int64	   *lo = palloc(sizeof(int64) * n);
	int64	   *hi = palloc(sizeof(int64) * n);
	Datum	   *ps = palloc(sizeof(Datum) * n);
	Datum	   *ss = palloc(sizeof(Datum) * n);
	Slot	   *pick = palloc(sizeof(Slot) * n);
	int		   *pick_page = palloc(sizeof(int) * n);
	Slot	   *locked = palloc(sizeof(Slot) * n);
	int64	   *served = palloc(sizeof(int64) * n);
	int			npick = 0;
	int			nlocked;
	int			nserved = 0;
	int32		kept = 0;
	int			written = 0;
	bool		drained = true;

	if (!take_cut_to_serve(call, &cut))
		return false;			/* held back: nothing handed out */
	for (int i = 0; i < n; i++)
	{
		lo[i] = f[i].has_batch ? relay_batch_lower(&f[i]) : f[i].pos_lo - 1;
		hi[i] = f[i].has_batch ? f[i].batch_hi : cut.hi;
		ps[i] = f[i].pos_snap;
		ss[i] = f[i].has_batch ? f[i].batch_snap : cut.snap;
	}
	m.page = *r;
	m.page.max = a->max_events;
	run_pages(call, f, n, lo, hi, ps, ss, &m);
	for (int i = 0; i < n; i++)
	{
		if (i + 1 > m.stopped_at || (i + 1 == m.stopped_at && m.pages[i].count == 0))
		{
			drained = false;	/* not reached: max_events ran out first */
			continue;
		}
		if (!must_write(&f[i], &m.pages[i], &cut))
			continue;
		pick_page[npick] = i;
		pick[npick++] = f[i];
	}
	nlocked = npick > 0 ? lock_slots(call, pick, npick, locked) : 0;
	for (int k = 0, j = 0; k < nlocked; k++)
	{
		Slot	   *s = &locked[k];
		const SlotPage *pg;
		bool		complete;

		while (j < npick && pick[j].slot != s->slot)
			j++;				/* lock_slots keeps the order */
		if (j == npick)
			elog(ERROR, "eo: slot %d was locked but not picked", s->slot);
		pg = &m.pages[pick_page[j]];
		if (!ItemPointerEquals(&s->tid, &pick[j].seen_tid))
			continue;			/* moved since the scan: fetched again */
		move_slot(s, pg, &cut, &complete);
		drained = drained && complete;
		record_page(s, pg->count, pg->last_seq, pg->more, pg->token, a->now, a->lease_usecs,
					a->session_lease);
		if (pg->count > 0)
			served[nserved++] = pg->token;
		kept += pg->count;
		locked[written++] = *s;
	}
	/* a slot another relay has locked or moved meanwhile: fetch again, not sleep */
	if (written < npick)
		drained = false;
	relay_write_slots(call->ob->name, call->grp, locked, written);
	if (kept < m.total)
		drop_unserved_pages(r, served, nserved);
	return drained;
}

/* The same, slot by slot (serve_slot), up to `want` slots with a page. */
static bool
fetch_one_by_one(EoRelayCall *call, const Slot *c, const bool *work, int n, PageReceiver *r,
				 const FetchArgs *a)
{
	int32		served = 0;
	int32		events = 0;
	bool		drained = true;

	for (int i = 0; i < n; i++)
	{
		Slot		s;
		bool		complete;

		if (!work[i])
			continue;
		if (served >= a->want || events >= a->max_events)
			return false;		/* a slot with work left for the next fetch */
		/* locked by another relay's fetch now: it may leave it (see above) */
		if (!lock_slot(call, &c[i], &s))
		{
			drained = false;
			continue;
		}
		r->max = a->max_events - events;
		if (serve_slot(call, &s, r, a->now, a->lease_usecs, a->session_lease, &complete))
		{
			served++;
			events += r->count;
		}
		drained = drained && complete;
	}
	return drained;
}

/*
 * The free slots of the n candidates c[] into f[], if they can be fetched
 * together (fetch_together): no more of them than `want` (each gets its
 * page: one that turns out empty does not take another's turn) and none
 * with an earlier cluster's events.  Returns how many, or -1.
 */
static int
free_to_fetch_together(const Slot *c, int n, TimestampTz now, int32 want, Slot *f)
{
	int			nfree = 0;

	for (int i = 0; i < n; i++)
	{
		if (!lease_free(&c[i], now))
			continue;
		if (c[i].has_old || nfree == want)
			return -1;
		f[nfree++] = c[i];
	}
	return nfree;
}

/*
 * A fetch rolled back (its transaction, or a savepoint around it) leaves
 * its pages free again: what it knew of the doorbell counts no more, so
 * that eo_relay_wait answers "fetch now" rather than sleep past them.
 */
static void
bell_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		eo_ob_forget_fetches();
}

/* The subtransaction of eo_relay_wait's look (look_and_let_go), if any. */
static SubTransactionId looking = InvalidSubTransactionId;

static void
bell_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					  SubTransactionId parentSubid, void *arg)
{
	/* the wait's look is rolled back only to let its locks go: no fetch undone */
	if (event == SUBXACT_EVENT_ABORT_SUB && mySubid != looking)
		eo_ob_forget_fetches();
}

static void
bell_watch_rollbacks(void)
{
	static bool registered = false;

	if (registered)
		return;
	RegisterXactCallback(bell_xact_callback, NULL);
	RegisterSubXactCallback(bell_subxact_callback, NULL);
	registered = true;
}

/* The bell state of this backend's last fetch of group_id, or NULL. */
static EoBell *
bell_find(EoOutbox *ob, int32 group_id)
{
	for (int i = 0; i < EO_BELLS; i++)
		if (ob->bells[i].group_id == group_id && group_id != 0)
			return &ob->bells[i];
	return NULL;
}

/*
 * The bell state a fetch of group_id starts afresh: the group's own, else
 * an unused one, else the one fetched longest ago (its group then gets
 * "fetch now" from eo_relay_wait, never a sleep on another's state).
 */
static EoBell *
bell_of_fetch(EoOutbox *ob, int32 group_id)
{
	EoBell	   *b = bell_find(ob, group_id);

	if (b == NULL)
	{
		b = &ob->bells[0];		/* unused ones have order 0 */
		for (int i = 1; i < EO_BELLS; i++)
			if (ob->bells[i].order < b->order)
				b = &ob->bells[i];
	}
	b->group_id = group_id;
	b->known = false;
	b->blocked = false;
	b->standby_lsn = 0;
	b->order = ++ob->bell_clock;
	ob->bell_last = (int) (b - ob->bells);
	return b;
}

/*
 * eo_relay_fetch(outbox, consumer_group, max_events, lease [, slots,
 * release_on_disconnect]) returns the next pages of events of up to
 * `slots` (default 1) free slots of the group, at most max_events in all,
 * each slot's events with the lease token that acknowledges them; no rows
 * if every free slot is caught up.  With release_on_disconnect the leases
 * also end when this backend does (the default: only when they expire;
 * a relay that connects per call, or whose connections a pooler or a
 * database setting closes, must not ask for it).  Slots are served oldest-served first; one that turns out to
 * have nothing is passed over without a write.
 */
Datum
eo_relay_fetch(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *grp = eo_check_group_name(PG_GETARG_DATUM(1), PG_ARGISNULL(1));
	int32		max_events = check_count(fcinfo, 2, "max_events", EO_RELAY_MAX_EVENTS);
	int64		lease_usecs = eo_check_lease(PG_GETARG_DATUM(3), PG_ARGISNULL(3), EO_LEASE_RELAY);
	int32		want = PG_NARGS() > 4 ? check_count(fcinfo, 4, "slots", EO_OUTBOX_MAX_SLOTS) : 1;
	bool		session_lease = PG_NARGS() > 5 && check_flag(fcinfo, 5, "release_on_disconnect");
	EoRelayCall call;
	EoOutbox   *ob;
	PageReceiver r;
	int			ncandidates;
	Slot	   *f;
	int			nfree;
	FetchArgs	fetch = {max_events, want, lease_usecs, session_lease, GetCurrentTimestamp()};
	bool		drained;
	Slot	   *c;
	bool	   *work;
	EoBell	   *bell;

	InitMaterializedSRF(fcinfo, 0);

	eo_relay_begin(&call, PG_GETARG_DATUM(0), PG_ARGISNULL(0), grp);
	ob = call.ob;

	/*
	 * Before any snapshot of this fetch: see outbox_doorbell.c.  Known (so
	 * that eo_relay_wait may sleep) only once this fetch has handed out
	 * everything that committed before it was read, at the end.
	 */
	bell_watch_rollbacks();
	bell = bell_of_fetch(ob, call.group_id);
	bell->seen = eo_doorbell_read(ob->relid);

	relay_init_receiver(&r, rsinfo->setResult, rsinfo->setDesc, max_events);
	r.token_seq = eo_ob_token_seq();

	/*
	 * The group's slots, unlocked: a fetch locks only the slots it will
	 * serve, so one that is caught up costs a read, no lock, no WAL.
	 */
	c = relay_read_group_slots(ob->name, grp, &ncandidates);
	f = palloc(sizeof(Slot) * Max(ncandidates, 1));
	nfree = free_to_fetch_together(c, ncandidates, fetch.now, want, f);
	if (nfree == 0)
		drained = true;
	else if (nfree > 0)
		drained = fetch_together(&call, f, nfree, &r, &fetch);
	else
	{
		work = palloc(sizeof(bool) * Max(ncandidates, 1));
		probe_slots(&call, c, ncandidates, fetch.now, work);
		drained = fetch_one_by_one(&call, c, work, ncandidates, &r, &fetch);
	}
	bell->known = drained;
	if (call.held_back)
		bell->standby_lsn = call.held_lsn;	/* eo_relay_wait waits for them */
	rsinfo->setResult = r.store;	/* fetch_together may have dropped rows */
	eo_relay_end(&call);
	return (Datum) 0;
}

/*
 * Milliseconds until a lease of the group can be taken over (it expires,
 * or its session is gone): 0 if one can be now, -1 if none is held.
 */
static int64
next_takeover_ms(EoRelayCall *call, TimestampTz now)
{
	int			n;
	Slot	   *slots = relay_read_group_slots(call->ob->name, call->grp, &n);
	int64		best = -1;

	for (int i = 0; i < n; i++)
	{
		const Slot *s = &slots[i];
		int64		ms;

		if (!s->leased || s->page_state != PAGE_OUT)
			continue;
		ms = lease_free(s, now) ? 0 : TimestampDifferenceMilliseconds(now, s->lease_expires_at) + 1;
		if (best < 0 || ms < best)
			best = ms;
	}
	return best;
}

/* Sleep ms, or less if interrupted (the caller's timeout bounds it). */
static void
linger_ms(int64 ms)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);
	long		left;

	while ((left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline)) > 0)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, left,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * How long eo_relay_wait backs off before it answers "fetch now" after a
 * fetch that passed over slots it could not lock: another transaction
 * holds them (a relay serving or acknowledging them, or one left idle in
 * a transaction or prepared), and fetching again at once would read their
 * pages again and again, as fast as the calls go, until it ends.
 */
#define BLOCKED_BACKOFF_MS 10

/*
 * How long eo_relay_wait without a group backs off after a fetch held
 * back for its group's standbys: it does not know them, and fetching
 * again at once would hold the outbox's lock for the fetch's wait, again
 * and again.  With the group named it waits for the standbys themselves.
 */
#define STANDBY_BACKOFF_MS 1000

/*
 * Run look(arg) in a subtransaction that is rolled back, whether it
 * succeeded or not: every lock it took is let go (those the transaction
 * held before stay), and so are its other traces.  An error is raised
 * again after the rollback, so that a caller's own subtransaction (a
 * PL/pgSQL block with EXCEPTION) is the current one when it catches it.
 */
static void
look_and_let_go(void (*look) (void *), void *arg)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	looking = GetCurrentSubTransactionId();
	PG_TRY();
	{
		look(arg);
	}
	PG_CATCH();
	{
		ErrorData  *edata = eo_subxact_failed(cxt, owner);

		looking = InvalidSubTransactionId;
		ReThrowError(edata);
	}
	PG_END_TRY();
	RollbackAndReleaseCurrentSubTransaction();
	looking = InvalidSubTransactionId;
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
}

/* What eo_relay_wait does after its look (see there). */
typedef enum WaitNext
{
	WAIT_FETCH_NOW,				/* return true at once */
	WAIT_BACK_OFF,				/* ... after BLOCKED_BACKOFF_MS */
	WAIT_SLEEP,					/* sleep on the doorbell */
	WAIT_STANDBYS,				/* until the standbys flush what a fetch needed */
	WAIT_STANDBY_BACK_OFF		/* ... after STANDBY_BACKOFF_MS, without the group */
} WaitNext;

typedef struct WaitLook
{
	FunctionCallInfo fcinfo;	/* eo_relay_wait's arguments, checked */
	const char *grp;			/* NULL: without a group */
	TimestampTz start;
	/* what the look found */
	WaitNext	next;
	Oid			relid;			/* the outbox table: its doorbell */
	uint64		seen;			/* the doorbell before the last fetch */
	int64		takeover;		/* ms until a lease can be taken over, -1: none */
	ArrayType  *standby_slots;	/* WAIT_STANDBYS: the group's, copied */
	uint64		standby_lsn;	/* ... and the WAL they must flush */
} WaitLook;

/*
 * eo_relay_wait's look before it sleeps: the caller's rights, the group,
 * what this session's last fetch left, when a lease of the group can be
 * taken over.  Everything it needs after is copied into w (plain values:
 * the look is rolled back).
 */
static void
wait_look(void *arg)
{
	WaitLook   *w = (WaitLook *) arg;
	FunctionCallInfo fcinfo = w->fcinfo;
	EoOutbox   *ob;
	int32		group_id = 0;
	EoBell	   *bell;

	w->next = WAIT_FETCH_NOW;
	w->takeover = -1;
	if (w->grp != NULL)
	{
		EoRelayCall call;

		eo_relay_begin(&call, PG_GETARG_DATUM(0), PG_ARGISNULL(0), w->grp);
		group_id = call.group_id;
		bell = bell_find(call.ob, group_id);
		/* the last fetch was held back for standbys: wait for them, lock-free */
		if (bell != NULL && !bell->known && bell->standby_lsn != 0 && call.standby_slots != NULL)
		{
			w->next = WAIT_STANDBYS;
			/* SPI_palloc: in the context that outlives this call's SPI */
			w->standby_slots = SPI_palloc(VARSIZE(call.standby_slots));
			memcpy(w->standby_slots, call.standby_slots, VARSIZE(call.standby_slots));
			w->standby_lsn = bell->standby_lsn;
			eo_relay_end(&call);
			return;
		}
		/* the bell rang already: it lingers below, no lease to wait for */
		if (bell != NULL && bell->known && eo_doorbell_read(call.ob->relid) == bell->seen)
			w->takeover = next_takeover_ms(&call, w->start);
		eo_relay_end(&call);
		if (w->takeover == 0)
			return;
	}
	ob = relay_outbox(PG_GETARG_DATUM(0), PG_ARGISNULL(0));

	/*
	 * With a group, what this session's last fetch of that group left;
	 * without, what its last fetch of the outbox left.  None (no such
	 * fetch, or only before EO_BELLS other groups'): fetch now.
	 */
	bell = bell_find(ob, group_id != 0 ? group_id : ob->bells[ob->bell_last].group_id);
	if (bell == NULL)
		return;
	if (!bell->known)
	{
		if (bell->standby_lsn != 0)
			w->next = WAIT_STANDBY_BACK_OFF;	/* no group named: not its standbys */
		else
			w->next = bell->blocked ? WAIT_BACK_OFF : WAIT_FETCH_NOW;
		return;
	}
	w->next = WAIT_SLEEP;
	w->relid = ob->relid;
	w->seen = bell->seen;
}

/*
 * eo_relay_wait(outbox, timeout [, consumer_group, linger]): after a
 * fetch, sleep until a transaction that wrote events into the outbox
 * commits (true) or the timeout ends (false).  Without the preload it
 * sleeps the whole timeout.  "Its last fetch" is this session's last
 * fetch of the group, or without a group its last fetch from the outbox.
 * It returns true at once if there is none (never fetched, fetched only
 * before EO_BELLS other groups of the outbox, or rolled back), if it may
 * have left events that committed before it (a page cut short by
 * max_events or slots, or the rest of an earlier batch: see
 * eo_relay_fetch), or if the bell rang since it began: fetch now.  So a
 * relay may wait right after acknowledging a page, without an empty fetch
 * first.  (If that fetch passed over slots another transaction had
 * locked, it first backs off BLOCKED_BACKOFF_MS.)
 * With a group whose last fetch was held back for its standbys
 * (eo_group_set_standby_slots), it waits until they flushed what that
 * fetch needed (true) or the timeout ends (false), holding no lock.
 * With a group, the sleep also ends (true) when one of its leases can be
 * taken over, and after the bell rang it lingers `linger` more, within
 * the timeout, so that the next page holds more than one commit's events
 * (not when the last fetch left events: they are there already).
 *
 * Locks.  A relay may sleep here an hour, in a loop; retention drops an
 * outbox's partitions under ACCESS EXCLUSIVE on the outbox table.  So
 * everything read before the sleep is read in a subtransaction that is
 * then rolled back (look_and_let_go): the sleeps hold none of the locks
 * the look took, on the outbox table or eo's tables.  Nothing is read
 * after it: the doorbell is in shared memory, and the next fetch reads
 * everything again.  A commit between the look and the sleep is not
 * missed: the doorbell is compared with its value before the last fetch.
 * Locks the caller's transaction took before the call (a fetch earlier
 * in the same transaction) are held through the sleep, as always: call
 * it in a transaction of its own.
 */
Datum
eo_relay_wait(PG_FUNCTION_ARGS)
{
	WaitLook	w;
	int64		ms;
	int64		linger = 0;
	bool		rang;

	ms = eo_interval_usecs(eo_check_interval(PG_GETARG_DATUM(1), PG_ARGISNULL(1), "timeout",
											 0, USECS_PER_HOUR)) / 1000;
	memset(&w, 0, sizeof(w));
	w.fcinfo = fcinfo;
	w.start = GetCurrentTimestamp();
	if (PG_NARGS() > 2)
	{
		w.grp = eo_check_group_name(PG_GETARG_DATUM(2), PG_ARGISNULL(2));
		linger = eo_interval_usecs(eo_check_interval(PG_GETARG_DATUM(3), PG_ARGISNULL(3), "linger",
													 0, USECS_PER_MINUTE)) / 1000;
	}
	look_and_let_go(wait_look, &w);

	if (w.next == WAIT_STANDBYS)
		PG_RETURN_BOOL(eo_standbys_wait(w.standby_slots, w.standby_lsn, ms));
	if (w.next == WAIT_BACK_OFF)
		linger_ms(Min(ms, BLOCKED_BACKOFF_MS));
	if (w.next == WAIT_STANDBY_BACK_OFF)
		linger_ms(Min(ms, STANDBY_BACKOFF_MS));
	if (w.next != WAIT_SLEEP)
		PG_RETURN_BOOL(true);
	rang = eo_doorbell_wait(w.relid, w.seen, w.takeover > 0 ? Min(ms, w.takeover) : ms);
	if (!rang)
		PG_RETURN_BOOL(w.takeover > 0 && w.takeover <= ms);
	linger = Min(linger, ms - TimestampDifferenceMilliseconds(w.start, GetCurrentTimestamp()));
	if (linger > 0)
		linger_ms(linger);
	PG_RETURN_BOOL(true);
}

