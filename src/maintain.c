/*-------------------------------------------------------------------------
 * maintain.c
 *	  One maintenance pass: reclaim processing keys whose lease expired.
 *
 * The background worker (worker.c) and eo_maintain() both call this.  The
 * work is cut into bounded steps so that the worker can commit after each
 * one and never holds many row locks or a long transaction; eo_maintain(),
 * being one SQL call, runs its steps in the caller's transaction.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
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

	eo_ks_open();
	reclaimed = eo_ks_reclaim_expired(GetCurrentTimestamp(), eo_max_attempts,
									  EO_RECLAIM_BATCH, &dead);
	eo_ks_close();

	stats->reclaimed += reclaimed;
	stats->dead += dead;
	*more = reclaimed == EO_RECLAIM_BATCH;
}

/* eo_maintain(): one pass by hand, for servers without the preload. */
Datum
eo_maintain(PG_FUNCTION_ARGS)
{
	EoPassStats stats = {0, 0};
	bool		more = true;
	TupleDesc	tupdesc;
	Datum		values[2];
	bool		nulls[2] = {false, false};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "eo: eo_maintain must return a composite type");

	while (more)
	{
		CHECK_FOR_INTERRUPTS();
		eo_reclaim_step(&stats, &more);
	}

	values[0] = Int64GetDatum(stats.reclaimed);
	values[1] = Int64GetDatum(stats.dead);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
													  values, nulls)));
}
