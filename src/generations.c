/*-------------------------------------------------------------------------
 * generations.c
 *	  Time generations of a table: made ahead, switched, retired, dropped.
 *
 * A "generation set" is a registry table (gen, relid, state, started_at,
 * ended_at) plus one plain table per generation, each made LIKE a template
 * table.  Exactly one generation is current ('c') and receives new rows;
 * older ones ('o') are still read and updated; one is made ahead ('a');
 * retired ones ('r') are no longer read and wait to be dropped.  This file
 * knows nothing of what the rows mean: callers decide when an old
 * generation may retire.
 *
 * Why plain tables and not declarative partitions: detaching or dropping a
 * partition takes an ACCESS EXCLUSIVE lock on the parent, which every
 * reader and writer holds a lock on, so it would queue them all behind it.
 * Here readers find the live generations in the registry, and a retired
 * table is dropped in a later transaction, only when its lock is free, so
 * no lock queue forms.
 *
 * Locking protocol.  A writer that inserts new rows takes ROW EXCLUSIVE on
 * the registry before reading which generation is current, and keeps it to
 * the end of its transaction; readers take ACCESS SHARE.  Switching takes
 * SHARE on the registry, so it waits until no writer of the old current
 * generation is in flight: every row of a generation is committed or gone
 * before any row of the next is written.  That is what lets a caller keep
 * a key unique across generations with a unique index per generation.  The
 * switch waits at most EO_LOCK_WAIT_MS, then gives up until the
 * next pass, so writers queue behind it for at most that long.  Registry changes
 * send a relcache invalidation for the registry, which is how readers
 * notice them.
 *
 * Readers lock every table of the list they read before they open one, and
 * read the list again if a lock newly taken let an invalidation in.  A
 * retired table is dropped only if its lock is free (drop_one), so either
 * the reader's lock keeps it, or the drop committed first and the reader,
 * noticing, no longer lists it: nobody opens a dropped generation by OID.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "eo.h"

static void
run_sql(const char *sql, int expected)
{
	int			rc = SPI_execute(sql, false, 0);

	if (rc != expected)
		elog(ERROR, "eo: \"%s\" failed: %s", sql, SPI_result_code_string(rc));
}

static char *
qualified(const EoGenSet *set, const char *relname)
{
	return psprintf("%s.%s", quote_identifier(set->schema), quote_identifier(relname));
}

/* The generation in `state` with the highest number, or 0. */
static int32
gen_in_state(const EoGenSet *set, char state)
{
	char	   *sql = psprintf("SELECT pg_catalog.max(gen) FROM %s"
							   " WHERE state OPERATOR(pg_catalog.=) '%c'",
							   qualified(set, set->registry), state);
	bool		isnull;
	Datum		d;

	run_sql(sql, SPI_OK_SELECT);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? 0 : DatumGetInt32(d);
}

/* The highest generation number ever registered, or 0. */
static int32
max_gen(const EoGenSet *set)
{
	bool		isnull;
	Datum		d;

	run_sql(psprintf("SELECT pg_catalog.max(gen) FROM %s", qualified(set, set->registry)),
			SPI_OK_SELECT);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? 0 : DatumGetInt32(d);
}

static Oid
registry_oid(const EoGenSet *set)
{
	return get_relname_relid(set->registry, get_namespace_oid(set->schema, false));
}

/*
 * A generation table goes with DROP EXTENSION, as it did when it was a
 * member, but it is not a member, so that pg_dump dumps it with its keys:
 * it has an automatic dependency on its registry, which is a member.  Not
 * on the extension itself: recording a dependency locks the object it is
 * on, and anyone can queue a DROP EXTENSION for the extension's lock
 * (locks.c), while the registry is locked by the caller already.  A
 * restore does not bring the dependency back: eo_gen_bind_all gives it
 * again.
 */
static void
bind_to_registry(const EoGenSet *set, Oid relid)
{
	ObjectAddress table;
	ObjectAddress registry;

	ObjectAddressSet(table, RelationRelationId, relid);
	ObjectAddressSet(registry, RelationRelationId, registry_oid(set));
	recordDependencyOn(&table, &registry, DEPENDENCY_AUTO);
}

/* Every registered generation table that lacks it gets that dependency. */
void
eo_gen_bind_all(const EoGenSet *set)
{
	run_sql(psprintf("SELECT g.relid FROM %1$s g"
					 " JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) g.relid"
					 " WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_depend d"
					 "   WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass"
					 "   AND d.objid OPERATOR(pg_catalog.=) g.relid"
					 "   AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass"
					 "   AND d.refobjid OPERATOR(pg_catalog.=) '%1$s'::pg_catalog.regclass)",
					 qualified(set, set->registry)), SPI_OK_SELECT);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		bind_to_registry(set, DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
															 SPI_tuptable->tupdesc, 1, &isnull)));
	}
	if (SPI_processed > 0)
		CommandCounterIncrement();
}

/*
 * Make generation `gen` (or the next number whose table name is free: a
 * schema-only restore leaves empty generation tables behind, unregistered)
 * in `state`.  Returns the number made.
 */
static int32
make_generation(const EoGenSet *set, int32 gen, char state)
{
	Oid			nsp = get_namespace_oid(set->schema, false);
	char	   *relname;
	char	   *table;

	eo_lock_internal_schema();	/* or a clear error: never a wait without bound */
	while (OidIsValid(get_relname_relid(psprintf("%s%d", set->prefix, gen), nsp)))
		gen++;
	relname = psprintf("%s%d", set->prefix, gen);
	table = qualified(set, relname);
	run_sql(psprintf("CREATE TABLE %s (LIKE %s INCLUDING ALL)",
					 table, qualified(set, set->template)), SPI_OK_UTILITY);
	run_sql(psprintf("REVOKE ALL ON TABLE %s FROM PUBLIC", table), SPI_OK_UTILITY);
	bind_to_registry(set, get_relname_relid(relname, nsp));
	run_sql(psprintf("INSERT INTO %s (gen, relid, state, started_at) VALUES (%d, '%u', '%c', %s)",
					 qualified(set, set->registry), gen,
					 get_relname_relid(relname, nsp), state,
					 state == 'c' ? "pg_catalog.clock_timestamp()" : "NULL"),
			SPI_OK_INSERT);
	return gen;
}

/*
 * Keep one generation made ahead of the current one.  Without a current
 * generation (none was ever made: see eo_gen_start) nothing is made, so
 * that a pass during a pg_restore makes nothing the restore then brings.
 */
static void
eo_gen_make_ahead(const EoGenSet *set)
{
	if (gen_in_state(set, 'c') == 0)
		return;
	if (gen_in_state(set, 'a') == 0)
		(void) make_generation(set, max_gen(set) + 1, 'a');
}

static void
registry_changed(const EoGenSet *set)
{
	CacheInvalidateRelcacheByRelid(registry_oid(set));
}

/*
 * Make the first generation, current at once, and one ahead.  The caller
 * holds a lock that keeps two of these from running together.
 */
void
eo_gen_start(const EoGenSet *set)
{
	(void) make_generation(set, max_gen(set) + 1, 'c');
	registry_changed(set);
	eo_gen_make_ahead(set);
}

/*
 * Take SHARE on the registry, waiting at most EO_LOCK_WAIT_MS (writers
 * queue behind the request meanwhile).  False if the wait timed out:
 * writers are in flight, try next pass.
 */
static bool
lock_registry_for_switch(const EoGenSet *set)
{
	LOCKTAG		tag;

	SET_LOCKTAG_RELATION(tag, MyDatabaseId, registry_oid(set));
	return eo_lock_within(&tag, ShareLock, EO_LOCK_WAIT_MS);
}

/*
 * Make the ahead generation current once the current one has been current
 * for `interval_secs` (eo_gen_keep made it ahead).  Says whether it
 * switched, or why it did not.
 */
static EoSwitch
maybe_switch(const EoGenSet *set, int interval_secs, int max_live)
{
	char	   *registry = qualified(set, set->registry);
	char	   *sql;
	uint64		live;

	sql = psprintf("SELECT 1 FROM %s WHERE state OPERATOR(pg_catalog.=) 'c'"
				   " AND started_at OPERATOR(pg_catalog.<=) (pg_catalog.clock_timestamp()"
				   " OPERATOR(pg_catalog.-) pg_catalog.make_interval(secs => %d))",
				   registry, interval_secs);
	run_sql(sql, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return EO_SWITCH_NOT_DUE;

	/* Too many live generations (retention held back): keep the current one. */
	run_sql(psprintf("SELECT 1 FROM %s WHERE state OPERATOR(pg_catalog.=) ANY ('{c,o,r}')",
					 registry), SPI_OK_SELECT);
	live = SPI_processed;
	if (live >= max_live)
		return EO_SWITCH_TOO_MANY;

	if (!lock_registry_for_switch(set))
		return EO_SWITCH_LOCK_BUSY;

	run_sql(psprintf("UPDATE %s SET state = 'o', ended_at = pg_catalog.clock_timestamp()"
					 " WHERE state OPERATOR(pg_catalog.=) 'c'", registry), SPI_OK_UPDATE);
	run_sql(psprintf("UPDATE %s SET state = 'c', started_at = pg_catalog.clock_timestamp()"
					 " WHERE state OPERATOR(pg_catalog.=) 'a'", registry), SPI_OK_UPDATE);
	registry_changed(set);
	return EO_SWITCH_DONE;
}

typedef struct AheadCall
{
	const EoGenSet *set;
	const char *what;
} AheadCall;

static void
make_ahead(void *arg)
{
	eo_gen_make_ahead(((AheadCall *) arg)->set);
}

/* eo_gen_make_ahead in a subtransaction: false (and a WARNING) if it failed. */
static bool
make_ahead_isolated(const EoGenSet *set, const char *what)
{
	AheadCall	call = {set, what};
	ErrorData  *error;

	if (eo_try(make_ahead, &call, &error))
		return true;
	eo_warn_failure(error, psprintf("making a %s ahead", what),
					"The switch and retention go on; it is made at the next pass.");
	return false;
}

/*
 * One pass's upkeep of a generation set's head: a generation made ahead,
 * the switch to it when due, and the next one made ahead.  Making one can
 * fail (the schema locked by someone, see locks.c) without stopping the
 * switch to one made earlier: the set then lives on in its current
 * generation until a later pass makes the next.  `what` names a
 * generation in messages.
 */
EoSwitch
eo_gen_keep(const EoGenSet *set, int interval_secs, int max_live, const char *what)
{
	EoSwitch	result;

	if (!make_ahead_isolated(set, what))
		return EO_SWITCH_NOT_DUE;	/* none ahead to switch to (logged, counted) */
	result = maybe_switch(set, interval_secs, max_live);
	if (result == EO_SWITCH_DONE)
		(void) make_ahead_isolated(set, what);
	return result;
}

/*
 * Old generations that stopped receiving new rows more than
 * `retention_secs` ago: candidates for retirement, oldest first.
 */
List *
eo_gen_retire_candidates(const EoGenSet *set, int retention_secs)
{
	List	   *gens = NIL;
	char	   *sql = psprintf("SELECT gen FROM %s WHERE state OPERATOR(pg_catalog.=) 'o'"
							   " AND ended_at OPERATOR(pg_catalog.<=) (pg_catalog.clock_timestamp()"
							   " OPERATOR(pg_catalog.-) pg_catalog.make_interval(secs => %d))"
							   " ORDER BY gen",
							   qualified(set, set->registry), retention_secs);

	run_sql(sql, SPI_OK_SELECT);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		gens = lappend_int(gens, DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i],
															 SPI_tuptable->tupdesc,
															 1, &isnull)));
	}
	return gens;
}

/* Stop reading generation `gen`: it is dropped by a later eo_gen_drop_retired. */
void
eo_gen_retire(const EoGenSet *set, int32 gen)
{
	run_sql(psprintf("UPDATE %s SET state = 'r' WHERE gen OPERATOR(pg_catalog.=) %d",
					 qualified(set, set->registry), gen), SPI_OK_UPDATE);
	registry_changed(set);
}

typedef struct DropCall
{
	const EoGenSet *set;
	int32		gen;
	Oid			relid;
	bool		dropped;
} DropCall;

/* Drop one retired generation if its lock is free; unregister it. */
static void
drop_one(void *arg)
{
	DropCall   *call = (DropCall *) arg;
	Oid			rowtype;

	call->dropped = false;
	if (get_rel_name(call->relid) != NULL)
	{
		if (!ConditionalLockRelationOid(call->relid, AccessExclusiveLock))
			return;				/* still read by a call that started earlier */
		eo_check_own_relation(call->relid, RELKIND_RELATION, true, "retired key generation");

		/*
		 * A generation made by CREATE EXTENSION 0.1.0 was updated out of the
		 * extension, but on PostgreSQL 17 and 18 (not 15) its row type and
		 * that type's array type were members too: let them go as well.
		 */
		rowtype = get_rel_type_id(call->relid);
		deleteDependencyRecordsForClass(TypeRelationId, rowtype,
										ExtensionRelationId, DEPENDENCY_EXTENSION);
		deleteDependencyRecordsForClass(TypeRelationId, get_array_type(rowtype),
										ExtensionRelationId, DEPENDENCY_EXTENSION);
		CommandCounterIncrement();

		/*
		 * CASCADE: nobody else may make anything depend on eo's tables (a
		 * view naming one would keep it from ever being dropped).
		 */
		run_sql(psprintf("DROP TABLE %s CASCADE",
						 qualified(call->set, get_rel_name(call->relid))), SPI_OK_UTILITY);
	}
	run_sql(psprintf("DELETE FROM %s WHERE gen OPERATOR(pg_catalog.=) %d",
					 qualified(call->set, call->set->registry), call->gen), SPI_OK_DELETE);
	call->dropped = true;
}

/*
 * Drop retired generations.  Every reader makes its list of live
 * generations current when it starts and locks their tables before it
 * uses them (see the protocol above), so once the retirement has
 * committed only calls that locked the table earlier can touch it, and
 * they hold the lock until their transaction ends.  The drop takes its
 * lock only if it is free: it never waits, so nothing queues behind it,
 * and a table still in use is dropped by a later pass.  Each table is dropped in a subtransaction of its own:
 * one that cannot be dropped is a WARNING, not the end of the others.
 * Returns how many were dropped.
 */
int
eo_gen_drop_retired(const EoGenSet *set)
{
	int			dropped = 0;
	uint64		n;
	Oid		   *relids;
	int32	   *gens;

	run_sql(psprintf("SELECT gen, relid FROM %s WHERE state OPERATOR(pg_catalog.=) 'r'",
					 qualified(set, set->registry)), SPI_OK_SELECT);
	n = SPI_processed;
	relids = palloc(sizeof(Oid) * (n + 1));
	gens = palloc(sizeof(int32) * (n + 1));
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;

		gens[i] = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i],
											  SPI_tuptable->tupdesc, 1, &isnull));
		relids[i] = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
												   SPI_tuptable->tupdesc, 2, &isnull));
	}

	for (uint64 i = 0; i < n; i++)
	{
		DropCall	call = {set, gens[i], relids[i], false};
		ErrorData  *error;

		if (!eo_try(drop_one, &call, &error))
			eo_warn_failure(error, psprintf("dropping key generation %d", gens[i]),
							"The other generations were dropped.");
		else if (call.dropped)
			dropped++;
	}
	return dropped;
}
