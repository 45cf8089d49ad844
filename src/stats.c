/*-------------------------------------------------------------------------
 * stats.c
 *	  Counters of what the claim functions refused or replayed, per
 *	  database, in shared memory (needs the preload): duplicates served,
 *	  fingerprint conflicts, stale lease tokens refused.
 *
 * Counting must cost a claim nothing it would notice and must not write:
 * an atomic add on a per-database slot found once per backend.  Counts are
 * not transactional (a duplicate served by a transaction that then rolled
 * back was still served) and start from zero when the server starts, like
 * PostgreSQL's cumulative statistics after a crash.  A database takes a
 * slot on its first count; when all are taken, the slot of a dropped
 * database is taken over; with 64 live databases counting, further ones
 * are not counted (eo_claim_stats() says so with NULLs).
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/syscache.h"

#include "eo.h"

#define EO_STATS_DATABASES 64

typedef struct DbCounters
{
	pg_atomic_uint32 dbid;		/* InvalidOid: free */
	pg_atomic_uint64 counts[EO_NSTATS];
} DbCounters;

static DbCounters *shared = NULL;
static DbCounters *mine = NULL;	/* this backend's database's slot */

PG_FUNCTION_INFO_V1(eo_claim_stats);

Size
eo_stats_shmem_size(void)
{
	return MAXALIGN(sizeof(DbCounters) * EO_STATS_DATABASES);
}

/* Under AddinShmemInitLock, from eo.c's shared memory start-up. */
void
eo_stats_shmem_init(void)
{
	bool		found;

	shared = ShmemInitStruct("eo claim counters", eo_stats_shmem_size(), &found);
	if (found)
		return;
	for (int i = 0; i < EO_STATS_DATABASES; i++)
	{
		pg_atomic_init_u32(&shared[i].dbid, InvalidOid);
		for (int c = 0; c < EO_NSTATS; c++)
			pg_atomic_init_u64(&shared[i].counts[c], 0);
	}
}

/*
 * Every slot taken: take over the slot of a database that was dropped,
 * its counts starting again from zero.  Called inside a transaction (the
 * catalog is read).
 */
static DbCounters *
take_dropped_slot(void)
{
	for (int i = 0; i < EO_STATS_DATABASES; i++)
	{
		uint32		old = pg_atomic_read_u32(&shared[i].dbid);

		if (SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(old)) ||
			!pg_atomic_compare_exchange_u32(&shared[i].dbid, &old, MyDatabaseId))
			continue;
		for (int c = 0; c < EO_NSTATS; c++)
			pg_atomic_write_u64(&shared[i].counts[c], 0);
		return &shared[i];
	}
	return NULL;
}

/* This database's slot, taking a free one if `claim`; NULL if none. */
static DbCounters *
my_slot(bool claim)
{
	if (shared == NULL)
		return NULL;
	if (mine != NULL && pg_atomic_read_u32(&mine->dbid) == MyDatabaseId)
		return mine;
	mine = NULL;
	for (int i = 0; i < EO_STATS_DATABASES && mine == NULL; i++)
	{
		uint32		expected = InvalidOid;

		if (pg_atomic_read_u32(&shared[i].dbid) == MyDatabaseId)
			mine = &shared[i];
		else if (claim &&
				 pg_atomic_compare_exchange_u32(&shared[i].dbid, &expected, MyDatabaseId))
			mine = &shared[i];
	}
	if (mine == NULL && claim)
		mine = take_dropped_slot();
	return mine;
}

void
eo_stat_count(EoStat stat)
{
	DbCounters *slot = my_slot(true);

	if (slot != NULL)
		pg_atomic_fetch_add_u64(&slot->counts[stat], 1);
}

/*
 * eo_claim_stats(): this database's counters since the server started;
 * NULLs without the preload or when every slot is taken by other
 * databases.
 */
Datum
eo_claim_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[EO_NSTATS];
	bool		nulls[EO_NSTATS];
	DbCounters *slot = my_slot(true);

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "eo: eo_claim_stats must return a composite type");
	tupdesc = BlessTupleDesc(tupdesc);
	for (int c = 0; c < EO_NSTATS; c++)
	{
		nulls[c] = slot == NULL;
		values[c] = slot == NULL ? (Datum) 0 :
			Int64GetDatum((int64) pg_atomic_read_u64(&slot->counts[c]));
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
