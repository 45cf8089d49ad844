/*-------------------------------------------------------------------------
 * objects.c
 *	  Finding eo's own tables, and acting as their owner.
 *
 * The key store (keystore.c) and the outbox (outbox.c) both find their
 * tables through the extension's schema and run their statements as the
 * tables' owner, so that callers need no privileges on the tables; and
 * both keep prepared plans for the life of the backend.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/plancache.h"
#include "utils/resowner.h"
#include "utils/syscache.h"

#include "eo.h"

/* The table `relname` in eo's schema `nsp`; a clear error if it is gone. */
Oid
eo_own_table(Oid nsp, const char *relname)
{
	Oid			relid = get_relname_relid(relname, nsp);

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("eo's relation \"%s\" is missing from schema \"%s\"",
						relname, get_namespace_name(nsp)),
				 errhint("Reinstall the extension with DROP EXTENSION eo; CREATE EXTENSION eo;")));
	return relid;
}

Oid
eo_relation_owner(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "eo: cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * Act as `owner` until eo_restore_identity(saved).  Restricted, so that no
 * user code (a trigger someone added) can run with the owner's rights.  An
 * error in between needs no cleanup: (sub)transaction abort restores the
 * identity.
 */
void
eo_become_owner(Oid owner, EoIdentity *saved)
{
	GetUserIdAndSecContext(&saved->userid, &saved->sec_context);
	SetUserIdAndSecContext(owner, saved->sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
}

void
eo_restore_identity(const EoIdentity *saved)
{
	SetUserIdAndSecContext(saved->userid, saved->sec_context);
}

/*
 * Prepare `sql`, keep it past the current SPI connection, and build its
 * generic plan at once (no call ever plans).  The plan is built with
 * sequential scans discouraged: a generation or partition made ahead may
 * have been analysed while empty, and a plan that scans it sequentially
 * would stay in use while the table fills, until its next ANALYZE.  eo's
 * statements all have an index made for them.
 */
SPIPlanPtr
eo_prepare_kept(const char *sql, int nargs, Oid *argtypes)
{
	SPIPlanPtr	plan = SPI_prepare_cursor(sql, nargs, argtypes,
										  CURSOR_OPT_GENERIC_PLAN);
	CachedPlan *cplan;
	int			nestlevel;

	if (plan == NULL)
		elog(ERROR, "eo: could not prepare \"%s\": %s",
			 sql, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "eo: could not keep plan");

	nestlevel = NewGUCNestLevel();
	(void) set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	cplan = SPI_plan_get_cached_plan(plan);
	if (cplan != NULL)
		ReleaseCachedPlan(cplan, CurrentResourceOwner);
	AtEOXact_GUC(true, nestlevel);
	return plan;
}
