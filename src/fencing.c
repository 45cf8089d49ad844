/*-------------------------------------------------------------------------
 *
 * fencing.c
 *	  Fencing tokens that stay strictly increasing across a promotion.
 *
 * A lease token (eo_claim with a lease) and a relay's lease token
 * (eo_relay_fetch) fence: whoever holds a newer token for the same key or
 * slot wins, at eo and at any outside system that compares them.  Both are
 * drawn from sequences.  A sequence alone does not survive a failover
 * under asynchronous replication: the new primary's copy of it is as old
 * as the last WAL it received, and it hands out again values the old
 * primary had already issued in the window the failover lost.
 *
 * So a token's value carries an epoch above `shift` bits.  On timeline T a
 * token's epoch is at least T + base (base: per sequence, in
 * eo_internal.eo_token_epochs, 0 if absent; the install or update sets it
 * so that epochs count from 1 on the timeline it ran on, not from the
 * timeline's ID, which may be high already); the first token drawn on a
 * new timeline moves the sequence up to its epoch's start.  A promoted
 * standby always starts a timeline with a greater ID than its upstream's
 * (PostgreSQL picks one above every timeline it knows of), so every token
 * it issues is above every token issued on the timelines before it,
 * whatever the replication and whatever WAL was lost.  The only writes are
 * the sequence's own, so nothing here waits for a standby.
 *
 * The base covers what moves a timeline ID backwards: pg_upgrade and a
 * restore into a new cluster start at timeline 1 with the sequences'
 * values restored.  Tokens then go on from the sequence (still
 * increasing), and the worker (eo_fencing_keep) raises base so that the
 * epoch of the present timeline is again above the sequence's: the next
 * promotion then starts a new epoch too.  The same holds if a sequence
 * ever runs through 2^shift values of one epoch into the next.
 *
 * Why not a timeline ID stored with each token: the token is one number
 * that outside systems compare, below 2^53 so that a relay in JavaScript
 * reads it exactly.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xlog.h"
#include "catalog/pg_sequence.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "storage/lmgr.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "compat.h"
#include "eo.h"

/* What this backend knows of one sequence's epochs. */
typedef struct EpochCache
{
	Oid			seq;
	TimeLineID	tli;			/* the timeline `base` was read on */
	int64		base;
} EpochCache;

static EpochCache cache[2];

/*
 * eo_internal.eo_token_epochs, or InvalidOid while the SQL objects are
 * 0.2.0's (the library serves them until ALTER EXTENSION eo UPDATE; every
 * base is 0 then).
 */
static Oid
epochs_table(void)
{
	if (!OidIsValid(get_relname_relid("eo_token_epochs", eo_catalog()->schema)))
		return InvalidOid;
	return eo_own_relation("eo_token_epochs", RELKIND_RELATION);
}

/* eo_internal.eo_token_epochs' base for `seq` (0 if it has no row). */
static int64
read_base(Oid seq)
{
	Oid			relid = epochs_table();
	Relation	rel;
	SysScanDesc scan;
	HeapTuple	tup;
	int64		base = 0;

	if (!OidIsValid(relid))
		return 0;
	rel = table_open(relid, AccessShareLock);
	scan = systable_beginscan(rel, InvalidOid, false, GetLatestSnapshot(), 0, NULL);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		bool		isnull;
		Datum		sequence = heap_getattr(tup, 1, RelationGetDescr(rel), &isnull);

		if (!isnull && DatumGetObjectId(sequence) == seq)
		{
			Datum		b = heap_getattr(tup, 2, RelationGetDescr(rel), &isnull);

			base = isnull ? 0 : DatumGetInt64(b);
			break;
		}
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return base;
}

/*
 * The entry of `seq`.  A third sequence means eo was installed again
 * (DROP and CREATE EXTENSION): the old entries name sequences that are
 * gone, and are forgotten.
 */
static EpochCache *
cache_for(Oid seq)
{
	for (int i = 0; i < lengthof(cache); i++)
		if (cache[i].seq == seq || cache[i].seq == InvalidOid)
		{
			cache[i].seq = seq;
			return &cache[i];
		}
	memset(cache, 0, sizeof(cache));
	cache[0].seq = seq;
	return &cache[0];
}

/*
 * The least epoch a token of `seq` may have now: the timeline's ID plus
 * the sequence's base, read again on a new timeline (a hot standby's
 * session that lives on past a promotion) or when asked (`fresh`).
 */
static int64
epoch_floor(Oid seq, bool fresh)
{
	EpochCache *c = cache_for(seq);
	TimeLineID	tli = GetWALInsertionTimeLine();

	if (fresh || c->tli != tli)
	{
		c->base = read_base(seq);
		c->tli = tli;
	}
	return (int64) tli + c->base;
}

/*
 * Move `seq` up to the start of epoch `epoch` and draw from there.  The
 * self-conflicting lock lets one backend at a time look and move, so that
 * a backend that read the old epoch before another moved the sequence
 * does not move it back.  The lock is released at once: a sequence's
 * changes do not wait for the transaction.
 */
static int64
start_epoch(Oid seq, int shift, int64 epoch)
{
	int64		v;

	LockRelationOid(seq, ShareUpdateExclusiveLock);
	v = nextval_internal(seq, false);
	if ((v >> shift) < epoch)
	{
		HeapTuple	tup = SearchSysCache1(SEQRELID, ObjectIdGetDatum(seq));
		EoIdentity	saved;

		if (!HeapTupleIsValid(tup))
			elog(ERROR, "eo: cache lookup failed for sequence %u", seq);
		/* a backend's cached values would come from before the move */
		if (((Form_pg_sequence) GETSTRUCT(tup))->seqcache > 1)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("eo's token sequence \"%s\" has a cache", get_rel_name(seq)),
					 errhint("ALTER SEQUENCE eo_internal.%s CACHE 1", get_rel_name(seq))));
		ReleaseSysCache(tup);
		eo_become_owner(&saved);
		(void) DirectFunctionCall2(setval_oid, ObjectIdGetDatum(seq),
								   Int64GetDatum(epoch << shift));
		eo_restore_identity(&saved);
		v = nextval_internal(seq, false);
	}
	UnlockRelationOid(seq, ShareUpdateExclusiveLock);
	return v;
}

/*
 * The next token of `seq`: strictly above every token it issued before,
 * on this timeline and every earlier one; an epoch of at most max_epoch.
 */
int64
eo_fenced_nextval(Oid seq, int shift, int64 max_epoch)
{
	int64		v = nextval_internal(seq, false);
	int64		floor = epoch_floor(seq, false);

	if ((v >> shift) < floor && floor <= max_epoch)
		v = start_epoch(seq, shift, floor);
	if ((v >> shift) > max_epoch || floor > max_epoch)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("eo's fencing tokens from sequence \"%s\" are used up", get_rel_name(seq)),
				 errdetail("Tokens stay below 2^53; this sequence has reached epoch " INT64_FORMAT " of " INT64_FORMAT ".",
						   Max(v >> shift, floor), max_epoch)));
	return v;
}

/*
 * Whether `token` of `seq` comes from an earlier timeline than this
 * server's: issued before a failover or restore, by a server whose claim
 * of it this one may never have had.  Epoch 0 is no timeline's (tokens
 * from before 0.3.0, or a number that was never a token).
 */
bool
eo_token_from_earlier_timeline(Oid seq, int shift, int64 token)
{
	int64		epoch = token >> shift;

	return epoch >= 1 && epoch < epoch_floor(seq, false);
}

/*
 * The worker's part, once a pass: if `seq` is ahead of the present
 * timeline's epoch (a pg_upgrade or a restore began timeline 1 again, or
 * an epoch ran full), raise its base so that the present epoch is above
 * it.  Tokens drawn meanwhile go on from the sequence, still increasing.
 * SPI connected, as the extension owner.
 */
static void
keep_epoch(const char *seqname, int shift)
{
	Oid			seq = eo_own_relation(seqname, RELKIND_SEQUENCE);
	int64		floor = epoch_floor(seq, true);
	int64		epoch;
	bool		isnull;
	Oid			types[2] = {REGCLASSOID, INT8OID};
	Datum		values[2];

	if (SPI_execute(psprintf("SELECT last_value FROM %s", eo_internal_name(seqname)),
					true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "eo: reading sequence %s failed", seqname);
	epoch = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
										&isnull)) >> shift;
	if (epoch <= floor)
		return;					/* the common case: not ahead */
	values[0] = ObjectIdGetDatum(seq);
	values[1] = Int64GetDatum(epoch + 1 - (int64) GetWALInsertionTimeLine());
	if (SPI_execute_with_args("INSERT INTO eo_internal.eo_token_epochs (sequence, base) VALUES ($1, $2)"
							  " ON CONFLICT (sequence) DO UPDATE SET base = excluded.base",
							  2, types, values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "eo: keeping the epoch of sequence %s failed", seqname);
	ereport(LOG,
			(errmsg("eo: fencing tokens of %s move to epoch " INT64_FORMAT " (they were ahead of this timeline's)",
					seqname, epoch + 1)));
}

void
eo_fencing_keep(void)
{
	EoIdentity	saved;

	if (!OidIsValid(epochs_table()))
		return;					/* 0.2.0's objects: nothing to keep yet */
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&saved);
	keep_epoch("eo_lease_token_seq", EO_LEASE_EPOCH_SHIFT);
	keep_epoch("eo_outbox_token_seq", EO_RELAY_EPOCH_SHIFT);
	eo_restore_identity(&saved);
	SPI_finish();
}
