/*-------------------------------------------------------------------------
 * redrive.c
 *	  eo_redrive and eo_redrive_dead: dead keys may be claimed again, once
 *	  the cause of their failures is fixed.
 *
 * A key goes dead after eo.max_attempts failed attempts (claim.c).  A
 * redrive makes it failed and due at once, so the next delivery claims it;
 * eo.max_attempts then counts from the redrive, while the key keeps its
 * history (attempts, last_error), its fingerprint and its recovery point.
 * The transition itself is claim.c's (eo_redrive_key); this file is the
 * SQL-facing part: one key, or every dead key of a scope that matches a
 * key prefix and a time range, among those the caller may act on.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/timestamp.h"

#include "eo.h"

PG_FUNCTION_INFO_V1(eo_redrive);
PG_FUNCTION_INFO_V1(eo_redrive_dead);

/* eo_redrive(key, scope): true if the key was dead and is now due. */
Datum
eo_redrive(PG_FUNCTION_ARGS)
{
	text	   *key = eo_check_key(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	Oid			caller = GetUserId();
	EoScope		scope;
	bool		redriven;

	eo_scope_resolve(PG_GETARG_DATUM(1), PG_ARGISNULL(1), caller, &scope);
	PreventCommandIfReadOnly("eo_redrive()");
	eo_ks_begin(EO_KS_READ);
	redriven = eo_redrive_key(key, scope.id, caller, false);
	PG_RETURN_BOOL(redriven);
}

typedef struct BulkRedrive
{
	Oid			caller;
	int32		scope;
	int64		redriven;
} BulkRedrive;

static bool
redrive_one(const EoListedKey *key, void *arg)
{
	BulkRedrive *bulk = (BulkRedrive *) arg;

	if (eo_redrive_key(key->key, bulk->scope, bulk->caller, true))
		bulk->redriven++;
	return true;
}

/*
 * eo_redrive_dead(scope, key_prefix, dead_since, dead_before): every dead
 * key of the scope (none: the keys claimed without one) that the caller
 * may act on and that matches; how many were redriven.  Keys of other
 * roles are passed over, not refused, and not counted.  Each dead key is
 * decided as eo_redrive decides it, so a concurrent redrive or claim of a
 * key is never undone; one transaction, so all or none.
 */
Datum
eo_redrive_dead(PG_FUNCTION_ARGS)
{
	Oid			caller = GetUserId();
	EoScope		scope;
	EoKeyFilter filter = {0};
	BulkRedrive bulk;

	eo_scope_resolve(PG_GETARG_DATUM(0), PG_ARGISNULL(0), caller, &scope);
	filter.caller = caller;
	filter.scope = scope.id;
	filter.states = "{x}";
	filter.redrivable = true;
	filter.prefix = eo_check_key_prefix(PG_GETARG_DATUM(1), PG_ARGISNULL(1));
	filter.has_since = !PG_ARGISNULL(2);
	filter.since = filter.has_since ? PG_GETARG_TIMESTAMPTZ(2) : 0;
	filter.has_before = !PG_ARGISNULL(3);
	filter.before = filter.has_before ? PG_GETARG_TIMESTAMPTZ(3) : 0;

	PreventCommandIfReadOnly("eo_redrive_dead()");
	bulk.caller = caller;
	bulk.scope = scope.id;
	bulk.redriven = 0;
	eo_ks_open(EO_KS_READ);
	eo_ks_each_key(&filter, redrive_one, &bulk);
	eo_ks_close();
	PG_RETURN_INT64(bulk.redriven);
}
