/*-------------------------------------------------------------------------
 * keystore.c
 *	  Storage of idempotency keys: find, insert and update eo_keys rows.
 *
 * Every statement is a prepared SPI plan, made once per backend and kept,
 * with fully schema-qualified names and operators so that the caller's
 * search_path cannot change what runs.  Statements run as the owner of the
 * eo tables (normally the superuser who created the extension): callers
 * get no privileges on the tables themselves, and claim.c enforces key
 * ownership before it asks for any change.
 *
 * Concurrency is the database's own: eo_ks_insert is INSERT ... ON
 * CONFLICT DO NOTHING, so a claimer that meets an uncommitted claim of the
 * same key waits for that transaction exactly as a unique index would make
 * it; eo_ks_update rewrites only the row version that eo_ks_find returned
 * (by ctid), so an update that lost a race to another transaction changes
 * nothing and reports it, and the caller looks again.
 *
 * Process model: per backend.  The cached OIDs and plans are dropped when a
 * relcache invalidation says eo_keys may be gone (DROP EXTENSION).
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/sequence.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "eo.h"

typedef struct KeyStore
{
	bool		valid;
	Oid			keys_relid;
	Oid			token_seq_relid;
	Oid			table_owner;
	SPIPlanPtr	find_plan;
	SPIPlanPtr	insert_plan;
	SPIPlanPtr	update_plan;
	SPIPlanPtr	reclaim_plan;
} KeyStore;

static KeyStore store;
static bool callback_registered = false;

/* The caller's identity while eo_ks_open() has switched to the owner. */
static Oid	saved_userid;
static int	saved_sec_context;
static MemoryContext caller_context;

/* Column order shared by the find plan and ks_read_row(). */
#define FIND_COLUMNS \
	"state, owner, fingerprint, result, attempts, lease_token, " \
	"lease_expires_at, last_error, created_at, updated_at, xmin, ctid"

static void
ks_invalidate(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == store.keys_relid)
		store.valid = false;
}

static SPIPlanPtr
ks_prepare(const char *sql, int nargs, Oid *argtypes)
{
	SPIPlanPtr	plan = SPI_prepare(sql, nargs, argtypes);

	if (plan == NULL)
		elog(ERROR, "eo: could not prepare \"%s\": %s",
			 sql, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "eo: could not keep plan");
	return plan;
}

static void
ks_prepare_plans(const char *schema)
{
	Oid			find_types[1] = {TEXTOID};
	Oid			insert_types[11] = {TEXTOID, OIDOID, CHAROID, TEXTOID, JSONBOID,
		INT4OID, INT8OID, TIMESTAMPTZOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	Oid			reclaim_types[3] = {TIMESTAMPTZOID, INT4OID, INT4OID};
	Oid			update_types[9] = {TIDOID, CHAROID, TEXTOID, JSONBOID, INT4OID,
		INT8OID, TIMESTAMPTZOID, TEXTOID, TIMESTAMPTZOID};

	store.find_plan = ks_prepare(psprintf(
										  "SELECT " FIND_COLUMNS " FROM %s.eo_keys"
										  " WHERE key OPERATOR(pg_catalog.=) $1",
										  schema), 1, find_types);
	store.insert_plan = ks_prepare(psprintf(
											"INSERT INTO %s.eo_keys (key, owner, state, fingerprint, result,"
											" attempts, lease_token, lease_expires_at, last_error, created_at,"
											" updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
											" ON CONFLICT (key) DO NOTHING",
											schema), 11, insert_types);
	store.reclaim_plan = ks_prepare(psprintf(
											 "UPDATE %1$s.eo_keys k SET"
											 " state = CASE WHEN k.attempts OPERATOR(pg_catalog.>=) $2"
											 "   THEN 'x'::pg_catalog.\"char\" ELSE 'f' END,"
											 " lease_expires_at = CASE WHEN k.attempts OPERATOR(pg_catalog.>=) $2"
											 "   THEN NULL ELSE $1 END,"
											 " last_error = 'lease expired', updated_at = $1"
											 " WHERE k.ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
											 "   SELECT ctid FROM %1$s.eo_keys"
											 "   WHERE lease_expires_at OPERATOR(pg_catalog.<) $1"
											 "     AND state OPERATOR(pg_catalog.=) 'p'"
											 "   LIMIT $3 FOR UPDATE SKIP LOCKED))"
											 " RETURNING k.state",
											 schema), 3, reclaim_types);
	store.update_plan = ks_prepare(psprintf(
											"UPDATE %s.eo_keys SET state = $2, fingerprint = $3, result = $4,"
											" attempts = $5, lease_token = $6, lease_expires_at = $7,"
											" last_error = $8, updated_at = $9"
											" WHERE ctid OPERATOR(pg_catalog.=) $1",
											schema), 9, update_types);
}

static void
ks_free_plans(void)
{
	SPIPlanPtr *plans[4] = {&store.find_plan, &store.insert_plan,
	&store.update_plan, &store.reclaim_plan};

	for (int i = 0; i < lengthof(plans); i++)
	{
		if (*plans[i] != NULL)
			SPI_freeplan(*plans[i]);
		*plans[i] = NULL;
	}
}

/* Find eo's tables through the extension's schema; (re)make the plans. */
static void
ks_load(void)
{
	Oid			ext_oid = get_extension_oid("eo", false);
	Oid			nsp = get_extension_schema(ext_oid);
	HeapTuple	tup;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(ks_invalidate, (Datum) 0);
		callback_registered = true;
	}
	ks_free_plans();

	store.keys_relid = get_relname_relid("eo_keys", nsp);
	store.token_seq_relid = get_relname_relid("eo_lease_token_seq", nsp);
	if (!OidIsValid(store.keys_relid) || !OidIsValid(store.token_seq_relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("eo's tables are missing from schema \"%s\"",
						get_namespace_name(nsp)),
				 errhint("Reinstall the extension with DROP EXTENSION eo; CREATE EXTENSION eo;")));

	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(store.keys_relid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "eo: cache lookup failed for relation %u", store.keys_relid);
	store.table_owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);

	ks_prepare_plans(quote_identifier(get_namespace_name(nsp)));
	store.valid = true;
}

/*
 * Start a series of key-store calls: connect SPI and act as the table
 * owner.  An error before eo_ks_close() needs no cleanup here: (sub)xact
 * abort restores the user and closes SPI.
 */
void
eo_ks_open(void)
{
	caller_context = CurrentMemoryContext;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");

	/* Relcache invalidations for eo_keys are common (ANALYZE); replan only
	 * when the table itself is gone. */
	if (!store.valid &&
		!(OidIsValid(store.keys_relid) &&
		  SearchSysCacheExists1(RELOID, ObjectIdGetDatum(store.keys_relid)) &&
		  store.find_plan != NULL))
		ks_load();
	store.valid = true;

	GetUserIdAndSecContext(&saved_userid, &saved_sec_context);
	SetUserIdAndSecContext(store.table_owner,
						   saved_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
}

void
eo_ks_close(void)
{
	SetUserIdAndSecContext(saved_userid, saved_sec_context);
	SPI_finish();
}

/* Copy one column of the current SPI row into the caller's memory. */
static Datum
ks_column(int col, bool *isnull, bool varlena)
{
	Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
								  col, isnull);
	MemoryContext old;

	if (*isnull || !varlena)
		return d;
	old = MemoryContextSwitchTo(caller_context);
	d = PointerGetDatum(PG_DETOAST_DATUM_COPY(d));
	MemoryContextSwitchTo(old);
	return d;
}

static void
ks_read_row(EoKey *row)
{
	bool		isnull;
	Datum		d;

	row->state = DatumGetChar(ks_column(1, &isnull, false));
	row->owner = DatumGetObjectId(ks_column(2, &isnull, false));
	d = ks_column(3, &isnull, true);
	row->fingerprint = isnull ? NULL : DatumGetTextPP(d);
	d = ks_column(4, &isnull, true);
	row->result = isnull ? NULL : DatumGetJsonbP(d);
	row->attempts = DatumGetInt32(ks_column(5, &isnull, false));
	d = ks_column(6, &row->has_token, false);
	row->has_token = !row->has_token;
	row->lease_token = row->has_token ? DatumGetInt64(d) : 0;
	d = ks_column(7, &row->has_expiry, false);
	row->has_expiry = !row->has_expiry;
	row->lease_expires_at = row->has_expiry ? DatumGetTimestampTz(d) : 0;
	d = ks_column(8, &isnull, true);
	row->last_error = isnull ? NULL : DatumGetTextPP(d);
	row->created_at = DatumGetTimestampTz(ks_column(9, &isnull, false));
	row->updated_at = DatumGetTimestampTz(ks_column(10, &isnull, false));
	row->xmin = DatumGetTransactionId(ks_column(11, &isnull, false));
	row->tid = *DatumGetItemPointer(ks_column(12, &isnull, false));
}

/*
 * The key's row as the latest committed state plus this transaction's own
 * changes (a fresh statement snapshot under READ COMMITTED).
 */
bool
eo_ks_find(text *key, EoKey *row)
{
	Datum		values[1] = {PointerGetDatum(key)};
	int			rc = SPI_execute_plan(store.find_plan, values, NULL, false, 1);

	if (rc != SPI_OK_SELECT)
		elog(ERROR, "eo: key lookup failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return false;
	ks_read_row(row);
	row->key = key;
	return true;
}

#define PARAM(value, isnull, i) \
	(nulls[i] = (isnull) ? 'n' : ' ', values[i] = (value))

/* Insert a new key; false if the key exists (after waiting for its writer). */
bool
eo_ks_insert(const EoKey *row)
{
	Datum		values[11];
	char		nulls[11];
	int			rc;

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

	rc = SPI_execute_plan(store.insert_plan, values, nulls, false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "eo: key insert failed: %s", SPI_result_code_string(rc));
	return SPI_processed == 1;
}

/*
 * Rewrite the row version that eo_ks_find returned.  False if another
 * transaction changed or removed it first.
 */
bool
eo_ks_update(const EoKey *row)
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

	rc = SPI_execute_plan(store.update_plan, values, nulls, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "eo: key update failed: %s", SPI_result_code_string(rc));
	return SPI_processed == 1;
}

/* A fencing token: strictly increasing, durable across crashes. */
int64
eo_ks_next_token(void)
{
	return nextval_internal(store.token_seq_relid, false);
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
	int			rc = SPI_execute_plan(store.reclaim_plan, values, NULL, false, 0);

	if (rc != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "eo: lease reclaim failed: %s", SPI_result_code_string(rc));
	*dead = 0;
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		if (DatumGetChar(SPI_getbinval(SPI_tuptable->vals[i],
									   SPI_tuptable->tupdesc, 1, &isnull)) == EO_DEAD)
			(*dead)++;
	}
	return (int64) SPI_processed;
}
