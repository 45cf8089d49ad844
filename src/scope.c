/*-------------------------------------------------------------------------
 * scope.c
 *	  Scopes: named namespaces of idempotency keys, each belonging to a
 *	  role.  eo_scope_create / eo_scope_drop, and the lookup that every
 *	  scoped call makes.
 *
 * Without scopes, keys share one namespace: two consumers of the same
 * event in one database would collide on its id.  A scope (the consumer
 * or the endpoint) makes the key unique per (key, scope); keys in a scope
 * belong to the scope's role, so what a role may do in a scope is what
 * membership in the scope's role allows.  Keys without a scope have
 * scope 0 and belong to whoever claimed them.
 *
 * The registry is eo_internal.eo_scopes (read and written as the extension
 * owner).  Ids come from a sequence that never cycles: a dropped scope's
 * keys stay unreachable until their generation is dropped, and a scope
 * made later with the same name starts empty.
 *
 * Process model: per backend.  Scoped calls look the name up in a small
 * cache, dropped by a relcache invalidation of the registry, which
 * eo_scope_create and eo_scope_drop send.  So a backend sees a change at
 * its next transaction (or lock) at the latest.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "compat.h"
#include "eo.h"

PG_FUNCTION_INFO_V1(eo_scope_create);
PG_FUNCTION_INFO_V1(eo_scope_drop);

typedef struct ScopeEntry
{
	char		name[EO_SCOPE_MAX_NAME + 1];	/* hash key */
	int32		id;
	Oid			owner;
} ScopeEntry;

static HTAB *scope_cache = NULL;
static Oid	registry_relid = InvalidOid;
static bool callback_registered = false;

static void
scope_invalidate(Datum arg, Oid relid)
{
	if (scope_cache != NULL && (relid == InvalidOid || relid == registry_relid))
	{
		hash_destroy(scope_cache);
		scope_cache = NULL;
	}
}

/* The cache, made (empty) if an invalidation dropped it. */
static HTAB *
scope_cache_get(void)
{
	HASHCTL		ctl;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(scope_invalidate, (Datum) 0);
		callback_registered = true;
	}
	if (scope_cache != NULL)
		return scope_cache;
	/* The registry's OID, checked to be eo's own, before anything is cached. */
	registry_relid = eo_own_relation("eo_scopes", RELKIND_RELATION);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = EO_SCOPE_MAX_NAME + 1;
	ctl.entrysize = sizeof(ScopeEntry);
	scope_cache = hash_create("eo scopes", 16, &ctl, HASH_ELEM | HASH_STRINGS);
	return scope_cache;
}

/*
 * Read scope `name` from the registry, as the owner; false if none.  With
 * the latest snapshot, not the statement's: the invalidations taken in
 * until now have emptied the cache of what changed, so what is cached from
 * here must be at least that new (an older snapshot, say of a REPEATABLE
 * READ transaction, would cache a scope dropped since, for good).
 */
static bool
scope_read(const char *name, int32 *id, Oid *owner)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	EoIdentity	saved;
	SPIPlanPtr	plan;
	bool		found;
	bool		isnull;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&saved);
	plan = SPI_prepare("SELECT id, owner FROM eo_internal.eo_scopes"
					   " WHERE name OPERATOR(pg_catalog.=) $1", 1, types);
	if (plan == NULL ||
		SPI_execute_snapshot(plan, values, NULL, GetLatestSnapshot(), InvalidSnapshot,
							 true, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "eo: scope lookup failed");
	found = SPI_processed == 1;
	if (found)
	{
		*id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		*owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	}
	eo_restore_identity(&saved);
	SPI_finish();
	return found;
}

/*
 * Scope `name` from the cache or the registry; error if there is none.
 * Copied out: any catalog access after this may drop the cache.
 */
static void
scope_lookup(const char *name, EoScope *scope)
{
	ScopeEntry *entry;

	/*
	 * Take in the invalidations of scopes dropped or made since the last
	 * call (a cheap check when there are none), so that no call uses a
	 * scope whose drop committed before it started.
	 */
	AcceptInvalidationMessages();
	entry = hash_search(scope_cache_get(), name, HASH_FIND, NULL);
	if (entry == NULL)
	{
		EoScope		read;

		if (!scope_read(name, &read.id, &read.owner))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("scope \"%s\" does not exist", name),
					 errhint("Create it with eo_scope_create.")));
		/* The read may have dropped the cache: get it again. */
		entry = hash_search(scope_cache_get(), name, HASH_ENTER, NULL);
		entry->id = read.id;
		entry->owner = read.owner;
	}
	scope->id = entry->id;
	scope->owner = entry->owner;
}

/*
 * The scope a call names (argument `value`), for `caller`: scope 0 and no
 * owner if none is named; otherwise its id and role, which the caller must
 * have the privileges of.
 */
void
eo_scope_resolve(Datum value, bool isnull, Oid caller, EoScope *scope)
{
	char	   *name;

	scope->id = 0;
	scope->owner = InvalidOid;
	if (isnull)
		return;
	name = eo_check_scope_name(value, false);
	scope_lookup(name, scope);
	if (!has_privs_of_role(caller, scope->owner))
		ereport(ERROR,
				(errcode(EO_ERRCODE_NOT_OWNER),
				 errmsg("permission denied for scope \"%s\"", name),
				 errdetail("The scope belongs to role %s.", eo_role_name(scope->owner))));
}

/* Let every backend forget its cached scopes at its next transaction. */
static void
scope_changed(void)
{
	CacheInvalidateRelcacheByRelid(eo_own_relation("eo_scopes", RELKIND_RELATION));
}

/*
 * eo_scope_create(name, owner): only a role with the privileges of `owner`
 * may give it a scope (as for ALTER ... OWNER TO, and as using the scope
 * will ask).  The id is drawn only for a name not taken, so that calls
 * with a taken name do not use ids up.
 */
Datum
eo_scope_create(PG_FUNCTION_ARGS)
{
	char	   *name = eo_check_scope_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	Oid			caller = GetUserId();
	Oid			owner = eo_check_role(PG_GETARG_DATUM(1), PG_ARGISNULL(1), caller);
	Oid			types[2] = {TEXTOID, REGROLEOID};
	Datum		values[2] = {CStringGetTextDatum(name), ObjectIdGetDatum(owner)};
	EoIdentity	saved;

	PreventCommandIfReadOnly("eo_scope_create()");
	if (!has_privs_of_role(caller, owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to create a scope owned by role \"%s\"",
						GetUserNameFromId(owner, false)),
				 errhint("Only roles with the privileges of a role may give it a scope.")));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&saved);
	if (SPI_execute_with_args("INSERT INTO eo_internal.eo_scopes (id, name, owner, created_at)"
							  " SELECT pg_catalog.nextval('eo_internal.eo_scope_id_seq'), $1, $2, pg_catalog.now()"
							  " WHERE NOT EXISTS (SELECT FROM eo_internal.eo_scopes"
							  "                   WHERE name OPERATOR(pg_catalog.=) $1)"
							  " ON CONFLICT (name) DO NOTHING",
							  2, types, values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "eo: scope insert failed");
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("scope \"%s\" already exists", name)));
	eo_restore_identity(&saved);
	SPI_finish();
	scope_changed();
	PG_RETURN_VOID();
}

/*
 * eo_scope_drop(name): by a member of the scope's role.  Its keys are not
 * touched (no DELETE): they can no longer be reached, and go with their
 * generation.
 */
Datum
eo_scope_drop(PG_FUNCTION_ARGS)
{
	char	   *name = eo_check_scope_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	Oid			caller = GetUserId();
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	EoIdentity	saved;
	Oid			owner = InvalidOid;
	bool		isnull;

	PreventCommandIfReadOnly("eo_scope_drop()");
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&saved);
	if (SPI_execute_with_args("SELECT owner FROM eo_internal.eo_scopes"
							  " WHERE name OPERATOR(pg_catalog.=) $1 FOR UPDATE",
							  1, types, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "eo: scope lookup failed");
	if (SPI_processed == 1)
		owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (!OidIsValid(owner))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("scope \"%s\" does not exist", name)));
	if (!has_privs_of_role(caller, owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to drop scope \"%s\"", name),
				 errdetail("It belongs to role %s.", eo_role_name(owner))));
	if (SPI_execute_with_args("DELETE FROM eo_internal.eo_scopes WHERE name OPERATOR(pg_catalog.=) $1",
							  1, types, values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "eo: scope delete failed");
	eo_restore_identity(&saved);
	SPI_finish();
	scope_changed();
	PG_RETURN_VOID();
}
