/*-------------------------------------------------------------------------
 * outbox_metrics.c
 *	  eo_outbox_metrics(): per outbox and consumer group, what a scraper
 *	  asks for, at a cost that does not grow with the backlog.
 *
 * Events emitted come from the outbox's seq sequence (one value per event
 * written, so events of transactions that rolled back count too); events
 * fetched, acknowledged and handed out again are counters in the group's
 * slot rows, which relay.c writes on every fetch and acknowledgement
 * anyway, so they are transactional and survive restarts and dumps.  The
 * age of the oldest pending event is one short index probe per slot: the
 * first event, in seq order, of what the slot would hand out next.  It
 * reads past the already acknowledged part of a batch in progress (at
 * most one batch) and looks at the main section only (not the events of
 * an earlier cluster a restored group still serves first).  The exact
 * backlog (a count of every unacknowledged event) stays in
 * eo_outbox_status, for people rather than scrapers.
 *
 * Everything read is in eo_internal, as the extension owner.
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

#include "eo.h"
#include "outbox.h"

PG_FUNCTION_INFO_V1(eo_outbox_metrics);

#define METRIC_COLUMNS 10

typedef struct GroupMetrics
{
	char	   *outbox;
	char	   *grp;
	bool		exists;			/* the outbox was found */
	Datum		values[METRIC_COLUMNS];
	bool		nulls[METRIC_COLUMNS];
} GroupMetrics;

/* Events written so far: the seq sequence's last value (table mode). */
static void
emitted(EoOutbox *ob, GroupMetrics *g)
{
	Oid			types[1] = {REGCLASSOID};
	Datum		args[1];
	bool		isnull;

	g->nulls[4] = true;
	if (!OidIsValid(ob->seqid))
		return;					/* WAL mode: nothing is written to a table */
	args[0] = ObjectIdGetDatum(ob->seqid);
	if (SPI_execute_with_args("SELECT coalesce(pg_catalog.pg_sequence_last_value($1), 0)",
							  1, types, args, NULL, true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "eo: reading the outbox's sequence failed");
	g->values[4] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	g->nulls[4] = isnull;
}

/* Slots, leases, the slot counters and the oldest pending event's age. */
static void
slot_metrics(EoOutbox *ob, GroupMetrics *g)
{
	static const int columns[] = {2, 3, 5, 6, 7, 8};
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		args[2];
	char	   *sql;

	args[0] = CStringGetTextDatum(ob->name);
	args[1] = CStringGetTextDatum(g->grp);
	sql = psprintf("SELECT pg_catalog.count(*)::pg_catalog.int4,"
				   " (pg_catalog.count(*) FILTER (WHERE s.lease_expires_at OPERATOR(pg_catalog.>) pg_catalog.now()))::pg_catalog.int4,"
				   " pg_catalog.sum(s.fetched_events)::pg_catalog.int8,"
				   " pg_catalog.sum(s.acked_events)::pg_catalog.int8,"
				   " pg_catalog.sum(s.redelivered_events)::pg_catalog.int8,"
				   " pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-) pg_catalog.min(x.created_at))"
				   " FROM eo_internal.eo_outbox_slots s LEFT JOIN LATERAL ("
				   "   SELECT e.created_at FROM %s e"
				   "   WHERE %s OPERATOR(pg_catalog.=) s.slot AND e.seq OPERATOR(pg_catalog.>=) s.pos_lo"
				   "   AND NOT pg_catalog.pg_visible_in_snapshot(e.txid, s.pos_snap)"
				   "   AND NOT coalesce(e.seq OPERATOR(pg_catalog.<=) s.acked_seq"
				   "       AND pg_catalog.pg_visible_in_snapshot(e.txid, s.batch_snap), false)"
				   "   ORDER BY e.seq LIMIT 1) x ON true"
				   " WHERE s.outbox OPERATOR(pg_catalog.=) $1 AND s.grp OPERATOR(pg_catalog.=) $2",
				   ob->view_name, eo_ob_slot_expr(ob, "e"));
	if (SPI_execute_with_args(sql, 2, types, args, NULL, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "eo: group metrics failed");
	for (int i = 0; i < lengthof(columns); i++)
	{
		int			c = columns[i];

		/* all passed by value: nothing to copy out of SPI's memory */
		g->values[c] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, i + 1,
									 &g->nulls[c]);
	}
}

static void
group_metrics(void *arg)
{
	GroupMetrics *g = (GroupMetrics *) arg;
	EoOutbox   *ob = eo_ob_lookup(g->outbox, AccessShareLock, true);

	g->exists = ob != NULL;
	if (ob == NULL)
		return;
	eo_cluster_check(ob);
	g->values[0] = CStringGetTextDatum(g->outbox);
	g->values[1] = CStringGetTextDatum(g->grp);
	emitted(ob, g);
	slot_metrics(ob, g);
	/* what an oldest pending age is compared with */
	g->values[9] = DirectFunctionCall2(interval_part, CStringGetTextDatum("epoch"),
									   IntervalPGetDatum(&ob->retention));
}

/* The groups, copied out of SPI's memory into the function's. */
static List *
all_groups(MemoryContext cxt)
{
	List	   *groups = NIL;

	if (SPI_execute("SELECT g.outbox, g.name FROM eo_internal.eo_outbox_groups g"
					" ORDER BY g.outbox, g.name", true, 0) != SPI_OK_SELECT)
		elog(ERROR, "eo: group scan failed");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		MemoryContext old = MemoryContextSwitchTo(cxt);
		GroupMetrics *g = palloc0(sizeof(GroupMetrics));

		g->outbox = pstrdup(SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
		g->grp = pstrdup(SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2));
		groups = lappend(groups, g);
		MemoryContextSwitchTo(old);
	}
	return groups;
}

/*
 * eo_outbox_metrics(): one row per outbox and consumer group.  Counts and
 * ages only, never events.
 */
Datum
eo_outbox_metrics(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext cxt = CurrentMemoryContext;
	ListCell   *lc;
	EoIdentity	saved;

	InitMaterializedSRF(fcinfo, 0);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&saved);
	foreach(lc, all_groups(cxt))
	{
		GroupMetrics *g = (GroupMetrics *) lfirst(lc);
		ErrorData  *error;
		MemoryContext old;

		/* An outbox someone broke gets a warning, not the others' rows. */
		old = MemoryContextSwitchTo(cxt);
		if (!eo_try(group_metrics, g, &error))
		{
			MemoryContextSwitchTo(old);
			eo_warn_failure(error, psprintf("metrics of outbox \"%s\"", g->outbox),
							"The other outboxes are shown.");
			continue;
		}
		MemoryContextSwitchTo(old);
		if (g->exists)
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, g->values, g->nulls);
	}
	eo_restore_identity(&saved);
	SPI_finish();
	return (Datum) 0;
}
