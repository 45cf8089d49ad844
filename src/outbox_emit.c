/*-------------------------------------------------------------------------
 * outbox_emit.c
 *	  eo_emit: an event written in the caller's transaction, as the caller,
 *	  into a table-mode outbox (without SQL where it can, else by INSERT)
 *	  or into the WAL; and the outbox's statement trigger.
 *
 * The direct path.  eo_emit checked the caller's INSERT right on the outbox and holds its
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
 * statement instead (emit_to_table), where PostgreSQL does all it does.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_trigger.h"
#include "commands/async.h"
#include "commands/sequence.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "partitioning/partbounds.h"
#include "partitioning/partdesc.h"
#include "replication/message.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/partcache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
#include "utils/xid8.h"

#include "compat.h"
#include "eo.h"
#include "outbox.h"

PG_FUNCTION_INFO_V1(eo_emit);
PG_FUNCTION_INFO_V1(eo_outbox_notify);

/* eo_emit's arguments, checked. */
typedef struct EmitArgs
{
	pg_uuid_t  *id;
	text	   *aggregatetype;
	text	   *aggregateid;
	text	   *type;
	Jsonb	   *payload;		/* NULL if SQL NULL */
	Jsonb	   *headers;		/* NULL if SQL NULL */
} EmitArgs;

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
static bool
emit_direct(EoOutbox *ob, const EmitArgs *a)
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
		eo_ob_note_seq_drawn();
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

/* ---- eo_emit ---- */

/* A version 4 UUID, as gen_random_uuid() makes. */
static pg_uuid_t *
new_uuid(void)
{
	pg_uuid_t  *uuid = palloc(UUID_LEN);

	if (!pg_strong_random(uuid, UUID_LEN))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate random values")));
	uuid->data[6] = (uuid->data[6] & 0x0f) | 0x40;
	uuid->data[8] = (uuid->data[8] & 0x3f) | 0x80;
	return uuid;
}

/*
 * The INSERT, run as the caller (see the top of this file), for an outbox
 * that emit_direct cannot write to.
 */
static void
emit_to_table(EoOutbox *ob, const EmitArgs *a)
{
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
	SPIPlanPtr	plan;
	int			pinned;
	int			rc;

	values[0] = UUIDPGetDatum(a->id);
	values[1] = PointerGetDatum(a->aggregatetype);
	values[2] = PointerGetDatum(a->aggregateid);
	values[3] = PointerGetDatum(a->type);
	values[4] = PointerGetDatum(a->payload);
	values[5] = PointerGetDatum(a->headers);
	if (a->payload == NULL)
		nulls[4] = 'n';
	if (a->headers == NULL)
		nulls[5] = 'n';

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	if (ob->emit_plan == NULL)
	{
		Oid			types[6] = {UUIDOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID, JSONBOID};
		EoIdentity	saved;

		/* txid, seq and created_at come from the table's defaults. */
		eo_become_owner(&saved);
		ob->emit_plan = eo_prepare_kept(psprintf(
											   "INSERT INTO %s (id, aggregatetype, aggregateid, type, payload, headers)"
											   " VALUES ($1, $2, $3, $4, $5, $6)", ob->view_name),
									  6, types);
		eo_restore_identity(&saved);
	}
	/*
	 * The plan, not the entry's field: a statement trigger that calls eo
	 * again may replace the entry's plans while this one runs.
	 */
	plan = ob->emit_plan;
	pinned = eo_plan_ready(plan);
	rc = SPI_execute_plan(plan, values, nulls, false, 0);
	eo_unpin(pinned);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "eo: insert into outbox \"%s\" failed: %s",
			 ob->name, SPI_result_code_string(rc));
	eo_ob_check_plan(ob, plan);
	SPI_finish();
}

static void
append_json_text(StringInfo buf, const char *key, text *value, bool comma)
{
	if (comma)
		appendStringInfoChar(buf, ',');
	escape_json(buf, key);
	appendStringInfoChar(buf, ':');
	escape_json(buf, text_to_cstring(value));
}

static void
append_json_jsonb(StringInfo buf, const char *key, Jsonb *value)
{
	appendStringInfoChar(buf, ',');
	escape_json(buf, key);
	appendStringInfoChar(buf, ':');
	if (value == NULL)
		appendStringInfoString(buf, "null");
	else
		(void) JsonbToCString(buf, &value->root, VARSIZE(value));
}

/*
 * WAL mode: one transactional logical decoding message per event, a JSON
 * object with the outbox columns.  Decoders see it at commit, in commit
 * order, and never for a transaction that rolled back.
 */
static void
emit_to_wal(EoOutbox *ob, const EmitArgs *a)
{
	StringInfoData buf;

	if (!XLogLogicalInfoActive())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("outbox \"%s\" writes events to the WAL, but wal_level is not \"logical\"",
						ob->name),
				 errdetail("The event would be lost: no logical decoding could read it."),
				 errhint("Set wal_level = logical and restart the server.")));

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"id\":\"");
	appendStringInfoString(&buf, DatumGetCString(DirectFunctionCall1(uuid_out,
																	 UUIDPGetDatum(a->id))));
	appendStringInfoChar(&buf, '"');
	append_json_text(&buf, "aggregatetype", a->aggregatetype, true);
	append_json_text(&buf, "aggregateid", a->aggregateid, true);
	append_json_text(&buf, "type", a->type, true);
	append_json_jsonb(&buf, "payload", a->payload);
	append_json_jsonb(&buf, "headers", a->headers);
	appendStringInfoString(&buf, ",\"created_at\":");
	escape_json(&buf, timestamptz_to_str(GetCurrentTransactionStartTimestamp()));
	appendStringInfoChar(&buf, '}');

	(void) eo_log_logical_message(ob->wal_prefix, buf.data, buf.len, true);
}

/*
 * eo_emit(outbox, aggregatetype, aggregateid, type, payload, headers)
 * returns uuid: the event, written in the caller's transaction, as the
 * caller.
 */
Datum
eo_emit(PG_FUNCTION_ARGS)
{
	char	   *name;
	EmitArgs	a;
	EoOutbox   *ob;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("outbox must not be null")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	a.aggregatetype = eo_check_required_text(PG_GETARG_DATUM(1), PG_ARGISNULL(1), "aggregatetype");
	a.aggregateid = eo_check_required_text(PG_GETARG_DATUM(2), PG_ARGISNULL(2), "aggregateid");
	a.type = eo_check_required_text(PG_GETARG_DATUM(3), PG_ARGISNULL(3), "type");
	a.payload = PG_ARGISNULL(4) ? NULL : PG_GETARG_JSONB_P(4);
	a.headers = PG_ARGISNULL(5) ? NULL : PG_GETARG_JSONB_P(5);
	a.id = new_uuid();

	PreventCommandIfReadOnly("eo_emit()");	/* an event is a write, in both modes */
	ob = eo_ob_lookup(name, RowExclusiveLock, false);
	eo_ob_check_privilege(ob, ACL_INSERT, "emit to");
	if (ob->mode == EO_OUTBOX_WAL)
		emit_to_wal(ob, &a);
	else if (!emit_direct(ob, &a))
		emit_to_table(ob, &a);

	PG_RETURN_UUID_P(a.id);
}

/*
 * BEFORE INSERT ... FOR EACH STATEMENT on every table-mode outbox: ring the
 * outbox's doorbell at commit (outbox_doorbell.c; relays in eo_relay_wait) and,
 * unless the channel is empty (notify => false), one NOTIFY on the
 * outbox's channel, sent at commit.  PostgreSQL folds equal notifications
 * of one transaction into one, so a transaction that emits many events
 * wakes listening relays once; a rolled-back one not at all.
 */
Datum
eo_outbox_notify(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event) ||
		trigdata->tg_trigger->tgnargs != 1)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("eo_outbox_notify must be a statement trigger with the channel as its argument")));
	eo_doorbell_ring_at_commit(RelationGetRelid(trigdata->tg_relation));
	if (trigdata->tg_trigger->tgargs[0][0] != '\0')
		Async_Notify(trigdata->tg_trigger->tgargs[0], "");
	return PointerGetDatum(NULL);
}
