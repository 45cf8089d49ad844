/*-------------------------------------------------------------------------
 * keystore.c
 *	  Storage of idempotency keys: find, insert and update key rows across
 *	  the live time generations of the key store.
 *
 * Keys live in one table per generation (eo_keys_<n>, see generations.c),
 * each with a unique index on (key, scope).  New keys go into the current
 * generation; a key is looked up in every live one, newest first.
 *
 * A key is unique across generations because every transaction that
 * inserts a new key first takes the key's lock (an exclusive advisory-type
 * lock on a 64-bit hash of the key and its scope, see eo_ks_lock_key), then looks the
 * key up in every live generation with a dirty snapshot, waiting out any
 * writer of the key still in progress, and inserts only if no generation
 * holds it.  The key lock is released as soon as the row is in the unique
 * index (from then on the row itself makes the next claimer wait), or held
 * to the end of the transaction by a deferred claim that has no row yet
 * (pending.c).  Rows moved between generations by retirement are deleted
 * and inserted in one transaction, which the dirty lookup also waits out.
 * Under REPEATABLE READ and SERIALIZABLE a row that the transaction's own
 * snapshot cannot see is a serialization failure, as ON CONFLICT makes it
 * within one table.
 *
 * Rows are read and written directly through the heap and the unique
 * index (no SQL, no planner): this is the path every claim takes, and the
 * executor start-up of a statement per call cost more than the work.  The
 * rarer maintenance statements (reclaim, retire, the registry) are
 * prepared SPI plans, run as the tables' owner with fully schema-qualified
 * names.  A row is rewritten only in the version that was read (by ctid),
 * so an update that lost a race changes nothing and reports it, and the
 * caller looks again.
 *
 * Process model: per backend.  The cache is dropped when a relcache
 * invalidation arrives for the registry (generations.c sends one on every
 * change) or for a generation table.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/table.h"
#include "access/subtrans.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/index.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/sequence.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/primnodes.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "eo.h"

/* Columns of eo_keys_template, in table order (checked when loaded). */
#define KEY_COLUMNS(X) \
	X(COL_KEY, "key", TEXTOID) \
	X(COL_OWNER, "owner", REGROLEOID) \
	X(COL_STATE, "state", CHAROID) \
	X(COL_FINGERPRINT, "fingerprint", TEXTOID) \
	X(COL_RESULT, "result", JSONBOID) \
	X(COL_ATTEMPTS, "attempts", INT4OID) \
	X(COL_LEASE_TOKEN, "lease_token", INT8OID) \
	X(COL_LEASE_EXPIRES_AT, "lease_expires_at", TIMESTAMPTZOID) \
	X(COL_LAST_ERROR, "last_error", TEXTOID) \
	X(COL_CREATED_AT, "created_at", TIMESTAMPTZOID) \
	X(COL_UPDATED_AT, "updated_at", TIMESTAMPTZOID) \
	X(COL_SCOPE, "scope", INT4OID) \
	X(COL_RECOVERY_POINT, "recovery_point", TEXTOID) \
	X(COL_RECOVERY_STATE, "recovery_state", JSONBOID) \
	X(COL_ATTEMPTS_BEFORE_REDRIVE, "attempts_before_redrive", INT4OID)

enum
{
	COL_NONE = 0,
	KEY_COLUMNS(EO_COLUMN_ENUM)
	KEY_NATTS_PLUS_1
};
#define KEY_NATTS (KEY_NATTS_PLUS_1 - 1)

/*
 * A generation made by eo 0.2.0 ends at scope: the library runs against
 * such tables between its installation and ALTER EXTENSION UPDATE (which
 * widens them all), and a dump of a 0.2.0 database restores them so.
 * Their keys work as before; a recovery point or a redrive of one is
 * refused (ks_fill_values).
 */
#define KEY_NATTS_020 COL_SCOPE

static const EoColumn key_columns[] = {KEY_COLUMNS(EO_COLUMN_DESC)};

/*
 * Where the key lock lives: advisory locks of the current database whose
 * fourth field is this number (pg_locks shows it as objsubid), so they can
 * never be mistaken for pg_advisory_lock()'s, which use 1 and 2.
 */
#define EO_KEY_LOCK_FIELD4 17743	/* "EO" */

/* One live generation of the key store. */
typedef struct Generation
{
	int32		gen;
	Oid			relid;
	Oid			key_index;		/* the unique index on (key, scope) */
	int			natts;			/* KEY_NATTS, or KEY_NATTS_020 for a 0.2.0 table */
	/*
	 * New rows are indexed without the executor (ks_insert_direct) when the
	 * table has exactly the template's two indexes: these, built once.
	 */
	bool		direct;
	IndexInfo  *key_ii;
	Oid			lease_index;	/* on lease_expires_at, WHERE IS NOT NULL */
	IndexInfo  *lease_ii;
	char	   *table;			/* schema-qualified, quoted */
	SPIPlanPtr	reclaim_plan;	/* made on first use */
} Generation;

typedef struct KeyStore
{
	bool		loaded;			/* schema, registry, owner known */
	bool		gens_valid;		/* no invalidation since gens[] was read */
	bool		gens_complete;	/* ... and reading it did not fail midway */
	Oid			registry_relid;
	Oid			token_seq_relid;
	EoGenSet	genset;
	SPIPlanPtr	gens_plan;		/* reads the registry */
	int			ngens;
	Generation	gens[EO_MAX_LIVE_GENERATIONS];	/* newest (current) first */
	EoKsMode	mode;			/* of the last eo_ks_begin */
} KeyStore;

static KeyStore store;
static MemoryContext ks_context = NULL;	/* names and plans of gens[] */
static bool callback_registered = false;

/* The caller's identity while eo_ks_open() has switched to the owner. */
static EoIdentity caller_identity;

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
	eo_free_plan_later(*plan);	/* as every plan eo drops */
	*plan = NULL;
}

/* Find eo's registry and sequence in eo_internal. */
static void
ks_load_static(void)
{
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(ks_invalidate, (Datum) 0);
		ks_context = AllocSetContextCreate(TopMemoryContext, "eo key store",
										   ALLOCSET_SMALL_SIZES);
		callback_registered = true;
	}

	store.registry_relid = eo_own_relation("eo_generations", RELKIND_RELATION);
	store.token_seq_relid = eo_own_relation("eo_lease_token_seq", RELKIND_SEQUENCE);
	store.genset.schema = EO_INTERNAL_SCHEMA;
	store.genset.registry = "eo_generations";
	store.genset.template = "eo_keys_template";
	store.genset.prefix = "eo_keys_";

	ks_free_plan(&store.gens_plan);
	store.loaded = true;
	store.gens_valid = false;
}

static void
ks_forget_generations(void)
{
	for (int i = 0; i < store.ngens; i++)
		ks_free_plan(&store.gens[i].reclaim_plan);
	store.ngens = 0;
	MemoryContextReset(ks_context);
}

/*
 * The unique index on (key, scope) of generation table `relid`, after checking
 * that the table is eo's own (objects.c) and has the template's columns
 * and types in the template's order (the row code below reads and writes
 * columns by number).
 */
static Oid
ks_key_index(Oid relid, int *natts)
{
	static const AttrNumber unique_cols[2] = {COL_KEY, COL_SCOPE};
	Relation	rel;
	TupleDesc	desc;
	Oid			result;
	char	   *problem;

	eo_check_own_relation(relid, RELKIND_RELATION, true, "key generation");
	rel = table_open(relid, AccessShareLock);
	desc = RelationGetDescr(rel);
	*natts = desc->natts == KEY_NATTS_020 ? KEY_NATTS_020 : KEY_NATTS;
	problem = eo_columns_mismatch(desc, key_columns, *natts, false);
	if (problem != NULL)
		elog(ERROR, "eo: key table \"%s\" is not shaped as eo made it: %s",
			 RelationGetRelationName(rel), problem);

	result = eo_unique_index(rel, 2, unique_cols);
	table_close(rel, NoLock);
	if (!OidIsValid(result))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("key generation \"%s\" has no unique index on (key, scope)", get_rel_name(relid)),
				 errdetail("A restore makes its index last; until it is there, eo does not use the key store."),
				 errhint("Let the restore finish: pg_restore's post-data section makes it.")));
	return result;
}

/* Is `idx` the template's lease index: btree (lease_expires_at) WHERE lease_expires_at IS NOT NULL? */
static bool
ks_is_lease_index(Relation idx)
{
	Form_pg_index form = idx->rd_index;
	List	   *pred;
	NullTest   *nt;

	if (idx->rd_rel->relam != BTREE_AM_OID || form->indnatts != 1 ||
		form->indkey.values[0] != COL_LEASE_EXPIRES_AT || form->indisunique ||
		RelationGetIndexExpressions(idx) != NIL)
		return false;
	pred = RelationGetIndexPredicate(idx);
	if (list_length(pred) != 1 || !IsA(linitial(pred), NullTest))
		return false;
	nt = linitial_node(NullTest, pred);
	return nt->nulltesttype == IS_NOT_NULL && !nt->argisrow && IsA(nt->arg, Var) &&
		((Var *) nt->arg)->varattno == COL_LEASE_EXPIRES_AT;
}

/*
 * May new rows of `g` be written by ks_insert_direct?  Only a heap table
 * with exactly the template's two indexes, both ready and valid: then the
 * two index entries are all the executor would have made.  Anything else
 * (an index someone added, one being built) takes the executor's path.
 * In ks_context: the IndexInfos live as long as gens[].
 */
static void
ks_check_direct(Generation *g)
{
	Relation	heap = table_open(g->relid, AccessShareLock);
	List	   *indexes = RelationGetIndexList(heap);
	ListCell   *lc;

	g->direct = heap->rd_rel->relam == HEAP_TABLE_AM_OID && list_length(indexes) == 2;
	g->lease_index = InvalidOid;
	foreach(lc, indexes)
	{
		Relation	idx = index_open(lfirst_oid(lc), AccessShareLock);
		bool		usable = idx->rd_index->indisvalid && idx->rd_index->indisready;

		if (lfirst_oid(lc) == g->key_index && usable)
			g->key_ii = BuildIndexInfo(idx);
		else if (usable && ks_is_lease_index(idx))
		{
			g->lease_index = lfirst_oid(lc);
			g->lease_ii = BuildIndexInfo(idx);
		}
		else
			g->direct = false;
		index_close(idx, AccessShareLock);
	}
	g->direct &= OidIsValid(g->lease_index);
	list_free(indexes);
	table_close(heap, AccessShareLock);
}

/* Find each live generation's indexes and name, after checking its table. */
static void
ks_fill_generations(void)
{
	for (int i = 0; i < store.ngens; i++)
	{
		Generation *g = &store.gens[i];
		MemoryContext old;

		g->key_index = ks_key_index(g->relid, &g->natts);
		old = MemoryContextSwitchTo(ks_context);
		g->table = eo_internal_name(get_rel_name(g->relid));
		ks_check_direct(g);
		MemoryContextSwitchTo(old);
	}
	store.gens_complete = true;
}

/* Read the registry (SPI, as the owner) into gens[]. */
static void
ks_read_registry(void)
{
	Datum		values[1] = {Int32GetDatum(0)};
	Oid			argtypes[1] = {INT4OID};
	MemoryContext old;
	EoIdentity	saved;
	int			rc;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&saved);
	if (store.gens_plan == NULL)
		store.gens_plan = eo_prepare_kept("SELECT gen, relid FROM eo_internal.eo_generations"
										  " WHERE state OPERATOR(pg_catalog.=) ANY ('{c,o}')"
										  " AND gen OPERATOR(pg_catalog.>) $1 ORDER BY gen DESC",
										  1, argtypes);
	rc = SPI_execute_snapshot(store.gens_plan, values, NULL, GetLatestSnapshot(),
							  InvalidSnapshot, true, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "eo: the key store's registry could not be read");
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
	}
	store.ngens = (int) SPI_processed;
	MemoryContextSwitchTo(old);
	eo_restore_identity(&saved);
	SPI_finish();
}

/*
 * Make the list of live generations current and lock their tables for
 * this transaction: read the registry with the latest snapshot (the
 * caller's lock on the registry makes that the list in force), lock every
 * table before it is opened, and read again if an invalidation arrived
 * meanwhile (a lock newly taken lets them in).  A generation retired and
 * dropped between the read and the lock is then gone from the list, never
 * opened by an OID that no longer exists (generations.c's protocol).
 */
static void
ks_load_generations(void)
{
	for (;;)
	{
		bool		fresh = !store.gens_valid || !store.gens_complete;

		if (fresh)
		{
			store.gens_valid = true;
			store.gens_complete = false;	/* until every member is filled in */
			ks_forget_generations();
			ks_read_registry();
		}
		for (int i = 0; i < store.ngens; i++)
			LockRelationOid(store.gens[i].relid, AccessShareLock);
		if (fresh && store.gens_valid)
			ks_fill_generations();
		if (store.gens_valid)
			return;
	}
}

/*
 * Does the key store still exist?  False once the extension was dropped
 * (pending.c: a transaction that made deferred claims, then dropped eo).
 */
bool
eo_ks_exists(void)
{
	if (store.loaded &&
		SearchSysCacheExists1(RELOID, ObjectIdGetDatum(store.registry_relid)))
		return true;
	return eo_catalog_load(true);
}

/*
 * Make the first generation unless one exists: under a lock (SHARE UPDATE
 * EXCLUSIVE on the registry, which writers' ROW EXCLUSIVE does not
 * conflict with) that lets one maker at a time look and make it.
 */
static void
ks_make_first_generation_locked(void)
{
	EoIdentity	saved;

	LockRelationOid(store.registry_relid, ShareUpdateExclusiveLock);
	AcceptInvalidationMessages();
	store.gens_valid = false;
	ks_load_generations();
	if (store.ngens > 0)
		return;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&saved);
	eo_gen_start(&store.genset);
	eo_restore_identity(&saved);
	SPI_finish();
	CommandCounterIncrement();
	store.gens_valid = false;
	ks_load_generations();
}

/* The helper process's step (worker.c): a transaction of its own. */
void
eo_ks_make_first_generation(void)
{
	eo_ks_begin(EO_KS_MAINTAIN);
	ks_make_first_generation_locked();
}

/*
 * No generation was ever made (a new installation, or one restored from a
 * dump of one): the first writer has one made, by a helper process in a
 * transaction of its own, so that no claim waits on this transaction.  If
 * no helper can run (no background worker slot free, or eo was installed
 * in this very transaction, invisible to others), the writer makes it in
 * its own transaction.  Maintenance never makes it, so that a worker pass
 * during a pg_restore does not make what the restore brings.
 */
static void
ks_start(void)
{
	if (eo_run_helper("eo_first_generation_main", "eo first generation"))
	{
		AcceptInvalidationMessages();
		store.gens_valid = false;
		ks_load_generations();
		if (store.ngens > 0)
			return;
	}
	ks_make_first_generation_locked();
}

/*
 * Start a series of row calls: take the registry lock of generations.c's
 * protocol (ROW EXCLUSIVE if new keys may be inserted, else ACCESS SHARE;
 * held to the end of the transaction) and make sure the list of live
 * generations is current.
 */
void
eo_ks_begin(EoKsMode mode)
{
	if (!store.loaded ||
		!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(store.registry_relid)))
		ks_load_static();

	LockRelationOid(store.registry_relid,
					mode == EO_KS_READ ? AccessShareLock : RowExclusiveLock);
	store.mode = mode;

	/*
	 * A lock this transaction already holds is granted without looking at
	 * invalidations; look anyway, so that every call sees the generations
	 * that were live when it started, even in a long transaction.
	 */
	AcceptInvalidationMessages();
	ks_load_generations();
	if (store.ngens == 0 && mode == EO_KS_WRITE)
		ks_start();
}

/*
 * Start a series of maintenance calls: eo_ks_begin, then connect SPI and
 * act as the table owner.  An error before eo_ks_close() needs no cleanup
 * here: (sub)transaction abort restores the user and closes SPI.
 */
void
eo_ks_open(EoKsMode mode)
{
	eo_ks_begin(mode);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&caller_identity);
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

/* ---- the key lock ---- */

/* Keys without a scope (0) hash as they did before scopes. */
static void
ks_key_locktag(LOCKTAG *tag, const text *key, int32 scope)
{
	uint64		h = DatumGetUInt64(hash_any_extended((const unsigned char *) VARDATA_ANY(key),
													 VARSIZE_ANY_EXHDR(key), (uint64) scope));

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 EO_KEY_LOCK_FIELD4);
}

/*
 * Take the lock that every inserter of a new key holds while it looks the
 * key up and inserts it; a transaction-level lock, so abort or a crash
 * releases it.  Two keys with the same 64-bit hash merely share a lock.
 */
void
eo_ks_lock_key(const text *key, int32 scope)
{
	LOCKTAG		tag;

	ks_key_locktag(&tag, key, scope);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}

void
eo_ks_unlock_key(const text *key, int32 scope)
{
	LOCKTAG		tag;

	ks_key_locktag(&tag, key, scope);
	LockRelease(&tag, ExclusiveLock, false);
}

/* ---- reading rows ---- */

/* A copy of varlena column `col` in the current memory context, or NULL. */
static struct varlena *
ks_copy_varlena(TupleTableSlot *slot, int col)
{
	if (slot->tts_isnull[col - 1])
		return NULL;
	return PG_DETOAST_DATUM_COPY(slot->tts_values[col - 1]);
}

/* The recovery point and redrive columns, absent from a 0.2.0 table. */
static void
ks_read_progress(TupleTableSlot *slot, EoKey *row)
{
	bool		wide = slot->tts_tupleDescriptor->natts >= KEY_NATTS;

	row->recovery_point = wide ? (text *) ks_copy_varlena(slot, COL_RECOVERY_POINT) : NULL;
	row->recovery_state = wide ? (Jsonb *) ks_copy_varlena(slot, COL_RECOVERY_STATE) : NULL;
	row->attempts_base = wide && !slot->tts_isnull[COL_ATTEMPTS_BEFORE_REDRIVE - 1] ?
		DatumGetInt32(slot->tts_values[COL_ATTEMPTS_BEFORE_REDRIVE - 1]) : 0;
}

/* The row in `slot` (all attributes deformed) as an EoKey. */
static void
ks_read_slot(TupleTableSlot *slot, EoKey *row)
{
	Datum	   *v = slot->tts_values;
	bool	   *n = slot->tts_isnull;
	bool		should_free;
	HeapTuple	tuple = ExecFetchSlotHeapTuple(slot, false, &should_free);

	row->owner = DatumGetObjectId(v[COL_OWNER - 1]);
	row->state = DatumGetChar(v[COL_STATE - 1]);
	row->fingerprint = (text *) ks_copy_varlena(slot, COL_FINGERPRINT);
	row->result = (Jsonb *) ks_copy_varlena(slot, COL_RESULT);
	row->attempts = DatumGetInt32(v[COL_ATTEMPTS - 1]);
	row->has_token = !n[COL_LEASE_TOKEN - 1];
	row->lease_token = row->has_token ? DatumGetInt64(v[COL_LEASE_TOKEN - 1]) : 0;
	row->has_expiry = !n[COL_LEASE_EXPIRES_AT - 1];
	row->lease_expires_at = row->has_expiry ?
		DatumGetTimestampTz(v[COL_LEASE_EXPIRES_AT - 1]) : 0;
	row->last_error = (text *) ks_copy_varlena(slot, COL_LAST_ERROR);
	row->created_at = DatumGetTimestampTz(v[COL_CREATED_AT - 1]);
	row->updated_at = DatumGetTimestampTz(v[COL_UPDATED_AT - 1]);
	ks_read_progress(slot, row);
	row->expired = false;		/* a full record, not a tombstone */
	row->has_fp_hash = false;
	row->xmin = HeapTupleHeaderGetXmin(tuple->t_data);
	row->tid = slot->tts_tid;
	if (should_free)
		heap_freetuple(tuple);
}

/*
 * Look (`key`, `scope`) up in generation `g` through its unique index.  With a dirty
 * snapshot, *busy_xid is set if the version found is being written by
 * another transaction still in progress (the caller waits for it).
 */
static bool
ks_fetch(Generation *g, text *key, int32 scope, Snapshot snapshot, EoKey *row,
		 TransactionId *busy_xid)
{
	/*
	 * In the current generation a writer takes the lock its insertion
	 * will take (at once, or at commit for a deferred claim): one lock
	 * each for the table and its index, not two.  Nothing waits for
	 * ROW EXCLUSIVE on a generation (switching is decided on the
	 * registry's lock), and a lookup that finds the key only holds it
	 * a little longer than needed, to its transaction's end.
	 */
	LOCKMODE	lockmode = store.mode == EO_KS_WRITE && g == &store.gens[0] ?
		RowExclusiveLock : AccessShareLock;
	Relation	heap = table_open(g->relid, lockmode);
	Relation	index = index_open(g->key_index, lockmode);
	TupleTableSlot *slot = table_slot_create(heap, NULL);
	IndexScanDesc scan;
	ScanKeyData skey[2];
	bool		found;

	ScanKeyEntryInitialize(&skey[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   index->rd_indcollation[0], F_TEXTEQ, PointerGetDatum(key));
	ScanKeyEntryInitialize(&skey[1], 0, 2, BTEqualStrategyNumber, InvalidOid,
						   InvalidOid, F_INT4EQ, Int32GetDatum(scope));
	scan = eo_index_beginscan(heap, index, snapshot, 2, 0);
	index_rescan(scan, skey, 2, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	if (found)
	{
		slot_getallattrs(slot);
		ks_read_slot(slot, row);
		row->gen = g->gen;
		row->key = key;
		row->scope = scope;
		if (busy_xid != NULL)
			*busy_xid = TransactionIdIsValid(snapshot->xmin) ? snapshot->xmin :
				snapshot->xmax;
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, NoLock);
	table_close(heap, NoLock);
	return found;
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
eo_ks_find(text *key, int32 scope, EoKey *row)
{
	Snapshot	snapshot = GetLatestSnapshot();

	for (int i = 0; i < store.ngens; i++)
		if (ks_fetch(&store.gens[i], key, scope, snapshot, row, NULL))
		{
			ks_check_serializable(row);
			return true;
		}
	return false;
}

/*
 * Wait until a lock on `tag` in `mode` is free, unless a prepared
 * transaction holds it: false then, at once.  In steps of EO_LOCK_WAIT_MS,
 * so that a holder that prepares while we wait is noticed.  With `keep`
 * the lock is kept (the key lock, let go later by eo_ks_unlock_key),
 * else only waited for (a transaction's lock).
 */
static bool
ks_wait_unless_prepared(const LOCKTAG *tag, LOCKMODE mode, bool keep)
{
	TimestampTz start = GetCurrentTimestamp();

	for (;;)
	{
		int			step = EO_LOCK_WAIT_MS;

		/* the caller's lock_timeout bounds the whole wait, as for one lock */
		if (LockTimeout > 0)
		{
			long		left = LockTimeout -
				TimestampDifferenceMilliseconds(start, GetCurrentTimestamp());

			if (left <= 0)
				ereport(ERROR,
						(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
						 errmsg("canceling statement due to lock timeout"),
						 errdetail("eo_status waited for a transaction that is claiming or changing the key.")));
			step = Min(step, (int) left);
		}
		/* a lock it waited for is the transaction's, so keep takes it anew */
		if (eo_lock_wait_within(tag, mode, step) &&
			(!keep || LockAcquire(tag, mode, false, true) != LOCKACQUIRE_NOT_AVAIL))
			return true;
		if (eo_lock_held_by_prepared(tag, mode))
			return false;
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Wait for transaction `xid`, which is writing a row we found; false if it
 * is a prepared one and `in_doubt` is not NULL (the caller will not wait
 * for it), having set *in_doubt.
 */
static bool
ks_wait_for_writer(TransactionId xid, bool *in_doubt)
{
	LOCKTAG		tag;

	if (in_doubt == NULL)
	{
		XactLockTableWait(xid, NULL, NULL, XLTW_None);
		return true;
	}
	/*
	 * The top-level transaction's lock: a subtransaction's is let go at its
	 * commit, and waiting on it would return at once while the row stays
	 * busy (XactLockTableWait walks up for the same reason).  `xid` was in
	 * progress after this statement's snapshot was taken, so pg_subtrans
	 * still knows it.
	 */
	SET_LOCKTAG_TRANSACTION(tag, SubTransGetTopmostTransaction(xid));
	if (ks_wait_unless_prepared(&tag, ShareLock, false))
		return true;
	*in_doubt = true;
	return false;
}

/* The key lock, waiting for it, or (with `in_doubt`) not for a prepared holder. */
static bool
ks_lock_key_for(const text *key, int32 scope, bool *in_doubt)
{
	LOCKTAG		tag;

	if (in_doubt == NULL)
	{
		eo_ks_lock_key(key, scope);
		return true;
	}
	ks_key_locktag(&tag, key, scope);
	if (ks_wait_unless_prepared(&tag, ExclusiveLock, true))
		return true;
	*in_doubt = true;
	return false;
}

/*
 * Like eo_ks_find, but a version that another transaction is writing is
 * waited for (as a unique index makes an inserter wait) and the lookup
 * starts again.  Used by inserters of new keys, under the key lock, which
 * is let go while waiting: the writer may want it (to claim its own key
 * again in the same transaction, which finds its row only after taking
 * the lock), and holding it would deadlock.  With `in_doubt` not NULL
 * (eo_status), a prepared writer is not waited for: false, *in_doubt
 * set, the key lock not held.
 */
static bool
ks_find_settled(text *key, int32 scope, EoKey *row, bool *in_doubt)
{
	for (;;)
	{
		SnapshotData dirty;
		TransactionId busy = InvalidTransactionId;
		bool		found = false;

		InitDirtySnapshot(dirty);
		for (int i = 0; i < store.ngens && !found; i++)
			found = ks_fetch(&store.gens[i], key, scope, &dirty, row, &busy);
		if (!found)
			return false;
		if (!TransactionIdIsValid(busy))
		{
			ks_check_serializable(row);
			return true;
		}
		eo_ks_unlock_key(key, scope);
		if (!ks_wait_for_writer(busy, in_doubt))
			return false;
		CHECK_FOR_INTERRUPTS();
		if (!ks_lock_key_for(key, scope, in_doubt))
			return false;
	}
}

/*
 * The key's row once no transaction is claiming or changing it any more:
 * a transaction that claimed a new key holds the key lock until it ends
 * (its row goes in at commit, pending.c), and one that changed a row has
 * it as its writer; both are waited for.  What eo_status answers, so that
 * a client that lost its connection during COMMIT never hears "no row"
 * for a claim whose commit is still running.  Not a prepared transaction:
 * its outcome may be hours away (a coordinator that is gone), so eo
 * answers false with *in_doubt set, the key's fate unknown until COMMIT
 * PREPARED or ROLLBACK PREPARED.  (On a standby no claim is in flight:
 * the primary's locks are not there.)
 */
bool
eo_ks_find_settled(text *key, int32 scope, EoKey *row, bool *in_doubt)
{
	bool		found;

	*in_doubt = false;
	if (RecoveryInProgress())
		return eo_ks_find(key, scope, row);
	if (!ks_lock_key_for(key, scope, in_doubt))
		return false;
	found = ks_find_settled(key, scope, row, in_doubt);
	if (!*in_doubt)
		eo_ks_unlock_key(key, scope);
	return found;
}

/* ---- writing rows ---- */

/*
 * `row` as the values of a tuple of a key table with `natts` columns.  A
 * 0.2.0 table has no place for a recovery point or a redrive.
 */
static void
ks_fill_values(Datum *v, bool *n, const EoKey *row, int natts)
{
	memset(n, 0, natts * sizeof(bool));
	v[COL_KEY - 1] = PointerGetDatum(row->key);
	v[COL_OWNER - 1] = ObjectIdGetDatum(row->owner);
	v[COL_STATE - 1] = CharGetDatum(row->state);
	n[COL_FINGERPRINT - 1] = row->fingerprint == NULL;
	v[COL_FINGERPRINT - 1] = PointerGetDatum(row->fingerprint);
	n[COL_RESULT - 1] = row->result == NULL;
	v[COL_RESULT - 1] = PointerGetDatum(row->result);
	v[COL_ATTEMPTS - 1] = Int32GetDatum(row->attempts);
	n[COL_LEASE_TOKEN - 1] = !row->has_token;
	v[COL_LEASE_TOKEN - 1] = Int64GetDatum(row->lease_token);
	n[COL_LEASE_EXPIRES_AT - 1] = !row->has_expiry;
	v[COL_LEASE_EXPIRES_AT - 1] = TimestampTzGetDatum(row->lease_expires_at);
	n[COL_LAST_ERROR - 1] = row->last_error == NULL;
	v[COL_LAST_ERROR - 1] = PointerGetDatum(row->last_error);
	v[COL_CREATED_AT - 1] = TimestampTzGetDatum(row->created_at);
	v[COL_UPDATED_AT - 1] = TimestampTzGetDatum(row->updated_at);
	v[COL_SCOPE - 1] = Int32GetDatum(row->scope);
	if (natts < KEY_NATTS)
	{
		if (row->recovery_point != NULL || row->recovery_state != NULL || row->attempts_base != 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("idempotency key \"%s\" is in a key generation made by eo 0.2.0",
							text_to_cstring(row->key)),
					 errdetail("That table has no columns for recovery points and redrives."),
					 errhint("Run ALTER EXTENSION eo UPDATE; a generation restored from a 0.2.0 dump keeps its shape until it retires.")));
		return;
	}
	n[COL_RECOVERY_POINT - 1] = row->recovery_point == NULL;
	v[COL_RECOVERY_POINT - 1] = PointerGetDatum(row->recovery_point);
	n[COL_RECOVERY_STATE - 1] = row->recovery_state == NULL;
	v[COL_RECOVERY_STATE - 1] = PointerGetDatum(row->recovery_state);
	n[COL_ATTEMPTS_BEFORE_REDRIVE - 1] = row->attempts_base == 0;
	v[COL_ATTEMPTS_BEFORE_REDRIVE - 1] = Int32GetDatum(row->attempts_base);
}

/* `row` as the values of a key-table tuple in `slot`. */
static void
ks_fill_slot(TupleTableSlot *slot, const EoKey *row)
{
	ExecClearTuple(slot);
	ks_fill_values(slot->tts_values, slot->tts_isnull, row,
				   slot->tts_tupleDescriptor->natts);
	ExecStoreVirtualTuple(slot);
}

/* What one write needs: the table, its indexes and a slot. */
typedef struct RowWrite
{
	Relation	heap;
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *slot;
	MemoryContext caller_context;	/* the write allocates in the EState's */
} RowWrite;

static void
ks_write_begin(RowWrite *w, Generation *g, const EoKey *row)
{
	w->heap = table_open(g->relid, RowExclusiveLock);
	w->estate = CreateExecutorState();
	w->caller_context = MemoryContextSwitchTo(w->estate->es_query_cxt);
	w->rri = makeNode(ResultRelInfo);
	InitResultRelInfo(w->rri, w->heap, 0, NULL, 0);
	w->slot = ExecInitExtraTupleSlot(w->estate, RelationGetDescr(w->heap),
									 &TTSOpsVirtual);
	ks_fill_slot(w->slot, row);
}

/* Index the new version in `w->slot` (every index, or the summarizing ones). */
static void
ks_write_indexes(RowWrite *w, bool only_summarizing)
{
	ExecOpenIndices(w->rri, false);
	eo_insert_index_tuples(w->rri, w->slot, w->estate, only_summarizing);
	ExecCloseIndices(w->rri);
}

/*
 * Finish a write.  The command counter moves on, as after any SQL
 * statement, so that the next lookup in this transaction sees the row.
 */
static void
ks_write_end(RowWrite *w)
{
	ExecResetTupleTable(w->estate->es_tupleTable, false);
	MemoryContextSwitchTo(w->caller_context);
	FreeExecutorState(w->estate);
	table_close(w->heap, NoLock);
	CommandCounterIncrement();
}

/* One index entry of the heap tuple `tup`, without the executor. */
static void
ks_index_entry(Oid indexid, IndexInfo *ii, Relation heap, HeapTuple tup,
			   Datum *values, bool *nulls, IndexUniqueCheck check)
{
	Relation	idx = index_open(indexid, RowExclusiveLock);

	(void) index_insert(idx, values, nulls, &tup->t_self, heap, check, false, ii);
	index_close(idx, NoLock);
}

/*
 * Insert `row` into a generation whose indexes are the template's
 * (ks_check_direct): the heap tuple, its (key, scope) entry (unique:
 * a duplicate is an error, as from the executor) and, for a row with a
 * lease or retry time, its lease_expires_at entry.  The executor's set-up
 * for one row (an EState, a ResultRelInfo, both indexes opened, their
 * IndexInfos built and the partial index's predicate compiled) was most of
 * what a new key cost at commit.
 */
static void
ks_insert_direct(Generation *g, EoKey *row)
{
	Relation	heap = table_open(g->relid, RowExclusiveLock);
	Datum		values[KEY_NATTS];
	bool		nulls[KEY_NATTS];
	Datum		ivalues[2];
	bool		inulls[2] = {false, false};
	HeapTuple	tup;

	ks_fill_values(values, nulls, row, g->natts);
	tup = heap_form_tuple(RelationGetDescr(heap), values, nulls);
	heap_insert(heap, tup, GetCurrentCommandId(true), 0, NULL);
	ivalues[0] = values[COL_KEY - 1];
	ivalues[1] = values[COL_SCOPE - 1];
	ks_index_entry(g->key_index, g->key_ii, heap, tup, ivalues, inulls, UNIQUE_CHECK_YES);
	if (row->has_expiry)
	{
		ivalues[0] = values[COL_LEASE_EXPIRES_AT - 1];
		ks_index_entry(g->lease_index, g->lease_ii, heap, tup, ivalues, inulls, UNIQUE_CHECK_NO);
	}
	row->gen = g->gen;
	row->tid = tup->t_self;
	row->xmin = GetCurrentTransactionId();
	heap_freetuple(tup);
	table_close(heap, NoLock);
	CommandCounterIncrement();
}

/* Insert `row` into generation `g`; row->gen and row->tid say where. */
static void
ks_insert_row(Generation *g, EoKey *row)
{
	RowWrite	w;

	if (g->direct)
	{
		ks_insert_direct(g, row);
		return;
	}
	ks_write_begin(&w, g, row);
	table_tuple_insert(w.heap, w.slot, GetCurrentCommandId(true), 0, NULL);
	ks_write_indexes(&w, false);
	row->gen = g->gen;
	row->tid = w.slot->tts_tid;
	row->xmin = GetCurrentTransactionId();
	ks_write_end(&w);
}

/*
 * Insert a new key into the current generation, under the key lock; false
 * if a live generation holds the key (after waiting for its writer).
 * On success row->gen and row->tid say where the row is.
 */
bool
eo_ks_insert(EoKey *row)
{
	EoKey		found;
	bool		inserted = false;

	eo_ks_lock_key(row->key, row->scope);
	if (!ks_find_settled(row->key, row->scope, &found, NULL))
	{
		ks_insert_row(&store.gens[0], row);
		inserted = true;
	}
	eo_ks_unlock_key(row->key, row->scope);
	return inserted;
}

/*
 * Insert the row of a deferred claim, whose key lock this transaction has
 * held since it found no row (pending.c), into the current generation.
 */
void
eo_ks_insert_held(EoKey *row)
{
	ks_insert_row(&store.gens[0], row);
}

/*
 * The key's tombstone (tombstones.c), if it has one, as a row: no result,
 * expired set.  Looked for under the key lock after no live generation had
 * the key: a generation retires and its keys become tombstones in one
 * transaction, so the key is in one or the other.
 */
static bool
ks_find_tombstone(const EoKey *row, EoKey *found)
{
	EoTomb		tomb;

	if (!eo_ts_find(row->scope, row->key, &tomb))
		return false;
	memset(found, 0, sizeof(*found));
	found->key = row->key;
	found->scope = row->scope;
	found->owner = tomb.owner;	/* the caller checks it, as for a row */
	found->state = tomb.state;
	found->expired = true;
	found->has_fp_hash = tomb.has_fp;
	found->fp_hash = tomb.fp;
	return true;
}

/*
 * The tombstone of a key that no live generation holds (the caller looked),
 * as a row.  For eo_fail of an unknown key: a tombstone is the key finished,
 * as its row was.
 */
bool
eo_ks_find_tombstone(text *key, int32 scope, EoKey *found)
{
	EoKey		row;

	memset(&row, 0, sizeof(row));
	row.key = key;
	row.scope = scope;
	return ks_find_tombstone(&row, found);
}

/*
 * Claim a new key: insert `row` unless a live generation holds the key, in
 * which case `found` is that row, or a tombstone stands for it (`found` is
 * then the tombstone, found->expired set).  With `defer`, nothing is
 * written: the key lock stays held to the end of the transaction and the
 * caller writes the row later with eo_ks_insert_held (EO_KS_DEFERRED).
 */
EoKsClaim
eo_ks_claim(EoKey *row, EoKey *found, bool defer)
{
	eo_ks_lock_key(row->key, row->scope);
	if (ks_find_settled(row->key, row->scope, found, NULL) || ks_find_tombstone(row, found))
	{
		eo_ks_unlock_key(row->key, row->scope);
		return EO_KS_FOUND;
	}
	if (defer)
	{
		row->gen = store.gens[0].gen;
		return EO_KS_DEFERRED;
	}
	ks_insert_row(&store.gens[0], row);
	eo_ks_unlock_key(row->key, row->scope);
	return EO_KS_INSERTED;
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

/*
 * Rewrite the row version at row->gen, row->tid (as eo_ks_find or the last
 * write returned it), waiting for a concurrent writer of it first.  False
 * if another transaction changed, moved or removed it: the caller looks
 * again.  Under REPEATABLE READ and SERIALIZABLE that is a serialization
 * failure, as it is for an UPDATE.  On success row->tid is the new version.
 */
bool
eo_ks_update(EoKey *row)
{
	RowWrite	w;
	TM_Result	result;
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	EoUpdateIndexes update_indexes;

	ks_write_begin(&w, ks_generation(row->gen), row);
	result = table_tuple_update(w.heap, &row->tid, w.slot, GetCurrentCommandId(true),
								InvalidSnapshot, InvalidSnapshot, true, &tmfd,
								&lockmode, &update_indexes);
	switch (result)
	{
		case TM_Ok:
			if (EO_UPDATE_NEEDS_INDEXES(update_indexes))
				ks_write_indexes(&w, EO_UPDATE_ONLY_SUMMARIZING(update_indexes));
			row->tid = w.slot->tts_tid;
			row->xmin = GetCurrentTransactionId();
			ks_write_end(&w);
			return true;
		case TM_Updated:
		case TM_Deleted:
			if (IsolationUsesXactSnapshot())
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("could not serialize access due to concurrent update")));
			ks_write_end(&w);
			return false;
		default:
			elog(ERROR, "eo: unexpected result %d updating key \"%s\"",
				 (int) result, text_to_cstring(row->key));
	}
	return false;				/* keep compiler quiet */
}

/*
 * A fencing token: strictly increasing, durable across crashes, and
 * across promotions (fencing.c).
 */
int64
eo_ks_next_token(void)
{
	return eo_fenced_nextval(store.token_seq_relid, EO_LEASE_EPOCH_SHIFT, EO_LEASE_MAX_EPOCH);
}

/* Whether `token` was issued before this server's timeline began. */
bool
eo_ks_token_from_earlier_timeline(int64 token)
{
	return eo_token_from_earlier_timeline(store.token_seq_relid, EO_LEASE_EPOCH_SHIFT, token);
}

/* Add to one of the running totals in eo_counters. */
static void
ks_count(const char *name, int64 n)
{
	Oid			argtypes[2] = {TEXTOID, INT8OID};
	Datum		values[2] = {CStringGetTextDatum(name), Int64GetDatum(n)};
	int			rc;

	rc = SPI_execute_with_args("UPDATE eo_internal.eo_counters SET value = value OPERATOR(pg_catalog.+) $2"
							   " WHERE name OPERATOR(pg_catalog.=) $1",
							   2, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "eo: counting %s failed: %s", name, SPI_result_code_string(rc));
}

/*
 * Reclaim expired leases of `g`: a failed attempt each, dead when the
 * attempts since the key's last redrive (if any) reach $2.
 */
static SPIPlanPtr
ks_reclaim_plan(Generation *g)
{
	Oid			argtypes[3] = {TIMESTAMPTZOID, INT4OID, INT4OID};
	const char *spent = g->natts >= KEY_NATTS ?
		"(k.attempts OPERATOR(pg_catalog.-) COALESCE(k.attempts_before_redrive, 0))" :
		"k.attempts";

	if (g->reclaim_plan == NULL)
		g->reclaim_plan = eo_prepare_kept(psprintf(
											  "UPDATE %1$s k SET"
											  " state = CASE WHEN %2$s OPERATOR(pg_catalog.>=) $2"
											  "   THEN 'x'::pg_catalog.\"char\" ELSE 'f' END,"
											  " lease_expires_at = CASE WHEN %2$s OPERATOR(pg_catalog.>=) $2"
											  "   THEN NULL ELSE $1 END,"
											  " last_error = 'lease expired', updated_at = $1"
											  " WHERE k.ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
											  "   SELECT ctid FROM %1$s"
											  "   WHERE lease_expires_at OPERATOR(pg_catalog.<) $1"
											  "     AND state OPERATOR(pg_catalog.=) 'p'"
											  "   LIMIT $3 FOR UPDATE SKIP LOCKED))"
											  " RETURNING k.state",
											  g->table, spent), 3, argtypes);
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
 * Call `fn` with each key of `f->scope` in the live generations that
 * matches `f`: in one of the states f->states, owned by a role f->caller
 * has the privileges of (as has_privs_of_role), a key that starts with
 * f->prefix (if set), last changed (updated_at) at or after f->since and
 * before f->before (each if set), until `fn` returns false.  Read through
 * a cursor per generation, newest first and by updated_at within one, so
 * that any number of keys takes bounded memory; its snapshot does not see
 * what `fn` changes.  With f->redrivable, a 0.2.0 generation
 * (ks_fill_values) is passed over: its keys cannot be redriven.  After
 * eo_ks_open: the cursor reads as the owner.
 */
/* A cursor over the keys of generation `g` that `f` matches. */
static Portal
ks_open_key_cursor(const Generation *g, const EoKeyFilter *f)
{
	Oid			argtypes[6] = {INT4OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, OIDOID, TEXTOID};
	Datum		values[6] = {Int32GetDatum(f->scope), PointerGetDatum(f->prefix),
		TimestampTzGetDatum(f->since), TimestampTzGetDatum(f->before),
	ObjectIdGetDatum(f->caller), CStringGetTextDatum(f->states)};
	/* a superuser's call also reaches the keys of roles dropped since */
	char		nulls[6] = {' ', f->prefix ? ' ' : 'n', f->has_since ? ' ' : 'n',
	f->has_before ? ' ' : 'n', superuser_arg(f->caller) ? 'n' : ' ', ' '};

	/*
	 * Keys of owners the caller has not the privileges of are left out here,
	 * not looked at one by one: what they are costs the caller nothing.
	 * The roles are listed once (a key's owner may have been dropped since,
	 * which pg_has_role on the key's owner would raise).
	 */
	return SPI_cursor_open_with_args(NULL, psprintf(
		"SELECT key, state, attempts, last_error, updated_at, lease_expires_at FROM %s"
		" WHERE state OPERATOR(pg_catalog.=) ANY ($6::pg_catalog.\"char\"[])"
		" AND scope OPERATOR(pg_catalog.=) $1"
		" AND ($2 IS NULL OR pg_catalog.starts_with(key, $2))"
		" AND ($3 IS NULL OR updated_at OPERATOR(pg_catalog.>=) $3)"
		" AND ($4 IS NULL OR updated_at OPERATOR(pg_catalog.<) $4)"
		" AND ($5 IS NULL OR owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY (ARRAY("
		"   SELECT r.oid FROM pg_catalog.pg_roles r"
		"   WHERE pg_catalog.pg_has_role($5, r.oid, 'USAGE'))))"
		" ORDER BY updated_at",
		g->table), 6, argtypes, values, nulls, true, 0);
}

/* One row of the cursor, copied into the current memory context. */
static EoListedKey *
ks_listed_key(HeapTuple tuple, TupleDesc desc)
{
	EoListedKey *k = palloc0(sizeof(EoListedKey));
	bool		isnull;
	Datum		d;

	k->key = DatumGetTextPCopy(SPI_getbinval(tuple, desc, 1, &isnull));
	k->state = DatumGetChar(SPI_getbinval(tuple, desc, 2, &isnull));
	k->attempts = DatumGetInt32(SPI_getbinval(tuple, desc, 3, &isnull));
	d = SPI_getbinval(tuple, desc, 4, &isnull);
	k->last_error = isnull ? NULL : DatumGetTextPCopy(d);
	k->updated_at = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 5, &isnull));
	d = SPI_getbinval(tuple, desc, 6, &isnull);
	k->has_expiry = !isnull;
	k->lease_expires_at = isnull ? 0 : DatumGetTimestampTz(d);
	return k;
}

void
eo_ks_each_key(const EoKeyFilter *f, bool (*fn) (const EoListedKey *key, void *arg), void *arg)
{
	MemoryContext batch = AllocSetContextCreate(CurrentMemoryContext, "eo listed keys",
												ALLOCSET_DEFAULT_SIZES);
	/* what `fn` allocates for one key (its row, detoasted) goes with it */
	MemoryContext each = AllocSetContextCreate(CurrentMemoryContext, "eo listed key",
											   ALLOCSET_DEFAULT_SIZES);
	bool		more = true;

	for (int i = 0; i < store.ngens && more; i++)
	{
		Portal		portal;

		if (f->redrivable && store.gens[i].natts < KEY_NATTS)
			continue;
		portal = ks_open_key_cursor(&store.gens[i], f);
		while (more)
		{
			MemoryContext old;
			List	   *keys = NIL;
			ListCell   *lc;

			SPI_cursor_fetch(portal, true, 1000);
			if (SPI_processed == 0)
				break;
			old = MemoryContextSwitchTo(batch);
			for (uint64 n = 0; n < SPI_processed; n++)
				keys = lappend(keys, ks_listed_key(SPI_tuptable->vals[n], SPI_tuptable->tupdesc));
			SPI_freetuptable(SPI_tuptable);
			foreach(lc, keys)
			{
				MemoryContextSwitchTo(each);
				more = fn((EoListedKey *) lfirst(lc), arg);
				MemoryContextReset(each);
				if (!more)
					break;
			}
			MemoryContextSwitchTo(old);
			MemoryContextReset(batch);
		}
		SPI_cursor_close(portal);
	}
	MemoryContextDelete(each);
	MemoryContextDelete(batch);
}

/* Generation `gen`'s table, schema-qualified and quoted. */
const char *
eo_ks_generation_table(int32 gen)
{
	return ks_generation(gen)->table;
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
