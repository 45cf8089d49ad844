/*-------------------------------------------------------------------------
 * maintain.c
 *	  One maintenance pass: reclaim expired leases, keep the key store's
 *	  time generations (make ahead, switch, retire, drop).
 *
 * The background worker (worker.c) and eo_maintain() both call these
 * steps.  The work is cut into bounded steps so that the worker can commit
 * after each one and never holds many row locks or a long transaction;
 * eo_maintain(), being one SQL call, runs its steps in the caller's
 * transaction.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "eo.h"

/* Keys reclaimed per step: few enough to keep each step's transaction short. */
#define EO_RECLAIM_BATCH 1000

PG_FUNCTION_INFO_V1(eo_maintain);

/*
 * Reclaim up to one batch of expired leases in the current transaction.
 * *more says whether a full batch was found, so there may be more.
 */
void
eo_reclaim_step(EoPassStats *stats, bool *more)
{
	int64		dead;
	int64		reclaimed;

	eo_ks_open(EO_KS_READ);
	reclaimed = eo_ks_reclaim_expired(GetCurrentTimestamp(), eo_max_attempts,
									  EO_RECLAIM_BATCH, &dead);
	eo_ks_close();

	stats->reclaimed += reclaimed;
	stats->dead += dead;
	*more = reclaimed == EO_RECLAIM_BATCH;
}

/*
 * Keep a generation made ahead and switch to it when the current one is
 * eo.partition_interval old.  The switch's SHARE lock on the registry is
 * held to the end of the transaction: the worker commits right after.
 */
void
eo_switch_step(EoPassStats *stats)
{
	const EoGenSet *set;

	eo_ks_open(EO_KS_WRITE);
	set = eo_ks_generations();
	eo_gen_make_ahead(set);
	if (eo_gen_maybe_switch(set, eo_partition_interval_secs, EO_MAX_LIVE_GENERATIONS))
		stats->switched++;
	eo_ks_close();
}

/*
 * Retire old generations whose keys were all last changed more than
 * eo.retention ago, after moving unfinished keys out of them.
 */
void
eo_retire_step(EoPassStats *stats)
{
	const EoGenSet *set;
	ListCell   *lc;
	List	   *candidates;
	TimestampTz cutoff = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													 -(int64) eo_retention_secs * 1000);

	eo_ks_open(EO_KS_WRITE);
	set = eo_ks_generations();
	candidates = eo_gen_retire_candidates(set, eo_retention_secs);
	foreach(lc, candidates)
	{
		int32		gen = lfirst_int(lc);

		if (eo_ks_prepare_retire(gen, cutoff))
		{
			eo_gen_retire(set, gen);
			stats->retired++;
		}
	}
	eo_ks_close();
}

/*
 * Drop generations retired by an earlier, committed transaction, whose
 * tables no one holds a lock on.
 */
void
eo_drop_step(EoPassStats *stats)
{
	eo_ks_open(EO_KS_READ);
	stats->dropped += eo_gen_drop_retired(eo_ks_generations());
	eo_ks_close();
}

/*
 * Outbox partitions: make ahead, drop what every consumer group is past
 * (outbox.c does the work; here it is only scheduled).
 */
void
eo_outbox_step(EoPassStats *stats)
{
	int			rc;

	eo_ks_open(EO_KS_READ);
	rc = SPI_execute(psprintf("SELECT pg_catalog.count(*) FROM %s.eo_outbox_maintain()",
							  quote_identifier(eo_ks_generations()->schema)),
					 false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "eo: outbox maintenance failed: %s", SPI_result_code_string(rc));
	eo_ks_close();
}

/* eo_maintain(): one pass by hand, for servers without the preload. */
Datum
eo_maintain(PG_FUNCTION_ARGS)
{
	EoPassStats stats = {0};
	bool		more = true;
	TupleDesc	tupdesc;
	Datum		values[5];
	bool		nulls[5] = {false, false, false, false, false};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "eo: eo_maintain must return a composite type");

	/* Drop first: only what earlier passes retired, before taking locks. */
	eo_drop_step(&stats);
	while (more)
	{
		CHECK_FOR_INTERRUPTS();
		eo_reclaim_step(&stats, &more);
	}
	eo_switch_step(&stats);
	eo_retire_step(&stats);
	eo_outbox_step(&stats);

	values[0] = Int64GetDatum(stats.reclaimed);
	values[1] = Int64GetDatum(stats.dead);
	values[2] = Int64GetDatum(stats.switched);
	values[3] = Int64GetDatum(stats.retired);
	values[4] = Int64GetDatum(stats.dropped);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
													  values, nulls)));
}
