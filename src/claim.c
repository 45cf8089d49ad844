/*-------------------------------------------------------------------------
 * claim.c
 *	  The key state machine: eo_claim, eo_complete, eo_fail, eo_extend and
 *	  eo_status.
 *
 * States (eo.h) and transitions, one function each:
 *
 *	 (none) --claim--> c (transaction mode) or p (lease mode)
 *	 c --commit--> done without result;  c --rollback--> as before the claim
 *	 c --complete--> d;  p --complete(token)--> d
 *	 p --lease expired, claim--> p with a new token (takeover) or x
 *	 c/p --fail--> f (retry after retry_after) or x (eo.max_attempts reached)
 *	 c/p/f --fail, final SQLSTATE--> r (every later claim raises that error)
 *	 f --claim, when due--> c or p
 *	 p --recovery point(token)--> p, with the holder's progress recorded
 *	 x --redrive--> f (due at once; eo.max_attempts counts from there)
 *
 * A transaction-mode claim of a new key is deferred (pending.c): no row
 * until commit, which writes it once, already 'd' (or 'c' without a
 * result); eo_complete of such a claim only records the result.
 *
 * Every function looks the key up, decides, and asks keystore.c to write.
 * A write that loses a race to another transaction changes nothing; the
 * function then looks again, so each decision is made on the newest
 * committed state.  Under REPEATABLE READ and SERIALIZABLE the executor
 * turns such a race into a serialization failure instead.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "eo.h"

PG_FUNCTION_INFO_V1(eo_claim);
PG_FUNCTION_INFO_V1(eo_complete);
PG_FUNCTION_INFO_V1(eo_fail);
PG_FUNCTION_INFO_V1(eo_extend);
PG_FUNCTION_INFO_V1(eo_status);
PG_FUNCTION_INFO_V1(eo_recovery_point);

/* What eo_claim returns. */
typedef struct ClaimOutcome
{
	const char *status;
	EoKey		row;			/* the key as the outcome left it */
	bool		show_token;		/* only the holder may see its token */
} ClaimOutcome;

/* What one claim asks for. */
typedef struct ClaimRequest
{
	text	   *key;
	EoScope		scope;
	text	   *fingerprint;
	bool		lease_mode;
	int64		lease_usecs;
	Oid			caller;
	TimestampTz now;
} ClaimRequest;

/* ---- arguments and checks common to every function ---- */

/*
 * The scope named by argument `argno` (scope.c), which the caller must be
 * allowed to use; scope 0 if none.  (PG_NARGS: never read past the
 * arguments of an older SQL definition; eo_ks_begin then refuses it.)
 */
static void
get_scope(FunctionCallInfo fcinfo, int argno, Oid caller, EoScope *scope)
{
	bool		given = PG_NARGS() > argno && !PG_ARGISNULL(argno);

	eo_scope_resolve(given ? PG_GETARG_DATUM(argno) : (Datum) 0, !given, caller, scope);
}

/* Whose a new key is: the scope's role, or without a scope the claimer. */
static Oid
new_key_owner(const EoScope *scope, Oid caller)
{
	return OidIsValid(scope->owner) ? scope->owner : caller;
}

static void
check_owner(const EoKey *row, Oid caller)
{
	if (!has_privs_of_role(caller, row->owner))
		ereport(ERROR,
				(errcode(EO_ERRCODE_NOT_OWNER),
				 errmsg("permission denied for idempotency key \"%s\"",
						text_to_cstring(row->key)),
				 errdetail("The key belongs to role \"%s\".",
						   GetUserNameFromId(row->owner, true))));
}

/*
 * Write this transaction's deferred claim of `key`, if any, before acting
 * on the key as a row (pending.c) - only for a caller who could act on it:
 * another role's code running in the transaction must not even cause the
 * write.
 */
static void
write_pending(text *key, int32 scope, Oid caller)
{
	EoKey	   *pending = eo_pending_get(key, scope);

	if (pending == NULL)
		return;
	check_owner(pending, caller);
	eo_pending_write(key, scope);
}

/* Same fingerprint?  A tombstone keeps only the fingerprint's hash. */
static bool
same_fingerprint(const EoKey *row, text *fingerprint)
{
	if (row->expired)
		return !row->has_fp_hash || eo_ts_fingerprint_hash(fingerprint) == row->fp_hash;
	if (row->fingerprint == NULL)
		return true;
	return VARSIZE_ANY_EXHDR(fingerprint) == VARSIZE_ANY_EXHDR(row->fingerprint) &&
		memcmp(VARDATA_ANY(fingerprint), VARDATA_ANY(row->fingerprint),
			   VARSIZE_ANY_EXHDR(fingerprint)) == 0;
}

static void
check_fingerprint(const EoKey *row, text *fingerprint)
{
	if (fingerprint == NULL || same_fingerprint(row, fingerprint))
		return;
	eo_stat_count(EO_STAT_FINGERPRINT_CONFLICTS);
	ereport(ERROR,
			(errcode(EO_ERRCODE_FINGERPRINT),
			 errmsg("idempotency key \"%s\" was used with a different fingerprint",
					text_to_cstring(row->key)),
			 errdetail("A different request already used this key; its result is not replayed."),
			 errhint("Use a new key for a new request.")));
}

/* Claimed by this very transaction (or one of its subtransactions)? */
static bool
held_by_this_transaction(const EoKey *row)
{
	return row->state == EO_TXN_CLAIMED &&
		TransactionIdIsCurrentTransactionId(row->xmin);
}

static bool
lease_live(const EoKey *row, TimestampTz now)
{
	return row->has_expiry && row->lease_expires_at > now;
}

/*
 * Has the key used up its attempts?  Counted since its last redrive, if
 * any: `attempts` keeps the whole history.
 */
static bool
out_of_attempts(const EoKey *row)
{
	return row->attempts - row->attempts_base >= eo_max_attempts;
}

/* ---- eo_claim transitions ---- */

/* The row a claim writes: transaction mode or a new lease. */
static void
set_claim(EoKey *row, const ClaimRequest *req)
{
	row->state = req->lease_mode ? EO_PROCESSING : EO_TXN_CLAIMED;

	/*
	 * A lease gets a new token.  So does a transaction-mode claim that takes
	 * over a key once leased (rare: a new key has no token, and costs no
	 * token): nobody holds that token, but the holder of the expired lease
	 * is then told its token is stale, whatever the new claim did with the
	 * key (completed, failed, left it), never that the key is done.
	 */
	if (req->lease_mode || row->has_token)
	{
		row->has_token = true;
		row->lease_token = eo_ks_next_token();
	}
	row->has_expiry = req->lease_mode;
	row->lease_expires_at = req->lease_mode ? req->now + req->lease_usecs : 0;
	row->result = NULL;
	row->updated_at = req->now;
	if (row->fingerprint == NULL)
		row->fingerprint = req->fingerprint;
}

/* The claim is written: the caller holds the key. */
static bool
claimed(const ClaimRequest *req, ClaimOutcome *out)
{
	if (!req->lease_mode)
		eo_pending_remember_held(&out->row);
	out->status = "claimed";
	out->show_token = true;
	return true;
}

/*
 * Insert the key unless a live generation holds it; then `out->row` is the
 * row written or found.  A transaction-mode claim writes no row yet while
 * the transaction has room for pending claims (pending.c): its row is
 * written once, at commit.
 */
static EoKsClaim
claim_new_key(const ClaimRequest *req, ClaimOutcome *out)
{
	EoKey		row;
	EoKsClaim	result;
	bool		defer = !req->lease_mode && eo_pending_room();

	memset(&row, 0, sizeof(row));
	row.key = req->key;
	row.scope = req->scope.id;
	row.owner = new_key_owner(&req->scope, req->caller);
	row.attempts = 1;
	row.created_at = req->now;
	set_claim(&row, req);
	result = eo_ks_claim(&row, &out->row, defer);
	if (result == EO_KS_DEFERRED)
	{
		/* Not claimed(): there is no row for eo_complete's hint to name. */
		eo_pending_add(&row);
		out->row = row;
		out->status = "claimed";
		out->show_token = true;
	}
	else if (result == EO_KS_INSERTED)
	{
		out->row = row;
		claimed(req, out);
	}
	return result;
}

/* A failed key that is due, or an expired lease: a new attempt. */
static bool
claim_again(const ClaimRequest *req, ClaimOutcome *out)
{
	EoKey	   *row = &out->row;

	row->attempts++;
	set_claim(row, req);
	return eo_ks_update(row) && claimed(req, out);
}

/* Out of attempts: the key goes to the dead state. */
static bool
declare_dead(const ClaimRequest *req, ClaimOutcome *out, const char *why)
{
	EoKey	   *row = &out->row;

	row->state = EO_DEAD;
	row->has_expiry = false;
	if (why != NULL)
		row->last_error = cstring_to_text(why);
	row->updated_at = req->now;
	if (!eo_ks_update(row))
		return false;
	out->status = "dead";
	eo_stat_count(EO_STAT_KEYS_DEAD);
	return true;
}

static bool
report(ClaimOutcome *out, const char *status)
{
	out->status = status;
	return true;
}

/* An expired lease: a new attempt (a takeover), or dead if none is left. */
static bool
take_over(const ClaimRequest *req, ClaimOutcome *out)
{
	if (out_of_attempts(&out->row))
		return declare_dead(req, out, "lease expired");
	if (!claim_again(req, out))
		return false;
	eo_stat_count(EO_STAT_TAKEN_OVER);
	return true;
}

/* Count what eo_claim answered (eo_metrics.claims). */
static void
count_answer(const ClaimOutcome *out)
{
	if (strcmp(out->status, "claimed") == 0)
		eo_stat_count(EO_STAT_CLAIMED);
	else if (strcmp(out->status, "duplicate") == 0)
		eo_stat_count(EO_STAT_DUPLICATES);
	else if (strcmp(out->status, "busy") == 0)
		eo_stat_count(EO_STAT_BUSY);
	else
		eo_stat_count(EO_STAT_DEAD_ANSWERS);
}

/* Decide on a key that exists; false if a race was lost (look again). */
static bool
claim_existing(const ClaimRequest *req, ClaimOutcome *out)
{
	EoKey	   *row = &out->row;

	switch (row->state)
	{
		case EO_TXN_CLAIMED:
		case EO_DONE:
			/* Done, or claimed earlier in this same transaction. */
			return report(out, "duplicate");
		case EO_DEAD:
			return report(out, "dead");
		case EO_REJECTED:
			eo_replay_rejection(row);	/* raises the error it failed with */
			break;
		case EO_PROCESSING:
			if (lease_live(row, req->now))
				return report(out, "busy");
			return take_over(req, out);
		case EO_FAILED:
			if (lease_live(row, req->now))
				return report(out, "busy");
			if (out_of_attempts(row))
				return declare_dead(req, out, NULL);
			return claim_again(req, out);
	}
	elog(ERROR, "eo: key \"%s\" has unknown state '%c'",
		 text_to_cstring(row->key), row->state);
	return false;				/* keep compiler quiet */
}

/*
 * A new key is inserted only if no live generation holds it (one statement,
 * keystore.c); otherwise decide on the row found.
 */
static void
claim_key(ClaimRequest *req, ClaimOutcome *out)
{
	EoKey	   *pending = eo_pending_get(req->key, req->scope.id);

	if (pending != NULL)
	{
		/* Claimed earlier in this transaction, row not written yet. */
		out->row = *pending;
		out->show_token = false;
		check_owner(&out->row, req->caller);
		check_fingerprint(&out->row, req->fingerprint);
		report(out, "duplicate");
		return;
	}
	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		req->now = GetCurrentTimestamp();
		out->show_token = false;
		if (claim_new_key(req, out) != EO_KS_FOUND)
			return;
		check_owner(&out->row, req->caller);
		check_fingerprint(&out->row, req->fingerprint);
		if (claim_existing(req, out))
			return;
		/* Lost a race: the other writer has finished by now; look again. */
	}
}

/*
 * eo_claim's result descriptor, blessed, kept for the backend: building it
 * reads the catalog entries of the function and of each OUT column's
 * type, which every claim would otherwise pay (a call site's own cache,
 * fn_extra, lasts one execution of a statement only).  Dropped when a
 * function changes (ALTER EXTENSION UPDATE makes eo_claim again).
 */
static Oid	result_desc_fn = InvalidOid;
static Oid	result_desc_relid = InvalidOid;	/* the row type's pg_class entry */
static TupleDesc result_desc_cache = NULL;

static void
result_desc_invalidate(Datum arg, int cacheid, uint32 hashvalue)
{
	result_desc_fn = InvalidOid;
}

/*
 * 0.3.0's ALTER TYPE eo_claim_result ADD ATTRIBUTE changes the row type.
 * Its update script also makes functions, whose pg_proc entries reset the
 * cache above anyway; this does not count on that.
 */
static void
result_type_invalidate(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == result_desc_relid)
		result_desc_fn = InvalidOid;
}

static TupleDesc
result_desc(FunctionCallInfo fcinfo)
{
	static bool registered = false;
	TupleDesc	desc;
	MemoryContext old;

	if (result_desc_fn == fcinfo->flinfo->fn_oid && result_desc_cache != NULL)
		return result_desc_cache;
	if (!registered)
	{
		CacheRegisterSyscacheCallback(PROCOID, result_desc_invalidate, (Datum) 0);
		CacheRegisterRelcacheCallback(result_type_invalidate, (Datum) 0);
		registered = true;
	}
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE ||
		(desc->natts != 6 && desc->natts != 8))
		elog(ERROR, "eo: eo_claim must return eo_claim_result");
	old = MemoryContextSwitchTo(TopMemoryContext);
	if (result_desc_cache != NULL)
		FreeTupleDesc(result_desc_cache);
	result_desc_cache = BlessTupleDesc(CreateTupleDescCopy(desc));
	MemoryContextSwitchTo(old);
	result_desc_relid = get_typ_typrelid(desc->tdtypeid);
	result_desc_fn = fcinfo->flinfo->fn_oid;
	return result_desc_cache;
}

/*
 * The row eo_claim returns: eo_claim_result, with the recovery point and
 * state since 0.3.0 (older SQL definitions have six columns).  The holder
 * alone sees its token and the progress it resumes from.
 */
static Datum
claim_result(FunctionCallInfo fcinfo, const ClaimOutcome *out)
{
	TupleDesc	tupdesc = result_desc(fcinfo);
	Datum		values[8];
	bool		nulls[8] = {false, false, false, false, false, false, false, false};
	const EoKey *row = &out->row;
	bool		busy = strcmp(out->status, "busy") == 0;
	bool		claimed = strcmp(out->status, "claimed") == 0;

	values[0] = CStringGetTextDatum(out->status);
	nulls[1] = strcmp(out->status, "duplicate") != 0 || row->result == NULL;
	values[1] = nulls[1] ? (Datum) 0 : JsonbPGetDatum(row->result);
	nulls[2] = row->expired;	/* a tombstone keeps no count */
	values[2] = Int32GetDatum(row->attempts);
	nulls[3] = !(out->show_token && row->state == EO_PROCESSING);
	values[3] = Int64GetDatum(row->lease_token);
	nulls[4] = !((out->show_token || busy) && row->has_expiry);
	values[4] = TimestampTzGetDatum(row->lease_expires_at);
	/* The key's full record is gone: only its tombstone answered. */
	values[5] = BoolGetDatum(row->expired);
	nulls[6] = !claimed || row->recovery_point == NULL;
	values[6] = PointerGetDatum(row->recovery_point);
	nulls[7] = !claimed || row->recovery_state == NULL;
	values[7] = PointerGetDatum(row->recovery_state);
	Assert(tupdesc->natts == 6 || tupdesc->natts == 8);
	return HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls));
}

Datum
eo_claim(PG_FUNCTION_ARGS)
{
	ClaimRequest req;
	ClaimOutcome out;

	req.key = eo_check_key(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	req.fingerprint = eo_check_fingerprint(PG_GETARG_DATUM(1), PG_ARGISNULL(1));
	req.lease_mode = !PG_ARGISNULL(2);
	req.lease_usecs = req.lease_mode ? eo_check_lease(PG_GETARG_DATUM(2), false, EO_LEASE_KEY) : 0;
	if (!req.lease_mode)
		eo_warn_fingerprint_as_lease(req.fingerprint);
	req.caller = GetUserId();
	get_scope(fcinfo, 3, req.caller, &req.scope);

	PreventCommandIfReadOnly("eo_claim()");
	eo_ks_begin(EO_KS_WRITE);
	claim_key(&req, &out);
	count_answer(&out);

	PG_RETURN_DATUM(claim_result(fcinfo, &out));
}

/* ---- errors shared by complete, fail and extend ---- */

static void
refuse_not_claimed(const EoKey *row)
{
	ereport(ERROR,
			(errcode(EO_ERRCODE_NOT_HELD),
			 errmsg("idempotency key \"%s\" is not claimed",
					text_to_cstring(row->key)),
			 errhint("Call eo_claim first and act only on status \"claimed\".")));
}

/*
 * A done key asked to be completed (or failed) again.  Say which of the
 * usual mistakes it was: completing twice in one transaction (this error
 * then rolls the first completion back too), or claiming and completing
 * in two transactions, as autocommit does with two statements (the
 * claim's commit made the key done).  A lease holder's token that
 * completed it already (a retry after a lost connection) is told so.
 */
static void
refuse_done(const EoKey *row, bool this_transaction, bool with_token)
{
	if (this_transaction)
		ereport(ERROR,
				(errcode(EO_ERRCODE_NOT_HELD),
				 errmsg("idempotency key \"%s\" was already completed in this transaction",
						text_to_cstring(row->key)),
				 errdetail("Unless a savepoint catches it, this error rolls back the transaction, the claim and the first completion with it: the key is not done."),
				 errhint("Call eo_complete or eo_fail once per claim.")));
	if (with_token)
		ereport(ERROR,
				(errcode(EO_ERRCODE_NOT_HELD),
				 errmsg("idempotency key \"%s\" is already done", text_to_cstring(row->key)),
				 errdetail("The lease was completed by a transaction that has committed."),
				 errhint("eo_status shows its result.")));
	ereport(ERROR,
			(errcode(EO_ERRCODE_NOT_HELD),
			 errmsg("idempotency key \"%s\" is already done", text_to_cstring(row->key)),
			 row->state == EO_TXN_CLAIMED ?
			 errdetail("It was claimed in a transaction that has committed, which made it done.") :
			 errdetail("A transaction that has committed completed it."),
			 errhint("Claim and complete a key in one transaction (in autocommit every statement is a transaction of its own); "
					 "for work that spans transactions, claim with a lease and pass its lease_token.")));
}

static void
refuse_not_held(const EoKey *row, bool with_token)
{
	if (row->state == EO_DONE || row->state == EO_TXN_CLAIMED)
		refuse_done(row, row->state == EO_DONE &&
					TransactionIdIsCurrentTransactionId(row->xmin), with_token);
	if (row->state == EO_REJECTED)
		ereport(ERROR,
				(errcode(EO_ERRCODE_NOT_HELD),
				 errmsg("idempotency key \"%s\" failed for good",
						text_to_cstring(row->key)),
				 errhint("eo_status shows the error; to run the work again, use a new key.")));
	if (row->state == EO_PROCESSING && !with_token)
		ereport(ERROR,
				(errcode(EO_ERRCODE_NOT_HELD),
				 errmsg("idempotency key \"%s\" is held under a lease",
						text_to_cstring(row->key)),
				 errhint("Pass the lease_token that eo_claim returned.")));
	refuse_not_claimed(row);
}

static void
refuse_stale(const EoKey *row, int64 token, const char *detail)
{
	eo_stat_count(EO_STAT_STALE_TOKENS);
	ereport(ERROR,
			(errcode(EO_ERRCODE_STALE_TOKEN),
			 errmsg("lease token " INT64_FORMAT " for idempotency key \"%s\" is stale",
					token, text_to_cstring(row->key)),
			 errdetail("%s", detail),
			 errhint("Stop this attempt: make no outside call for it and record nothing of it; the key's current holder does the work.")));
}

/*
 * A token newer than any this server has for the key, from an earlier
 * timeline: issued by a primary whose claim this server lacks (lost in an
 * asynchronous failover, or before a restore).
 */
static void
refuse_if_from_lost_timeline(const EoKey *row, int64 token)
{
	if (eo_ks_token_from_earlier_timeline(token))
		refuse_stale(row, token, "It was issued before a failover or restore that lost its claim.");
}

/*
 * The caller's token must be the key's current one, under a lease.  The row
 * keeps the newest token ever issued for the key, which tells a stale
 * holder (older token, or its own token after the key moved on) from a
 * token that was never issued for this key; one newer than the row's is
 * stale too if it comes from an earlier timeline.
 */
static void
check_token(const EoKey *row, int64 token)
{
	if (!row->has_token || token > row->lease_token)
	{
		refuse_if_from_lost_timeline(row, token);
		ereport(ERROR,
				(errcode(EO_ERRCODE_NOT_HELD),
				 errmsg("lease token " INT64_FORMAT " does not hold idempotency key \"%s\"",
						token, text_to_cstring(row->key)),
				 errhint("Use the lease_token that eo_claim returned with status \"claimed\".")));
	}
	if (token < row->lease_token)
		refuse_stale(row, token,
					 "The key was claimed again since.");
	switch (row->state)
	{
		case EO_PROCESSING:
			return;
		case EO_DONE:
		case EO_REJECTED:
			refuse_not_held(row, true);
			break;
		case EO_TXN_CLAIMED:
			refuse_stale(row, token,
						 "The lease expired and the key was claimed in a transaction since.");
			break;
		default:
			refuse_stale(row, token, "The lease expired and was reclaimed.");
	}
}

/*
 * A key this server has no row of, changed with a token: stale if the
 * token comes from before a failover that lost the claim (check_token),
 * else not claimed.
 */
static void
refuse_unknown(text *key, const int64 *token, EoKey *row)
{
	row->key = key;
	if (token != NULL)
		refuse_if_from_lost_timeline(row, *token);
	refuse_not_claimed(row);
}

/* Find a key the caller is about to change (with `token`, if not NULL). */
static void
find_for_change(text *key, int32 scope, Oid caller, const int64 *token, EoKey *row)
{
	if (!eo_ks_find(key, scope, row))
		refuse_unknown(key, token, row);
	check_owner(row, caller);
}

/* The key's row, which the caller must hold under lease `token`. */
static void
find_held(text *key, int32 scope, Oid caller, int64 token, EoKey *row)
{
	CHECK_FOR_INTERRUPTS();
	find_for_change(key, scope, caller, &token, row);
	check_token(row, token);
}

/* ---- eo_complete ---- */

static void
set_done(EoKey *row, Jsonb *result)
{
	row->state = EO_DONE;
	row->result = result;
	/* the work is finished: its result is what is replayed, not its steps */
	row->recovery_point = NULL;
	row->recovery_state = NULL;
	row->has_expiry = false;
	row->updated_at = GetCurrentTimestamp();
}

/* eo_complete of a claim whose row is not written yet (pending.c). */
static bool
complete_pending(text *key, int32 scope, Jsonb *result, Oid caller)
{
	EoKey	   *pending = eo_pending_get(key, scope);

	if (pending == NULL)
		return false;
	check_owner(pending, caller);
	if (pending->state == EO_DONE)
		refuse_done(pending, true, false);
	eo_pending_set_done(pending, result);
	return true;
}

static bool
complete_key(text *key, int32 scope, Jsonb *result, bool with_token, int64 token,
			 Oid caller)
{
	EoKey		row;

	/* The common case: completing the claim this transaction just made. */
	if (!with_token && eo_pending_take_held(key, scope, &row))
	{
		check_owner(&row, caller);	/* the caller may be another role's code */
		set_done(&row, result);
		eo_pending_forget_held();
		if (eo_ks_update(&row))
			return true;
	}

	find_for_change(key, scope, caller, with_token ? &token : NULL, &row);
	if (with_token)
		check_token(&row, token);
	else if (!held_by_this_transaction(&row))
		refuse_not_held(&row, false);
	set_done(&row, result);
	return eo_ks_update(&row);
}

Datum
eo_complete(PG_FUNCTION_ARGS)
{
	text	   *key = eo_check_key(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	Jsonb	   *result = eo_check_result(PG_GETARG_DATUM(1), PG_ARGISNULL(1));
	bool		with_token = !PG_ARGISNULL(2);
	int64		token = with_token ? PG_GETARG_INT64(2) : 0;
	Oid			caller = GetUserId();
	EoScope		scope;

	get_scope(fcinfo, 3, caller, &scope);
	PreventCommandIfReadOnly("eo_complete()");
	if (with_token || !complete_pending(key, scope.id, result, caller))
	{
		write_pending(key, scope.id, caller);
		eo_ks_begin(EO_KS_READ);
		while (!complete_key(key, scope.id, result, with_token, token, caller))
			CHECK_FOR_INTERRUPTS();
	}
	eo_stat_count(EO_STAT_COMPLETED);
	PG_RETURN_VOID();
}

/* ---- eo_fail ---- */

typedef struct FailRequest
{
	text	   *key;
	EoScope		scope;
	text	   *error;
	bool		with_token;
	int64		token;
	int64		retry_usecs;
	char	   *sqlstate;		/* NULL if not given */
	bool		final;			/* reject the key for good (outcome.c) */
	Oid			caller;
	TimestampTz now;
	bool		became_dead;	/* set by set_failed */
} FailRequest;

/* Record the failure on the row; attempts counts it if not yet counted. */
static void
set_failed(EoKey *row, FailRequest *req, bool count_attempt)
{
	if (count_attempt)
		row->attempts++;
	if (req->final)
	{
		req->became_dead = false;
		row->state = EO_REJECTED;
		row->result = eo_rejection_result(req->sqlstate, req->error);
	}
	else
	{
		req->became_dead = row->state != EO_DEAD && out_of_attempts(row);
		row->state = out_of_attempts(row) ? EO_DEAD : EO_FAILED;
		row->result = NULL;
	}
	row->has_expiry = row->state == EO_FAILED;
	row->lease_expires_at = req->now + req->retry_usecs;
	if (req->error != NULL)
		row->last_error = req->error;
	row->updated_at = req->now;
}

/* A transaction-mode attempt rolled back before it left any row. */
static bool
fail_unknown_key(FailRequest *req, EoKey *row)
{
	memset(row, 0, sizeof(*row));
	row->key = req->key;
	row->scope = req->scope.id;
	row->owner = new_key_owner(&req->scope, req->caller);
	row->created_at = req->now;
	set_failed(row, req, true);
	return eo_ks_insert(row);
}

/* The failure of the attempt that holds the key now (token or this xact). */
static bool
fail_held_key(FailRequest *req, EoKey *row)
{
	set_failed(row, req, false);
	return eo_ks_update(row);
}

/* A retry attempt that rolled back: the row still says failed. */
static bool
fail_after_rollback(FailRequest *req, EoKey *row)
{
	if (row->state == EO_DEAD || row->state == EO_REJECTED)
		return true;			/* finished: nothing to record */
	if (row->state != EO_FAILED)
		refuse_not_held(row, false);
	set_failed(row, req, true);
	return eo_ks_update(row);
}

static bool
fail_key(FailRequest *req, EoKey *row)
{
	if (!eo_ks_find(req->key, req->scope.id, row))
	{
		/* Only a tombstone left: a finished key, whose owner alone may ask. */
		if (eo_ks_find_tombstone(req->key, req->scope.id, row))
		{
			check_owner(row, req->caller);
			if (row->state == EO_DEAD)
				return true;
			refuse_not_held(row, req->with_token);
		}
		if (req->with_token)
			refuse_unknown(req->key, &req->token, row);
		return fail_unknown_key(req, row);
	}
	check_owner(row, req->caller);
	if (req->with_token)
	{
		check_token(row, req->token);
		return fail_held_key(req, row);
	}
	if (held_by_this_transaction(row))
		return fail_held_key(req, row);
	return fail_after_rollback(req, row);
}

Datum
eo_fail(PG_FUNCTION_ARGS)
{
	FailRequest req;
	EoKey		row;

	req.key = eo_check_key(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	req.error = eo_clip_error(PG_GETARG_DATUM(1), PG_ARGISNULL(1));
	req.with_token = !PG_ARGISNULL(2);
	req.token = req.with_token ? PG_GETARG_INT64(2) : 0;
	req.retry_usecs = eo_check_retry_after(PG_GETARG_DATUM(3), PG_ARGISNULL(3));
	req.caller = GetUserId();
	get_scope(fcinfo, 4, req.caller, &req.scope);
	req.sqlstate = PG_NARGS() > 5 ? eo_check_sqlstate(PG_GETARG_DATUM(5), PG_ARGISNULL(5)) : NULL;
	req.final = eo_failure_is_final(req.sqlstate,
									PG_NARGS() > 6 && !PG_ARGISNULL(6) ? PG_GETARG_BOOL(6) : -1);

	PreventCommandIfReadOnly("eo_fail()");
	eo_pending_forget_held();
	write_pending(req.key, req.scope.id, req.caller);
	eo_ks_begin(EO_KS_WRITE);
	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		req.now = GetCurrentTimestamp();
		req.became_dead = false;
		if (fail_key(&req, &row))
			break;
	}
	eo_stat_count(EO_STAT_FAILED);
	if (req.became_dead)
		eo_stat_count(EO_STAT_KEYS_DEAD);
	PG_RETURN_TEXT_P(cstring_to_text(row.state == EO_DEAD ? "dead" :
									 row.state == EO_REJECTED ? "rejected" : "retry"));
}

/* ---- eo_extend ---- */

Datum
eo_extend(PG_FUNCTION_ARGS)
{
	text	   *key = eo_check_key(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	int64		token;
	int64		lease_usecs;
	Oid			caller = GetUserId();
	EoScope		scope;
	EoKey		row;

	if (PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lease_token and lease must not be null")));
	token = PG_GETARG_INT64(1);
	lease_usecs = eo_check_lease(PG_GETARG_DATUM(2), false, EO_LEASE_KEY);
	get_scope(fcinfo, 3, caller, &scope);

	PreventCommandIfReadOnly("eo_extend()");
	write_pending(key, scope.id, caller);
	eo_ks_begin(EO_KS_READ);
	do
	{
		find_held(key, scope.id, caller, token, &row);
		row.updated_at = GetCurrentTimestamp();
		row.lease_expires_at = row.updated_at + lease_usecs;
	} while (!eo_ks_update(&row));
	PG_RETURN_TIMESTAMPTZ(row.lease_expires_at);
}

/* ---- eo_recovery_point ---- */

/*
 * The holder of a lease records how far its work got: a named point and a
 * small state, fenced by its token like eo_complete.  A row change in the
 * caller's transaction: it commits with the step's database work, or not
 * at all.  The next holder (after a takeover, a retry or a redrive) gets
 * both from eo_claim.
 */
Datum
eo_recovery_point(PG_FUNCTION_ARGS)
{
	text	   *key = eo_check_key(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	text	   *point = eo_check_recovery_point(PG_GETARG_DATUM(2), PG_ARGISNULL(2));
	Jsonb	   *state = eo_check_recovery_state(PG_GETARG_DATUM(3), PG_ARGISNULL(3));
	Oid			caller = GetUserId();
	int64		token;
	EoScope		scope;
	EoKey		row;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lease_token must not be null"),
				 errhint("Recovery points are for work under a lease: claim the key with a lease.")));
	token = PG_GETARG_INT64(1);
	get_scope(fcinfo, 4, caller, &scope);

	PreventCommandIfReadOnly("eo_recovery_point()");
	write_pending(key, scope.id, caller);
	eo_ks_begin(EO_KS_READ);
	do
	{
		find_held(key, scope.id, caller, token, &row);
		row.recovery_point = point;
		row.recovery_state = state;
		row.updated_at = GetCurrentTimestamp();
	} while (!eo_ks_update(&row));
	PG_RETURN_VOID();
}

/* ---- redrive ---- */

/*
 * A dead key is given eo.max_attempts more attempts: failed, due at once,
 * with its attempts, last error, fingerprint and recovery point kept.
 * Decided on the newest committed row, as every transition: of two
 * redrives (or a redrive and a claim) of one key, the second sees what
 * the first did.  Returns false if the key is not dead.  With `quiet`
 * (eo_redrive_dead), a key the caller may not act on, or that is gone, is
 * passed over as not dead instead of raising an error.
 */
bool
eo_redrive_key(text *key, int32 scope, Oid caller, bool quiet)
{
	EoKey		row;

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (!eo_ks_find(key, scope, &row))
		{
			if (quiet)
				return false;
			if (eo_ks_find_tombstone(key, scope, &row))
			{
				check_owner(&row, caller);
				ereport(ERROR,
						(errcode(EO_ERRCODE_NOT_HELD),
						 errmsg("idempotency key \"%s\" has expired",
								text_to_cstring(key)),
						 errdetail("Only its tombstone is left (eo.tombstone_retention); it cannot be redriven."),
						 errhint("To run the work again, use a new key.")));
			}
			ereport(ERROR,
					(errcode(EO_ERRCODE_NOT_HELD),
					 errmsg("idempotency key \"%s\" is not known", text_to_cstring(key))));
		}
		if (quiet && !has_privs_of_role(caller, row.owner))
			return false;
		check_owner(&row, caller);
		if (row.state != EO_DEAD)
			return false;
		row.state = EO_FAILED;
		row.attempts_base = row.attempts;
		row.updated_at = GetCurrentTimestamp();
		row.has_expiry = true;	/* a retry time, reached already */
		row.lease_expires_at = row.updated_at;
		if (eo_ks_update(&row))
			break;
	}
	eo_stat_count(EO_STAT_REDRIVEN);
	return true;
}

/* ---- eo_status ---- */

/* The name of stored state `state`, as eo_status and eo_list_keys show it. */
const char *
eo_state_name(char state)
{
	switch (state)
	{
		case EO_TXN_CLAIMED:
		case EO_DONE:
			return "done";
		case EO_PROCESSING:
			return "processing";
		case EO_FAILED:
			return "failed";
		case EO_DEAD:
			return "dead";
		case EO_REJECTED:
			return "rejected";
	}
	return "unknown";
}

/* A transaction-mode claim is processing only inside its own transaction. */
static const char *
state_name(const EoKey *row)
{
	if (held_by_this_transaction(row))
		return "processing";
	return eo_state_name(row->state);
}

static HeapTuple
status_tuple(TupleDesc tupdesc, const EoKey *row)
{
	Datum		values[8];
	bool		nulls[8] = {false, false, false, false, false, false, false, false};

	values[0] = CStringGetTextDatum(state_name(row));
	nulls[1] = row->result == NULL;
	values[1] = PointerGetDatum(row->result);
	values[2] = Int32GetDatum(row->attempts);
	nulls[3] = row->state != EO_PROCESSING;
	values[3] = Int64GetDatum(row->lease_token);
	nulls[4] = !row->has_expiry;
	values[4] = TimestampTzGetDatum(row->lease_expires_at);
	nulls[5] = row->last_error == NULL;
	values[5] = PointerGetDatum(row->last_error);
	values[6] = TimestampTzGetDatum(row->created_at);
	values[7] = TimestampTzGetDatum(row->updated_at);
	return heap_form_tuple(tupdesc, values, nulls);
}

/*
 * A claim or a change of the key sits in a prepared transaction: whether
 * it happened is decided by COMMIT PREPARED or ROLLBACK PREPARED, which
 * may be hours away.  State "in_doubt", nothing else: what that
 * transaction wrote is not known to have happened.
 */
static HeapTuple
in_doubt_tuple(TupleDesc tupdesc)
{
	Datum		values[8] = {0};
	bool		nulls[8] = {false, true, true, true, true, true, true, true};

	values[0] = CStringGetTextDatum("in_doubt");
	return heap_form_tuple(tupdesc, values, nulls);
}

/*
 * Returns the key's one row, no row for a key eo does not know, or a row
 * saying it is in doubt.
 */
Datum
eo_status(PG_FUNCTION_ARGS)
{
	FuncCallContext *funcctx;

	if (SRF_IS_FIRSTCALL())
	{
		text	   *key = eo_check_key(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
		Oid			caller = GetUserId();
		MemoryContext old;
		TupleDesc	tupdesc;
		EoScope		scope;
		EoKey		row;
		bool		found;
		bool		in_doubt;

		funcctx = SRF_FIRSTCALL_INIT();
		old = MemoryContextSwitchTo(funcctx->multi_call_memory_ctx);
		if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
			elog(ERROR, "eo: eo_status must return a composite type");
		tupdesc = BlessTupleDesc(tupdesc);

		get_scope(fcinfo, 1, caller, &scope);
		write_pending(key, scope.id, caller);
		eo_ks_begin(EO_KS_READ);
		/* waits for a claim in flight, unless it is in a prepared transaction */
		found = eo_ks_find_settled(key, scope.id, &row, &in_doubt);
		if (found)
			check_owner(&row, caller);

		funcctx->user_fctx = in_doubt ? in_doubt_tuple(tupdesc) :
			found ? status_tuple(tupdesc, &row) : NULL;
		funcctx->max_calls = found || in_doubt ? 1 : 0;
		MemoryContextSwitchTo(old);
	}
	funcctx = SRF_PERCALL_SETUP();
	if (funcctx->call_cntr < funcctx->max_calls)
		SRF_RETURN_NEXT(funcctx, HeapTupleGetDatum((HeapTuple) funcctx->user_fctx));
	SRF_RETURN_DONE(funcctx);
}
