/*-------------------------------------------------------------------------
 * outbox_relay.c
 *	  Consumer groups of an outbox: eo_group_create / eo_group_drop; the
 *	  page statements of the relay API; eo_relay_ack (and _pages) /
 *	  eo_relay_extend / eo_relay_release; the numbers behind the
 *	  eo_outbox_status view.  eo_relay_fetch and eo_relay_wait are in
 *	  outbox_relay_fetch.c, the group and slot rows in outbox_slots.c
 *	  (outbox_relay.h is what the three share).
 *
 * Slots.  A group is split into the outbox's N slots (an event's slot is
 * hash(aggregateid) mod N, the first column of the outbox's index), each
 * with its own position and lease, so several relays share a group: each
 * holds one slot at a time, one aggregate's events stay in one slot and in
 * order, and a slow aggregate holds up only its own slot.  (A relay that
 * fetches runs through the slots in turn; the fewer slots, the fewer
 * times it visits each heap page.)
 *
 * Batches (the idea of PgQ's ticks).  A slot's position is a snapshot P
 * (pg_snapshot): every event whose transaction is visible in P has been
 * acknowledged.  A fetch takes a new snapshot S and hands out the events
 * whose transaction is visible in S but not in P: exactly the
 * transactions that committed between the two, in whatever txid order
 * they were assigned.  A transaction that took its txid early and
 * committed late is simply invisible in P and visible in some later S, so
 * it is never skipped.  Reading writes nothing per event; the slot row is
 * written once per batch.  Such a batch (P, S] may be larger than a
 * relay asked for, so it is handed out in pages in seq order: the slot
 * remembers S and the last acknowledged seq until the batch is done, then
 * S becomes the new P.  Order: batches follow commit order (everything in
 * (P, S] committed after everything visible in P); inside one batch seq
 * order is insertion order, which is commit order for any two
 * transactions that serialize on the aggregate (one emits after the other
 * committed), the only case where commit order is defined.
 *
 * Index bounds.  The only index is (slot, seq), so a batch is read as a
 * seq range of the slot, filtered by the two visibility tests.  Upper
 * end: hi(S), the seq sequence's last value read after S was taken;
 * a transaction visible in S drew its seqs before it committed, before S.
 * (S always shows the fetch's own transaction in progress, although
 * PostgreSQL leaves a backend's own txid out of its snapshots: see
 * with_own_in_progress in outbox_relay_fetch.c.)
 * Lower end: lo(P), a seq below which no event invisible in P can lie.
 * Every event's txid was assigned no later than its seq was drawn (the
 * txid column's default runs first, see outbox_registry.c), so for any pair (X, H)
 * where H = the sequence's last value read before X = the next txid to be
 * assigned, an event with txid >= X has seq > H.  Each fetch records
 * such a pair in the slot (a short history); lo(S) = 1 + the largest H
 * among recorded pairs and S's own pair with X <= x(S), the oldest txid
 * S does not see that may hold events (the first of its in-progress
 * list, else its xmax, or the one after xmax if that is the fetch's own
 * transaction and it drew no seq), as every event invisible in S has
 * txid >= x(S); and never lower than lo(P).  With S's own pair, a batch
 * taken while no other transaction runs has lo(S) = hi(S) + 1: the next
 * batch starts its scan where this one ended, not where it began.  A long
 * transaction holds lo back to where it started, so while it runs each
 * batch also scans the events committed since it began (PgQ has the same
 * cost and trims it with txid lists; here it is one index range scan).
 *
 * Leases and fencing.  A fetch reads the group's slots without a lock,
 * passes over those leased to a live backend and those with nothing to
 * hand out (no lock, no write, no WAL for a caught-up slot), and locks
 * the ones it serves as SELECT ... FOR UPDATE SKIP LOCKED would, if their
 * lease is still as read, so two relays never pick the same slot.  (A
 * fetch of all the free slots reads their pages first and serves only the
 * slots whose row, once locked, is still the version it read; see
 * fetch_together in outbox_relay_fetch.c.)  A lease is
 * free when it expired, or, if it was taken with release_on_disconnect,
 * when the backend that took it is gone (the relay crashed or lost its
 * connection).  The fetch gives the slot a
 * lease and a new token, up to `slots` slots per call, from a sequence
 * (fenced across promotions: fencing.c), so tokens are strictly increasing
 * per slot.  eo_relay_ack needs the slot's current token; once another
 * relay has taken the slot over after expiry, the old token is refused
 * (55006, "stale": any token below the group's newest, or from before a
 * failover) and the page comes back, same events first, to the new
 * holder; a token above every one the group holds gets 55000.  An expired
 * lease nobody took over yet can still be acknowledged, extended or
 * released.
 *
 * Who.  A consumer group belongs to the role that created it: fetching,
 * acknowledging, extending and releasing need that role's privileges (and
 * SELECT on the outbox).  Group and slot rows live in eo_internal and are
 * read, locked and written as the extension owner, through their primary
 * keys without the executor (outbox_slots.c); the events themselves are
 * read as the
 * caller, whose SELECT right suffices, through a statement that names the
 * outbox table and is checked afterwards to have read the table eo
 * recorded (outbox_registry.c).  Statements are prepared once per backend with
 * generic plans and fully qualified names.  Call the relay functions in
 * their own transaction at READ COMMITTED.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/tableam.h"
#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_sequence.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/procarray.h"
#include "utils/wait_event.h"
#include "tcop/dest.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/fmgroids.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
#include "utils/xid8.h"

#include "compat.h"
#include "eo.h"
#include "outbox.h"
#include "outbox_relay.h"

PG_FUNCTION_INFO_V1(eo_group_create);
PG_FUNCTION_INFO_V1(eo_group_drop);
PG_FUNCTION_INFO_V1(eo_relay_ack);
PG_FUNCTION_INFO_V1(eo_relay_ack_pages);
PG_FUNCTION_INFO_V1(eo_relay_extend);
PG_FUNCTION_INFO_V1(eo_relay_release);






RelayPlans relay_plans;

/* ---- argument checks ---- */

static int64
check_token(Datum value, bool isnull)
{
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lease token must not be null")));
	return DatumGetInt64(value);
}

/* The outbox a relay function works on: table mode, caller may read it. */
EoOutbox *
relay_outbox(Datum value, bool isnull)
{
	char	   *name = eo_check_outbox_name(value, isnull, "outbox name");
	EoOutbox   *ob = eo_ob_lookup(name, AccessShareLock, false);

	if (ob->mode != EO_OUTBOX_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("outbox \"%s\" writes its events to the WAL", ob->name),
				 errhint("Read it through logical decoding (messages with prefix \"%s\").",
						 ob->wal_prefix)));
	eo_ob_check_privilege(ob, ACL_SELECT, "relay from");
	return ob;
}

/* ---- plans ---- */

static void
prepare_plans(void)
{
	Oid			group_types[2] = {TEXTOID, TEXTOID};
	Oid			cut_types[1] = {REGCLASSOID};

	if (relay_plans.ready)
		return;

	/*
	 * S is the statement's own snapshot, taken before the sequence is read:
	 * whatever pg_current_snapshot() shows as committed drew its seqs
	 * before hi.  The second column is the first txid of its in-progress
	 * list, NULL if none (take_cut makes x(S) of it).
	 */
	relay_plans.cut = eo_prepare_kept("SELECT x.s, (SELECT i FROM pg_catalog.pg_snapshot_xip(x.s) i"
								" ORDER BY i USING OPERATOR(pg_catalog.<) LIMIT 1), pg_catalog.pg_snapshot_xmax(x.s),"
								" pg_catalog.pg_sequence_last_value($1)"
								" FROM (SELECT pg_catalog.pg_current_snapshot() AS s) x",
								1, cut_types);
	relay_plans.group_tokens = eo_prepare_kept("SELECT pg_catalog.max(lease_token)"
										 " FROM eo_internal.eo_outbox_slots"
										 " WHERE outbox OPERATOR(pg_catalog.=) $1 AND grp OPERATOR(pg_catalog.=) $2",
										 2, group_types);
	relay_plans.ready = true;
}

/*
 * Start a relay call on outbox `outbox` and group `grp` (unchecked): find
 * and check the outbox as the caller, then act as the extension owner
 * with SPI connected, the group read and the caller checked to be a
 * member of its role.  eo_relay_end() undoes it.
 */
void
eo_relay_begin(EoRelayCall *call, Datum outbox, bool outbox_null, const char *grp)
{
	call->ob = relay_outbox(outbox, outbox_null);
	call->grp = pstrdup(grp);
	call->held_back = false;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&call->caller);
	eo_cluster_check(call->ob);
	prepare_plans();
	/* as a read-only statement of this call would see it */
	if (!relay_find_group(call->ob->name, grp,
						  ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot(),
						  &call->group_id, &call->group_owner, &call->standby_slots))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("consumer group \"%s\" of outbox \"%s\" does not exist",
						grp, call->ob->name),
				 errhint("Create it with eo_group_create.")));
	if (!has_privs_of_role(call->caller.userid, call->group_owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for consumer group \"%s\" of outbox \"%s\"",
						grp, call->ob->name),
				 errdetail("It belongs to role \"%s\".", GetUserNameFromId(call->group_owner, true)),
				 errhint("Relay as a member of that role.")));
}

void
eo_relay_end(EoRelayCall *call)
{
	eo_restore_identity(&call->caller);
	SPI_finish();
}

/* Act as the caller of this relay call until eo_restore_identity(owner). */
void
relay_as_caller(EoRelayCall *call, EoIdentity *owner)
{
	GetUserIdAndSecContext(&owner->userid, &owner->sec_context);
	owner->guc_level = 0;		/* the settings stay as eo_relay_begin pinned them */
	SetUserIdAndSecContext(call->caller.userid, call->caller.sec_context);
}


/*
 * The page statement: it names the outbox's view in eo_internal, so it is
 * prepared as the owner (eo_relay_begin switched), and run as the caller.
 */
static void
prepare_page_plan(EoOutbox *ob)
{
	Oid			types[6] = {INT4OID, INT8OID, INT8OID, PG_SNAPSHOTOID, PG_SNAPSHOTOID, INT8OID};
	char	   *slot;

	if (ob->page_plan != NULL)
		return;
	slot = eo_ob_slot_expr(ob, "e");

	ob->page_plan = eo_prepare_kept(psprintf(
										   "SELECT " PAGE_COLUMNS " FROM %s e"
										   " WHERE %s OPERATOR(pg_catalog.=) $1"
										   " AND e.seq OPERATOR(pg_catalog.>) $2 AND e.seq OPERATOR(pg_catalog.<=) $3"
										   " AND NOT pg_catalog.pg_visible_in_snapshot(e.txid, $4)"
										   " AND pg_catalog.pg_visible_in_snapshot(e.txid, $5)"
										   " ORDER BY e.seq LIMIT $6", slot, ob->view_name, slot),
								  6, types);
}

/*
 * Is the backend that took a lease gone?  Then the relay holding it
 * crashed or lost its connection, and nobody will acknowledge the page
 * under it: the lease is free at once (its token is fenced off as after
 * an expiry).  A pid reused by another backend only keeps the lease until
 * it expires, as before; this backend's own leases are never gone.
 */
bool
eo_relay_holder_gone(int32 pid)
{
	return pid != 0 && pid != MyProcPid && BackendPidGetProc(pid) == NULL;
}


/* The highest token the group's slots hold (0 if none). */
static int64
group_max_token(EoRelayCall *call)
{
	Datum		values[2];
	bool		isnull;
	Datum		max;

	values[0] = CStringGetTextDatum(call->ob->name);
	values[1] = CStringGetTextDatum(call->grp);
	if (SPI_execute_plan(relay_plans.group_tokens, values, NULL, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "eo: group token lookup failed");
	max = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? 0 : DatumGetInt64(max);
}

/* A new lease token of a relay (outbox_relay.h). */
int64
eo_relay_new_token(Oid token_seq)
{
	return eo_fenced_nextval(token_seq, EO_RELAY_EPOCH_SHIFT, EO_RELAY_MAX_EPOCH);
}

/* ---- one page of a batch, straight into the function's result ---- */


static bool
page_receive(TupleTableSlot *slot, DestReceiver *self)
{
	PageReceiver *r = (PageReceiver *) self;
	Datum		values[10];
	bool		nulls[10];

	if (r->count >= r->max)
	{
		r->more = true;
		return false;			/* stop the scan */
	}
	if (r->count_only)
	{
		r->last_seq = DatumGetInt64(slot_getattr(slot, 2, &nulls[0]));
		r->count++;
		return true;
	}
	if (r->count == 0)
		r->token = eo_relay_new_token(r->token_seq);
	slot_getallattrs(slot);
	values[0] = Int64GetDatum(r->token);
	nulls[0] = false;
	memcpy(&values[1], slot->tts_values, sizeof(Datum) * 9);
	memcpy(&nulls[1], slot->tts_isnull, sizeof(bool) * 9);
	tuplestore_putvalues(r->store, r->desc, values, nulls);
	r->last_seq = DatumGetInt64(slot->tts_values[1]);
	r->count++;
	return true;
}

/*
 * page_receive copies the values into eo_relay_fetch's result as they
 * are, so the page statement must yield exactly those types.
 */
void
relay_check_page_columns(TupleDesc typeinfo, int first)
{
	static const Oid types[9] = {INT4OID, INT8OID, UUIDOID, TEXTOID, TEXTOID, TEXTOID,
	JSONBOID, JSONBOID, TIMESTAMPTZOID};

	if (typeinfo->natts != first + lengthof(types))
		elog(ERROR, "eo: the page statement returns %d columns", typeinfo->natts);
	for (int i = 0; i < lengthof(types); i++)
		if (TupleDescAttr(typeinfo, first + i)->atttypid != types[i])
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("column %d of the outbox page has type %s, not %s", i + 1,
							format_type_be(TupleDescAttr(typeinfo, first + i)->atttypid),
							format_type_be(types[i]))));
}

static void
page_startup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
	relay_check_page_columns(typeinfo, 0);
}

static void
page_shutdown(DestReceiver *self)
{
}

static void
page_destroy(DestReceiver *self)
{
}

/*
 * Events of slot s with lower < seq <= upper, invisible in P and visible
 * in S, in seq order: at most r->max of them into the result.
 */
int32
relay_run_statement(EoRelayCall *call, SPIPlanPtr plan, int nparams, const Oid *types,
			  const Datum *values, const bool *nulls, PageReceiver *r)
{
	EoIdentity	owner;
	ParamListInfo params = makeParamList(nparams);
	SPIExecuteOptions options;
	int			pinned;
	int			rc;

	for (int i = 0; i < nparams; i++)
	{
		params->params[i].value = values[i];
		params->params[i].isnull = nulls[i];
		params->params[i].pflags = PARAM_FLAG_CONST;
		params->params[i].ptype = types[i];
	}
	r->count = 0;
	r->more = false;
	r->last_seq = 0;

	memset(&options, 0, sizeof(options));
	options.params = params;
	options.read_only = false;	/* a snapshot newer than S: sees all of it */
	options.dest = &r->pub;
	pinned = eo_plan_ready(plan);	/* as the owner: it names eo_internal */
	relay_as_caller(call, &owner);
	rc = SPI_execute_plan_extended(plan, &options);
	eo_restore_identity(&owner);
	eo_unpin(pinned);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "eo: batch read failed: %s", SPI_result_code_string(rc));
	eo_ob_check_plan(call->ob, plan);
	return r->count;
}

/*
 * Events of slot s with lower < seq <= upper, invisible in P and visible
 * in S, in seq order: at most r->max of them into the result.
 */
int32
relay_run_page(EoRelayCall *call, const Slot *s, int64 lower, int64 upper,
		 Datum p_snap, Datum s_snap, PageReceiver *r)
{
	Oid			types[6] = {INT4OID, INT8OID, INT8OID, PG_SNAPSHOTOID, PG_SNAPSHOTOID, INT8OID};
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};

	values[0] = Int32GetDatum(s->slot);
	values[1] = Int64GetDatum(lower);
	values[2] = Int64GetDatum(upper);
	values[3] = p_snap;
	values[4] = s_snap;
	values[5] = Int64GetDatum((int64) r->max + 1);
	prepare_page_plan(call->ob);
	return relay_run_statement(call, call->ob->page_plan, 6, types, values, nulls, r);
}

/*
 * The next page of the slot's events of an earlier cluster (outbox_cluster.c):
 * seq in (old_seq, old_hi], not acknowledged by the slot's state there.
 * All of them committed before the dump, so no snapshot of this cluster
 * is involved.  If none is left the section is closed (false).
 */
int32
relay_run_old_page(EoRelayCall *call, const Slot *s, int64 upper, PageReceiver *r)
{
	Oid			types[7] = {INT4OID, INT8OID, INT8OID, PG_SNAPSHOTOID, INT8OID,
	PG_SNAPSHOTOID, INT8OID};
	Datum		values[7];
	bool		nulls[7] = {false, false, false, false, false, false, false};

	values[0] = Int32GetDatum(s->slot);
	values[1] = Int64GetDatum(Max(s->old_seq, s->old_pos_lo - 1));
	values[2] = Int64GetDatum(upper);
	values[3] = s->old_pos_snap;
	values[4] = Int64GetDatum(s->old_acked_seq);
	nulls[4] = !s->has_old_batch;
	values[5] = s->old_batch_snap;
	nulls[5] = !s->has_old_batch;
	values[6] = Int64GetDatum((int64) r->max + 1);

	if (call->ob->old_plan == NULL)
	{
		char	   *slot = eo_ob_slot_expr(call->ob, "e");

		call->ob->old_plan = eo_prepare_kept(psprintf(
													"SELECT " PAGE_COLUMNS " FROM %s e"
													" WHERE %s OPERATOR(pg_catalog.=) $1"
													" AND e.seq OPERATOR(pg_catalog.>) $2 AND e.seq OPERATOR(pg_catalog.<=) $3"
													" AND NOT pg_catalog.pg_visible_in_snapshot(e.txid, $4)"
													" AND NOT coalesce(e.seq OPERATOR(pg_catalog.<=) $5"
													"   AND pg_catalog.pg_visible_in_snapshot(e.txid, $6), false)"
													" ORDER BY e.seq LIMIT $7", slot, call->ob->view_name, slot),
											 7, (Oid *) types);
	}
	return relay_run_statement(call, call->ob->old_plan, 7, types, values, nulls, r);
}

/* The first seq after which the rest of the slot's batch lies. */
int64
relay_batch_lower(const Slot *s)
{
	return s->has_acked ? s->acked_seq : s->pos_lo - 1;
}

/* A receiver of page rows, into `store` (NULL: count only). */
void
relay_init_receiver(PageReceiver *r, Tuplestorestate *store, TupleDesc desc, int32 max)
{
	memset(r, 0, sizeof(*r));
	r->pub.receiveSlot = page_receive;
	r->pub.rStartup = page_startup;
	r->pub.rShutdown = page_shutdown;
	r->pub.rDestroy = page_destroy;
	r->pub.mydest = DestTuplestore;	/* not DestNone: SPI would call it discarded */
	r->store = store;
	r->desc = desc;
	r->count_only = store == NULL;
	r->max = max;
}

/* ---- acknowledging a page: eo_relay_ack, _extend, _release ---- */

/*
 * The slot holding token, locked; an error if no slot of the group holds
 * it: stale (55006) if the token was superseded by a newer one, else not
 * a token of this group (55000).
 */
static void token_missing(EoRelayCall *call, int64 token);

/* Tokens an acknowledgement names, ascending, each once. */
typedef struct TokenSet
{
	const int64 *tokens;
	int			n;
} TokenSet;

/* Is there a token, and is it one of t's? */
static bool
token_in_set(bool has_token, int64 token, const void *arg)
{
	const TokenSet *t = (const TokenSet *) arg;
	int			lo = 0;
	int			hi = t->n - 1;

	while (has_token && lo <= hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (t->tokens[mid] == token)
			return true;
		if (t->tokens[mid] < token)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return false;
}

/* A slot locked is acknowledged if it still holds one of the tokens. */
static bool
holds_token(const Slot *seen, const Slot *row, const void *arg)
{
	return token_in_set(row->has_token, row->lease_token, arg);
}

static int
cmp_slot_number(const void *a, const void *b)
{
	int32		x = ((const Slot *) a)->slot;
	int32		y = ((const Slot *) b)->slot;

	return (x > y) - (x < y);
}

/*
 * The slots of the call's group that hold one of the tokens t, locked
 * (FOR UPDATE, waiting for another holder) in slot order, into *slots:
 * how many.  None unless the group is still the one checked
 * (relay_group_still).
 */
static int
lock_token_slots(EoRelayCall *call, const TokenSet *t, Slot **slots)
{
	int			n;
	Slot	   *all = relay_read_token_slots(call->ob->name, call->grp, token_in_set, t, &n);
	Slot	   *pick = palloc(sizeof(Slot) * Max(n, 1));
	int			npick = 0;
	int			nlocked;

	*slots = palloc(sizeof(Slot) * Max(n, 1));
	if (!relay_group_still(call))
		return 0;
	for (int i = 0; i < n; i++)
		if (holds_token(&all[i], &all[i], t))
			pick[npick++] = all[i];
	qsort(pick, npick, sizeof(Slot), cmp_slot_number);
	nlocked = relay_lock_seen(pick, npick, false, holds_token, t, *slots);
	if (nlocked > t->n)
		elog(ERROR, "eo: a lease token is held by more than one slot");
	for (int i = 0; i < nlocked; i++)
		eo_cluster_check_slot((*slots)[i].sysid, call->ob->name);
	return nlocked;
}

static void
find_token(EoRelayCall *call, int64 token, Slot *s)
{
	TokenSet	t = {&token, 1};
	Slot	   *found;

	if (lock_token_slots(call, &t, &found) == 1)
	{
		*s = found[0];
		return;
	}
	token_missing(call, token);
}

/*
 * No slot of the group holds token: stale (55006) if a newer token
 * superseded it or it comes from before a failover, else never issued to
 * the group (55000).
 */
static void
token_missing(EoRelayCall *call, int64 token)
{
	const char *grp = call->grp;

	if (token > 0 &&
		(token <= group_max_token(call) ||
		 eo_token_from_earlier_timeline(eo_ob_token_seq(), EO_RELAY_EPOCH_SHIFT, token)))
	{
		eo_stat_count(EO_STAT_STALE_TOKENS);
		ereport(ERROR,
				(errcode(EO_ERRCODE_RELAY_STALE),
				 errmsg("lease token " INT64_FORMAT " of consumer group \"%s\" is stale", token, grp),
				 errdetail("A newer token of the group superseded it (its lease ended and the batch went to another relay, which will deliver it again), or it was issued before a failover."),
				 errhint("Drop the work of this batch; fetch a new one.")));
	}
	ereport(ERROR,
			(errcode(EO_ERRCODE_RELAY_NOT_HELD),
			 errmsg("lease token " INT64_FORMAT " does not hold a batch of consumer group \"%s\"",
					token, grp),
			 errhint("Use the lease_token that eo_relay_fetch returned.")));
}

static void
refuse_not_out(const Slot *s, int64 token)
{
	ereport(ERROR,
			(errcode(EO_ERRCODE_RELAY_NOT_HELD),
			 errmsg("the batch of lease token " INT64_FORMAT " was already %s",
					token, s->page_state == PAGE_ACKED ? "acknowledged" : "released")));
}

typedef struct TokenArgs
{
	EoRelayCall	call;
	int64		token;
	Slot		slot;
} TokenArgs;

/* Common start of ack, extend, release: check, lock the slot. */
static void
open_token(FunctionCallInfo fcinfo, TokenArgs *t)
{
	char	   *grp = eo_check_group_name(PG_GETARG_DATUM(1), PG_ARGISNULL(1));

	t->token = check_token(PG_GETARG_DATUM(2), PG_ARGISNULL(2));
	eo_relay_begin(&t->call, PG_GETARG_DATUM(0), PG_ARGISNULL(0), grp);
	find_token(&t->call, t->token, &t->slot);
}

/*
 * How many events of the outstanding page of `s` have seq <= upto, and the
 * last of their seqs (*last): the page statement run again to upto,
 * counting.  Its events are those it handed out, as the slot's position
 * has not moved since.
 */
static int32
count_page_upto(EoRelayCall *call, const Slot *s, int64 upto, int64 *last)
{
	PageReceiver r;

	AcceptInvalidationMessages();	/* every partition: see take_cut */
	relay_init_receiver(&r, NULL, NULL, s->page_count);
	if (s->page_old)
		(void) relay_run_old_page(call, s, Min(upto, s->page_end), &r);
	else
		(void) relay_run_page(call, s, relay_batch_lower(s), Min(upto, s->page_end),
						s->pos_snap, s->batch_snap, &r);
	*last = r.last_seq;
	return r.count;
}

/* The slot's position moves past the page's events up to seq `end`. */
static void
ack_through(Slot *s, int64 end, bool whole)
{
	if (s->page_old)
	{
		/* a page of an earlier cluster's events (serve_old) */
		s->old_seq = end;
		s->has_old = !(whole && s->page_last);
	}
	else if (whole && s->page_last)
	{
		/* The batch is done: S becomes the slot's position. */
		s->pos_snap = s->batch_snap;
		s->pos_lo = s->batch_lo;
		s->has_batch = false;
		s->has_acked = false;
	}
	else
	{
		s->has_acked = true;
		s->acked_seq = end;
	}
}

/*
 * Slot s's outstanding page acknowledged: `count` of its events, up to
 * seq `end`, in part (the rest is handed out again) or whole.
 */
static void
ack_page(Slot *s, int32 count, int64 end, bool partial)
{
	s->acked_events += count;
	if (count > 0)
	{
		ack_through(s, end, !partial);
		s->has_acked_at = true;
		s->acked_at = GetCurrentTimestamp();
	}
	s->page_state = partial ? PAGE_RELEASED : PAGE_ACKED;
	s->page_count -= partial ? count : 0;
	s->leased = false;
}

/*
 * eo_relay_ack(outbox, consumer_group, lease_token [, upto_seq]) returns
 * the number of events acknowledged: the whole page, or with upto_seq
 * those of its events with seq <= upto_seq (the rest of the page comes
 * back first at the slot's next fetch, as after a release: a relay that
 * delivered a page only in part acknowledges what it delivered); 0 if
 * this token's page was acknowledged before (a retried ack).
 */
Datum
eo_relay_ack(PG_FUNCTION_ARGS)
{
	TokenArgs	t;
	Slot	   *s = &t.slot;
	int32		count = 0;
	bool		partial = PG_NARGS() > 3;
	int64		upto = 0;
	int64		end;

	if (partial && PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("upto_seq must not be null"),
				 errhint("Give the seq of the last event delivered, or call eo_relay_ack without it.")));
	if (partial)
		upto = PG_GETARG_INT64(3);
	open_token(fcinfo, &t);
	if (s->page_state == PAGE_OUT)
	{
		partial = partial && upto < s->page_end;
		count = partial ? count_page_upto(&t.call, s, upto, &end) : s->page_count;
		if (!partial)
			end = s->page_end;
		ack_page(s, count, end, partial);
		relay_write_slot(t.call.ob->name, t.call.grp, s);
	}
	else if (s->page_state != PAGE_ACKED)
		refuse_not_out(s, t.token);
	eo_relay_end(&t.call);
	PG_RETURN_INT32(count);
}

static int
cmp_token(const void *a, const void *b)
{
	int64		x = DatumGetInt64(*(const Datum *) a);
	int64		y = DatumGetInt64(*(const Datum *) b);

	return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * eo_relay_ack_pages(outbox, consumer_group, lease_tokens) acknowledges
 * the page of each token whole, as eo_relay_ack does one, in one call: the
 * slots locked by one statement, the group looked up once.  All or
 * nothing: a token that does not hold a page (stale, not of this group, a
 * page released) is an error, as from eo_relay_ack, and nothing of the
 * call stays.  Returns the events acknowledged; a token whose page was
 * acknowledged before counts 0, as a retried eo_relay_ack.
 */
Datum
eo_relay_ack_pages(PG_FUNCTION_ARGS)
{
	char	   *grp = eo_check_group_name(PG_GETARG_DATUM(1), PG_ARGISNULL(1));
	ArrayType  *arr;
	Datum	   *tokens;
	bool	   *tnulls;
	int			ntokens;
	Slot	   *s = NULL;
	int			nslots;
	int32		count = 0;
	EoRelayCall call;
	int64	   *distinct;
	TokenSet	set = {NULL, 0};

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lease tokens must not be null")));
	arr = PG_GETARG_ARRAYTYPE_P(2);
	deconstruct_array(arr, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
					  &tokens, &tnulls, &ntokens);
	for (int i = 0; i < ntokens; i++)
		(void) check_token(tokens[i], tnulls[i]);
	eo_relay_begin(&call, PG_GETARG_DATUM(0), PG_ARGISNULL(0), grp);
	/* each token once: a long array of repeats costs a sort, not a search each */
	qsort(tokens, ntokens, sizeof(Datum), cmp_token);
	distinct = palloc(sizeof(int64) * Max(ntokens, 1));
	for (int i = 0; i < ntokens; i++)
		if (i == 0 || DatumGetInt64(tokens[i]) != DatumGetInt64(tokens[i - 1]))
			distinct[set.n++] = DatumGetInt64(tokens[i]);
	set.tokens = distinct;
	nslots = set.n > 0 ? lock_token_slots(&call, &set, &s) : 0;
	for (int i = 0; i < ntokens; i++)
	{
		int64		token = DatumGetInt64(tokens[i]);
		int			j = 0;

		if (i > 0 && token == DatumGetInt64(tokens[i - 1]))
			continue;
		while (j < nslots && s[j].lease_token != token)
			j++;
		if (j == nslots)
		{
			token_missing(&call, token);	/* raises an error */
			pg_unreachable();
		}
		if (s[j].page_state == PAGE_OUT)
		{
			count += s[j].page_count;
			ack_page(&s[j], s[j].page_count, s[j].page_end, false);
			relay_write_slot(call.ob->name, call.grp, &s[j]);
		}
		else if (s[j].page_state != PAGE_ACKED)
			refuse_not_out(&s[j], token);
	}
	eo_relay_end(&call);
	PG_RETURN_INT32(count);
}

/* eo_relay_extend(outbox, consumer_group, lease_token, lease): new expiry. */
Datum
eo_relay_extend(PG_FUNCTION_ARGS)
{
	TokenArgs	t;
	int64		lease_usecs = eo_check_lease(PG_GETARG_DATUM(3), PG_ARGISNULL(3), EO_LEASE_RELAY);
	TimestampTz expires;

	open_token(fcinfo, &t);
	if (t.slot.page_state != PAGE_OUT)
		refuse_not_out(&t.slot, t.token);
	expires = GetCurrentTimestamp() + lease_usecs;
	t.slot.lease_expires_at = expires;
	/* a lease that ends with its session now ends with this one */
	t.slot.holder_pid = t.slot.holder_pid != 0 ? MyProcPid : 0;
	relay_write_slot(t.call.ob->name, t.call.grp, &t.slot);
	eo_relay_end(&t.call);
	PG_RETURN_TIMESTAMPTZ(expires);
}

/*
 * eo_relay_release(outbox, consumer_group, lease_token): give the page
 * back unacknowledged; the next fetch of the slot delivers it again.
 */
Datum
eo_relay_release(PG_FUNCTION_ARGS)
{
	TokenArgs	t;

	open_token(fcinfo, &t);
	if (t.slot.page_state != PAGE_OUT)
		refuse_not_out(&t.slot, t.token);
	t.slot.page_state = PAGE_RELEASED;
	t.slot.leased = false;
	relay_write_slot(t.call.ob->name, t.call.grp, &t.slot);
	eo_relay_end(&t.call);
	PG_RETURN_VOID();
}

/* ---- consumer groups ---- */

/*
 * An id for a new group of `outbox` called `grp` (SPI connected, as the
 * owner): the next value of eo_outbox_group_id_seq, which cycles, skipping
 * ids that the outbox's groups still have (ids are unique per outbox).  Refused first if the group exists, so that
 * no call that fails uses an id up.  Nothing is locked: concurrent
 * creators draw different values.
 */
static int32
new_group_id(const char *outbox, const char *grp)
{
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2] = {CStringGetTextDatum(outbox), CStringGetTextDatum(grp)};
	Oid			seq = eo_own_relation("eo_outbox_group_id_seq", RELKIND_SEQUENCE);

	if (SPI_execute_with_args("SELECT FROM eo_internal.eo_outbox_groups"
							  " WHERE outbox OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2",
							  2, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "eo: group lookup failed");
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("consumer group \"%s\" of outbox \"%s\" already exists", grp, outbox)));
	for (int tries = 0; tries < TOKEN_MAX_GROUPS; tries++)
	{
		int32		id = (int32) nextval_internal(seq, false);
		Oid			idtypes[2] = {TEXTOID, INT4OID};
		Datum		idvals[2] = {values[0], Int32GetDatum(id)};

		if (SPI_execute_with_args("SELECT FROM eo_internal.eo_outbox_groups"
								  " WHERE outbox OPERATOR(pg_catalog.=) $1 AND id OPERATOR(pg_catalog.=) $2",
								  2, idtypes, idvals, NULL, true, 1) != SPI_OK_SELECT)
			elog(ERROR, "eo: group id lookup failed");
		if (SPI_processed == 0)
			return id;
	}
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("too many consumer groups"),
			 errdetail("An outbox has at most %d.", TOKEN_MAX_GROUPS)));
	return 0;					/* not reached */
}

/*
 * eo_group_create(outbox, consumer_group, start_at): 'beginning' delivers
 * every event the outbox still holds, 'now' only events of transactions
 * that commit from now on.  For members of the outbox's role, with SELECT
 * on it; the group belongs to `owner` (default: the caller), a role the
 * caller is a member of.
 */
Datum
eo_group_create(PG_FUNCTION_ARGS)
{
	char	   *grp = eo_check_group_name(PG_GETARG_DATUM(1), PG_ARGISNULL(1));
	char	   *start = PG_ARGISNULL(2) ? "beginning" : text_to_cstring(PG_GETARG_TEXT_PP(2));
	Oid			caller = GetUserId();
	Oid			owner = PG_NARGS() > 3 ? eo_check_role(PG_GETARG_DATUM(3), PG_ARGISNULL(3), caller) : caller;
	const char *snap;
	EoOutbox   *ob;
	EoIdentity	saved;
	Oid			types[6] = {TEXTOID, TEXTOID, INT4OID, REGROLEOID, INT8OID, INT4OID};
	Datum		values[6];
	int			rc;

	if (strcmp(start, "beginning") == 0)
		snap = "'3:3:'::pg_catalog.pg_snapshot";	/* no txid is visible */
	else if (strcmp(start, "now") == 0)
		snap = "pg_catalog.pg_current_snapshot()";
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid start_at \"%s\"", start),
				 errhint("Use \"beginning\" or \"now\".")));

	/*
	 * A group holds back the outbox's retention: its owner's decision.  And
	 * only to a role whose privileges one has: what using the group asks
	 * (as eo_scope_create does).
	 */
	if (!has_privs_of_role(caller, owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to create a consumer group owned by role \"%s\"",
						GetUserNameFromId(owner, false)),
				 errhint("Only roles with the privileges of a role may give it a consumer group.")));

	ob = relay_outbox(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	eo_ob_check_owner(ob, "create a consumer group of");
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&saved);
	values[0] = CStringGetTextDatum(ob->name);
	values[1] = CStringGetTextDatum(grp);
	values[2] = Int32GetDatum(ob->slots);
	values[3] = ObjectIdGetDatum(owner);
	values[4] = Int64GetDatum((int64) GetSystemIdentifier());
	eo_cluster_check(ob);		/* the positions below are this cluster's */
	values[5] = Int32GetDatum(new_group_id(ob->name, grp));
	rc = SPI_execute_with_args("INSERT INTO eo_internal.eo_outbox_groups (outbox, name, owner, created_at, id)"
							   " VALUES ($1, $2, $4, pg_catalog.now(), $6) ON CONFLICT (outbox, name) DO NOTHING",
							   6, types, values, NULL, false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "eo: group insert failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("consumer group \"%s\" of outbox \"%s\" already exists",
						grp, ob->name)));

	/*
	 * lo = 0: nothing is known yet about where invisible events lie, so the
	 * first batch of each slot scans the slot from its start.
	 */
	rc = SPI_execute_with_args(psprintf(
										"INSERT INTO eo_internal.eo_outbox_slots (outbox, grp, slot, pos_snap, pos_lo,"
										" hist_xid, hist_seq, sysid, page_old)"
										" SELECT $1, $2, g, %s, 0, '{}', '{}', $5, false"
										" FROM pg_catalog.generate_series(0, $3 OPERATOR(pg_catalog.-) 1) g",
										snap),
							   5, types, values, NULL, false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "eo: slot insert failed: %s", SPI_result_code_string(rc));
	eo_restore_identity(&saved);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * eo_group_drop(outbox, consumer_group): its positions go with it.  For
 * members of the group's role or of the outbox's.
 */
Datum
eo_group_drop(PG_FUNCTION_ARGS)
{
	char	   *grp = eo_check_group_name(PG_GETARG_DATUM(1), PG_ARGISNULL(1));
	char	   *name = eo_check_outbox_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "outbox name");
	EoOutbox   *ob = eo_ob_lookup(name, AccessShareLock, false);
	Oid			caller = GetUserId();
	EoIdentity	saved;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	Oid			owner = InvalidOid;
	bool		isnull;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&saved);
	values[0] = CStringGetTextDatum(ob->name);
	values[1] = CStringGetTextDatum(grp);
	if (SPI_execute_with_args("SELECT owner FROM eo_internal.eo_outbox_groups"
							  " WHERE outbox OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2"
							  " FOR UPDATE", 2, types, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "eo: group lookup failed");
	if (SPI_processed == 1)
		owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (!OidIsValid(owner))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("consumer group \"%s\" of outbox \"%s\" does not exist",
						grp, ob->name)));
	if (!has_privs_of_role(caller, owner) && !has_privs_of_role(caller, ob->owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to drop consumer group \"%s\" of outbox \"%s\"",
						grp, ob->name),
				 errdetail("It belongs to role \"%s\".", GetUserNameFromId(owner, true))));
	if (SPI_execute_with_args("WITH s AS (DELETE FROM eo_internal.eo_outbox_slots"
							  "   WHERE outbox OPERATOR(pg_catalog.=) $1 AND grp OPERATOR(pg_catalog.=) $2)"
							  " DELETE FROM eo_internal.eo_outbox_groups"
							  " WHERE outbox OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2",
							  2, types, values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "eo: group delete failed");
	eo_restore_identity(&saved);
	SPI_finish();
	PG_RETURN_VOID();
}

/* ---- retention and monitoring ---- */

/*
 * Events (alias e) of an earlier cluster not yet acknowledged by a slot
 * (alias s): see serve_old.
 */
static char *
old_unacked(const char *e, const char *s)
{
	return psprintf("%2$s.old_hi IS NOT NULL"
					" AND %1$s.seq OPERATOR(pg_catalog.>) GREATEST(%2$s.old_seq, %2$s.old_pos_lo OPERATOR(pg_catalog.-) 1)"
					" AND %1$s.seq OPERATOR(pg_catalog.<=) %2$s.old_hi"
					" AND NOT pg_catalog.pg_visible_in_snapshot(%1$s.txid, %2$s.old_pos_snap)"
					" AND NOT coalesce(%1$s.seq OPERATOR(pg_catalog.<=) %2$s.old_acked_seq"
					"   AND pg_catalog.pg_visible_in_snapshot(%1$s.txid, %2$s.old_batch_snap), false)",
					e, s);
}

/*
 * Events (alias e) not yet acknowledged by a slot (alias s): invisible in
 * its position and not in the acknowledged part of its current batch, or
 * of an earlier cluster and not acknowledged there.
 */
char *
eo_relay_unacked_sql(const EoOutbox *ob, const char *e, const char *s)
{
	return psprintf("%s OPERATOR(pg_catalog.=) %s.slot AND ("
					" (%s.seq OPERATOR(pg_catalog.>=) %s.pos_lo"
					"  AND NOT pg_catalog.pg_visible_in_snapshot(%s.txid, %s.pos_snap)"
					"  AND NOT coalesce(%s.seq OPERATOR(pg_catalog.<=) %s.acked_seq"
					"          AND pg_catalog.pg_visible_in_snapshot(%s.txid, %s.batch_snap), false))"
					" OR (%s))",
					eo_ob_slot_expr(ob, e), s, e, s, e, s, e, s, e, s, old_unacked(e, s));
}

/*
 * Has every group acknowledged every event of the partition?  Conservative:
 * an event of a batch still being handed out counts as unacknowledged
 * until its whole batch is.  As the owner; the partition is in eo_internal.
 */
bool
eo_relay_partition_delivered(EoOutbox *ob, const EoPartition *part)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;
	int			rc;

	values[0] = CStringGetTextDatum(ob->name);
	rc = SPI_execute_with_args(psprintf(
										"SELECT NOT EXISTS (SELECT FROM eo_internal.eo_outbox_slots s"
										" WHERE s.outbox OPERATOR(pg_catalog.=) $1 AND EXISTS ("
										"   SELECT FROM %s e WHERE %s OPERATOR(pg_catalog.=) s.slot"
										"   AND ((e.seq OPERATOR(pg_catalog.>=) s.pos_lo"
										"         AND NOT pg_catalog.pg_visible_in_snapshot(e.txid, s.pos_snap))"
										"        OR (%s))))",
										part->name, eo_ob_slot_expr(ob, "e"), old_unacked("e", "s")),
							   1, types, values, NULL, false, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "eo: delivery check failed: %s", SPI_result_code_string(rc));
	return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}
