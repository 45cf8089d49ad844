/*-------------------------------------------------------------------------
 * stats.c
 *	  Cumulative counters per database, in shared memory (needs the
 *	  preload): what the claim functions answered, replayed or refused, and
 *	  what maintenance passes did.  Behind the views eo_metrics.claims,
 *	  eo_metrics.maintenance and the older eo_claim_stats().
 *
 * Counting must cost a claim nothing it would notice and must not write:
 * an atomic add on a per-database slot found once per backend.  Counts are
 * not transactional (a claim whose transaction then rolled back was still
 * answered) and count calls that returned, not errors.  Like
 * pg_stat_statements, the counters are written to pg_stat/eo.stat when
 * the server shuts down cleanly and read back when it starts; after a
 * crash they start from zero (the file is removed once read).  A database
 * takes a slot on its first count; when all are taken, the slot of a
 * dropped database is taken over; with 64 live databases counting,
 * further ones are not counted (the views then show NULLs).
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "access/xact.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "eo.h"

#define EO_STATS_DATABASES 64
#define EO_STATS_FILE PGSTAT_STAT_PERMANENT_DIRECTORY "/eo.stat"
#define EO_STATS_FILE_TMP EO_STATS_FILE ".tmp"
#define EO_STATS_MAGIC 0x454f5301	/* "EOS" and the file format's version */

typedef struct DbCounters
{
	pg_atomic_uint32 dbid;		/* InvalidOid: free */
	pg_atomic_uint64 since;		/* TimestampTz: counting started */
	pg_atomic_uint64 last_pass_end;	/* TimestampTz; 0: none yet */
	pg_atomic_uint64 last_pass_usecs;
	pg_atomic_uint64 counts[EO_NSTATS];
} DbCounters;

/* One database's counters in the file. */
typedef struct SavedCounters
{
	Oid			dbid;
	TimestampTz since;
	TimestampTz last_pass_end;
	int64		last_pass_usecs;
} SavedCounters;

static DbCounters *shared = NULL;
static DbCounters *mine = NULL;	/* this backend's database's slot */

PG_FUNCTION_INFO_V1(eo_claim_stats);
PG_FUNCTION_INFO_V1(eo_metrics_claims);
PG_FUNCTION_INFO_V1(eo_metrics_keys_redriven);
PG_FUNCTION_INFO_V1(eo_metrics_maintenance);

Size
eo_stats_shmem_size(void)
{
	return MAXALIGN(sizeof(DbCounters) * EO_STATS_DATABASES);
}

static void
reset_slot(DbCounters *slot, Oid dbid, TimestampTz since)
{
	pg_atomic_write_u32(&slot->dbid, dbid);
	pg_atomic_write_u64(&slot->since, (uint64) since);
	pg_atomic_write_u64(&slot->last_pass_end, 0);
	pg_atomic_write_u64(&slot->last_pass_usecs, 0);
	for (int c = 0; c < EO_NSTATS; c++)
		pg_atomic_write_u64(&slot->counts[c], 0);
}

/* ---- the file: read at start-up, written at a clean shutdown ---- */

static bool
read_exact(FILE *file, void *buf, size_t len)
{
	return fread(buf, 1, len, file) == len;
}

/* A database's entry is valid: a database, not one seen before. */
static bool
new_database(Oid dbid, int loaded)
{
	if (dbid == InvalidOid)
		return false;
	for (int i = 0; i < loaded; i++)
		if (pg_atomic_read_u32(&shared[i].dbid) == dbid)
			return false;
	return true;
}

/* Read one database's entry into slot `slot`; false if it is not whole. */
static bool
read_db(FILE *file, uint32 ncounters, DbCounters *slot, int loaded)
{
	SavedCounters saved;

	if (!read_exact(file, &saved, sizeof(saved)) || !new_database(saved.dbid, loaded))
		return false;
	reset_slot(slot, saved.dbid, saved.since);
	pg_atomic_write_u64(&slot->last_pass_end, (uint64) saved.last_pass_end);
	pg_atomic_write_u64(&slot->last_pass_usecs, (uint64) saved.last_pass_usecs);
	for (uint32 c = 0; c < ncounters; c++)
	{
		uint64		value;

		if (!read_exact(file, &value, sizeof(value)) || value > PG_INT64_MAX)
			return false;
		if (c < EO_NSTATS)		/* a later version's extra counters are dropped */
			pg_atomic_write_u64(&slot->counts[c], value);
	}
	return true;
}

/*
 * Read the counters the last shutdown wrote, then remove the file so that
 * a crash later starts from zero.  A file that does not match (another
 * format, cut short, a database twice) is ignored whole, with a LOG line.
 */
static void
load_counters(void)
{
	FILE	   *file = AllocateFile(EO_STATS_FILE, PG_BINARY_R);
	uint32		header[3];		/* magic, counters per database, databases */
	int			loaded = 0;
	bool		ok;

	if (file == NULL)
		return;					/* first start, or after a crash */
	ok = read_exact(file, header, sizeof(header)) && header[0] == EO_STATS_MAGIC &&
		header[1] <= 1024 && header[2] <= EO_STATS_DATABASES;
	while (ok && loaded < (int) header[2])
	{
		ok = read_db(file, header[1], &shared[loaded], loaded);
		loaded++;
	}
	if (!ok)
	{
		ereport(LOG,
				(errmsg("eo: ignoring counters file \"%s\": it is not in the expected format",
						EO_STATS_FILE)));
		for (int i = 0; i < loaded; i++)	/* the partly read one too */
			reset_slot(&shared[i], InvalidOid, 0);
	}
	FreeFile(file);
	unlink(EO_STATS_FILE);
}

static bool
write_db(FILE *file, DbCounters *slot)
{
	SavedCounters saved;

	memset(&saved, 0, sizeof(saved));	/* no stack bytes in the padding */
	saved.dbid = pg_atomic_read_u32(&slot->dbid);
	saved.since = (TimestampTz) pg_atomic_read_u64(&slot->since);
	saved.last_pass_end = (TimestampTz) pg_atomic_read_u64(&slot->last_pass_end);
	saved.last_pass_usecs = (int64) pg_atomic_read_u64(&slot->last_pass_usecs);
	if (fwrite(&saved, sizeof(saved), 1, file) != 1)
		return false;
	for (int c = 0; c < EO_NSTATS; c++)
	{
		uint64		value = pg_atomic_read_u64(&slot->counts[c]);

		if (fwrite(&value, sizeof(value), 1, file) != 1)
			return false;
	}
	return true;
}

/*
 * on_shmem_exit in the postmaster: at a clean shutdown (code 0) write the
 * counters of every database that has some, through a temporary file and
 * a rename so that a half-written file is never read.
 */
static void
save_counters(int code, Datum arg)
{
	FILE	   *file;
	uint32		header[3] = {EO_STATS_MAGIC, EO_NSTATS, 0};
	bool		ok;

	if (code != 0 || shared == NULL)
		return;
	for (int i = 0; i < EO_STATS_DATABASES; i++)
		if (pg_atomic_read_u32(&shared[i].dbid) != InvalidOid)
			header[2]++;
	file = AllocateFile(EO_STATS_FILE_TMP, PG_BINARY_W);
	if (file == NULL)
		goto fail;
	ok = fwrite(header, sizeof(header), 1, file) == 1;
	for (int i = 0; ok && i < EO_STATS_DATABASES; i++)
		if (pg_atomic_read_u32(&shared[i].dbid) != InvalidOid)
			ok = write_db(file, &shared[i]);
	if (FreeFile(file) != 0 || !ok)
		goto fail;
	(void) durable_rename(EO_STATS_FILE_TMP, EO_STATS_FILE, LOG);
	return;

fail:
	ereport(LOG,
			(errcode_for_file_access(),
			 errmsg("eo: could not write counters file \"%s\": %m", EO_STATS_FILE_TMP)));
	unlink(EO_STATS_FILE_TMP);
}

/* Under AddinShmemInitLock, from eo.c's shared memory start-up. */
void
eo_stats_shmem_init(void)
{
	bool		found;

	shared = ShmemInitStruct("eo claim counters", eo_stats_shmem_size(), &found);
	if (!IsUnderPostmaster)
		on_shmem_exit(save_counters, (Datum) 0);
	if (found)
		return;
	for (int i = 0; i < EO_STATS_DATABASES; i++)
	{
		pg_atomic_init_u32(&shared[i].dbid, InvalidOid);
		pg_atomic_init_u64(&shared[i].since, 0);
		pg_atomic_init_u64(&shared[i].last_pass_end, 0);
		pg_atomic_init_u64(&shared[i].last_pass_usecs, 0);
		for (int c = 0; c < EO_NSTATS; c++)
			pg_atomic_init_u64(&shared[i].counts[c], 0);
	}
	load_counters();
}

/* ---- this database's slot ---- */

/*
 * Every slot taken: take over the slot of a database that was dropped,
 * its counts starting again from zero.  Only inside a transaction (the
 * catalog is read): the worker also counts between its transactions, and
 * then goes uncounted rather than read the catalog without one.
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
		reset_slot(&shared[i], MyDatabaseId, GetCurrentTimestamp());
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
		{
			mine = &shared[i];
			pg_atomic_write_u64(&mine->since, (uint64) GetCurrentTimestamp());
		}
	}
	if (mine == NULL && claim && IsTransactionState())
		mine = take_dropped_slot();
	return mine;
}

/* ---- counting ---- */

void
eo_stat_add(EoStat stat, int64 n)
{
	DbCounters *slot;

	if (!eo_track_counts || n <= 0 || (slot = my_slot(true)) == NULL)
		return;
	pg_atomic_fetch_add_u64(&slot->counts[stat], (uint64) n);
}

void
eo_stat_count(EoStat stat)
{
	eo_stat_add(stat, 1);
}

void
eo_stat_step_failed(EoStep step)
{
	eo_stat_count(EO_STAT_STEP_ERRORS + step);
}

/* A maintenance pass (the worker's or eo_maintain()) ended. */
void
eo_stat_pass_done(const EoPassStats *stats, TimestampTz started)
{
	DbCounters *slot;
	TimestampTz now = GetCurrentTimestamp();

	eo_stat_count(EO_STAT_PASSES);
	eo_stat_add(EO_STAT_RECLAIMED, stats->reclaimed);
	eo_stat_add(EO_STAT_KEYS_DEAD, stats->dead);
	eo_stat_add(EO_STAT_SWITCHED, stats->switched);
	eo_stat_add(EO_STAT_RETIRED, stats->retired);
	eo_stat_add(EO_STAT_DROPPED, stats->dropped);
	eo_stat_add(EO_STAT_POSTPONED_RETENTION, stats->postponed_retention);
	eo_stat_add(EO_STAT_POSTPONED_LOCK, stats->postponed_lock);
	eo_stat_add(EO_STAT_OUTBOX_FAILURES, stats->outbox_failures);
	if (!eo_track_counts || (slot = my_slot(true)) == NULL)
		return;
	pg_atomic_write_u64(&slot->last_pass_end, (uint64) now);
	pg_atomic_write_u64(&slot->last_pass_usecs, (uint64) Max(now - started, 0));
}

/* ---- reading ---- */

/*
 * The counters `which` of this database as one row of the function's
 * result type; all NULL without the preload or when every slot is taken
 * by other databases.  `extra` columns come first (filled by the caller).
 */
static Datum
counters_row(FunctionCallInfo fcinfo, DbCounters *slot, const EoStat *which, int n,
			 Datum *extra, bool *extra_nulls, int nextra)
{
	TupleDesc	tupdesc;
	Datum	   *values = palloc(sizeof(Datum) * (n + nextra));
	bool	   *nulls = palloc(sizeof(bool) * (n + nextra));

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "eo: a counters function must return a composite type");
	if (tupdesc->natts != n + nextra)
		elog(ERROR, "eo: a counters function returns %d columns, not %d",
			 tupdesc->natts, n + nextra);
	for (int c = 0; c < nextra; c++)
	{
		values[c] = extra[c];
		nulls[c] = extra_nulls[c] || slot == NULL;
	}
	for (int c = 0; c < n; c++)
	{
		nulls[nextra + c] = slot == NULL;
		values[nextra + c] = slot == NULL ? (Datum) 0 :
			Int64GetDatum((int64) pg_atomic_read_u64(&slot->counts[which[c]]));
	}
	return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls));
}

/* eo_claim_stats(): the three counters of 0.1.0. */
Datum
eo_claim_stats(PG_FUNCTION_ARGS)
{
	static const EoStat which[] = {EO_STAT_DUPLICATES, EO_STAT_FINGERPRINT_CONFLICTS,
	EO_STAT_STALE_TOKENS};

	PG_RETURN_DATUM(counters_row(fcinfo, my_slot(true), which, lengthof(which), NULL, NULL, 0));
}

static Datum
since_column(DbCounters *slot, bool *isnull)
{
	*isnull = slot == NULL || pg_atomic_read_u64(&slot->since) == 0;
	return *isnull ? (Datum) 0 : TimestampTzGetDatum((TimestampTz) pg_atomic_read_u64(&slot->since));
}

/* eo_metrics_claims(): what the key functions answered, since `since`. */
Datum
eo_metrics_claims(PG_FUNCTION_ARGS)
{
	static const EoStat which[] = {EO_STAT_CLAIMED, EO_STAT_DUPLICATES, EO_STAT_BUSY,
		EO_STAT_DEAD_ANSWERS, EO_STAT_TAKEN_OVER, EO_STAT_COMPLETED, EO_STAT_FAILED,
		EO_STAT_KEYS_DEAD, EO_STAT_RECLAIMED, EO_STAT_FINGERPRINT_CONFLICTS,
	EO_STAT_STALE_TOKENS};
	DbCounters *slot = my_slot(true);
	Datum		extra[1];
	bool		extra_nulls[1];

	extra[0] = since_column(slot, &extra_nulls[0]);
	PG_RETURN_DATUM(counters_row(fcinfo, slot, which, lengthof(which), extra, extra_nulls, 1));
}

/*
 * eo_metrics.keys_redriven(): dead keys redriven, since `since` (0.3.0's
 * column of eo_metrics.claims, a function of its own so that the view
 * grows in place); NULL where the other counters are.
 */
Datum
eo_metrics_keys_redriven(PG_FUNCTION_ARGS)
{
	DbCounters *slot = my_slot(true);

	if (slot == NULL)
		PG_RETURN_NULL();
	PG_RETURN_INT64((int64) pg_atomic_read_u64(&slot->counts[EO_STAT_REDRIVEN]));
}

/*
 * eo_metrics_maintenance(): the maintenance passes in this database: the
 * last one's end and length, then counters.
 */
Datum
eo_metrics_maintenance(PG_FUNCTION_ARGS)
{
	static const EoStat which[] = {EO_STAT_PASSES, EO_STAT_RECLAIMED, EO_STAT_SWITCHED,
		EO_STAT_RETIRED, EO_STAT_DROPPED, EO_STAT_POSTPONED_RETENTION, EO_STAT_POSTPONED_LOCK,
		EO_STAT_OUTBOX_FAILURES, EO_STAT_STEP_ERRORS + EO_STEP_DROP,
		EO_STAT_STEP_ERRORS + EO_STEP_RECLAIM, EO_STAT_STEP_ERRORS + EO_STEP_SWITCH,
		EO_STAT_STEP_ERRORS + EO_STEP_RETIRE, EO_STAT_STEP_ERRORS + EO_STEP_OUTBOX,
	EO_STAT_LOCK_WAITS_GIVEN_UP};
	DbCounters *slot = my_slot(true);
	Datum		extra[3];
	bool		extra_nulls[3];
	uint64		end = slot == NULL ? 0 : pg_atomic_read_u64(&slot->last_pass_end);

	extra[0] = since_column(slot, &extra_nulls[0]);
	extra_nulls[1] = extra_nulls[2] = end == 0;
	extra[1] = TimestampTzGetDatum((TimestampTz) end);
	extra[2] = Float8GetDatum(slot == NULL ? 0 :
							  (double) pg_atomic_read_u64(&slot->last_pass_usecs) / USECS_PER_SEC);
	PG_RETURN_DATUM(counters_row(fcinfo, slot, which, lengthof(which), extra, extra_nulls, 3));
}
