/*-------------------------------------------------------------------------
 * session_pin.c
 *	  eo_session_pin: put a session's settings back to given values, setting
 *	  only those that read otherwise; eo_session_pin_at_commit: the same,
 *	  and every LISTEN dropped, when the transaction commits, after every
 *	  piece of code in it has run.
 *
 * eo_nats apply runs code that is not its own in its session (the triggers
 * of the tables its --sql writes), which can change any setting for the
 * rest of the session.  So it puts back the thirty-odd settings it read
 * once its session was set up.  In SQL that is a statement over two
 * unnested arrays, parsed and planned every time (eo_nats prepares nothing
 * by name: a trigger could replace what it prepared), which cost more
 * server CPU than the claim; with eo_session_pin at the start of each
 * transaction apply's server CPU per message, one message a fetch, was
 * 0.86x, and with eo_session_pin_at_commit in place of that and of three
 * statements before COMMIT, less again (bench/nats.sh, docs/performance.md).
 *
 * Nothing here runs with rights the caller lacks: a setting is read as
 * current_setting(name, true) reads it and set as set_config(name, value,
 * false) sets it, LISTENs are dropped as UNLISTEN * drops them, so EXECUTE
 * is granted to PUBLIC like set_config's.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"

#include "compat.h"
#include "eo.h"

PG_FUNCTION_INFO_V1(eo_session_pin);
PG_FUNCTION_INFO_V1(eo_session_pin_at_commit);

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

/* Who sets the settings: the context and role set_config_option_ext checks. */
typedef struct Setter
{
	GucContext	context;
	Oid			role;
} Setter;

/* The caller, as set_config(name, value, false) would set for it. */
static Setter
setter_now(void)
{
	return (Setter) {superuser() ? PGC_SUSET : PGC_USERSET, GetUserId()};
}

/*
 * One setting put back for the session, with setter's rights, if it
 * reads otherwise or was set in this transaction at all (it has a stacked
 * value to go back to at the transaction's end: set for the session, then
 * LOCAL to the value given, it reads the same now and would read the
 * session's value after COMMIT); true if it was set.  One whose record
 * is not found under the name (an old name GetConfigOptionByName maps,
 * sort_mem) is set.  An unknown one is passed over, as
 * current_setting(name, true) reads NULL for it (a setting the server
 * lacks, transaction_timeout before 17).
 */
static bool
pin_one(const char *name, const char *value, Setter setter)
{
	char	   *now = GetConfigOptionByName(name, NULL, true);
	struct config_generic *setting;

	if (now == NULL)
		return false;
	if (strcmp(now, value) == 0 &&
		(setting = eo_find_setting(name)) != NULL && setting->stack == NULL)
		return false;
	(void) set_config_option_ext(name, value, setter.context, PGC_S_SESSION, setter.role,
								 GUC_ACTION_SET, true, 0, false);
	return true;
}

/*
 * The elements of names and settings (as many of each, no NULL name);
 * returns how many.
 */
static int
settings_of(ArrayType *names_array, ArrayType *settings_array,
			Datum **names, Datum **values, bool **value_nulls)
{
	bool	   *name_nulls;
	int			n = text_elements(names_array, "names", names, &name_nulls);

	if (text_elements(settings_array, "settings", values, value_nulls) != n)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("names and settings must have as many elements")));
	for (int i = 0; i < n; i++)
		if (name_nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("a setting's name must not be NULL")));
	return n;
}

/*
 * pin_one for each setting of names and its element of settings; a NULL
 * element leaves its setting alone.  Returns how many were set.
 */
static int
pin_all(ArrayType *names_array, ArrayType *settings_array, Setter setter)
{
	Datum	   *names;
	Datum	   *values;
	bool	   *value_nulls;
	int			n = settings_of(names_array, settings_array, &names, &values, &value_nulls);
	int			set = 0;

	for (int i = 0; i < n; i++)
		if (!value_nulls[i] &&
			pin_one(TextDatumGetCString(names[i]), TextDatumGetCString(values[i]), setter))
			set++;
	return set;
}

/* eo_session_pin(names, settings): pin_all, now. */
Datum
eo_session_pin(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(pin_all(PG_GETARG_ARRAYTYPE_P(0), PG_GETARG_ARRAYTYPE_P(1), setter_now()));
}

/*
 * What eo_session_pin_at_commit asked of this transaction's commit (in
 * TopTransactionContext), or NULLs, and with whose rights.
 */
static ArrayType *commit_names = NULL;
static ArrayType *commit_settings = NULL;
static Setter commit_setter;
static bool commit_callback_registered = false;

/*
 * At XACT_EVENT_PRE_COMMIT: every deferred trigger has fired and every
 * held cursor is materialized (CommitTransaction does those first, until
 * none is left), and nothing after it runs code of the transaction's.
 * So what is set here is what the commit runs with (a durable
 * synchronous_commit, whatever was set LOCAL: a session-wide set replaces
 * it) and what the next transaction begins with; and an UNLISTEN * queued
 * here comes after every LISTEN of the transaction (PreCommit_Notify
 * applies them in order, after this).  Any other end forgets the request:
 * a rollback takes the transaction's changes with it, and a prepared
 * transaction commits elsewhere.
 */
static void
pin_at_commit_callback(XactEvent event, void *arg)
{
	ArrayType  *names = commit_names;
	ArrayType  *settings = commit_settings;

	commit_names = commit_settings = NULL;
	if (event != XACT_EVENT_PRE_COMMIT || names == NULL)
		return;
	Async_UnlistenAll();
	(void) pin_all(names, settings, commit_setter);

	/*
	 * A cancel the transaction's own code sent its backend (a deferred
	 * trigger's pg_cancel_backend(pg_backend_pid())) is still pending, and
	 * would end the wait for synchronous standbys at once: COMMIT would
	 * succeed with a warning, not replicated, and the caller take it for
	 * durable.  Taken here, it fails the COMMIT instead.
	 */
	CHECK_FOR_INTERRUPTS();
}

/*
 * eo_session_pin_at_commit(names, settings): when this transaction
 * commits, after all code in it has run, every LISTEN is dropped and
 * pin_all(names, settings) is done, with the caller's rights as they are
 * now (the user may be another by then).  The arrays are checked now,
 * each value by its setting at COMMIT.  A second call in the same
 * transaction is refused: the caller makes the first before it runs code
 * that is not its own, which must not replace what it asked for
 * (synchronous_commit off, for one).  It holds for the transaction, even
 * if made in a subtransaction rolled back later.
 * Every transaction of eo_nats apply that commits ends so, and one that
 * rolls back takes its own changes with it: each begins as apply set its
 * session up, with no pin at its start, and no trigger (deferred or not)
 * can make its commit asynchronous.  Like UNLISTEN, refused within a
 * security-restricted operation; and within a SECURITY DEFINER function,
 * as SET ROLE is: what it sets would outlive the function, for whoever
 * called it.
 */
Datum
eo_session_pin_at_commit(PG_FUNCTION_ARGS)
{
	Datum	   *names;
	Datum	   *values;
	bool	   *value_nulls;
	MemoryContext old;

	if (InSecurityRestrictedOperation())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("cannot call eo_session_pin_at_commit within security-restricted operation")));
	if (InLocalUserIdChange())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("cannot call eo_session_pin_at_commit within security-definer function")));
	if (commit_names != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("eo_session_pin_at_commit was already called in this transaction"),
				 errdetail("What the first call asked for is done at COMMIT; it cannot be replaced.")));
	(void) settings_of(PG_GETARG_ARRAYTYPE_P(0), PG_GETARG_ARRAYTYPE_P(1), &names, &values, &value_nulls);
	if (!commit_callback_registered)
	{
		RegisterXactCallback(pin_at_commit_callback, NULL);
		commit_callback_registered = true;
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	commit_names = DatumGetArrayTypePCopy(PG_GETARG_DATUM(0));
	commit_settings = DatumGetArrayTypePCopy(PG_GETARG_DATUM(1));
	MemoryContextSwitchTo(old);
	commit_setter = setter_now();
	PG_RETURN_VOID();
}
