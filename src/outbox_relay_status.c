/*-------------------------------------------------------------------------
 * outbox_relay_status.c
 *	  eo_relay_status(outbox, consumer_group): one row per slot of a group,
 *	  for the group's own relays.
 *
 * What a relay or a drain check needs and eo_relay_fetch cannot say: an
 * empty fetch means either "caught up" or "the rest is leased", maybe to
 * a relay that died.  Each row gives the slot's exact backlog (events not
 * yet acknowledged, counted as eo_outbox_status counts them: it reads
 * them all), and its state:
 *   'leased'     a page is out under a lease that has not expired, to a
 *                backend that still exists (holder_pid);
 *   'ready'      events wait and the next fetch can take them;
 *   'caught up'  nothing to deliver.
 * Same rights as eo_relay_fetch: SELECT on the outbox, membership in the
 * group's role.  Counts and times only, read as the extension owner.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "eo.h"
#include "outbox.h"

PG_FUNCTION_INFO_V1(eo_relay_status);

#define STATUS_COLUMNS 7

/* Unacknowledged events per slot, over every partition, into backlog[]. */
static void
count_backlog(EoRelayCall *call, int64 *backlog, int nslots)
{
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		args[2];
	ListCell   *lc;

	args[0] = CStringGetTextDatum(call->ob->name);
	args[1] = CStringGetTextDatum(call->grp);
	foreach(lc, eo_ob_partitions(call->ob))
	{
		EoPartition *p = (EoPartition *) lfirst(lc);
		char	   *sql = psprintf("SELECT s.slot, pg_catalog.count(*)"
								   " FROM eo_internal.eo_outbox_slots s, %s e"
								   " WHERE s.outbox OPERATOR(pg_catalog.=) $1"
								   " AND s.grp OPERATOR(pg_catalog.=) $2 AND %s GROUP BY s.slot",
								   p->name, eo_relay_unacked_sql(call->ob, "e", "s"));

		if (SPI_execute_with_args(sql, 2, types, args, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "eo: backlog count failed");
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			bool		isnull;
			int32		slot = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i],
														   SPI_tuptable->tupdesc, 1, &isnull));

			if (slot >= 0 && slot < nslots)
				backlog[slot] += DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
															 SPI_tuptable->tupdesc, 2, &isnull));
		}
	}
}

/* The state of one slot row: its lease is values[3] (expiry), [4] (holder). */
static const char *
slot_state(const Datum *values, const bool *nulls, int64 backlog)
{
	bool		leased = !nulls[3] &&
		DatumGetTimestampTz(values[3]) > GetCurrentTimestamp() &&
		!eo_relay_holder_gone(nulls[4] ? 0 : DatumGetInt32(values[4]));

	if (leased)
		return "leased";
	return backlog > 0 ? "ready" : "caught up";
}

Datum
eo_relay_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *grp = eo_check_group_name(PG_GETARG_DATUM(1), PG_ARGISNULL(1));
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		args[2];
	EoRelayCall call;
	int64	   *backlog;

	InitMaterializedSRF(fcinfo, 0);
	if (rsinfo->setDesc->natts != STATUS_COLUMNS)
		elog(ERROR, "eo: eo_relay_status returns %d columns", rsinfo->setDesc->natts);
	eo_relay_begin(&call, PG_GETARG_DATUM(0), PG_ARGISNULL(0), grp);
	backlog = palloc0(sizeof(int64) * EO_OUTBOX_MAX_SLOTS);
	count_backlog(&call, backlog, EO_OUTBOX_MAX_SLOTS);

	args[0] = CStringGetTextDatum(call.ob->name);
	args[1] = CStringGetTextDatum(call.grp);
	if (SPI_execute_with_args("SELECT slot, NULL::pg_catalog.text, NULL::pg_catalog.int8,"
							  " lease_expires_at, holder_pid, fetched_at, acked_at"
							  " FROM eo_internal.eo_outbox_slots"
							  " WHERE outbox OPERATOR(pg_catalog.=) $1 AND grp OPERATOR(pg_catalog.=) $2"
							  " ORDER BY slot", 2, types, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "eo: slot scan failed");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		Datum		values[STATUS_COLUMNS];
		bool		nulls[STATUS_COLUMNS];
		int32		slot;

		heap_deform_tuple(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, values, nulls);
		slot = DatumGetInt32(values[0]);
		values[2] = Int64GetDatum(slot >= 0 && slot < EO_OUTBOX_MAX_SLOTS ? backlog[slot] : 0);
		nulls[2] = false;
		values[1] = CStringGetTextDatum(slot_state(values, nulls, DatumGetInt64(values[2])));
		nulls[1] = false;
		if (strcmp(TextDatumGetCString(values[1]), "leased") != 0)
			nulls[3] = nulls[4] = true;	/* an old lease says nothing */
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	eo_relay_end(&call);
	return (Datum) 0;
}
