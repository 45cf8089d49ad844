/*-------------------------------------------------------------------------
 * emit.c
 *	  eo_emit's event into a table-mode outbox, without SQL.
 *
 * eo_emit checked the caller's INSERT right on the outbox and holds its
 * lock.  Here the row is formed with the values the table's defaults give
 * (created_at now(), txid the transaction's, seq drawn from the outbox's
 * sequence after the transaction id, as eo_outbox_next_seq does) and
 * inserted into the partition that holds now(), its index kept; what the
 * outbox's statement trigger would do (ring the doorbell, NOTIFY) is done
 * here.  This skips the executor's per-statement work (planning checks,
 * tuple routing set-up, defaults, the CHECK, trigger machinery), which is
 * most of what an event costs beyond its WAL.
 *
 * Only for an outbox exactly as eo made it: its one trigger eo's, its
 * partitions' one CHECK eo's, no trigger on the partition, replication
 * role "origin".  Anything else - a statement trigger someone with
 * TRIGGER added, no partition for now() - and eo_emit runs the INSERT
 * statement instead (outbox.c), where PostgreSQL does all it does.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "commands/async.h"
#include "commands/sequence.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "nodes/makefuncs.h"
#include "partitioning/partbounds.h"
#include "partitioning/partdesc.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/partcache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
#include "utils/xid8.h"

#include "compat.h"
#include "eo.h"
#include "outbox.h"

/*
 * The outbox's only trigger is eo's statement trigger (and will fire):
 * *channel is its NOTIFY channel, "" for none.
 */
static bool
only_eo_trigger(Relation parent, const char **channel)
{
	TriggerDesc *td = parent->trigdesc;
	Trigger    *t;

	if (td == NULL || td->numtriggers != 1 ||
		SessionReplicationRole != SESSION_REPLICATION_ROLE_ORIGIN)
		return false;
	t = &td->triggers[0];
	if (strcmp(t->tgname, "eo_notify") != 0 || t->tgnargs != 1 ||
		t->tgenabled != TRIGGER_FIRES_ON_ORIGIN ||
		!TRIGGER_FOR_BEFORE(t->tgtype) || TRIGGER_FOR_ROW(t->tgtype) ||
		!TRIGGER_FOR_INSERT(t->tgtype) ||
		get_func_namespace(t->tgfoid) != eo_catalog()->schema)
		return false;
	*channel = t->tgargs[0];
	return true;
}

/* The partition of `parent` that holds `at`, InvalidOid if none. */
static Oid
partition_for(Relation parent, TimestampTz at)
{
	PartitionKey key = RelationGetPartitionKey(parent);
	PartitionDesc pd = RelationGetPartitionDesc(parent, true);
	Datum		value = TimestampTzGetDatum(at);
	bool		equal;
	int			offset;
	int			index;

	if (key == NULL || key->strategy != PARTITION_STRATEGY_RANGE ||
		key->partnatts != 1 || pd->nparts == 0)
		return InvalidOid;
	/* the bound at offset is <= at; the next one bounds its partition */
	offset = partition_range_datum_bsearch(key->partsupfunc, key->partcollation,
										   pd->boundinfo, 1, &value, &equal);
	index = pd->boundinfo->indexes[offset + 1];
	return index < 0 ? InvalidOid : pd->oids[index];
}

/* The partition has no trigger and no CHECK but eo's (its parent none). */
static bool
only_eo_constraints(Relation parent, Relation part)
{
	TupleConstr *pc = RelationGetDescr(parent)->constr;
	TupleConstr *c = RelationGetDescr(part)->constr;

	return part->trigdesc == NULL && (pc == NULL || pc->num_check == 0) &&
		c != NULL && c->num_check == 1 && strcmp(c->check[0].ccname, "eo_outbox_row") == 0;
}

/* What goes into each column of the row, by name; false for a stranger. */
static bool
fill_column(const char *name, const EmitArgs *a, TimestampTz at,
			Datum *value, bool *isnull)
{
	*isnull = false;
	if (strcmp(name, "id") == 0)
		*value = UUIDPGetDatum(a->id);
	else if (strcmp(name, "aggregatetype") == 0)
		*value = PointerGetDatum(a->aggregatetype);
	else if (strcmp(name, "aggregateid") == 0)
		*value = PointerGetDatum(a->aggregateid);
	else if (strcmp(name, "type") == 0)
		*value = PointerGetDatum(a->type);
	else if (strcmp(name, "payload") == 0)
	{
		*isnull = a->payload == NULL;
		*value = PointerGetDatum(a->payload);
	}
	else if (strcmp(name, "headers") == 0)
	{
		*isnull = a->headers == NULL;
		*value = PointerGetDatum(a->headers);
	}
	else if (strcmp(name, "created_at") == 0)
		*value = TimestampTzGetDatum(at);
	else if (strcmp(name, "txid") == 0 || strcmp(name, "seq") == 0)
		*value = (Datum) 0;		/* drawn once the row is known to go in */
	else
		return false;
	return true;
}

/* Fill `slot` (of the partition) but txid and seq; false if it cannot be. */
static bool
fill_slot(TupleTableSlot *slot, const EmitArgs *a, TimestampTz at,
		  AttrNumber *txid_att, AttrNumber *seq_att)
{
	TupleDesc	desc = slot->tts_tupleDescriptor;

	ExecClearTuple(slot);
	*txid_att = *seq_att = InvalidAttrNumber;
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		const char *name = NameStr(att->attname);

		slot->tts_isnull[i] = true;
		if (att->attisdropped)
			continue;
		if (!fill_column(name, a, at, &slot->tts_values[i], &slot->tts_isnull[i]))
			return false;
		if (strcmp(name, "txid") == 0)
			*txid_att = att->attnum;
		else if (strcmp(name, "seq") == 0)
			*seq_att = att->attnum;
	}
	return *txid_att != InvalidAttrNumber && *seq_att != InvalidAttrNumber;
}

/* Insert the row in `slot` into `part` and index it. */
static void
insert_row(Relation part, EState *estate, TupleTableSlot *slot)
{
	ResultRelInfo *rri = makeNode(ResultRelInfo);

	InitResultRelInfo(rri, part, 0, NULL, 0);
	ExecStoreVirtualTuple(slot);
	table_tuple_insert(part, slot, GetCurrentCommandId(true), 0, NULL);
	ExecOpenIndices(rri, false);
	eo_insert_index_tuples(rri, slot, estate, false);
	ExecCloseIndices(rri);
}

/*
 * Write the event of `a` into table-mode outbox `ob` (looked up with ROW
 * EXCLUSIVE, the caller's INSERT right checked).  False, having written
 * nothing, if the outbox is not exactly as eo made it: the caller then
 * runs the INSERT statement.
 */
bool
eo_emit_direct(EoOutbox *ob, const EmitArgs *a)
{
	Relation	parent = table_open(ob->relid, NoLock);
	TimestampTz at = GetCurrentTransactionStartTimestamp();	/* now() */
	const char *channel;
	Oid			partid;
	Relation	part;
	EState	   *estate;
	MemoryContext caller;
	TupleTableSlot *slot;
	AttrNumber	txid_att,
				seq_att;
	bool		done = false;

	if (!only_eo_trigger(parent, &channel) ||
		!OidIsValid(partid = partition_for(parent, at)))
	{
		table_close(parent, NoLock);
		return false;
	}
	part = table_open(partid, RowExclusiveLock);
	estate = CreateExecutorState();
	caller = MemoryContextSwitchTo(estate->es_query_cxt);
	slot = ExecInitExtraTupleSlot(estate, RelationGetDescr(part), &TTSOpsVirtual);
	if (only_eo_constraints(parent, part) && fill_slot(slot, a, at, &txid_att, &seq_att))
	{
		/* seq after the transaction id, as eo_outbox_next_seq draws it */
		eo_cluster_check_seq(ob->seqid);
		slot->tts_values[txid_att - 1] = FullTransactionIdGetDatum(GetTopFullTransactionId());
		slot->tts_isnull[txid_att - 1] = false;
		slot->tts_values[seq_att - 1] = Int64GetDatum(nextval_internal(ob->seqid, false));
		slot->tts_isnull[seq_att - 1] = false;
		insert_row(part, estate, slot);
		eo_doorbell_ring_at_commit(ob->relid);
		if (channel[0] != '\0')
			Async_Notify(channel, "");
		done = true;
	}
	ExecResetTupleTable(estate->es_tupleTable, false);
	MemoryContextSwitchTo(caller);
	FreeExecutorState(estate);
	table_close(part, NoLock);
	table_close(parent, NoLock);
	if (done)
		CommandCounterIncrement();	/* as after the statement */
	return done;
}
