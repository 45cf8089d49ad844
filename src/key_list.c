/*-------------------------------------------------------------------------
 * key_list.c
 *	  eo_list_keys: the keys a role may act on, in one state, for the
 *	  operator who looks for its dead or failed keys before redriving them.
 *
 * eo_keys() shows every role's keys (results included) and is for the
 * superuser; a role sees here only the keys of roles it has the
 * privileges of (as eo_redrive_dead acts on them), in one scope, at most
 * `max_rows` of them, oldest change first within a generation.  Nothing
 * of a key's result or fingerprint is shown: eo_status gives the result
 * of one key to its owner.  The cost is that of eo_redrive_dead: every
 * live generation is read in full (no index leads by state), so it is a
 * tool for operators, not for every request.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "eo.h"

PG_FUNCTION_INFO_V1(eo_list_keys);

#define EO_LIST_MAX_ROWS 10000

/* The states a caller may ask for, by the names eo_status gives them. */
static const struct
{
	const char *name;
	const char *codes;
}			list_states[] = {
	{"processing", "{p}"},
	{"done", "{c,d}"},
	{"failed", "{f}"},
	{"dead", "{x}"},
	{"rejected", "{r}"},
};

static const char *
state_codes(text *state)
{
	char	   *name = text_to_cstring(state);

	for (int i = 0; i < lengthof(list_states); i++)
		if (strcmp(name, list_states[i].name) == 0)
			return list_states[i].codes;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unknown key state \"%s\"", name),
			 errhint("The states are processing, done, failed, dead and rejected.")));
	return NULL;				/* not reached */
}

typedef struct ListCall
{
	ReturnSetInfo *rsinfo;
	int			left;
} ListCall;

static bool
list_one(const EoListedKey *key, void *arg)
{
	ListCall   *call = (ListCall *) arg;
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};

	values[0] = PointerGetDatum(key->key);
	values[1] = CStringGetTextDatum(eo_state_name(key->state));
	values[2] = Int32GetDatum(key->attempts);
	nulls[3] = key->last_error == NULL;
	values[3] = PointerGetDatum(key->last_error);
	values[4] = TimestampTzGetDatum(key->updated_at);
	nulls[5] = !key->has_expiry;
	values[5] = TimestampTzGetDatum(key->lease_expires_at);
	tuplestore_putvalues(call->rsinfo->setResult, call->rsinfo->setDesc, values, nulls);
	return --call->left > 0;
}

/*
 * eo_list_keys(state, scope, key_prefix, max_rows) returns (key, state,
 * attempts, last_error, updated_at, lease_expires_at).
 */
Datum
eo_list_keys(PG_FUNCTION_ARGS)
{
	EoKeyFilter filter = {0};
	EoScope		scope;
	ListCall	call;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("state must not be null")));
	filter.states = state_codes(PG_GETARG_TEXT_PP(0));
	filter.caller = GetUserId();
	eo_scope_resolve(PG_GETARG_DATUM(1), PG_ARGISNULL(1), filter.caller, &scope);
	filter.scope = scope.id;
	filter.prefix = eo_check_key_prefix(PG_GETARG_DATUM(2), PG_ARGISNULL(2));
	call.left = PG_ARGISNULL(3) ? 0 : PG_GETARG_INT32(3);
	if (call.left < 1 || call.left > EO_LIST_MAX_ROWS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_rows must be between 1 and %d", EO_LIST_MAX_ROWS),
				 errhint("Narrow the list with key_prefix, or redrive in bulk with eo_redrive_dead.")));

	InitMaterializedSRF(fcinfo, 0);
	call.rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	eo_ks_open(EO_KS_READ);
	eo_ks_each_key(&filter, list_one, &call);
	eo_ks_close();
	return (Datum) 0;
}
