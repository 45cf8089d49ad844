/*-------------------------------------------------------------------------
 * session_pin.c
 *	  eo_session_pin: put a session's settings back to given values, setting
 *	  only those that read otherwise.
 *
 * eo_nats apply runs code that is not its own in its session (the triggers
 * of the tables its --sql writes), which can change any setting for the
 * rest of the session.  So at the start of every transaction it puts back
 * the thirty-odd settings it read once its session was set up.  In SQL
 * that is a statement over two unnested arrays, parsed and planned every
 * time (eo_nats prepares nothing by name: a trigger could replace what it
 * prepared), which cost more server CPU than the claim; with this call
 * apply's server CPU per message, one message a fetch, is 0.86x
 * (bench/nats.sh, docs/performance.md).
 *
 * Nothing here runs with rights the caller lacks: a setting is read as
 * current_setting(name, true) reads it and set as set_config(name, value,
 * false) sets it, so EXECUTE is granted to PUBLIC like set_config's.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"

#include "eo.h"

PG_FUNCTION_INFO_V1(eo_session_pin);

/* The elements of a one-dimensional text[] (or none, for an empty one). */
static int
text_elements(ArrayType *array, const char *what, Datum **elems, bool **nulls)
{
	int			n;

	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must be a one-dimensional array", what)));
	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, elems, nulls, &n);
	return n;
}

/*
 * One setting put back if it reads otherwise; true if it was set.  An
 * unknown one is passed over, as current_setting(name, true) reads NULL
 * for it (a setting the server lacks, transaction_timeout before 17).
 */
static bool
pin_one(const char *name, const char *value)
{
	char	   *now = GetConfigOptionByName(name, NULL, true);

	if (now == NULL || strcmp(now, value) == 0)
		return false;
	(void) set_config_option(name, value, superuser() ? PGC_SUSET : PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SET, true, 0, false);
	return true;
}

/*
 * eo_session_pin(names, settings): each named setting whose value reads
 * otherwise than its element of settings is set to it for the session;
 * a NULL element leaves its setting alone.  Returns how many were set.
 */
Datum
eo_session_pin(PG_FUNCTION_ARGS)
{
	Datum	   *names;
	Datum	   *values;
	bool	   *name_nulls;
	bool	   *value_nulls;
	int			n = text_elements(PG_GETARG_ARRAYTYPE_P(0), "names", &names, &name_nulls);
	int			set = 0;

	if (text_elements(PG_GETARG_ARRAYTYPE_P(1), "settings", &values, &value_nulls) != n)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("names and settings must have as many elements")));
	for (int i = 0; i < n; i++)
	{
		if (name_nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("a setting's name must not be NULL")));
		if (!value_nulls[i] &&
			pin_one(TextDatumGetCString(names[i]), TextDatumGetCString(values[i])))
			set++;
	}
	PG_RETURN_INT32(set);
}
