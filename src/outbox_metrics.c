/*-------------------------------------------------------------------------
 * outbox_metrics.c
 *	  Monitoring of outboxes and consumer groups, one row per group:
 *	  eo_outbox_metrics() for scrapers, eo_outbox_stats() for people.
 *
 * eo_outbox_metrics costs what a scrape may cost: nothing that grows
 * with the backlog.  Events emitted come from the outbox's seq sequence
 * (one value per event written, so events of transactions that rolled
 * back count too); events fetched, acknowledged and handed out again are
 * counters in the group's slot rows, which outbox_relay.c writes on every fetch
 * and acknowledgement anyway, so they are transactional and survive
 * restarts and dumps.  The age of the oldest pending event is one short
 * index probe per slot: the first event, in seq order, of what the slot
 * would hand out next.  It reads past the already acknowledged part of a
 * batch in progress (at most one batch) and looks at the main section
 * only (not the events of an earlier cluster a restored group still
 * serves first).
 *
 * eo_outbox_stats (behind eo_outbox_status) counts the exact backlog, and
 * so reads every unacknowledged event.
 *
 * Everything read is in eo_internal, as the extension owner; counts,
 * times and names only, never an event.
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
PG_FUNCTION_INFO_V1(eo_outbox_stats);

#define GROUP_COLUMNS 10		/* both functions return 10 columns */

/* One group's result row, filled in place. */
typedef struct GroupRow
{
	char	   *outbox;
	char	   *grp;
	bool		exists;			/* the outbox was found */
	Datum		values[GROUP_COLUMNS];
	bool		nulls[GROUP_COLUMNS];
} GroupRow;

/* Column `col` of the single row SPI just returned, into the result row. */
static void
take_column(GroupRow *g, int row_column, int col)
{
	/* all passed by value: nothing to copy out of SPI's memory */
	g->values[row_column] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col,
										  &g->nulls[row_column]);
}

/* Run a one-row statement on the group's slot rows ($1 outbox, $2 group). */
static void
query_group(GroupRow *g, const char *sql, const char *what)
{
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		args[2];

	args[0] = CStringGetTextDatum(g->outbox);
	args[1] = CStringGetTextDatum(g->grp);
	if (SPI_execute_with_args(sql, 2, types, args, NULL, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "eo: %s failed", what);
}

/* The outbox, or NULL (the row is then left out) if it is gone. */
static EoOutbox *
open_group(GroupRow *g)
{
	EoOutbox   *ob = eo_ob_lookup(g->outbox, AccessShareLock, true);

	g->exists = ob != NULL;
	if (ob == NULL)
		return NULL;
	eo_cluster_check(ob);
	g->values[0] = CStringGetTextDatum(g->outbox);
	g->values[1] = CStringGetTextDatum(g->grp);
	return ob;
}

/* ---- eo_outbox_metrics ---- */

/* Events written so far: the seq sequence's last value (table mode). */
static void
emitted(EoOutbox *ob, GroupRow *g)
{
	Oid			types[1] = {REGCLASSOID};
	Datum		args[1];

	g->nulls[4] = true;
	if (!OidIsValid(ob->seqid))
		return;					/* WAL mode: nothing is written to a table */
	args[0] = ObjectIdGetDatum(ob->seqid);
	if (SPI_execute_with_args("SELECT coalesce(pg_catalog.pg_sequence_last_value($1), 0)",
							  1, types, args, NULL, true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "eo: reading the outbox's sequence failed");
	take_column(g, 4, 1);
}

/* Slots, leases, the slot counters and the oldest pending event's age. */
static void
group_metrics(void *arg)
{
	GroupRow   *g = (GroupRow *) arg;
	EoOutbox   *ob = open_group(g);
	static const int columns[] = {2, 3, 5, 6, 7, 8};

	if (ob == NULL)
		return;
	emitted(ob, g);
	query_group(g, psprintf("SELECT pg_catalog.count(*)::pg_catalog.int4,"
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
							ob->view_name, eo_ob_slot_expr(ob, "e")),
				"group metrics");
	for (int i = 0; i < lengthof(columns); i++)
		take_column(g, columns[i], i + 1);
	/* what an oldest pending age is compared with */
	g->values[9] = DirectFunctionCall2(interval_part, CStringGetTextDatum("epoch"),
									   IntervalPGetDatum(&ob->retention));
}

/* ---- eo_outbox_stats ---- */

/*
 * Backlog and the oldest unacknowledged event, partition by partition
 * (each is read whole where the group has not acknowledged it).
 */
static void
backlog(EoOutbox *ob, GroupRow *g, int64 *count, bool *has_oldest, TimestampTz *oldest)
{
	ListCell   *lc;

	*count = 0;
	*has_oldest = false;
	foreach(lc, eo_ob_partitions(ob))
	{
		EoPartition *p = (EoPartition *) lfirst(lc);
		bool		isnull;
		Datum		d;

		query_group(g, psprintf("SELECT pg_catalog.count(*), pg_catalog.min(e.created_at)"
								" FROM eo_internal.eo_outbox_slots s, %s e"
								" WHERE s.outbox OPERATOR(pg_catalog.=) $1"
								" AND s.grp OPERATOR(pg_catalog.=) $2 AND %s",
								p->name, eo_relay_unacked_sql(ob, "e", "s")),
					"backlog count");
		*count += DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
		if (!isnull && (!*has_oldest || DatumGetTimestampTz(d) < *oldest))
		{
			*oldest = DatumGetTimestampTz(d);
			*has_oldest = true;
		}
	}
}

/*
 * The numbers of one group: slots, leases and the last fetch and
 * acknowledgement from its slot rows; backlog, the oldest unacknowledged
 * event, its age, and whether it holds a partition past retention.
 */
static void
group_stats(void *arg)
{
	GroupRow   *g = (GroupRow *) arg;
	EoOutbox   *ob = open_group(g);
	int64		count;
	bool		has_oldest;
	TimestampTz oldest = 0;
	TimestampTz cutoff;

	if (ob == NULL)
		return;
	query_group(g, "SELECT pg_catalog.count(*)::pg_catalog.int4,"
				" pg_catalog.count(*) FILTER (WHERE s.lease_expires_at OPERATOR(pg_catalog.>) pg_catalog.now())::pg_catalog.int4,"
				" pg_catalog.max(s.fetched_at), pg_catalog.max(s.acked_at)"
				" FROM eo_internal.eo_outbox_slots s"
				" WHERE s.outbox OPERATOR(pg_catalog.=) $1 AND s.grp OPERATOR(pg_catalog.=) $2",
				"group statistics");
	take_column(g, 2, 1);
	take_column(g, 3, 2);
	take_column(g, 8, 3);
	take_column(g, 9, 4);

	backlog(ob, g, &count, &has_oldest, &oldest);
	g->values[4] = Int64GetDatum(count);
	g->values[5] = TimestampTzGetDatum(oldest);
	g->nulls[5] = g->nulls[6] = !has_oldest;
	if (has_oldest)
		g->values[6] = DirectFunctionCall2(timestamp_mi,
										   TimestampTzGetDatum(GetCurrentTimestamp()),
										   TimestampTzGetDatum(oldest));
	/* It would have been dropped but for this group. */
	g->values[7] = BoolGetDatum(has_oldest && eo_ob_retention_cutoff(ob, &cutoff) &&
								oldest < cutoff);
}

/* ---- one row per group ---- */

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
		GroupRow   *g = palloc0(sizeof(GroupRow));

		g->outbox = pstrdup(SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
		g->grp = pstrdup(SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2));
		groups = lappend(groups, g);
		MemoryContextSwitchTo(old);
	}
	return groups;
}

/*
 * Fill one row per group with `fill`, as the extension owner.  An outbox
 * someone broke gets a warning, not the other outboxes' rows.
 */
static Datum
each_group(FunctionCallInfo fcinfo, void (*fill) (void *), const char *what)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext cxt = CurrentMemoryContext;
	ListCell   *lc;
	EoIdentity	saved;

	InitMaterializedSRF(fcinfo, 0);
	if (rsinfo->setDesc->natts != GROUP_COLUMNS)
		elog(ERROR, "eo: %s returns %d columns", what, rsinfo->setDesc->natts);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&saved);
	foreach(lc, all_groups(cxt))
	{
		GroupRow   *g = (GroupRow *) lfirst(lc);
		ErrorData  *error;
		MemoryContext old = MemoryContextSwitchTo(cxt);
		bool		ok = eo_try(fill, g, &error);

		MemoryContextSwitchTo(old);
		if (!ok)
			eo_warn_failure(error, psprintf("%s of outbox \"%s\"", what, g->outbox),
							"The other outboxes are shown.");
		else if (g->exists)
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, g->values, g->nulls);
	}
	eo_restore_identity(&saved);
	SPI_finish();
	return (Datum) 0;
}

/* eo_outbox_metrics(): behind the view eo_metrics.outbox, for scrapers. */
Datum
eo_outbox_metrics(PG_FUNCTION_ARGS)
{
	return each_group(fcinfo, group_metrics, "metrics");
}

/* eo_outbox_stats(): behind eo_outbox_status; reads the whole backlog. */
Datum
eo_outbox_stats(PG_FUNCTION_ARGS)
{
	return each_group(fcinfo, group_stats, "statistics");
}
