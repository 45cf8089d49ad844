/*-------------------------------------------------------------------------
 * outbox_partitions.c
 *	  The partitions of table-mode outboxes: made ahead, dropped once past
 *	  retention and delivered to every consumer group.
 *
 * Whether a partition is delivered is the relay's knowledge (outbox_relay.c):
 * the caller passes that judgement in, so this file knows nothing of
 * consumer groups (maintain.c, the scheduler, knows both).
 *
 * Partitions live in eo_internal, named <outbox>_p<start, UTC>, so no one
 * else can take a name eo will need, and each is attached to its outbox by
 * the outbox table's OID (outbox_ddl.c).  Each carries eo_outbox_row as a NOT
 * VALID constraint of its own (see outbox_registry.c), so that pg_dump restores the
 * rows before the constraint.
 *
 * Failure isolation.  Every outbox is kept in a subtransaction of its own:
 * one outbox whose table someone broke or replaced is reported (WARNING)
 * and skipped, and every other outbox is still kept in the same pass.
 *
 * Runs as the extension owner (the worker, eo_maintain, or an
 * administrator's eo_outbox_maintain in maintain.c), on objects verified
 * first.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "eo.h"
#include "outbox.h"


/*
 * The partitions of an outbox table with their bounds (NULL for MINVALUE /
 * MAXVALUE), oldest first, read from the catalog by the table's OID.
 * pg_get_expr() renders the bounds in this session's settings, so casting
 * them back is exact.
 */
#define PARTITIONS_SQL \
	"SELECT c.oid, c.relname::pg_catalog.text, m[1]::pg_catalog.timestamptz AS lo," \
	" m[2]::pg_catalog.timestamptz AS hi" \
	" FROM pg_catalog.pg_inherits i" \
	" JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) i.inhrelid" \
	" LEFT JOIN LATERAL pg_catalog.regexp_match(pg_catalog.pg_get_expr(c.relpartbound, c.oid)," \
	"   'FROM [(]''([^'']*)''[)] TO [(]''([^'']*)''[)]') m ON true" \
	" WHERE i.inhparent OPERATOR(pg_catalog.=) $1"

static void
run_sql(const char *sql)
{
	int			rc = SPI_execute(sql, false, 0);

	if (rc < 0)
		elog(ERROR, "eo: \"%s\" failed: %s", sql, SPI_result_code_string(rc));
}

/*
 * Every partition of ob, oldest first, each checked to be eo's own (in
 * eo_internal, owned by the extension owner).  SPI connected.
 */
List *
eo_ob_partitions(EoOutbox *ob)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(ob->relid)};
	List	   *parts = NIL;
	MemoryContext caller = CurrentMemoryContext;
	ListCell   *lc;
	int			pinned = eo_pin_datetime();

	if (SPI_execute_with_args(PARTITIONS_SQL " ORDER BY 4 NULLS LAST",
							  1, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "eo: partition listing failed");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		MemoryContext old = MemoryContextSwitchTo(caller);
		EoPartition *p = palloc0(sizeof(EoPartition));
		bool		isnull;
		Datum		d;

		p->relid = DatumGetObjectId(SPI_getbinval(tup, desc, 1, &isnull));
		p->name = eo_internal_name(SPI_getvalue(tup, desc, 2));
		d = SPI_getbinval(tup, desc, 3, &isnull);
		p->has_lo = !isnull;
		p->lo = isnull ? 0 : DatumGetTimestampTz(d);
		d = SPI_getbinval(tup, desc, 4, &isnull);
		p->has_hi = !isnull;
		p->hi = isnull ? 0 : DatumGetTimestampTz(d);
		parts = lappend(parts, p);
		MemoryContextSwitchTo(old);
	}
	eo_unpin(pinned);
	foreach(lc, parts)
		eo_check_own_relation(((EoPartition *) lfirst(lc))->relid, RELKIND_RELATION, true,
							  psprintf("partition of outbox \"%s\"", ob->name));
	return parts;
}

/* Make eo_internal.<part> and attach it to ob for [lo, hi). */
static void
make_partition(EoOutbox *ob, const char *part, const char *lo, const char *hi)
{
	char	   *table = eo_internal_name(part);

	eo_lock_internal_schema();	/* or a clear error: never a wait without bound */
	run_sql(psprintf("CREATE TABLE %s (LIKE eo_internal.eo_outbox_template)", table));
	run_sql(psprintf("ALTER TABLE %s ADD CONSTRAINT eo_outbox_row CHECK (%s) NOT VALID",
					 table, eo_ob_row_check_expr(ob)));
	eo_attach_partition(ob->relid, part, lo, hi);
}

/*
 * Make the partitions of [start of the current interval, now + premake
 * intervals] that no partition covers yet.  SPI connected, as the owner.
 * Returns their names.
 */
List *
eo_ob_make_partitions(EoOutbox *ob)
{
	Oid			types[3] = {OIDOID, INTERVALOID, INT4OID};
	Datum		values[3];
	List	   *made = NIL;
	uint64		n;
	char	  **los;
	char	  **his;
	char	  **suffixes;
	int			pinned = eo_pin_datetime();

	values[0] = ObjectIdGetDatum(ob->relid);
	values[1] = IntervalPGetDatum(&ob->every);
	values[2] = Int32GetDatum(ob->premake);
	if (SPI_execute_with_args(
							  "WITH have AS (" PARTITIONS_SQL "),"
							  " want AS (SELECT b AS lo, b OPERATOR(pg_catalog.+) $2 AS hi"
							  "   FROM pg_catalog.generate_series("
							  "     pg_catalog.date_bin($2, pg_catalog.now(), '2000-01-01 00:00:00+00'::pg_catalog.timestamptz),"
							  "     pg_catalog.now() OPERATOR(pg_catalog.+) ($2 OPERATOR(pg_catalog.*) $3::pg_catalog.float8), $2) b)"
							  " SELECT w.lo::pg_catalog.text, w.hi::pg_catalog.text,"
							  "   pg_catalog.to_char(w.lo AT TIME ZONE 'UTC', 'YYYYMMDD\"_\"HH24MISS')"
							  " FROM want w WHERE NOT EXISTS (SELECT FROM have h"
							  "   WHERE (h.lo IS NULL OR h.lo OPERATOR(pg_catalog.<) w.hi)"
							  "     AND (h.hi IS NULL OR h.hi OPERATOR(pg_catalog.>) w.lo))"
							  " ORDER BY w.lo",
							  3, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "eo: partition planning failed");

	/* Copy the answer out before running DDL through SPI. */
	n = SPI_processed;
	los = palloc(sizeof(char *) * (n + 1));
	his = palloc(sizeof(char *) * (n + 1));
	suffixes = palloc(sizeof(char *) * (n + 1));
	for (uint64 i = 0; i < n; i++)
	{
		los[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		his[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
		suffixes[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3);
	}
	for (uint64 i = 0; i < n; i++)
	{
		char	   *part = psprintf("%s_p%s", ob->name, suffixes[i]);

		make_partition(ob, part, los[i], his[i]);
		made = lappend(made, part);
	}
	eo_unpin(pinned);
	return made;
}

/*
 * Lock the outbox table, make sure the partition is still fully delivered
 * (`delivered`, the relay's judgement), drop it.  Waits at most
 * lock_timeout (or EO_LOCK_WAIT_MS if it is 0) for the lock: the drop
 * needs ACCESS EXCLUSIVE on the outbox table, and a lock request that
 * waits makes every later INSERT queue behind it; a subtransaction undoes everything (and frees
 * the locks) when it gives up or finds the partition undelivered after
 * all.  Returns the action taken.
 */
static const char *
drop_partition(EoOutbox *ob, const EoPartition *part, EoDelivered delivered)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	const char *volatile action = "dropped";
	int			nest = NewGUCNestLevel();

	(void) set_config_option("lock_timeout",
							 psprintf("%d", LockTimeout > 0 ? LockTimeout : EO_LOCK_WAIT_MS),
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		/*
		 * Parent first, the way INSERT locks them.  Once both are held no
		 * transaction can still be writing into the partition, so the
		 * check below sees every event it will ever hold.
		 */
		LockRelationOid(ob->relid, AccessExclusiveLock);
		LockRelationOid(part->relid, AccessExclusiveLock);
		if (delivered(ob, part))
		{
			eo_drop_relation(part->relid, true);
			ReleaseCurrentSubTransaction();
		}
		else
		{
			action = "held";
			RollbackAndReleaseCurrentSubTransaction();
		}
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata = eo_subxact_failed(cxt, owner);

		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		FreeErrorData(edata);
		action = "busy";
	}
	PG_END_TRY();
	AtEOXact_GUC(true, nest);
	return action;
}

/*
 * The end of the newest partition of ob that is past retention (all of
 * its events are older than that), or false if none is.
 */
bool
eo_ob_retention_cutoff(EoOutbox *ob, TimestampTz *cutoff)
{
	TimestampTz limit = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
																TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()),
																IntervalPGetDatum(&ob->retention)));
	ListCell   *lc;
	bool		found = false;

	foreach(lc, eo_ob_partitions(ob))
	{
		EoPartition *p = (EoPartition *) lfirst(lc);

		if (p->has_hi && p->hi <= limit && (!found || p->hi > *cutoff))
		{
			*cutoff = p->hi;
			found = true;
		}
	}
	return found;
}

/* One outbox's upkeep, and what it did, kept until its subtransaction commits. */
typedef struct Action
{
	const char *action;
	char	   *partition;
} Action;

/* Drop the partitions of ob past its retention that every group is past. */
static List *
retire_partitions(EoOutbox *ob, List *actions, EoDelivered delivered)
{
	TimestampTz limit = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
																TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()),
																IntervalPGetDatum(&ob->retention)));
	ListCell   *lc;

	foreach(lc, eo_ob_partitions(ob))
	{
		EoPartition *p = (EoPartition *) lfirst(lc);
		Action	   *a;

		if (!p->has_hi || p->hi > limit)
			continue;
		a = palloc(sizeof(Action));
		a->partition = p->name;
		/* A cheap look without locks first: most old partitions are done. */
		a->action = delivered(ob, p) ? drop_partition(ob, p, delivered) : "held";
		actions = lappend(actions, a);
		if (strcmp(a->action, "busy") == 0)
		{
			/* the next ones need the same lock: no second wait in this pass */
			eo_stat_count(EO_STAT_LOCK_WAITS_GIVEN_UP);
			break;
		}
	}
	return actions;
}

static void
lock_schema(void *arg)
{
	eo_lock_internal_schema();
}

typedef struct MaintainCall
{
	const char *name;
	bool		retire;			/* drop partitions (else make them ahead) */
	EoDelivered delivered;
	List	   *actions;
} MaintainCall;

/* One of an outbox's two steps; each runs in a subtransaction of its own. */
static void
maintain_step(void *arg)
{
	MaintainCall *call = (MaintainCall *) arg;
	EoOutbox   *ob = eo_ob_lookup(call->name, ShareUpdateExclusiveLock, true);
	ListCell   *lc;

	call->actions = NIL;
	if (ob == NULL)
		return;					/* dropped meanwhile */
	eo_cluster_check(ob);		/* before the delivery checks */
	if (call->retire)
	{
		call->actions = retire_partitions(ob, NIL, call->delivered);
		return;
	}
	foreach(lc, eo_ob_make_partitions(ob))
	{
		Action	   *a = palloc(sizeof(Action));

		a->action = "created";
		a->partition = eo_internal_name((char *) lfirst(lc));
		call->actions = lappend(call->actions, a);
	}
}

/*
 * Keep every table-mode outbox: make partitions ahead, then drop old ones,
 * each step of each outbox in a subtransaction (a partition that cannot
 * be dropped never keeps the next ones from being made); report what was
 * done through `report`.  A partition past retention is dropped only if
 * `delivered` says every consumer group is past it.  Returns how many
 * steps failed (each logged as a WARNING).  SPI connected, as the owner;
 * at READ COMMITTED.
 */
int
eo_ob_maintain_all(EoDelivered delivered, EoMaintainReport report, void *arg)
{
	ListCell   *lc;
	int			failed = 0;
	List	   *names = eo_ob_names(EO_OUTBOX_TABLE);
	StringInfoData locked;		/* outboxes whose lock was not had in time */
	int			nlocked = 0;
	ErrorData  *error;
	bool		can_create = names == NIL || eo_try(lock_schema, NULL, &error);

	/* One wait for the schema, held for the rest, not one per outbox. */
	if (!can_create)
	{
		eo_warn_failure(error, "making outbox partitions ahead",
						"Retention goes on; partitions are made at the next pass.");
		failed++;
	}
	initStringInfo(&locked);
	foreach(lc, names)
	{
		for (int retire = can_create ? 0 : 1; retire <= 1; retire++)
		{
			MaintainCall call = {(const char *) lfirst(lc), retire == 1, delivered, NIL};
			ListCell   *al;

			if (!eo_try(maintain_step, &call, &error))
			{
				failed++;
				if (error->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
					eo_warn_failure(error, psprintf("%s of outbox \"%s\"",
													retire ? "retention" : "maintenance", call.name),
									"The other outboxes were maintained.");
				else
				{
					/* its other step needs the same lock: not a second wait */
					eo_stat_count(EO_STAT_LOCK_WAITS_GIVEN_UP);
					if (nlocked++ < 10)
						appendStringInfo(&locked, "%s\"%s\"", nlocked > 1 ? ", " : "", call.name);
					FreeErrorData(error);
					break;
				}
				continue;
			}
			if (report == NULL)
				continue;
			foreach(al, call.actions)
				report(call.name, ((Action *) lfirst(al))->action,
					   ((Action *) lfirst(al))->partition, arg);
		}
	}
	/* one line for them all, however many outboxes: who held them is above */
	if (nlocked > 0)
		ereport(LOG,
				(errmsg_plural("eo: %d outbox left for the next pass, a lock was not free in time: %s%s",
							   "eo: %d outboxes left for the next pass, a lock was not free in time: %s%s",
							   nlocked, nlocked, locked.data, nlocked > 10 ? ", ..." : "")));
	return failed;
}
