/*-------------------------------------------------------------------------
 * tombstones.c
 *	  The second tier of retention: a compact tombstone for every finished
 *	  key after its full record is gone, kept eo.tombstone_retention.
 *
 * Redeliveries can arrive long after eo.retention (a partner's batch
 * replayed after a month).  Keeping full rows that long costs their result
 * and fingerprint; a tombstone keeps only what a claim needs to say
 * "done before": a 128-bit hash of (scope, key), the owner, a 64-bit hash
 * of the fingerprint, and the final state (done or dead).  The owner is
 * kept as a regrole, not hashed: pg_dump writes it by name and a restore
 * into another cluster maps it to the role's new OID, as for key rows.  A claim of a key
 * that no live key generation holds looks for its tombstone: found, the
 * answer is 'duplicate' (or 'dead') with no result and result_expired set;
 * a different fingerprint is still 22000.  Rejected keys leave none: their
 * error cannot be replayed without its message.
 *
 * Tombstones live in their own generation set (generations.c): tables
 * eo_internal.eo_tombstones_<n>, registry eo_internal.eo_tombstone_
 * generations, dropped whole.  They are written in one place: when a key
 * generation retires (maintain.c), its finished keys are buried into the
 * current tombstone generation in the same transaction, so a key is always
 * in a live key generation or, from that commit on, in a tombstone.
 *
 * The hash is SHA-256 of the scope (4 bytes, big endian; scope ids survive
 * a dump) and the key's bytes in the database encoding, cut to 128 bits: a
 * second key of the same scope with the same tombstone cannot be made on
 * purpose, and by chance once in 2^64 keys.  Hashing bytes cannot fail,
 * so no key can stop a burial.  Computed by one C function for both the
 * bulk insert (SQL) and the claim, so the two cannot drift apart.
 *
 * Process model: per backend; the list of live tombstone generations is
 * dropped by a relcache invalidation of their registry (generations.c
 * sends one on every change) or of one of their tables.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "common/cryptohash.h"
#include "common/sha2.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "port/pg_bswap.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/uuid.h"

#include "compat.h"
#include "eo.h"

PG_FUNCTION_INFO_V1(eo_tombstone_hash);
PG_FUNCTION_INFO_V1(eo_tombstone_fp);

/* Columns of eo_tombstones_template, in table order (checked when used). */
#define TOMB_COLUMNS(X) \
	X(TCOL_HASH, "hash", UUIDOID) \
	X(TCOL_OWNER, "owner", REGROLEOID) \
	X(TCOL_FP, "fp", INT8OID) \
	X(TCOL_STATE, "state", CHAROID)

enum
{
	TCOL_NONE = 0,
	TOMB_COLUMNS(EO_COLUMN_ENUM)
	TOMB_NATTS_PLUS_1
};
#define TOMB_NATTS (TOMB_NATTS_PLUS_1 - 1)

static const EoColumn tomb_columns[] = {TOMB_COLUMNS(EO_COLUMN_DESC)};

typedef struct TombGeneration
{
	Oid			relid;
	Oid			hash_index;		/* the unique index on hash */
} TombGeneration;

static const EoGenSet tomb_set = {
	EO_INTERNAL_SCHEMA, "eo_tombstone_generations", "eo_tombstones_template", "eo_tombstones_"
};

static TombGeneration gens[EO_MAX_LIVE_GENERATIONS];
static int	ngens = 0;
static bool gens_valid = false;
static bool gens_complete = false;	/* every member of gens[] filled in */
static Oid	registry_relid = InvalidOid;
static bool callback_registered = false;

static void
ts_invalidate(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == registry_relid)
		gens_valid = false;
	for (int i = 0; i < ngens; i++)
		if (gens[i].relid == relid)
			gens_valid = false;
}

/* ---- the hashes ---- */

static void
ts_sha256_update(pg_cryptohash_ctx *ctx, const void *data, size_t len)
{
	if (pg_cryptohash_update(ctx, data, len) < 0)
		elog(ERROR, "eo: SHA-256 failed: %s", pg_cryptohash_error(ctx));
}

/*
 * SHA-256 of the 4-byte big-endian `prefix` and the bytes of `t`, as the
 * database stores them.  No conversion: in some encodings a byte sequence
 * has no UTF-8 form (SQL_ASCII 0xff) or two have the same (EUC_JP), and a
 * hash that failed for one key, or gave two keys one tombstone, would stop
 * burial or answer 'duplicate' for a key never used.  So a tombstone
 * compares bytes; a restore into a database of another encoding keeps
 * finding the tombstones of keys whose bytes the conversion keeps (ASCII).
 */
static void
ts_sha256(uint32 prefix, const text *t, uint8 *digest)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);
	uint32		be_prefix = pg_hton32(prefix);

	if (pg_cryptohash_init(ctx) < 0)
		elog(ERROR, "eo: SHA-256 failed: %s", pg_cryptohash_error(ctx));
	ts_sha256_update(ctx, &be_prefix, sizeof(be_prefix));
	ts_sha256_update(ctx, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
	if (pg_cryptohash_final(ctx, digest, PG_SHA256_DIGEST_LENGTH) < 0)
		elog(ERROR, "eo: SHA-256 failed: %s", pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);
}

/* The tombstone of (scope, key). */
static void
ts_hash(int32 scope, const text *key, pg_uuid_t *out)
{
	uint8		digest[PG_SHA256_DIGEST_LENGTH];

	ts_sha256((uint32) scope, key, digest);
	memcpy(out->data, digest, UUID_LEN);
}

/*
 * The fingerprint's hash kept in a tombstone: 64 bits of SHA-256, so that
 * a fingerprint that passes for another cannot be made on purpose, and the
 * same on every machine.
 */
int64
eo_ts_fingerprint_hash(const text *fingerprint)
{
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	uint64		h;

	ts_sha256(0, fingerprint, digest);
	memcpy(&h, digest, sizeof(h));
	return (int64) pg_ntoh64(h);
}

/* eo_internal.eo_tombstone_hash(scope, key): for the bulk insert. */
Datum
eo_tombstone_hash(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *out = palloc(sizeof(pg_uuid_t));

	ts_hash(PG_GETARG_INT32(0), PG_GETARG_TEXT_PP(1), out);
	PG_RETURN_UUID_P(out);
}

/* eo_internal.eo_tombstone_fp(fingerprint) */
Datum
eo_tombstone_fp(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(eo_ts_fingerprint_hash(PG_GETARG_TEXT_PP(0)));
}

/* ---- the live tombstone generations ---- */

/* The unique index on hash of tombstone table `relid`, after checking it. */
static Oid
ts_hash_index(Oid relid)
{
	static const AttrNumber unique_cols[1] = {TCOL_HASH};
	Relation	rel;
	Oid			result;
	char	   *problem;

	eo_check_own_relation(relid, RELKIND_RELATION, true, "tombstone generation");
	rel = table_open(relid, AccessShareLock);
	problem = eo_columns_mismatch(RelationGetDescr(rel), tomb_columns, TOMB_NATTS, false);
	if (problem != NULL)
		elog(ERROR, "eo: tombstone table \"%s\" is not shaped as eo made it: %s",
			 RelationGetRelationName(rel), problem);
	result = eo_unique_index(rel, 1, unique_cols);
	table_close(rel, NoLock);
	if (!OidIsValid(result))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("tombstone generation \"%s\" has no unique index on hash", get_rel_name(relid)),
				 errdetail("A restore makes its index last; until it is there, eo does not use the tombstones."),
				 errhint("Let the restore finish: pg_restore's post-data section makes it.")));
	return result;
}

/* Read the live generations' tables (SPI, as the owner, latest snapshot). */
static void
ts_read_registry(void)
{
	EoIdentity	saved;

	ngens = 0;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&saved);
	if (SPI_execute_snapshot(SPI_prepare("SELECT relid FROM eo_internal.eo_tombstone_generations"
										 " WHERE state OPERATOR(pg_catalog.=) ANY ('{c,o}')"
										 " ORDER BY gen DESC", 0, NULL),
							 NULL, NULL, GetLatestSnapshot(), InvalidSnapshot,
							 true, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "eo: the tombstone registry could not be read");
	if (SPI_processed > EO_MAX_LIVE_GENERATIONS)
		elog(ERROR, "eo: too many live tombstone generations");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		gens[i].relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
													   SPI_tuptable->tupdesc, 1, &isnull));
	}
	ngens = (int) SPI_processed;
	eo_restore_identity(&saved);
	SPI_finish();
}

/*
 * Make the list of live generations current and lock their tables for
 * this transaction.  A table is locked before it is used, and the list is
 * read again if an invalidation arrived meanwhile (generations.c's locking
 * protocol): a generation retired and dropped between the read and the
 * lock is then gone from the list, not opened by OID.
 */
static void
ts_load(void)
{
	for (;;)
	{
		bool		fresh = !gens_valid || !gens_complete;

		if (fresh)
		{
			gens_valid = true;
			gens_complete = false;	/* until every index is known: an error midway */
			ts_read_registry();
		}
		for (int i = 0; i < ngens; i++)
			LockRelationOid(gens[i].relid, AccessShareLock);
		if (fresh && gens_valid)
		{
			for (int i = 0; i < ngens; i++)
				gens[i].hash_index = ts_hash_index(gens[i].relid);
			gens_complete = true;
		}
		if (gens_valid)
			return;
	}
}

/*
 * Take the readers' lock on the registry (ACCESS SHARE, to the end of the
 * transaction: generations.c drops a table only when nobody holds one) and
 * make the list current.
 */
static void
ts_begin(void)
{
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(ts_invalidate, (Datum) 0);
		callback_registered = true;
	}
	if (!OidIsValid(registry_relid) ||
		!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(registry_relid)))
	{
		registry_relid = eo_own_relation("eo_tombstone_generations", RELKIND_RELATION);
		gens_valid = false;
	}
	LockRelationOid(registry_relid, AccessShareLock);
	AcceptInvalidationMessages();
	ts_load();
}

/* Look `hash` up in tombstone generation `g`. */
static bool
ts_fetch(const TombGeneration *g, pg_uuid_t *hash, EoTomb *tomb)
{
	Relation	heap = table_open(g->relid, AccessShareLock);
	Relation	index = index_open(g->hash_index, AccessShareLock);
	TupleTableSlot *slot = table_slot_create(heap, NULL);
	IndexScanDesc scan;
	ScanKeyData skey;
	bool		found;

	ScanKeyEntryInitialize(&skey, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   InvalidOid, F_UUID_EQ, UUIDPGetDatum(hash));
	scan = eo_index_beginscan(heap, index, GetLatestSnapshot(), 1, 0);
	index_rescan(scan, &skey, 1, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	if (found)
	{
		slot_getallattrs(slot);
		tomb->owner = DatumGetObjectId(slot->tts_values[TCOL_OWNER - 1]);
		tomb->has_fp = !slot->tts_isnull[TCOL_FP - 1];
		tomb->fp = tomb->has_fp ? DatumGetInt64(slot->tts_values[TCOL_FP - 1]) : 0;
		tomb->state = DatumGetChar(slot->tts_values[TCOL_STATE - 1]);
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, NoLock);
	table_close(heap, NoLock);
	return found;
}

/*
 * The tombstone of (scope, key), if a live tombstone generation holds one
 * (its owner says whose it is, as a key row's does).  Only while
 * eo.tombstone_retention is on: off, claims pay nothing for it.
 */
bool
eo_ts_find(int32 scope, const text *key, EoTomb *tomb)
{
	pg_uuid_t	hash;

	if (eo_tombstone_retention_secs <= 0)
		return false;
	ts_begin();
	if (ngens == 0)
		return false;
	ts_hash(scope, key, &hash);
	for (int i = 0; i < ngens; i++)
		if (ts_fetch(&gens[i], &hash, tomb))
			return true;
	return false;
}

/* ---- maintenance (maintain.c's retire step; SPI connected, as owner) ---- */

/*
 * Bury the finished keys of key generation table `keys` (schema-qualified)
 * in the current tombstone generation, which is made if there is none.
 * Done and dead keys only: a rejected key's error has no tombstone.  Run in
 * the transaction that retires the key generation.
 */
/* The current tombstone generation's table, or InvalidOid. */
static Oid
ts_current(void)
{
	bool		isnull;

	if (SPI_execute("SELECT relid FROM eo_internal.eo_tombstone_generations"
					" WHERE state OPERATOR(pg_catalog.=) 'c'", false, 0) != SPI_OK_SELECT)
		elog(ERROR, "eo: the tombstone registry could not be read");
	if (SPI_processed == 0)
		return InvalidOid;
	return DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/* The same, with the latest snapshot: a maker that committed meanwhile. */
static Oid
ts_current_latest(void)
{
	bool		isnull;

	if (SPI_execute_snapshot(SPI_prepare("SELECT relid FROM eo_internal.eo_tombstone_generations"
										 " WHERE state OPERATOR(pg_catalog.=) 'c'", 0, NULL),
							 NULL, NULL, GetLatestSnapshot(), InvalidSnapshot, true, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "eo: the tombstone registry could not be read");
	if (SPI_processed == 0)
		return InvalidOid;
	return DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

int64
eo_ts_bury(const char *keys)
{
	Oid			registry = eo_own_relation("eo_tombstone_generations", RELKIND_RELATION);
	Oid			current;
	int			rc;

	/* The writers' lock of generations.c's protocol, then the current one. */
	LockRelationOid(registry, RowExclusiveLock);
	current = ts_current();
	if (!OidIsValid(current))
	{
		LockRelationOid(registry, ShareUpdateExclusiveLock);	/* one maker */
		CommandCounterIncrement();
		current = ts_current_latest();
		if (!OidIsValid(current))
		{
			eo_gen_start(&tomb_set);
			CommandCounterIncrement();
			current = ts_current();
		}
	}
	(void) ts_hash_index(current);	/* eo's own, shaped as eo made it */
	rc = SPI_execute(psprintf("INSERT INTO %s"
							  " SELECT eo_internal.eo_tombstone_hash(k.scope, k.key), k.owner,"
							  "        eo_internal.eo_tombstone_fp(k.fingerprint),"
							  "        CASE WHEN k.state OPERATOR(pg_catalog.=) 'x' THEN 'x' ELSE 'd' END::pg_catalog.\"char\""
							  " FROM %s k WHERE k.state OPERATOR(pg_catalog.=) ANY ('{c,d,x}')"
							  " ON CONFLICT (hash) DO UPDATE SET owner = EXCLUDED.owner, fp = EXCLUDED.fp,"
							  "   state = EXCLUDED.state",
							  eo_internal_name(get_rel_name(current)), keys),
					 false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "eo: burying keys failed: %s", SPI_result_code_string(rc));
	return (int64) SPI_processed;
}

/*
 * Keep the tombstone generations: one made ahead, a switch every quarter of
 * eo.tombstone_retention (at least eo.partition_interval), so a tombstone
 * is kept between 1 and 1.25 times that and a claim reads about five
 * tables; retire and drop the expired ones.  With eo.tombstone_retention
 * off, every generation but the current one goes.
 */
void
eo_ts_maintain(void)
{
	int			retention = Max(eo_tombstone_retention_secs, 0);
	int			interval = Max(eo_partition_interval_secs, retention / 4);
	List	   *candidates;
	ListCell   *lc;

	(void) eo_own_relation("eo_tombstone_generations", RELKIND_RELATION);
	eo_gen_bind_all(&tomb_set);
	(void) eo_gen_keep(&tomb_set, retention > 0 ? interval : PG_INT32_MAX,
					   EO_MAX_LIVE_GENERATIONS, "tombstone generation");
	candidates = eo_gen_retire_candidates(&tomb_set, retention);
	foreach(lc, candidates)
		eo_gen_retire(&tomb_set, lfirst_int(lc));
	(void) eo_gen_drop_retired(&tomb_set);
}
