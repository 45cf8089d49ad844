/*-------------------------------------------------------------------------
 * outbox.c
 *	  Outboxes: eo_outbox_create / eo_outbox_drop, eo_emit (table or WAL
 *	  mode), the NOTIFY trigger, and partition upkeep (eo_outbox_maintain).
 *
 * An outbox is a table with Debezium's outbox-router columns plus two
 * that the relay (relay.c) needs:
 *
 *	 txid  xid8 DEFAULT pg_current_xact_id()   the writing transaction
 *	 seq   int8 GENERATED ALWAYS AS IDENTITY   insertion order
 *
 * txid comes before seq in the table, so an INSERT evaluates its default
 * (which assigns the transaction id) before it draws seq: every event's
 * transaction id was assigned no later than its seq.  relay.c relies on
 * that to bound its index scans (see the comment at the top of relay.c).
 * An event's slot, hash(aggregateid) mod slots, is not stored: the one
 * index is on (slot expression, seq), which costs an INSERT less than a
 * generated column would (PostgreSQL re-reads a generated column's
 * expression from the catalog for every INSERT statement).
 * The table is RANGE-partitioned on created_at; partitions are made ahead
 * by eo_outbox_create and eo_outbox_maintain, and dropped by the latter
 * once they are past the outbox's retention and every consumer group has
 * acknowledged every event in them.
 *
 * A WAL-mode outbox keeps a table too, but only as the object that
 * privileges are granted on; a CHECK (false) constraint refuses plain
 * INSERTs, and eo_emit writes a transactional logical decoding message
 * instead (prefix "eo:<outbox>").
 *
 * Identity.  eo_emit needs INSERT on the outbox table, the relay functions
 * SELECT; the check is made for the caller, then every statement runs as
 * the owner of eo's tables (the extension owner, who also owns every
 * outbox) with fully schema-qualified names, as keystore.c does.
 *
 * Process model: per backend.  Each backend caches one entry per outbox it
 * used (its table, sequence and prepared plans, so eo_emit never plans);
 * an entry is re-read from the registry after a relcache invalidation of
 * the outbox table or of the registry (create and drop send one).
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "replication/message.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "compat.h"
#include "eo.h"
#include "outbox.h"

PG_FUNCTION_INFO_V1(eo_outbox_create);
PG_FUNCTION_INFO_V1(eo_outbox_drop);
PG_FUNCTION_INFO_V1(eo_outbox_maintain);
PG_FUNCTION_INFO_V1(eo_emit);
PG_FUNCTION_INFO_V1(eo_outbox_notify);

/*
 * Longest that dropping a partition may make emitters wait, in
 * milliseconds, unless the session sets lock_timeout: the drop needs
 * ACCESS EXCLUSIVE on the outbox table, and a lock request that waits
 * makes every later INSERT queue behind it.  Past this the drop gives up
 * until the next pass.
 */
#define EO_OUTBOX_DROP_LOCK_TIMEOUT_MS 100

/* What the backend knows about eo's own schema and registry. */
typedef struct OutboxStore
{
	bool		valid;
	Oid			registry_relid; /* eo_outboxes */
	Oid			token_seq;		/* eo_outbox_token_seq */
	Oid			owner;
	char	   *schema;			/* quoted, in CacheContext */
	SPIPlanPtr	find_plan;
} OutboxStore;

static OutboxStore store;
static HTAB *outboxes = NULL;
static MemoryContext CacheContext = NULL;
static bool callback_registered = false;

/* The identity in force before eo_ob_open() switched to the owner. */
typedef struct SavedIdentity
{
	EoIdentity	identity;
	int			depth;			/* transaction nest level it was saved at */
} SavedIdentity;

static SavedIdentity saved[8];
static int	open_depth = 0;

static void ob_xact_callback(XactEvent event, void *arg);
static void ob_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
								SubTransactionId parentSubid, void *arg);

/* ---- cache and registry ---- */

static void
free_entry_plans(EoOutbox *ob)
{
	if (ob->emit_plan != NULL)
		SPI_freeplan(ob->emit_plan);
	if (ob->page_plan != NULL)
		SPI_freeplan(ob->page_plan);
	ob->emit_plan = NULL;
	ob->page_plan = NULL;
}

static void
invalidate_entries(Oid relid)
{
	HASH_SEQ_STATUS status;
	EoOutbox   *ob;

	if (outboxes == NULL)
		return;
	hash_seq_init(&status, outboxes);
	while ((ob = (EoOutbox *) hash_seq_search(&status)) != NULL)
	{
		if (!OidIsValid(relid) || ob->relid == relid)
			ob->valid = false;
	}
}

static void
ob_invalidate(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == store.registry_relid)
	{
		store.valid = false;
		invalidate_entries(InvalidOid);
	}
	else
		invalidate_entries(relid);
}

/* Make other backends (and this one) re-read the registry. */
void
eo_ob_invalidate_all(void)
{
	CacheInvalidateRelcacheByRelid(store.registry_relid);
}

/* Forget everything: the extension was dropped or recreated. */
static void
reset_cache(void)
{
	if (outboxes != NULL)
	{
		HASH_SEQ_STATUS status;
		EoOutbox   *ob;

		hash_seq_init(&status, outboxes);
		while ((ob = (EoOutbox *) hash_seq_search(&status)) != NULL)
			free_entry_plans(ob);
		hash_destroy(outboxes);
		outboxes = NULL;
	}
	if (store.find_plan != NULL)
		SPI_freeplan(store.find_plan);
	store.find_plan = NULL;
	if (CacheContext != NULL)
		MemoryContextReset(CacheContext);
	else
		CacheContext = AllocSetContextCreate(TopMemoryContext, "eo outbox cache",
											 ALLOCSET_SMALL_SIZES);
}

static void
load_store(void)
{
	Oid			nsp = get_extension_schema(get_extension_oid("eo", false));
	HASHCTL		ctl;
	Oid			types[1] = {TEXTOID};

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(ob_invalidate, (Datum) 0);
		callback_registered = true;
	}
	reset_cache();

	store.registry_relid = eo_own_table(nsp, "eo_outboxes");
	store.token_seq = eo_own_table(nsp, "eo_outbox_token_seq");
	store.owner = eo_relation_owner(store.registry_relid);
	store.schema = MemoryContextStrdup(CacheContext,
									   quote_identifier(get_namespace_name(nsp)));

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = NAMEDATALEN;
	ctl.entrysize = sizeof(EoOutbox);
	ctl.hcxt = CacheContext;
	outboxes = hash_create("eo outboxes", 16, &ctl,
						   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);

	store.find_plan = eo_prepare_kept(psprintf(
											 "SELECT nspname, mode, slots, channel FROM %s.eo_outboxes"
											 " WHERE name OPERATOR(pg_catalog.=) $1", store.schema),
									1, types);
	store.valid = true;
}

/*
 * Connect SPI and act as the owner of eo's tables until eo_ob_close().
 * An error in between needs no cleanup: (sub)transaction abort restores
 * the user and closes SPI.
 */
void
eo_ob_open(void)
{
	static bool callbacks_registered = false;

	if (!callbacks_registered)
	{
		RegisterXactCallback(ob_xact_callback, NULL);
		RegisterSubXactCallback(ob_subxact_callback, NULL);
		callbacks_registered = true;
	}
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");

	/* Registry invalidations are common (ANALYZE); reload only if gone. */
	if (!store.valid &&
		!(OidIsValid(store.registry_relid) && store.find_plan != NULL &&
		  SearchSysCacheExists1(RELOID, ObjectIdGetDatum(store.registry_relid))))
		load_store();
	store.valid = true;

	if (open_depth >= lengthof(saved))
		elog(ERROR, "eo: outbox calls nested too deeply");
	saved[open_depth].depth = GetCurrentTransactionNestLevel();
	eo_become_owner(store.owner, &saved[open_depth].identity);
	open_depth++;
}

void
eo_ob_close(void)
{
	open_depth--;
	eo_restore_identity(&saved[open_depth].identity);
	SPI_finish();
}

/* After an error the saved identities are stale; forget them. */
static void
ob_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PREPARE)
		open_depth = 0;
}

static void
ob_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					SubTransactionId parentSubid, void *arg)
{
	if (event != SUBXACT_EVENT_ABORT_SUB)
		return;
	/* Drop the levels opened inside the aborted subtransaction. */
	while (open_depth > 0 &&
		   saved[open_depth - 1].depth >= GetCurrentTransactionNestLevel())
		open_depth--;
}

Oid
eo_ob_token_seq(void)
{
	return store.token_seq;
}

const char *
eo_ob_schema(void)
{
	return store.schema;
}

/* The caller, whose privileges count (not the owner we act as). */
static Oid
caller_id(void)
{
	Assert(open_depth > 0);
	return saved[open_depth - 1].identity.userid;
}

/* Re-read one outbox from the registry; false if it is not there. */
static bool
reload_entry(EoOutbox *ob)
{
	Datum		values[1];
	bool		isnull;
	char	   *nspname;
	Oid			nsp;
	Oid			relid;
	int			rc;
	char		mode;

	ob->bell_known = false;		/* the outbox may be another one now */
	values[0] = CStringGetTextDatum(ob->name);
	rc = SPI_execute_plan(store.find_plan, values, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "eo: outbox lookup failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return false;

	nspname = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	mode = DatumGetChar(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	ob->slots = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));

	nsp = get_namespace_oid(nspname, true);
	relid = OidIsValid(nsp) ? get_relname_relid(ob->name, nsp) : InvalidOid;
	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("table of outbox \"%s\" is missing", ob->name),
				 errdetail("The registry says it is \"%s\".\"%s\".", nspname, ob->name),
				 errhint("Drop the outbox with eo_outbox_drop and create it again.")));

	if (relid != ob->relid || ob->mode != mode)
	{
		MemoryContext old = MemoryContextSwitchTo(CacheContext);

		free_entry_plans(ob);
		if (ob->qualname)
			pfree(ob->qualname);
		if (ob->channel)
			pfree(ob->channel);
		if (ob->wal_prefix)
			pfree(ob->wal_prefix);
		ob->relid = relid;
		ob->mode = mode;
		ob->qualname = psprintf("%s.%s", quote_identifier(nspname),
								quote_identifier(ob->name));
		ob->channel = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4);
		ob->channel = pstrdup(ob->channel ? ob->channel : "");
		ob->wal_prefix = psprintf("eo:%s", ob->name);
		MemoryContextSwitchTo(old);

		ob->seqid = InvalidOid;
		if (mode == EO_OUTBOX_TABLE)
			ob->seqid = eo_identity_sequence(relid, get_attnum(relid, "seq"), false);
	}
	if (mode == EO_OUTBOX_TABLE && ob->emit_plan == NULL)
	{
		Oid			types[6] = {UUIDOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID, JSONBOID};

		/* txid, seq, slot and created_at come from the table's defaults. */
		ob->emit_plan = eo_prepare_kept(psprintf(
											   "INSERT INTO %s (id, aggregatetype, aggregateid, type, payload, headers)"
											   " VALUES ($1, $2, $3, $4, $5, $6)", ob->qualname),
									  6, types);
	}
	ob->valid = true;
	return true;
}

/* The outbox called name; between eo_ob_open() and eo_ob_close() only. */
EoOutbox *
eo_ob_lookup(const char *name, bool missing_ok)
{
	EoOutbox   *ob;
	bool		found;

	ob = (EoOutbox *) hash_search(outboxes, name, HASH_ENTER, &found);
	if (!found)
	{
		char		key[NAMEDATALEN];

		strlcpy(key, name, NAMEDATALEN);
		memset(ob, 0, sizeof(*ob));
		strlcpy(ob->name, key, NAMEDATALEN);
	}
	if (ob->valid)
		return ob;
	if (reload_entry(ob))
		return ob;

	free_entry_plans(ob);
	hash_search(outboxes, name, HASH_REMOVE, NULL);
	if (!missing_ok)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("outbox \"%s\" does not exist", name)));
	return NULL;
}

/*
 * An outbox name: the table's name too, and part of the NOTIFY channel and
 * the WAL message prefix, so it is kept to plain lower-case identifiers.
 */
char *
eo_ob_check_name(Datum value, bool isnull, const char *what)
{
	text	   *t;
	char	   *s;
	int			len;

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	t = DatumGetTextPP(value);
	len = VARSIZE_ANY_EXHDR(t);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what)));
	if (len > EO_OUTBOX_MAX_NAME)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("%s is too long", what),
				 errdetail("It is %d bytes; the limit is %d bytes.", len, EO_OUTBOX_MAX_NAME)));
	s = text_to_cstring(t);
	for (int i = 0; i < len; i++)
	{
		char		c = s[i];

		if (!((c >= 'a' && c <= 'z') || c == '_' || (i > 0 && c >= '0' && c <= '9')))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_NAME),
					 errmsg("invalid %s \"%s\"", what, s),
					 errdetail("An outbox name is a lower-case letter or underscore followed by lower-case letters, digits and underscores.")));
	}
	return s;
}

/* The caller needs INSERT on the outbox table to emit, SELECT to relay. */
void
eo_ob_check_privilege(EoOutbox *ob, AclMode mode, const char *action)
{
	Oid			caller = caller_id();

	if (pg_class_aclcheck(ob->relid, caller, mode) == ACLCHECK_OK)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to %s outbox \"%s\"", action, ob->name),
			 errhint("Grant %s on table %s to role \"%s\".",
					 mode == ACL_INSERT ? "INSERT" : "SELECT", ob->qualname,
					 GetUserNameFromId(caller, false))));
}

/*
 * An event's slot as an SQL expression of its aggregateid column.  The
 * relay's queries use exactly the expression of the index, so that the
 * planner matches them.
 */
static char *
slot_expr(int32 slots, const char *column)
{
	return psprintf("((pg_catalog.hashtext(%s) OPERATOR(pg_catalog.&) 2147483647)"
					" OPERATOR(pg_catalog.%%) %d)", column, slots);
}

char *
eo_ob_slot_expr(const EoOutbox *ob, const char *alias)
{
	return slot_expr(ob->slots, psprintf("%s.aggregateid", alias));
}

/* ---- eo_emit ---- */

static text *
required_text(FunctionCallInfo fcinfo, int arg, const char *what)
{
	text	   *t;

	if (PG_ARGISNULL(arg))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	t = PG_GETARG_TEXT_PP(arg);
	if (VARSIZE_ANY_EXHDR(t) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what)));
	return t;
}

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

typedef struct EmitArgs
{
	pg_uuid_t  *id;
	text	   *aggregatetype;
	text	   *aggregateid;
	text	   *type;
	Jsonb	   *payload;		/* NULL if SQL NULL */
	Jsonb	   *headers;		/* NULL if SQL NULL */
} EmitArgs;

static void
emit_to_table(EoOutbox *ob, const EmitArgs *a)
{
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
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
	rc = SPI_execute_plan(ob->emit_plan, values, nulls, false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "eo: insert into outbox \"%s\" failed: %s",
			 ob->name, SPI_result_code_string(rc));
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
 * returns uuid: the event, written in the caller's transaction.
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
	a.aggregatetype = required_text(fcinfo, 1, "aggregatetype");
	a.aggregateid = required_text(fcinfo, 2, "aggregateid");
	a.type = required_text(fcinfo, 3, "type");
	a.payload = PG_ARGISNULL(4) ? NULL : PG_GETARG_JSONB_P(4);
	a.headers = PG_ARGISNULL(5) ? NULL : PG_GETARG_JSONB_P(5);
	a.id = new_uuid();

	if (strlen(name) >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("outbox \"%s\" does not exist", name)));

	eo_ob_open();
	ob = eo_ob_lookup(name, false);
	eo_ob_check_privilege(ob, ACL_INSERT, "emit to");
	if (ob->mode == EO_OUTBOX_WAL)
		emit_to_wal(ob, &a);
	else
		emit_to_table(ob, &a);
	eo_ob_close();

	PG_RETURN_UUID_P(a.id);
}

/*
 * BEFORE INSERT ... FOR EACH STATEMENT on every table-mode outbox: ring the
 * outbox's doorbell at commit (doorbell.c; relays in eo_relay_wait) and,
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

/* ---- partitions ---- */

/*
 * The partitions of an outbox table with their bounds (NULL for MINVALUE /
 * MAXVALUE), oldest first.  pg_get_expr() renders the bounds in this
 * session's settings, so casting them back is exact.
 */
#define PARTITIONS_SQL \
	"SELECT c.relname::pg_catalog.text, m[1]::pg_catalog.timestamptz AS lo," \
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
 * Make the partitions of [start of the current interval, now + premake
 * intervals] that no partition covers yet.  Returns their names.
 */
static List *
make_partitions_ahead(Oid relid, const char *qualname, const char *name,
					  Interval *every, int32 premake)
{
	Oid			types[3] = {OIDOID, INTERVALOID, INT4OID};
	Datum		values[3];
	List	   *made = NIL;
	int			rc;
	uint64		n;
	char	  **los;
	char	  **his;
	char	  **suffixes;

	values[0] = ObjectIdGetDatum(relid);
	values[1] = IntervalPGetDatum(every);
	values[2] = Int32GetDatum(premake);
	rc = SPI_execute_with_args(
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
							   3, types, values, NULL, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "eo: partition planning failed: %s", SPI_result_code_string(rc));

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
		char	   *part = psprintf("%s_p%s", name, suffixes[i]);
		char	   *nsp = get_namespace_name(get_rel_namespace(relid));

		run_sql(psprintf("CREATE TABLE %s.%s PARTITION OF %s FOR VALUES FROM (%s) TO (%s)",
						 quote_identifier(nsp), quote_identifier(part), qualname,
						 quote_literal_cstr(los[i]), quote_literal_cstr(his[i])));
		made = lappend(made, part);
	}
	return made;
}

/* ---- eo_outbox_create / eo_outbox_drop ---- */

typedef struct CreateArgs
{
	char	   *name;
	Oid			nsp;
	char		mode;
	int32		slots;
	Interval   *every;
	int32		premake;
	Interval   *retention;
	bool		notify;
} CreateArgs;

static void
check_create_args(FunctionCallInfo fcinfo, CreateArgs *a)
{
	char	   *mode;
	Interval   *every;
	Interval   *retention;
	AclResult	acl;

	a->name = eo_ob_check_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "outbox name");
	if (PG_ARGISNULL(1))
		a->nsp = get_extension_schema(get_extension_oid("eo", false));
	else
		a->nsp = get_namespace_oid(NameStr(*PG_GETARG_NAME(1)), false);
	acl = eo_namespace_aclcheck(a->nsp, GetUserId(), ACL_CREATE);
	if (acl != ACLCHECK_OK)
		aclcheck_error(acl, OBJECT_SCHEMA, get_namespace_name(a->nsp));

	mode = PG_ARGISNULL(2) ? "table" : text_to_cstring(PG_GETARG_TEXT_PP(2));
	if (strcmp(mode, "table") == 0)
		a->mode = EO_OUTBOX_TABLE;
	else if (strcmp(mode, "wal") == 0)
		a->mode = EO_OUTBOX_WAL;
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid outbox mode \"%s\"", mode),
				 errhint("Use \"table\" or \"wal\".")));

	a->slots = PG_ARGISNULL(3) ? 8 : PG_GETARG_INT32(3);
	if (a->slots < 1 || a->slots > EO_OUTBOX_MAX_SLOTS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("slots must be between 1 and %d", EO_OUTBOX_MAX_SLOTS)));

	if (PG_ARGISNULL(4))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("partition_interval must not be null")));
	every = PG_GETARG_INTERVAL_P(4);
	if (every->month != 0 ||
		(double) every->day * USECS_PER_DAY + every->time < (double) USECS_PER_MINUTE ||
		(double) every->day * USECS_PER_DAY + every->time > 366.0 * USECS_PER_DAY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("partition_interval must be between 1 minute and 366 days"),
				 errdetail("Months are not allowed: give days, hours or minutes.")));
	a->every = every;

	a->premake = PG_ARGISNULL(5) ? 4 : PG_GETARG_INT32(5);
	if (a->premake < 1 || a->premake > 1000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("premake must be between 1 and 1000")));

	if (PG_ARGISNULL(6))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("retention must not be null")));
	retention = PG_GETARG_INTERVAL_P(6);
	if (retention->month < 0 || retention->day < 0 || retention->time < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("retention must not be negative")));
	a->retention = retention;
	a->notify = PG_ARGISNULL(7) ? true : PG_GETARG_BOOL(7);
}

static void
create_table_mode(const CreateArgs *a, const char *qualname, const char *channel)
{
	/* txid before seq: see the comment at the top of this file. */
	run_sql(psprintf(
					 "CREATE TABLE %s ("
					 " id pg_catalog.uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),"
					 " aggregatetype pg_catalog.text NOT NULL,"
					 " aggregateid pg_catalog.text NOT NULL,"
					 " type pg_catalog.text NOT NULL,"
					 " payload pg_catalog.jsonb,"
					 " headers pg_catalog.jsonb,"
					 " created_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.now(),"
					 " txid pg_catalog.xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),"
					 " seq pg_catalog.int8 GENERATED ALWAYS AS IDENTITY"
					 ") PARTITION BY RANGE (created_at)",
					 qualname));
	run_sql(psprintf("CREATE INDEX %s ON %s ((%s), seq)",
					 quote_identifier(psprintf("%s_slot_seq", a->name)), qualname,
					 slot_expr(a->slots, "aggregateid")));
	run_sql(psprintf("CREATE TRIGGER eo_notify BEFORE INSERT ON %s"
					 " FOR EACH STATEMENT EXECUTE FUNCTION %s.eo_outbox_notify(%s)",
					 qualname, store.schema,
					 quote_literal_cstr(channel != NULL ? channel : "")));
	run_sql(psprintf("COMMENT ON TABLE %s IS %s", qualname,
					 quote_literal_cstr(psprintf("eo outbox \"%s\": insert-only; "
												 "write with eo_emit() or INSERT, read with eo_relay_fetch()",
												 a->name))));
}

static void
create_wal_mode(const CreateArgs *a, const char *qualname)
{
	run_sql(psprintf(
					 "CREATE TABLE %s ("
					 " id pg_catalog.uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),"
					 " aggregatetype pg_catalog.text NOT NULL,"
					 " aggregateid pg_catalog.text NOT NULL,"
					 " type pg_catalog.text NOT NULL,"
					 " payload pg_catalog.jsonb,"
					 " headers pg_catalog.jsonb,"
					 " created_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.now(),"
					 " CONSTRAINT %s CHECK (false)"
					 ")",
					 qualname, quote_identifier(psprintf("%s_wal_mode_use_eo_emit", a->name))));
	run_sql(psprintf("COMMENT ON TABLE %s IS %s", qualname,
					 quote_literal_cstr(psprintf("eo outbox \"%s\" in WAL mode: eo_emit() writes "
												 "logical decoding messages with prefix \"eo:%s\"; "
												 "this table stays empty",
												 a->name, a->name))));
}

/*
 * eo_outbox_create(name, schema, mode, slots, partition_interval, premake,
 * retention, notify) returns regclass.
 */
Datum
eo_outbox_create(PG_FUNCTION_ARGS)
{
	CreateArgs	a;
	char	   *qualname;
	char	   *channel;
	Oid			relid;
	Oid			types[8] = {TEXTOID, NAMEOID, CHAROID, INT4OID, INTERVALOID,
		INT4OID, INTERVALOID, TEXTOID};
	Datum		values[8];
	int			rc;

	check_create_args(fcinfo, &a);
	qualname = psprintf("%s.%s", quote_identifier(get_namespace_name(a.nsp)),
						quote_identifier(a.name));
	/* No NOTIFY in WAL mode (decoders stream), nor if not wanted: a
	 * transaction that sent one cannot PREPARE TRANSACTION. */
	channel = (a.mode == EO_OUTBOX_TABLE && a.notify) ? psprintf("eo_%s", a.name) : NULL;

	eo_ob_open();
	if (eo_ob_lookup(a.name, true) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("outbox \"%s\" already exists", a.name)));

	if (a.mode == EO_OUTBOX_TABLE)
		create_table_mode(&a, qualname, channel);
	else
		create_wal_mode(&a, qualname);
	relid = get_relname_relid(a.name, a.nsp);
	if (a.mode == EO_OUTBOX_TABLE)
		(void) make_partitions_ahead(relid, qualname, a.name, a.every, a.premake);

	values[0] = CStringGetTextDatum(a.name);
	values[1] = DirectFunctionCall1(namein, CStringGetDatum(get_namespace_name(a.nsp)));
	values[2] = CharGetDatum(a.mode);
	values[3] = Int32GetDatum(a.slots);
	values[4] = IntervalPGetDatum(a.every);
	values[5] = Int32GetDatum(a.premake);
	values[6] = IntervalPGetDatum(a.retention);
	values[7] = channel ? CStringGetTextDatum(channel) : (Datum) 0;
	rc = SPI_execute_with_args(psprintf(
										"INSERT INTO %s.eo_outboxes (name, nspname, mode, slots,"
										" partition_interval, premake, retention, channel, created_at)"
										" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, pg_catalog.now())",
										store.schema),
							   8, types, values, channel ? NULL : "       n", false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "eo: outbox registration failed: %s", SPI_result_code_string(rc));
	eo_ob_invalidate_all();
	eo_ob_close();

	PG_RETURN_OID(relid);
}

/* eo_outbox_drop(name): the table, its partitions, groups and positions. */
Datum
eo_outbox_drop(PG_FUNCTION_ARGS)
{
	char	   *name = eo_ob_check_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "outbox name");
	EoOutbox   *ob;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	char	   *qualname;
	int			rc;

	eo_ob_open();
	ob = eo_ob_lookup(name, false);
	qualname = pstrdup(ob->qualname);

	run_sql(psprintf("DROP TABLE %s", qualname));
	values[0] = CStringGetTextDatum(name);
	rc = SPI_execute_with_args(psprintf("DELETE FROM %s.eo_outboxes WHERE name OPERATOR(pg_catalog.=) $1",
										store.schema),
							   1, types, values, NULL, false, 0);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "eo: outbox removal failed: %s", SPI_result_code_string(rc));
	eo_ob_invalidate_all();
	eo_ob_close();
	PG_RETURN_VOID();
}

/* ---- eo_outbox_maintain ---- */

typedef struct MaintainRow
{
	char	   *outbox;
	const char *action;
	char	   *partition;
} MaintainRow;

/* Where eo_outbox_maintain() keeps its answer (SPI's memory goes away). */
static MemoryContext maintain_cxt;

static void
add_row(List **rows, const char *outbox, const char *action, const char *partition)
{
	MemoryContext old = MemoryContextSwitchTo(maintain_cxt);
	MaintainRow *r = palloc(sizeof(MaintainRow));

	r->outbox = pstrdup(outbox);
	r->action = action;
	r->partition = pstrdup(partition);
	*rows = lappend(*rows, r);
	MemoryContextSwitchTo(old);
}

/*
 * Lock the outbox table, make sure the partition is still fully delivered,
 * drop it.  Waits at most lock_timeout (or EO_OUTBOX_DROP_LOCK_TIMEOUT_MS
 * if it is 0) for the lock; a
 * subtransaction undoes everything (and frees the locks) when it gives up
 * or finds the partition undelivered after all.  Returns the action taken.
 */
static const char *
drop_partition(EoOutbox *ob, const char *nspq, const char *part)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	char	   *partq = psprintf("%s.%s", nspq, quote_identifier(part));
	const char *action = "dropped";
	int			nest = NewGUCNestLevel();

	(void) set_config_option("lock_timeout",
							 psprintf("%d", LockTimeout > 0 ? LockTimeout : EO_OUTBOX_DROP_LOCK_TIMEOUT_MS),
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
		run_sql(psprintf("LOCK TABLE ONLY %s IN ACCESS EXCLUSIVE MODE", ob->qualname));
		run_sql(psprintf("LOCK TABLE ONLY %s IN ACCESS EXCLUSIVE MODE", partq));
		if (eo_relay_partition_delivered(ob, partq))
		{
			run_sql(psprintf("DROP TABLE %s", partq));
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
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		FreeErrorData(edata);
		action = "busy";
	}
	PG_END_TRY();
	AtEOXact_GUC(true, nest);
	return action;
}

/* Drop the partitions of ob past its retention that every group is past. */
static void
retire_partitions(EoOutbox *ob, Interval *retention, List **rows)
{
	Oid			types[2] = {OIDOID, INTERVALOID};
	Datum		values[2];
	int			rc;
	uint64		n;
	char	  **parts;
	const char *nspq = quote_identifier(get_namespace_name(get_rel_namespace(ob->relid)));

	values[0] = ObjectIdGetDatum(ob->relid);
	values[1] = IntervalPGetDatum(retention);
	rc = SPI_execute_with_args("SELECT relname FROM (" PARTITIONS_SQL ") p"
							   " WHERE p.hi OPERATOR(pg_catalog.<=) (pg_catalog.now() OPERATOR(pg_catalog.-) $2)"
							   " ORDER BY p.hi",
							   2, types, values, NULL, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "eo: partition listing failed: %s", SPI_result_code_string(rc));
	n = SPI_processed;
	parts = palloc(sizeof(char *) * (n + 1));
	for (uint64 i = 0; i < n; i++)
		parts[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);

	for (uint64 i = 0; i < n; i++)
	{
		char	   *partq = psprintf("%s.%s", nspq, quote_identifier(parts[i]));

		/* A cheap look without locks first: most old partitions are done. */
		if (!eo_relay_partition_delivered(ob, partq))
			add_row(rows, ob->name, "held", parts[i]);
		else
			add_row(rows, ob->name, drop_partition(ob, nspq, parts[i]), parts[i]);
	}
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
	List	   *rows = NIL;
	List	   *names = NIL;
	List	   *everys = NIL;
	List	   *premakes = NIL;
	List	   *retentions = NIL;
	ListCell   *lc1,
			   *lc2,
			   *lc3,
			   *lc4;
	MemoryContext cxt = CurrentMemoryContext;
	int			rc;

	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("eo_outbox_maintain must run at READ COMMITTED"),
				 errdetail("It must see events committed while it waits for locks.")));

	InitMaterializedSRF(fcinfo, 0);
	maintain_cxt = cxt;

	eo_ob_open();
	rc = SPI_execute(psprintf("SELECT name, partition_interval, premake, retention"
							  " FROM %s.eo_outboxes WHERE mode OPERATOR(pg_catalog.=) 't'"
							  " ORDER BY name", store.schema), true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "eo: registry scan failed: %s", SPI_result_code_string(rc));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		MemoryContext old = MemoryContextSwitchTo(cxt);

		names = lappend(names, SPI_getvalue(tup, desc, 1));
		everys = lappend(everys, DatumGetIntervalP(datumCopy(SPI_getbinval(tup, desc, 2, &isnull), false, 16)));
		premakes = lappend_int(premakes, DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull)));
		retentions = lappend(retentions, DatumGetIntervalP(datumCopy(SPI_getbinval(tup, desc, 4, &isnull), false, 16)));
		MemoryContextSwitchTo(old);
	}

	forfour(lc1, names, lc2, everys, lc3, premakes, lc4, retentions)
	{
		EoOutbox   *ob = eo_ob_lookup((char *) lfirst(lc1), true);
		List	   *made;
		ListCell   *lc;

		if (ob == NULL)
			continue;			/* dropped meanwhile */
		made = make_partitions_ahead(ob->relid, ob->qualname, ob->name,
									 (Interval *) lfirst(lc2), lfirst_int(lc3));
		foreach(lc, made)
			add_row(&rows, ob->name, "created", (char *) lfirst(lc));
		retire_partitions(ob, (Interval *) lfirst(lc4), &rows);
	}
	eo_ob_close();

	foreach(lc1, rows)
	{
		MaintainRow *r = (MaintainRow *) lfirst(lc1);
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		values[0] = CStringGetTextDatum(r->outbox);
		values[1] = CStringGetTextDatum(r->action);
		values[2] = CStringGetTextDatum(r->partition);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * The end of the newest partition of ob that is past retention (all of
 * its events are older than that), or false if none is.
 */
bool
eo_ob_retention_cutoff(EoOutbox *ob, Interval *retention, TimestampTz *cutoff)
{
	Oid			types[2] = {OIDOID, INTERVALOID};
	Datum		values[2];
	bool		isnull;
	int			rc;

	values[0] = ObjectIdGetDatum(ob->relid);
	values[1] = IntervalPGetDatum(retention);
	rc = SPI_execute_with_args("SELECT pg_catalog.max(p.hi) FROM (" PARTITIONS_SQL ") p"
							   " WHERE p.hi OPERATOR(pg_catalog.<=) (pg_catalog.now() OPERATOR(pg_catalog.-) $2)",
							   2, types, values, NULL, true, 0);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "eo: partition listing failed: %s", SPI_result_code_string(rc));
	*cutoff = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
												SPI_tuptable->tupdesc, 1, &isnull));
	return !isnull;
}
