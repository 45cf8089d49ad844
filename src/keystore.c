/*-------------------------------------------------------------------------
 * keystore.c
 *	  Storage of idempotency keys: find, insert and update key rows across
 *	  the live time generations of the key store.
 *
 * Keys live in one table per generation (eo_keys_<n>, see partition.c),
 * each with a unique index on key.  New keys go into the current
 * generation; a key is looked up in every live one, newest first.  A key
 * is unique across generations because (1) a new key is inserted only
 * after looking it up everywhere, (2) older generations receive no new
 * keys, and (3) by partition.c's locking protocol every insert into an
 * older generation had committed or rolled back before the current one
 * took its first key, so the lookup, made with the latest snapshot, sees
 * it.  Within the current generation, INSERT ... ON CONFLICT DO NOTHING
 * makes a concurrent claimer wait for the holder exactly as a unique index
 * would.  Under REPEATABLE READ and SERIALIZABLE a row found with the
 * latest snapshot that the transaction's own snapshot cannot see is a
 * serialization failure, as ON CONFLICT makes it within one table.
 *
 * Every statement is a prepared SPI plan, made when the list of live
 * generations changes and kept, with fully schema-qualified names and
 * operators so that the caller's search_path cannot change what runs.
 * Statements run as the owner of the eo tables: callers get no privileges
 * on the tables themselves, and claim.c enforces key ownership before it
 * asks for any change.  A row is rewritten only in the version that
 * eo_ks_find returned (by ctid), so an update that lost a race changes
 * nothing and reports it, and the caller looks again.
 *
 * Process model: per backend.  The cache is dropped when a relcache
 * invalidation arrives for the registry (partition.c sends one on every
 * change) or for a generation table.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/sequence.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "eo.h"

/* One live generation of the key store. */
typedef struct Generation
{
	int32		gen;
	Oid			relid;
	char	   *table;			/* schema-qualified, quoted */
	SPIPlanPtr	update_plan;	/* made on first use */
	SPIPlanPtr	reclaim_plan;	/* made on first use */
} Generation;

typedef struct KeyStore
{
	bool		loaded;			/* schema, registry, owner known */
	bool		gens_valid;		/* gens[] and the plans below are current */
	char	   *schema;			/* unquoted */
	Oid			registry_relid;
	Oid			token_seq_relid;
	Oid			table_owner;
	EoGenSet	genset;
	SPIPlanPtr	gens_plan;		/* reads the registry */
	int			ngens;
	Generation	gens[EO_MAX_LIVE_GENERATIONS];	/* newest (current) first */
	SPIPlanPtr	find_plan;
	SPIPlanPtr	insert_plan;
	SPIPlanPtr	claim_plan;
} KeyStore;

static KeyStore store;
static MemoryContext ks_context = NULL;	/* names and plans of gens[] */
static bool callback_registered = false;

/* The caller's identity while eo_ks_open() has switched to the owner. */
static EoIdentity caller_identity;
static MemoryContext caller_context;

/* Columns every generation query returns, in ks_read_row() order. */
#define ROW_COLUMNS \
	"state, owner, fingerprint, result, attempts, lease_token, " \
	"lease_expires_at, last_error, created_at, updated_at, xmin, ctid"

static void
ks_invalidate(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == store.registry_relid)
		store.gens_valid = false;
	for (int i = 0; i < store.ngens; i++)
		if (store.gens[i].relid == relid)
			store.gens_valid = false;
}

static void
ks_free_plan(SPIPlanPtr *plan)
{
	if (*plan != NULL)
		SPI_freeplan(*plan);
	*plan = NULL;
}

static char *
ks_qualified(const char *relname)
{
	return psprintf("%s.%s", quote_identifier(store.schema), quote_identifier(relname));
}

/* Find eo's registry and sequence through the extension's schema. */
static void
ks_load_static(void)
{
	Oid			nsp = get_extension_schema(get_extension_oid("eo", false));
	Oid			argtypes[1] = {INT4OID};
	MemoryContext old;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(ks_invalidate, (Datum) 0);
		ks_context = AllocSetContextCreate(TopMemoryContext, "eo key store",
										   ALLOCSET_SMALL_SIZES);
		callback_registered = true;
	}

	store.registry_relid = eo_own_table(nsp, "eo_generations");
	store.token_seq_relid = eo_own_table(nsp, "eo_lease_token_seq");
	store.table_owner = eo_relation_owner(store.registry_relid);

	old = MemoryContextSwitchTo(TopMemoryContext);
	store.schema = pstrdup(get_namespace_name(nsp));
	store.genset.schema = store.schema;
	store.genset.registry = "eo_generations";
	store.genset.template = "eo_keys_template";
	store.genset.prefix = "eo_keys_";
	MemoryContextSwitchTo(old);

	ks_free_plan(&store.gens_plan);
	store.gens_plan = eo_prepare_kept(psprintf(
										  "SELECT gen, relid FROM %s"
										  " WHERE state OPERATOR(pg_catalog.=) ANY ('{c,o}')"
										  " AND gen OPERATOR(pg_catalog.>) $1 ORDER BY gen DESC",
										  ks_qualified("eo_generations")), 1, argtypes);
	store.loaded = true;
	store.gens_valid = false;
}

static void
ks_forget_generations(void)
{
	for (int i = 0; i < store.ngens; i++)
	{
		ks_free_plan(&store.gens[i].update_plan);
		ks_free_plan(&store.gens[i].reclaim_plan);
	}
	ks_free_plan(&store.find_plan);
	ks_free_plan(&store.insert_plan);
	ks_free_plan(&store.claim_plan);
	store.ngens = 0;
	MemoryContextReset(ks_context);
}

/* One SELECT over every live generation, newest first, stopping at a hit. */
static char *
ks_find_sql(void)
{
	StringInfoData sql;

	initStringInfo(&sql);
	appendStringInfoString(&sql, "SELECT * FROM (");
	for (int i = 0; i < store.ngens; i++)
		appendStringInfo(&sql, "%sSELECT %d AS gen, " ROW_COLUMNS " FROM %s"
						 " WHERE key OPERATOR(pg_catalog.=) $1",
						 i > 0 ? " UNION ALL " : "",
						 store.gens[i].gen, store.gens[i].table);
	appendStringInfoString(&sql, ") k LIMIT 1");
	return sql.data;
}

#define INSERT_COLUMNS \
	"key, owner, state, fingerprint, result, attempts, lease_token, " \
	"lease_expires_at, last_error, created_at, updated_at"

/*
 * A claim in one statement: look the key up in every live generation and,
 * only if no generation holds it, insert it into the current one (ON
 * CONFLICT DO NOTHING).  Returns the new row's ctid, if inserted, then the
 * row found, if any; both NULL means a concurrent claimer of the key
 * committed while we waited for it, and the caller looks again.
 */
static void
ks_prepare_claim(void)
{
	Oid			argtypes[11] = {TEXTOID, OIDOID, CHAROID, TEXTOID, JSONBOID,
		INT4OID, INT8OID, TIMESTAMPTZOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID};

	store.claim_plan = eo_prepare_kept(psprintf(
										   "WITH f AS MATERIALIZED (%s),"
										   " i AS (INSERT INTO %s (" INSERT_COLUMNS ")"
										   "   SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11"
										   "   WHERE NOT EXISTS (SELECT FROM f)"
										   "   ON CONFLICT (key) DO NOTHING RETURNING ctid)"
										   " SELECT (SELECT ctid FROM i) AS new_ctid, f.*"
										   " FROM (VALUES (1)) one LEFT JOIN f ON true",
										   ks_find_sql(), store.gens[0].table), 11, argtypes);
}

static void
ks_prepare_find(void)
{
	Oid			argtypes[1] = {TEXTOID};

	store.find_plan = eo_prepare_kept(ks_find_sql(), 1, argtypes);
}

static void
ks_prepare_insert(void)
{
	Oid			argtypes[11] = {TEXTOID, OIDOID, CHAROID, TEXTOID, JSONBOID,
		INT4OID, INT8OID, TIMESTAMPTZOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID};

	store.insert_plan = eo_prepare_kept(psprintf(
											"INSERT INTO %s (" INSERT_COLUMNS ")"
											" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
											" ON CONFLICT (key) DO NOTHING RETURNING ctid",
											store.gens[0].table), 11, argtypes);
}

/*
 * Read the live generations from the registry with the latest snapshot
 * (the caller's lock on the registry makes that the list in force) and
 * make the plans for them.  An invalidation that arrives while we read
 * clears gens_valid again and we read once more.
 */
static void
ks_load_generations(void)
{
	while (!store.gens_valid)
	{
		Datum		values[1] = {Int32GetDatum(0)};
		MemoryContext old;
		int			rc;

		store.gens_valid = true;
		ks_forget_generations();
		rc = SPI_execute_snapshot(store.gens_plan, values, NULL, GetLatestSnapshot(),
								  InvalidSnapshot, true, false, 0);
		if (rc != SPI_OK_SELECT || SPI_processed == 0)
			elog(ERROR, "eo: the key store has no current generation");
		if (SPI_processed > EO_MAX_LIVE_GENERATIONS)
			elog(ERROR, "eo: the key store has too many live generations");

		old = MemoryContextSwitchTo(ks_context);
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			Generation *g = &store.gens[i];
			bool		isnull;

			memset(g, 0, sizeof(*g));
			g->gen = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i],
												 SPI_tuptable->tupdesc, 1, &isnull));
			g->relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
													  SPI_tuptable->tupdesc, 2, &isnull));
			g->table = ks_qualified(get_rel_name(g->relid));
		}
		store.ngens = (int) SPI_processed;
		MemoryContextSwitchTo(old);

		ks_prepare_find();
		ks_prepare_insert();
		ks_prepare_claim();
	}
}

/*
 * Start a series of key-store calls: connect SPI, take the registry lock
 * of partition.c's protocol (ROW EXCLUSIVE if new keys may be inserted,
 * else ACCESS SHARE; held to the end of the transaction), and act as the
 * table owner.  An error before eo_ks_close() needs no cleanup here:
 * (sub)transaction abort restores the user and closes SPI.
 */
void
eo_ks_open(EoKsMode mode)
{
	caller_context = CurrentMemoryContext;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");

	if (!store.loaded ||
		!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(store.registry_relid)))
		ks_load_static();

	LockRelationOid(store.registry_relid,
					mode == EO_KS_WRITE ? RowExclusiveLock : AccessShareLock);

	/*
	 * A lock this transaction already holds is granted without looking at
	 * invalidations; look anyway, so that every call sees the generations
	 * that were live when it started, even in a long transaction.
	 */
	AcceptInvalidationMessages();

	eo_become_owner(store.table_owner, &caller_identity);
	ks_load_generations();
}

void
eo_ks_close(void)
{
	eo_restore_identity(&caller_identity);
	SPI_finish();
}

const EoGenSet *
eo_ks_generations(void)
{
	return &store.genset;
}

/* Copy one column of SPI row `n` into the caller's memory. */
static Datum
ks_column(uint64 n, int col, bool *isnull, bool varlena)
{
	Datum		d = SPI_getbinval(SPI_tuptable->vals[n], SPI_tuptable->tupdesc,
								  col, isnull);
	MemoryContext old;

	if (*isnull || !varlena)
		return d;
	old = MemoryContextSwitchTo(caller_context);
	d = PointerGetDatum(PG_DETOAST_DATUM_COPY(d));
	MemoryContextSwitchTo(old);
	return d;
}

/* Read ROW_COLUMNS starting at column `first` of SPI row 0. */
static void
ks_read_row(EoKey *row, int first)
{
	bool		isnull;
	Datum		d;
	int			c = first;

	row->state = DatumGetChar(ks_column(0, c++, &isnull, false));
	row->owner = DatumGetObjectId(ks_column(0, c++, &isnull, false));
	d = ks_column(0, c++, &isnull, true);
	row->fingerprint = isnull ? NULL : DatumGetTextPP(d);
	d = ks_column(0, c++, &isnull, true);
	row->result = isnull ? NULL : DatumGetJsonbP(d);
	row->attempts = DatumGetInt32(ks_column(0, c++, &isnull, false));
	d = ks_column(0, c++, &isnull, false);
	row->has_token = !isnull;
	row->lease_token = isnull ? 0 : DatumGetInt64(d);
	d = ks_column(0, c++, &isnull, false);
	row->has_expiry = !isnull;
	row->lease_expires_at = isnull ? 0 : DatumGetTimestampTz(d);
	d = ks_column(0, c++, &isnull, true);
	row->last_error = isnull ? NULL : DatumGetTextPP(d);
	row->created_at = DatumGetTimestampTz(ks_column(0, c++, &isnull, false));
	row->updated_at = DatumGetTimestampTz(ks_column(0, c++, &isnull, false));
	row->xmin = DatumGetTransactionId(ks_column(0, c++, &isnull, false));
	row->tid = *DatumGetItemPointer(ks_column(0, c++, &isnull, false));
}

/*
 * A row committed after a REPEATABLE READ or SERIALIZABLE transaction took
 * its snapshot: acting on it would mean acting on a state the transaction
 * cannot see.
 */
static void
ks_check_serializable(const EoKey *row)
{
	if (!IsolationUsesXactSnapshot() ||
		TransactionIdIsCurrentTransactionId(row->xmin) ||
		!XidInMVCCSnapshot(row->xmin, GetTransactionSnapshot()))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not serialize access due to concurrent update"),
			 errdetail("Idempotency key \"%s\" was changed by a transaction that committed after this one started.",
					   text_to_cstring(row->key))));
}

/*
 * The key's row as the latest committed state plus this transaction's own
 * changes, from whichever live generation holds it.
 */
bool
eo_ks_find(text *key, EoKey *row)
{
	Datum		values[1] = {PointerGetDatum(key)};
	int			rc;
	bool		isnull;

	rc = SPI_execute_snapshot(store.find_plan, values, NULL, GetLatestSnapshot(),
							  InvalidSnapshot, false, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "eo: key lookup failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return false;
	row->gen = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 1, &isnull));
	ks_read_row(row, 2);
	row->key = key;
	ks_check_serializable(row);
	return true;
}

/* After a write: where the row's new version is, if one was written. */
static bool
ks_new_location(EoKey *row, int32 gen)
{
	bool		isnull;

	if (SPI_processed != 1)
		return false;
	row->gen = gen;
	row->tid = *DatumGetItemPointer(SPI_getbinval(SPI_tuptable->vals[0],
												  SPI_tuptable->tupdesc, 1, &isnull));
	return true;
}

#define PARAM(value, isnull, i) \
	(nulls[i] = (isnull) ? 'n' : ' ', values[i] = (value))

/*
 * Insert a new key into the current generation; false if the key exists
 * there (after waiting for its writer).  Callers look the key up first.
 * On success row->gen and row->tid say where the row is.
 */
static void
ks_insert_params(const EoKey *row, Datum *values, char *nulls)
{
	PARAM(PointerGetDatum(row->key), false, 0);
	PARAM(ObjectIdGetDatum(row->owner), false, 1);
	PARAM(CharGetDatum(row->state), false, 2);
	PARAM(PointerGetDatum(row->fingerprint), row->fingerprint == NULL, 3);
	PARAM(PointerGetDatum(row->result), row->result == NULL, 4);
	PARAM(Int32GetDatum(row->attempts), false, 5);
	PARAM(Int64GetDatum(row->lease_token), !row->has_token, 6);
	PARAM(TimestampTzGetDatum(row->lease_expires_at), !row->has_expiry, 7);
	PARAM(PointerGetDatum(row->last_error), row->last_error == NULL, 8);
	PARAM(TimestampTzGetDatum(row->created_at), false, 9);
	PARAM(TimestampTzGetDatum(row->updated_at), false, 10);
}

bool
eo_ks_insert(EoKey *row)
{
	Datum		values[11];
	char		nulls[11];
	int			rc;

	ks_insert_params(row, values, nulls);
	rc = SPI_execute_plan(store.insert_plan, values, nulls, false, 0);
	if (rc != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "eo: key insert failed: %s", SPI_result_code_string(rc));
	return ks_new_location(row, store.gens[0].gen);
}

/*
 * Claim a new key: insert `row` unless a live generation holds the key, in
 * which case `found` is that row.  With the latest snapshot, as
 * eo_ks_find.
 */
EoKsClaim
eo_ks_claim(EoKey *row, EoKey *found)
{
	Datum		values[11];
	char		nulls[11];
	int			rc;
	bool		isnull;
	Datum		d;

	ks_insert_params(row, values, nulls);
	rc = SPI_execute_snapshot(store.claim_plan, values, nulls, GetLatestSnapshot(),
							  InvalidSnapshot, false, false, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "eo: key claim failed: %s", SPI_result_code_string(rc));

	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (!isnull)
	{
		row->gen = store.gens[0].gen;
		row->tid = *DatumGetItemPointer(d);
		return EO_KS_INSERTED;
	}
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	if (isnull)
		return EO_KS_RACED;
	found->gen = DatumGetInt32(d);
	ks_read_row(found, 3);
	found->key = row->key;
	ks_check_serializable(found);
	return EO_KS_FOUND;
}

static Generation *
ks_generation(int32 gen)
{
	for (int i = 0; i < store.ngens; i++)
		if (store.gens[i].gen == gen)
			return &store.gens[i];
	elog(ERROR, "eo: generation %d of the key store is not live", gen);
	return NULL;				/* keep compiler quiet */
}

static SPIPlanPtr
ks_update_plan(Generation *g)
{
	Oid			argtypes[9] = {TIDOID, CHAROID, TEXTOID, JSONBOID, INT4OID,
		INT8OID, TIMESTAMPTZOID, TEXTOID, TIMESTAMPTZOID};

	if (g->update_plan == NULL)
		g->update_plan = eo_prepare_kept(psprintf(
											 "UPDATE %s SET state = $2, fingerprint = $3, result = $4,"
											 " attempts = $5, lease_token = $6, lease_expires_at = $7,"
											 " last_error = $8, updated_at = $9"
											 " WHERE ctid OPERATOR(pg_catalog.=) $1 RETURNING ctid",
											 g->table), 9, argtypes);
	return g->update_plan;
}

/*
 * Rewrite the row version at row->gen, row->tid (as eo_ks_find or the last
 * write returned it).  False if another transaction changed, moved or
 * removed it first.  On success row->tid is the new version.
 */
bool
eo_ks_update(EoKey *row)
{
	Datum		values[9];
	char		nulls[9];
	int			rc;

	PARAM(ItemPointerGetDatum(&row->tid), false, 0);
	PARAM(CharGetDatum(row->state), false, 1);
	PARAM(PointerGetDatum(row->fingerprint), row->fingerprint == NULL, 2);
	PARAM(PointerGetDatum(row->result), row->result == NULL, 3);
	PARAM(Int32GetDatum(row->attempts), false, 4);
	PARAM(Int64GetDatum(row->lease_token), !row->has_token, 5);
	PARAM(TimestampTzGetDatum(row->lease_expires_at), !row->has_expiry, 6);
	PARAM(PointerGetDatum(row->last_error), row->last_error == NULL, 7);
	PARAM(TimestampTzGetDatum(row->updated_at), false, 8);

	rc = SPI_execute_plan(ks_update_plan(ks_generation(row->gen)), values, nulls,
						  false, 0);
	if (rc != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "eo: key update failed: %s", SPI_result_code_string(rc));
	return ks_new_location(row, row->gen);
}

/* A fencing token: strictly increasing, durable across crashes. */
int64
eo_ks_next_token(void)
{
	return nextval_internal(store.token_seq_relid, false);
}

/* Add to one of the running totals in eo_counters. */
static void
ks_count(const char *name, int64 n)
{
	Oid			argtypes[2] = {TEXTOID, INT8OID};
	Datum		values[2] = {CStringGetTextDatum(name), Int64GetDatum(n)};
	int			rc;

	rc = SPI_execute_with_args(psprintf("UPDATE %s SET value = value OPERATOR(pg_catalog.+) $2"
										" WHERE name OPERATOR(pg_catalog.=) $1",
										ks_qualified("eo_counters")),
							   2, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "eo: counting %s failed: %s", name, SPI_result_code_string(rc));
}

static SPIPlanPtr
ks_reclaim_plan(Generation *g)
{
	Oid			argtypes[3] = {TIMESTAMPTZOID, INT4OID, INT4OID};

	if (g->reclaim_plan == NULL)
		g->reclaim_plan = eo_prepare_kept(psprintf(
											  "UPDATE %1$s k SET"
											  " state = CASE WHEN k.attempts OPERATOR(pg_catalog.>=) $2"
											  "   THEN 'x'::pg_catalog.\"char\" ELSE 'f' END,"
											  " lease_expires_at = CASE WHEN k.attempts OPERATOR(pg_catalog.>=) $2"
											  "   THEN NULL ELSE $1 END,"
											  " last_error = 'lease expired', updated_at = $1"
											  " WHERE k.ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
											  "   SELECT ctid FROM %1$s"
											  "   WHERE lease_expires_at OPERATOR(pg_catalog.<) $1"
											  "     AND state OPERATOR(pg_catalog.=) 'p'"
											  "   LIMIT $3 FOR UPDATE SKIP LOCKED))"
											  " RETURNING k.state",
											  g->table), 3, argtypes);
	return g->reclaim_plan;
}

/*
 * Turn up to `limit` processing keys whose lease ended before `now` into
 * failed keys (retry allowed at once) or, out of attempts, dead ones.  Rows
 * a holder is completing right now are skipped, not waited for: the next
 * pass sees them if the holder did not finish.  Returns how many rows were
 * reclaimed; *dead counts those that became dead.
 */
int64
eo_ks_reclaim_expired(TimestampTz now, int max_attempts, int limit, int64 *dead)
{
	Datum		values[3] = {TimestampTzGetDatum(now), Int32GetDatum(max_attempts),
	Int32GetDatum(limit)};
	int64		reclaimed = 0;

	*dead = 0;
	for (int i = 0; i < store.ngens && reclaimed < limit; i++)
	{
		int			rc;

		values[2] = Int32GetDatum(limit - (int) reclaimed);
		rc = SPI_execute_plan(ks_reclaim_plan(&store.gens[i]), values, NULL, false, 0);
		if (rc != SPI_OK_UPDATE_RETURNING)
			elog(ERROR, "eo: lease reclaim failed: %s", SPI_result_code_string(rc));
		for (uint64 n = 0; n < SPI_processed; n++)
		{
			bool		isnull;

			if (DatumGetChar(SPI_getbinval(SPI_tuptable->vals[n],
										   SPI_tuptable->tupdesc, 1, &isnull)) == EO_DEAD)
				(*dead)++;
		}
		reclaimed += SPI_processed;
	}
	if (reclaimed > 0)
		ks_count("leases_reclaimed", reclaimed);
	return reclaimed;
}

/*
 * Get old generation `gen` ready to retire: move its keys that are not
 * finished (processing or failed) into the current generation, then say
 * whether it holds only finished keys, all last changed before `cutoff`.
 * Must be called after eo_ks_open(EO_KS_WRITE): moving inserts into the
 * current generation.  Rows a holder has locked (it is completing them)
 * are skipped, not waited for, and keep the generation from retiring until
 * a later pass.  Finished keys never change again, so the answer holds
 * until the generation is retired in this same transaction.
 */
bool
eo_ks_prepare_retire(int32 gen, TimestampTz cutoff)
{
	Generation *g = ks_generation(gen);
	Datum		values[1] = {TimestampTzGetDatum(cutoff)};
	Oid			argtypes[1] = {TIMESTAMPTZOID};
	int			rc;

	if (g == &store.gens[0])
		return false;			/* the current generation never retires */

	rc = SPI_execute(psprintf("WITH moved AS (DELETE FROM %1$s WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
							  "   SELECT ctid FROM %1$s"
							  "   WHERE state OPERATOR(pg_catalog.=) ANY ('{p,f}')"
							  "   FOR UPDATE SKIP LOCKED)) RETURNING *)"
							  " INSERT INTO %2$s SELECT * FROM moved",
							  g->table, store.gens[0].table), false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "eo: moving unfinished keys failed: %s", SPI_result_code_string(rc));

	rc = SPI_execute_with_args(psprintf("SELECT 1 FROM %s"
										" WHERE updated_at OPERATOR(pg_catalog.>=) $1"
										" OR state OPERATOR(pg_catalog.=) ANY ('{p,f}') LIMIT 1",
										g->table), 1, argtypes, values, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "eo: checking generation %d failed", gen);
	return SPI_processed == 0;
}
