/*-------------------------------------------------------------------------
 * statement_names.c
 *	  Prepared statement names beginning "eo_nats_" are eo_nats's: in a
 *	  session that has loaded eo, SQL's PREPARE and DEALLOCATE refuse them.
 *
 * eo_nats runs code that is not its own in its session (apply: the
 * triggers of the tables its --sql writes), and PREPARE and DEALLOCATE
 * work from PL/pgSQL: a statement it prepared by name could be replaced
 * by one that answers "duplicate" to every claim, and the messages would
 * be acknowledged without being applied.  So eo_nats prepared nothing by
 * name, and the server parsed, analysed and planned each of its
 * statements every time: most of what apply's server CPU per message
 * was above a consumer that prepares (docs/performance.md).  With the
 * names reserved, no code in the session can put a statement under one
 * of them; eo_nats prepares by name (protocol-level Parse, which is not
 * a utility statement) only where it finds the reservation in force.
 * DEALLOCATE ALL is still allowed: it can only make eo_nats's next use of
 * a name fail (26000), and eo_nats then makes a new session.
 *
 * The hook is installed whenever eo's library is loaded: at start with
 * the preload, else at the first call of one of eo's C functions;
 * eo_nats calls eo_statement_names_reserved() at connect, which loads it
 * and says so.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"

#include "eo.h"

PG_FUNCTION_INFO_V1(eo_statement_names_reserved);

static ProcessUtility_hook_type prev_process_utility = NULL;
static bool names_reserved = false;

/* Whether name is one of eo_nats's (NULL, DEALLOCATE ALL's, is not). */
static bool
reserved(const char *name)
{
	return name != NULL && strncmp(name, EO_RESERVED_STATEMENT_PREFIX,
								   strlen(EO_RESERVED_STATEMENT_PREFIX)) == 0;
}

static void
refuse_reserved(const char *name)
{
	if (reserved(name))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("prepared statement name \"%s\" is reserved", name),
				 errdetail("Names beginning \"%s\" are eo_nats's: PREPARE and DEALLOCATE refuse them.",
						   EO_RESERVED_STATEMENT_PREFIX)));
}

static void
eo_process_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
				   ProcessUtilityContext context, ParamListInfo params,
				   QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;

	if (IsA(stmt, PrepareStmt))
		refuse_reserved(((PrepareStmt *) stmt)->name);
	else if (IsA(stmt, DeallocateStmt))
		refuse_reserved(((DeallocateStmt *) stmt)->name);
	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
}

/* From _PG_init, in every process that loads eo. */
void
eo_reserve_statement_names(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = eo_process_utility;
	names_reserved = true;
}

/*
 * eo_statement_names_reserved(): whether this session refuses PREPARE and
 * DEALLOCATE under eo_nats's names.  Calling it loads eo's library, which
 * reserves them, so it is true; an eo_nats that finds it (at connect,
 * before any code but its own has run) prepares its statements by name.
 */
Datum
eo_statement_names_reserved(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(names_reserved);
}
