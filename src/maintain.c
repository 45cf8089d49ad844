/*-------------------------------------------------------------------------
 * maintain.c
 *	  One maintenance pass: reclaim expired leases, keep the key store's
 *	  time generations (make ahead, switch, retire, drop).
 *
 * The background worker (worker.c) and eo_maintain() both call these
 * steps; eo_outbox_maintain() runs the outboxes' step alone, by hand.
 * This file is the scheduler: it knows both sides that the outbox step
 * needs (partitions, outbox_partitions.c; delivery, outbox_relay.c).  The work is cut into bounded steps so that the worker can commit
 * after each one and never holds many row locks or a long transaction;
 * eo_maintain(), being one SQL call, runs its steps in the caller's
 * transaction, each in a subtransaction so that one that fails (on an
 * object someone broke) does not stop the others.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "fmgr.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "eo.h"
#include "outbox.h"

/* Keys reclaimed per step: few enough to keep each step's transaction short. */
#define EO_RECLAIM_BATCH 1000

PG_FUNCTION_INFO_V1(eo_maintain);
PG_FUNCTION_INFO_V1(eo_outbox_maintain);

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

	eo_ks_open(EO_KS_MAINTAIN);
	set = eo_ks_generations();
	eo_gen_bind_all(set);		/* after a restore, or an update from 0.1.0 */
	switch (eo_gen_keep(set, eo_partition_interval_secs, EO_MAX_LIVE_GENERATIONS,
						"key generation"))
	{
		case EO_SWITCH_DONE:
			stats->switched++;
			break;
		case EO_SWITCH_TOO_MANY:
			stats->postponed_retention++;
			break;
		case EO_SWITCH_LOCK_BUSY:
			stats->postponed_lock++;
			break;
		case EO_SWITCH_NOT_DUE:
			break;
	}
	eo_ks_close();
}

typedef struct RetireCall
{
	int32		gen;
	TimestampTz cutoff;
	bool		retired;
} RetireCall;

/* Retire one key generation, its finished keys buried as it stops being read. */
static void
retire_one(void *arg)
{
	RetireCall *call = (RetireCall *) arg;

	call->retired = eo_ks_prepare_retire(call->gen, call->cutoff);
	if (!call->retired)
		return;
	if (eo_tombstone_retention_secs > 0)
		(void) eo_ts_bury(eo_ks_generation_table(call->gen));
	eo_gen_retire(eo_ks_generations(), call->gen);
}

static void
keep_tombstones(void *arg)
{
	eo_ts_maintain();
}

/*
 * Retire old generations whose keys were all last changed more than
 * eo.retention ago, after moving unfinished keys out of them; then keep
 * the tombstones' generations.  Each generation, and the tombstones, in a
 * subtransaction of its own: one that fails (a WARNING) is tried again at
 * the next pass, and never keeps the others from retiring.
 */
void
eo_retire_step(EoPassStats *stats)
{
	ListCell   *lc;
	List	   *candidates;
	ErrorData  *error;
	TimestampTz cutoff = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													 -(int64) eo_retention_secs * 1000);

	eo_ks_open(EO_KS_MAINTAIN);
	candidates = eo_gen_retire_candidates(eo_ks_generations(), eo_retention_secs);
	foreach(lc, candidates)
	{
		RetireCall	call = {lfirst_int(lc), cutoff, false};

		if (!eo_try(retire_one, &call, &error))
			eo_warn_failure(error, psprintf("retiring key generation %d", call.gen),
							"The other generations were retired; this one is tried again at the next pass.");
		else if (call.retired)
			stats->retired++;
	}
	if (!eo_try(keep_tombstones, NULL, &error))
		eo_warn_failure(error, "keeping the tombstone generations",
						"Key generations were retired; this is tried again at the next pass.");
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
 * (outbox_partitions.c does the work, each outbox on its own; here it is
 * only scheduled).
 */
void
eo_outbox_step(EoPassStats *stats)
{
	EoIdentity	saved;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&saved);
	stats->outbox_failures += eo_ob_maintain_all(eo_relay_partition_delivered, NULL, NULL);
	eo_restore_identity(&saved);
	SPI_finish();
}

typedef struct StepCall
{
	void		(*step) (EoPassStats *);
	EoPassStats *stats;
} StepCall;

static void
run_step(void *arg)
{
	StepCall   *call = (StepCall *) arg;

	call->step(call->stats);
}

/*
 * Run one step of eo_maintain() in a subtransaction: a step that fails
 * (a broken object) is reported as a WARNING and the others still run.
 */
static void
isolated_step(const char *what, EoStep which, void (*step) (EoPassStats *), EoPassStats *stats)
{
	StepCall	call = {step, stats};
	ErrorData  *error;

	if (!eo_try(run_step, &call, &error))
	{
		if (error->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
			eo_stat_count(EO_STAT_LOCK_WAITS_GIVEN_UP);
		eo_warn_failure(error, what, "The other maintenance steps ran.");
		eo_stat_step_failed(which);
	}
}

/*
 * A pass by hand waits for locks as the worker's does, at most
 * EO_LOCK_WAIT_MS, unless the session chose its own lock_timeout: so that
 * neither a held lock nor a DROP queued behind one (locks.c) stops a pass
 * that a scheduler runs, nor do writers queue behind it for longer.
 * Until eo_unpin(level).
 */
static int
bound_lock_waits(void)
{
	int			level = NewGUCNestLevel();

	if (LockTimeout == 0)
		(void) set_config_option("lock_timeout", psprintf("%d", EO_LOCK_WAIT_MS),
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	return level;
}

static void
fencing_step(EoPassStats *stats)
{
	eo_fencing_keep();
}

static void
reclaim_all(EoPassStats *stats)
{
	bool		more = true;

	while (more)
	{
		CHECK_FOR_INTERRUPTS();
		eo_reclaim_step(stats, &more);
	}
}

/* eo_maintain(): one pass by hand, for servers without the preload. */
Datum
eo_maintain(PG_FUNCTION_ARGS)
{
	EoPassStats stats = {0};
	TimestampTz started = GetCurrentTimestamp();
	TupleDesc	tupdesc;
	Datum		values[5];
	bool		nulls[5] = {false, false, false, false, false};
	int			bounded;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "eo: eo_maintain must return a composite type");

	(void) eo_catalog();		/* eo must be installed and up to date */
	/* Every step writes: refuse here, not step by step (on a standby too). */
	PreventCommandIfReadOnly("eo_maintain()");
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("eo_maintain must run at READ COMMITTED"),
				 errdetail("It must see events committed while it waits for locks.")));

	/* Drop first: only what earlier passes retired, before taking locks. */
	bounded = bound_lock_waits();
	isolated_step("dropping retired key generations", EO_STEP_DROP, eo_drop_step, &stats);
	isolated_step("reclaiming expired leases", EO_STEP_RECLAIM, reclaim_all, &stats);
	isolated_step("switching key generations", EO_STEP_SWITCH, eo_switch_step, &stats);
	isolated_step("retiring key generations", EO_STEP_RETIRE, eo_retire_step, &stats);
	isolated_step("keeping outbox partitions", EO_STEP_OUTBOX, eo_outbox_step, &stats);
	isolated_step("keeping fencing token epochs", EO_STEP_RECLAIM, fencing_step, &stats);
	eo_unpin(bounded);
	eo_stat_pass_done(&stats, started);

	values[0] = Int64GetDatum(stats.reclaimed);
	values[1] = Int64GetDatum(stats.dead);
	values[2] = Int64GetDatum(stats.switched);
	values[3] = Int64GetDatum(stats.retired);
	values[4] = Int64GetDatum(stats.dropped);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
													  values, nulls)));
}

/* ---- eo_outbox_maintain: the outboxes' part of a pass, by hand ---- */

static void
report_row(const char *outbox, const char *action, const char *partition, void *arg)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) arg;
	Datum		values[3];
	bool		nulls[3] = {false, false, false};

	values[0] = CStringGetTextDatum(outbox);
	values[1] = CStringGetTextDatum(action);
	values[2] = CStringGetTextDatum(partition);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * eo_outbox_maintain() returns (outbox, action, partition): partitions
 * made ahead ("created"), dropped ("dropped"), kept because a consumer
 * group has not acknowledged all their events ("held"), or left for the
 * next pass because the lock was not free in time ("busy").
 */
Datum
eo_outbox_maintain(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	EoIdentity	saved;
	int			bounded;

	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("eo_outbox_maintain must run at READ COMMITTED"),
				 errdetail("It must see events committed while it waits for locks.")));

	InitMaterializedSRF(fcinfo, 0);
	bounded = bound_lock_waits();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&saved);
	(void) eo_ob_maintain_all(eo_relay_partition_delivered, report_row, rsinfo);
	eo_restore_identity(&saved);
	SPI_finish();
	eo_unpin(bounded);
	return (Datum) 0;
}
