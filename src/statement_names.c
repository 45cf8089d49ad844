/*-------------------------------------------------------------------------
 * statement_names.c
 *	  Prepared statement names beginning "eo_nats_" are eo_nats's: in a
 *	  session that has loaded eo, SQL's PREPARE, EXECUTE and DEALLOCATE
 *	  refuse them.
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
 * SQL's EXECUTE of those names is refused too, also under EXPLAIN and in
 * CREATE TABLE AS.  After an invalidation, an EXECUTE makes the server
 * analyse and plan eo_nats's statement again under the settings of
 * whatever code ran it (a trigger's DateStyle, TimeZone ...), and that
 * plan is what eo_nats's next Bind runs, for the rest of the session.
 * eo_nats's own statements read nothing those settings change today;
 * this keeps it so whatever they become.  (eo_nats runs them with the
 * protocol's Bind message, which no hook sees and no code in its session
 * can send.)  What is left: an invalidation alone (DISCARD PLANS from a
 * trigger) still makes eo_nats's next Bind in the same transaction
 * analyse under the trigger's settings; after --sql, apply binds only its
 * call of eo_session_pin there, with typed parameters and no literal or
 * operator a setting reads.
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
				 errdetail("Names beginning \"%s\" are eo_nats's: PREPARE, EXECUTE and DEALLOCATE refuse them.",
						   EO_RESERVED_STATEMENT_PREFIX)));
}

/*
 * The prepared statement name stmt uses, looking through EXPLAIN and
 * CREATE TABLE AS, which run an EXECUTE they carry (analysed: a Query
 * whose utilityStmt is the ExecuteStmt) without ProcessUtility; NULL if
 * it uses none.
 */
static const char *
statement_name(Node *stmt)
{
	if (stmt == NULL)
		return NULL;
	switch (nodeTag(stmt))
	{
		case T_PrepareStmt:
			return ((PrepareStmt *) stmt)->name;
		case T_DeallocateStmt:
			return ((DeallocateStmt *) stmt)->name;
		case T_ExecuteStmt:
			return ((ExecuteStmt *) stmt)->name;
		case T_ExplainStmt:
			return statement_name(((ExplainStmt *) stmt)->query);
		case T_CreateTableAsStmt:
			return statement_name(((CreateTableAsStmt *) stmt)->query);
		case T_Query:
			return statement_name(((Query *) stmt)->utilityStmt);
		default:
			return NULL;
	}
}

static void
eo_process_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
				   ProcessUtilityContext context, ParamListInfo params,
				   QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	refuse_reserved(statement_name(pstmt->utilityStmt));
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
 * eo_statement_names_reserved(): whether this session refuses PREPARE,
 * EXECUTE and DEALLOCATE under eo_nats's names.  Calling it loads eo's library, which
 * reserves them, so it is true; an eo_nats that finds it (at connect,
 * before any code but its own has run) prepares its statements by name.
 */
Datum
eo_statement_names_reserved(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(names_reserved);
}
