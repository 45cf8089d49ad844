/*-------------------------------------------------------------------------
 * objects.c
 *	  eo's own objects, and whose rights eo acts with.
 *
 * Trust.  The superuser who installs eo and the extension's owner are
 * trusted; nobody else is: not the database owner (who owns schema public
 * in PostgreSQL 15+ and may drop or shadow anything in it), schema owners,
 * roles with grants on an outbox, producers, relays.  So whenever eo acts
 * with the extension owner's rights it only touches objects that
 *   - live in eo_internal, the schema CREATE/ALTER EXTENSION made, which
 *     only the extension owner can create objects in (so no name there can
 *     be taken, shadowed or replaced by anyone else), or
 *   - it found by the OID it recorded, owned by the extension owner and
 *     shaped as eo made them (outbox tables, checked by outbox_registry.c with the
 *     helpers here).
 * Where the caller's own rights suffice (inserting an event, reading a
 * page of events), eo acts as the caller instead.
 *
 * This file is the one place that knows the extension's owner and schemas
 * (cached per backend, dropped when any schema changes, which DROP and
 * CREATE EXTENSION do), switches identity, and keeps prepared plans.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_index.h"
#include "catalog/pg_namespace.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/lock.h"
#include "parser/parsetree.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/syscache.h"

#include "eo.h"



static EoCatalog catalog;
static bool catalog_valid = false;
static bool callback_registered = false;

static void
catalog_invalidate(Datum arg, int cacheid, uint32 hashvalue)
{
	catalog_valid = false;
}

/* pg_extension's row for eo, or false if eo is not installed here. */
static bool
read_extension(Oid *ext, Oid *owner, Oid *schema)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		found = false;

	*ext = get_extension_oid("eo", true);
	if (!OidIsValid(*ext))
		return false;
	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(*ext));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		Form_pg_extension e = (Form_pg_extension) GETSTRUCT(tup);

		*owner = e->extowner;
		*schema = e->extnamespace;
		found = true;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * Is eo installed in this database, at a version this library can use?
 * False if it is not installed; an error if its SQL objects are older
 * than the library (ALTER EXTENSION eo UPDATE not run yet) or eo_internal
 * is not eo's own.
 */
bool
eo_catalog_load(bool missing_ok)
{
	Oid			ext,
				owner,
				api_schema,
				schema;

	if (!callback_registered)
	{
		CacheRegisterSyscacheCallback(NAMESPACEOID, catalog_invalidate, (Datum) 0);
		callback_registered = true;
	}
	if (catalog_valid)
		return true;

	if (!read_extension(&ext, &owner, &api_schema))
	{
		if (missing_ok)
			return false;
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("extension \"eo\" is not installed in this database")));
	}
	schema = get_namespace_oid(EO_INTERNAL_SCHEMA, true);
	if (!OidIsValid(schema))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("eo's SQL objects are older than its library"),
				 errdetail("Schema \"%s\" is missing.", EO_INTERNAL_SCHEMA),
				 errhint("Run ALTER EXTENSION eo UPDATE.")));
	if (eo_namespace_owner(schema) != owner)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("schema \"%s\" is not owned by the owner of extension eo",
						EO_INTERNAL_SCHEMA),
				 errhint("eo works only on objects its owner owns; reinstall the extension.")));

	catalog.ext = ext;
	catalog.owner = owner;
	catalog.api_schema = api_schema;
	catalog.schema = schema;
	catalog_valid = true;
	return true;
}

const EoCatalog *
eo_catalog(void)
{
	(void) eo_catalog_load(false);
	return &catalog;
}

Oid
eo_namespace_owner(Oid nsp)
{
	HeapTuple	tup = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(nsp));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "eo: cache lookup failed for schema %u", nsp);
	owner = ((Form_pg_namespace) GETSTRUCT(tup))->nspowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * Take the lock that CREATE takes on eo_internal (ACCESS SHARE on the
 * schema) within EO_LOCK_WAIT_MS, so that none of eo's DDL waits behind a
 * DROP SCHEMA that someone queued behind an open transaction (locks.c).
 * Once taken it is held to the end of the transaction, and CREATE finds
 * it held.  An error (55P03) naming who is in the way if it was not had.
 */
void
eo_lock_internal_schema(void)
{
	const EoCatalog *cat = eo_catalog();
	LOCKTAG		tag;
	char	   *who;

	SET_LOCKTAG_OBJECT(tag, MyDatabaseId, NamespaceRelationId, cat->schema, 0);
	if (eo_lock_within(&tag, AccessShareLock, EO_LOCK_WAIT_MS))
		return;
	/*
	 * A DROP SCHEMA that cannot succeed, queued in front: the worker ends it
	 * (a few times over, for one that is queued again at once).
	 */
	for (int round = 0; round < 3; round++)
	{
		if (eo_cancel_doomed_waiters(&tag, AccessShareLock, cat->owner,
									 "schema \"" EO_INTERNAL_SCHEMA "\"") == 0)
			break;
		if (eo_lock_within(&tag, AccessShareLock, EO_LOCK_WAIT_MS))
			return;
	}
	who = eo_lock_blockers(&tag, AccessShareLock, cat->owner, NULL);
	eo_stat_count(EO_STAT_LOCK_WAITS_GIVEN_UP);
	ereport(ERROR,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 errmsg("schema \"%s\" is locked: eo cannot make its objects there now",
					EO_INTERNAL_SCHEMA),
			 who ? errdetail("In the way after %d ms: %s.", EO_LOCK_WAIT_MS, who) :
			 errdetail("It was locked for %d ms.", EO_LOCK_WAIT_MS),
			 errhint("A DROP SCHEMA or DROP EXTENSION that its role may not do can wait behind an open transaction; end those sessions (pg_terminate_backend). Maintenance tries again at its next pass.")));
}

/* "eo_internal"."relname", quoted. */
char *
eo_internal_name(const char *relname)
{
	return psprintf("%s.%s", EO_INTERNAL_SCHEMA, quote_identifier(relname));
}

static const char *
relkind_name(char relkind)
{
	switch (relkind)
	{
		case RELKIND_RELATION:
			return "table";
		case RELKIND_PARTITIONED_TABLE:
			return "partitioned table";
		case RELKIND_SEQUENCE:
			return "sequence";
		case RELKIND_VIEW:
			return "view";
		default:
			return "relation";
	}
}

/*
 * Refuse relation `relid` unless it is of `relkind`, owned by the
 * extension owner and (with `internal`) in eo_internal.  `what` names it
 * in the error, which says what is wrong with it.
 */
void
eo_check_own_relation(Oid relid, char relkind, bool internal, const char *what)
{
	const EoCatalog *cat = eo_catalog();
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Form_pg_class rel;
	char	   *problem = NULL;

	if (!HeapTupleIsValid(tup))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("%s was dropped", what),
				 errdetail("eo knows its objects by the OID it recorded; a table made later under the same name is not one of them.")));
	rel = (Form_pg_class) GETSTRUCT(tup);
	if (rel->relkind != relkind)
		problem = psprintf("it is not a %s", relkind_name(relkind));
	else if (rel->relowner != cat->owner)
		problem = psprintf("it is owned by role \"%s\", not by the owner of extension eo",
						   GetUserNameFromId(rel->relowner, true));
	else if (internal && rel->relnamespace != cat->schema)
		problem = psprintf("it is not in schema \"%s\"", EO_INTERNAL_SCHEMA);
	else if ((rel->relhasrules && relkind != RELKIND_VIEW) || rel->relrowsecurity)
		problem = pstrdup("it has rules or row security that eo did not make");
	if (problem != NULL)
	{
		char	   *name = psprintf("%s.%s", get_namespace_name(rel->relnamespace),
									NameStr(rel->relname));

		ReleaseSysCache(tup);
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("%s \"%s\" is not eo's own: %s", what, name, problem),
				 errdetail("eo acts with its owner's rights only on objects it made."),
				 errhint("Drop the object and let eo make it again.")));
	}
	ReleaseSysCache(tup);
}

/* eo_internal.relname, checked to be eo's own; an error if it is gone. */
Oid
eo_own_relation(const char *relname, char relkind)
{
	const EoCatalog *cat = eo_catalog();
	Oid			relid = get_relname_relid(relname, cat->schema);

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("eo's relation \"%s\" is missing from schema \"%s\"",
						relname, EO_INTERNAL_SCHEMA),
				 errhint("Reinstall the extension with DROP EXTENSION eo; CREATE EXTENSION eo;")));
	eo_check_own_relation(relid, relkind, true, "eo's relation");
	return relid;
}

/*
 * The valid unique index of `rel` on exactly the columns `cols` (in that
 * order), or InvalidOid: how the key store and the tombstones find the
 * index they look rows up through (a restore makes it last).
 */
Oid
eo_unique_index(Relation rel, int ncols, const AttrNumber *cols)
{
	List	   *indexes = RelationGetIndexList(rel);
	Oid			result = InvalidOid;
	ListCell   *lc;

	foreach(lc, indexes)
	{
		HeapTuple	tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(lfirst_oid(lc)));
		Form_pg_index idx;
		bool		match;

		if (!HeapTupleIsValid(tup))
			elog(ERROR, "eo: cache lookup failed for index %u", lfirst_oid(lc));
		idx = (Form_pg_index) GETSTRUCT(tup);
		match = idx->indisunique && idx->indisvalid && idx->indnkeyatts == ncols;
		for (int i = 0; match && i < ncols; i++)
			match = idx->indkey.values[i] == cols[i];
		if (match)
			result = idx->indexrelid;
		ReleaseSysCache(tup);
	}
	list_free(indexes);
	return result;
}

/*
 * What an action as the owner must not take from its caller's settings:
 * where names are looked up (every statement of eo's names its objects in
 * full; this is defence in depth), and where and how objects are made (a
 * caller without CREATE on a tablespace must not put eo's tables there
 * with SET default_tablespace).
 */
static const char *const owner_settings[][2] = {
	{"search_path", EO_SAFE_SEARCH_PATH},
	{"default_tablespace", ""},
	{"temp_tablespaces", ""},
	{"default_table_access_method", "heap"},
};

/*
 * Act as the extension owner, with owner_settings, until
 * eo_restore_identity(saved).  Restricted, so that nothing that runs
 * meanwhile can change session state behind the caller.  A setting that
 * already has its value is left alone (the worker pins them all).  An
 * error in between needs no cleanup: (sub)transaction abort restores the
 * user and the settings.
 */
void
eo_become_owner(EoIdentity *saved)
{
	Oid			owner = eo_catalog()->owner;

	GetUserIdAndSecContext(&saved->userid, &saved->sec_context);
	saved->guc_level = 0;
	for (int i = 0; i < lengthof(owner_settings); i++)
	{
		if (strcmp(GetConfigOption(owner_settings[i][0], false, false),
				   owner_settings[i][1]) == 0)
			continue;
		if (saved->guc_level == 0)
			saved->guc_level = NewGUCNestLevel();
		(void) set_config_option(owner_settings[i][0], owner_settings[i][1],
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	}
	SetUserIdAndSecContext(owner, saved->sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
}

void
eo_restore_identity(const EoIdentity *saved)
{
	SetUserIdAndSecContext(saved->userid, saved->sec_context);
	if (saved->guc_level > 0)
		AtEOXact_GUC(true, saved->guc_level);
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

/*
 * Make `plan` valid now, as the owner, for running it as the caller right
 * after, until eo_unpin(level).  A statement that names objects in
 * eo_internal, which only the owner may name, is parsed again when its
 * plan was invalidated or when the search path in effect differs from the
 * one it was planned with, and neither may happen when it then runs as the
 * caller.  So the search path is pinned, to the one eo_become_owner sets
 * (pg_catalog and pg_temp: the same for every role, where a "$user" entry,
 * or a schema without USAGE for one of the two, would differ), and
 * running right after this takes no
 * lock not already held, so no invalidation comes in between.
 */
int
eo_plan_ready(SPIPlanPtr plan)
{
	EoIdentity	saved;
	CachedPlan *cplan;
	int			level = NewGUCNestLevel();

	(void) set_config_option("search_path", EO_SAFE_SEARCH_PATH, PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	eo_become_owner(&saved);
	cplan = SPI_plan_get_cached_plan(plan);
	if (cplan != NULL)
		ReleaseCachedPlan(cplan, CurrentResourceOwner);
	eo_restore_identity(&saved);
	return level;
}

/*
 * Plans to free at the end of the transaction.  A cached plan that eo
 * drops (its outbox changed) may still be running further up the stack:
 * a statement trigger fired by eo_emit's INSERT can call eo again, which
 * finds the entry invalid and replaces its plans.  Nothing runs any more
 * once the transaction has ended.
 */
static List *plans_to_free = NIL;

static void
free_plans(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
		event != XACT_EVENT_PREPARE)
		return;
	foreach(lc, plans_to_free)
		SPI_freeplan((SPIPlanPtr) lfirst(lc));
	list_free(plans_to_free);
	plans_to_free = NIL;
}

void
eo_free_plan_later(SPIPlanPtr plan)
{
	static bool registered = false;
	MemoryContext old;

	if (plan == NULL)
		return;
	if (!registered)
	{
		RegisterXactCallback(free_plans, NULL);
		registered = true;
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	plans_to_free = lappend(plans_to_free, plan);
	MemoryContextSwitchTo(old);
}

/*
 * Did the last execution of `plan` (one statement) act on relations `a`
 * and `b` only?  Defence in depth: eo's statements name views in
 * eo_internal, which nobody else can replace (outbox_registry.c), but a plan is
 * parsed again from its text after an invalidation, and a wrong target
 * must be an error that rolls back what the statement did.
 */
/* A function in FROM that is one of PostgreSQL's own (unnest, say). */
static bool
catalog_functions_only(RangeTblEntry *rte)
{
	ListCell   *lc;

	foreach(lc, rte->functions)
	{
		Node	   *expr = lfirst_node(RangeTblFunction, lc)->funcexpr;

		if (!IsA(expr, FuncExpr) ||
			get_func_namespace(((FuncExpr *) expr)->funcid) != PG_CATALOG_NAMESPACE)
			return false;
	}
	return true;
}

static bool
query_relations_are(Query *query, Oid a, Oid b)
{
	ListCell   *lc;

	foreach(lc, query->rtable)
	{
		RangeTblEntry *rte = lfirst_node(RangeTblEntry, lc);

		if (OidIsValid(rte->relid) && rte->relid != a && rte->relid != b)
			return false;
		if (rte->rtekind == RTE_SUBQUERY && !query_relations_are(rte->subquery, a, b))
			return false;
		if (rte->rtekind == RTE_FUNCTION && !catalog_functions_only(rte))
			return false;
		if (rte->rtekind != RTE_RELATION && rte->rtekind != RTE_SUBQUERY &&
			rte->rtekind != RTE_VALUES && rte->rtekind != RTE_RESULT &&
			rte->rtekind != RTE_FUNCTION && rte->rtekind != RTE_JOIN)
			return false;
	}
	return true;
}

bool
eo_plan_relations_are(SPIPlanPtr plan, Oid a, Oid b)
{
	List	   *sources = SPI_plan_get_plan_sources(plan);
	CachedPlanSource *source;

	if (list_length(sources) != 1)
		return false;
	source = (CachedPlanSource *) linitial(sources);
	if (list_length(source->query_list) != 1)
		return false;
	return query_relations_are(linitial_node(Query, source->query_list), a, b);
}

/*
 * Run fn(arg) in a subtransaction.  True if it succeeded; otherwise the
 * subtransaction is rolled back (its locks and changes gone), the error
 * is returned in *error (in the caller's memory context) and false.  For
 * maintenance that must go on past one broken object.  A cancel or a
 * statement timeout is raised again, after the rollback.
 */
bool
eo_try(void (*fn) (void *), void *arg, ErrorData **error)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool ok = true;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		fn(arg);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		*error = eo_subxact_failed(cxt, owner);

		/*
		 * A cancel or a statement timeout is the caller's to obey, not a
		 * failure of this object: the rest of the pass must not run on
		 * (without its timeout, which fires once).
		 */
		if ((*error)->sqlerrcode == ERRCODE_QUERY_CANCELED)
			ReThrowError(*error);
		ok = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return ok;
}

/* A failure eo_try caught, reported as a WARNING that names what failed. */
void
eo_warn_failure(ErrorData *error, const char *what, const char *hint)
{
	ereport(WARNING,
			(errcode(error->sqlerrcode),
			 errmsg("eo: %s failed: %s", what, error->message),
			 error->detail ? errdetail_internal("%s", error->detail) : 0,
			 errhint("%s", hint)));
	FreeErrorData(error);
}

/*
 * Fixed date and time settings until eo_unpin(level): partition bounds go
 * through text (pg_get_expr, ATTACH PARTITION ... FROM ('...')), and a
 * DateStyle or TimeZone that the database owner chose for the database
 * could make them read back wrong (a zone abbreviation that means another
 * zone, say).
 */
int
eo_pin_datetime(void)
{
	int			level = NewGUCNestLevel();

	(void) set_config_option("DateStyle", "ISO, YMD", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("IntervalStyle", "postgres", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("TimeZone", "UTC", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return level;
}

void
eo_unpin(int level)
{
	AtEOXact_GUC(true, level);
}
