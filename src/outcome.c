/*-------------------------------------------------------------------------
 * outcome.c
 *	  What a failure means: final (cached and replayed) or not (the key is
 *	  released for a retry), decided by its SQLSTATE.
 *
 * A transaction-mode attempt that rolls back leaves no trace, so a request
 * that fails on a business rule (a constraint, a bad amount) would be
 * retried for ever, while one that failed on a serialization failure or a
 * timeout should be.  eo_fail takes the failure's SQLSTATE: one that the
 * caller says is final (final => true), or by default one that
 * eo.final_sqlstates lists (by class or exactly), makes the key rejected:
 * its SQLSTATE and message are kept as the key's result, and every later
 * eo_claim of the key raises that same error again instead of running the
 * work; anything else is recorded as a failed attempt, as before, and the
 * key may be claimed again once retry_after has passed.  Some SQLSTATEs
 * are never final (validate.c, eo_sqlstate_may_be_final): replaying them
 * would stop the client or its pool rather than answer the request.
 *
 * Process model: per call; no state.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "eo.h"

/*
 * Is a failure with `sqlstate` (NULL: not given) final?  `final_arg` is the
 * caller's word (-1: none), which wins; a failure without a SQLSTATE is
 * not final unless the caller says so.
 */
bool
eo_failure_is_final(const char *sqlstate, int final_arg)
{
	if (final_arg == 1)
	{
		if (sqlstate == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("a final failure needs its sqlstate"),
					 errhint("Pass the SQLSTATE of the error, which later claims of the key raise again.")));
		if (!eo_sqlstate_may_be_final(sqlstate, 5))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a failure with SQLSTATE %s cannot be final", sqlstate),
					 errdetail("It is no error, or it says something of the transaction, the connection or the server, not of the request: replayed, it would stop clients and pools that handle it."),
					 errhint("Record it without final => true: the key can then be claimed again.")));
		return true;
	}
	if (final_arg == 0 || sqlstate == NULL || !eo_sqlstate_may_be_final(sqlstate, 5))
		return false;
	return eo_sqlstate_listed(sqlstate, eo_final_sqlstates);
}

/* The result a rejected key keeps: {"sqlstate": ..., "message": ...}. */
Jsonb *
eo_rejection_result(const char *sqlstate, text *error)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"sqlstate\": ");
	escape_json(&buf, sqlstate);
	appendStringInfoString(&buf, ", \"message\": ");
	escape_json(&buf, error != NULL ? text_to_cstring(error) : "failed");
	appendStringInfoChar(&buf, '}');
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}

/* Member `field` of the rejected key's result, or `missing`. */
static char *
rejection_field(const EoKey *row, const char *field, const char *missing)
{
	JsonbValue	v;

	if (row->result != NULL && JB_ROOT_IS_OBJECT(row->result) &&
		getKeyJsonValueFromContainer(&row->result->root, field, strlen(field), &v) != NULL &&
		v.type == jbvString)
		return pnstrdup(v.val.string.val, v.val.string.len);
	return pstrdup(missing);
}

/*
 * A claim of a rejected key: the error it failed with, again.  The DETAIL
 * says that it is a replay, so that a log reader does not look for a
 * second failure of the work.
 */
void
eo_replay_rejection(const EoKey *row)
{
	char	   *sqlstate = rejection_field(row, "sqlstate", "P0001");
	char	   *message = rejection_field(row, "message", "failed");

	/* Only eo writes it; but a result edited by hand must not raise junk. */
	if (strlen(sqlstate) != 5 || strspn(sqlstate, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ") != 5 ||
		!eo_sqlstate_may_be_final(sqlstate, 5))
		sqlstate = "P0001";
	ereport(ERROR,
			(errcode(MAKE_SQLSTATE(sqlstate[0], sqlstate[1], sqlstate[2],
								   sqlstate[3], sqlstate[4])),
			 errmsg("%s", message),
			 errdetail("Idempotency key \"%s\" failed with this error for good at %s; the error is replayed, the work is not run again.",
					   text_to_cstring(row->key), timestamptz_to_str(row->updated_at)),
			 errhint("To run the work again, use a new key.")));
}
