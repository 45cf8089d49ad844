/*-------------------------------------------------------------------------
 * outbox_registry.c
 *	  Outboxes: the registry and its per-backend cache, the check that an
 *	  outbox's table is the one eo made, who may use or administer an
 *	  outbox, and the seq column's default and check.  Below every other
 *	  outbox_*.c file; eo_outbox_create and eo_outbox_drop are in
 *	  outbox_create.c, eo_emit in outbox_emit.c.
 *
 * An outbox is a table with Debezium's outbox-router columns plus two
 * that the relay (outbox_relay.c) needs:
 *
 *	 txid  xid8  DEFAULT pg_current_xact_id()              the writing transaction
 *	 seq   int8  DEFAULT eo_internal.eo_outbox_next_seq()  insertion order
 *
 * eo_outbox_next_seq assigns the transaction id before it draws seq, so
 * every event's transaction id was assigned no later than its seq: the relay
 * relies on that to bound its index scans.  Producers cannot set either
 * column: every partition has a CHECK (eo_outbox_row_check) that accepts a
 * row only if its seq is the value the default just drew for it and its
 * txid is the inserting transaction's.  An event's slot, hash(aggregateid)
 * mod slots, is not stored: the one index is on (slot expression, seq).
 * The table is RANGE-partitioned on created_at; its partitions live in
 * eo_internal (outbox_partitions.c).
 *
 * A WAL-mode outbox keeps a table too, but only as the object that
 * privileges are granted on; a CHECK (false) constraint refuses plain
 * INSERTs, and eo_emit writes a transactional logical decoding message
 * instead (prefix "eo:<outbox>").
 *
 * Trust (see objects.c).  The registry records each outbox table by OID.
 * Every entry is verified when it is (re)loaded: owned by the extension
 * owner, exactly the columns and types eo made, no rules or row security.
 * eo_emit inserts as the caller, who needs INSERT on the outbox anyway, so
 * a trigger someone added runs with the rights of whoever inserts, never
 * eo's.  Statements never name the outbox table itself, whose name the
 * owner of its schema controls (renaming the schema and making a
 * look-alike under the old name would let a statement planned or run by
 * name hit the look-alike): they name eo_internal.<outbox>_v, a view of
 * the table, bound to it by OID when made, WITH (security_invoker), so the
 * caller's own rights on the table count.  Only the extension owner may
 * name anything in eo_internal, so eo plans these statements as the owner
 * (eo_plan_ready) and runs them as the caller.  Tables are made in eo_internal
 * and only then moved, by OID, into the schema the caller chose.
 *
 * Process model: per backend.  Each backend caches one entry per outbox it
 * used; an entry is dropped after a relcache invalidation of the outbox
 * table or of the registry (create and drop send one).
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/partcache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/xid8.h"

#include "compat.h"
#include "eo.h"
#include "outbox.h"

PG_FUNCTION_INFO_V1(eo_outbox_next_seq);
PG_FUNCTION_INFO_V1(eo_outbox_row_check);

/* The columns eo makes, in table order (WAL mode: the first seven). */
#define OUTBOX_COLUMNS(X) \
	X(OCOL_ID, "id", UUIDOID) \
	X(OCOL_AGGREGATETYPE, "aggregatetype", TEXTOID) \
	X(OCOL_AGGREGATEID, "aggregateid", TEXTOID) \
	X(OCOL_TYPE, "type", TEXTOID) \
	X(OCOL_PAYLOAD, "payload", JSONBOID) \
	X(OCOL_HEADERS, "headers", JSONBOID) \
	X(OCOL_CREATED_AT, "created_at", TIMESTAMPTZOID) \
	X(OCOL_TXID, "txid", XID8OID) \
	X(OCOL_SEQ, "seq", INT8OID)

enum
{
	OCOL_NONE = 0,
	OUTBOX_COLUMNS(EO_COLUMN_ENUM)
	OCOL_COUNT_PLUS_1
};
#define TABLE_MODE_COLUMNS (OCOL_COUNT_PLUS_1 - 1)
#define WAL_MODE_COLUMNS OCOL_CREATED_AT

static const EoColumn outbox_columns[] = {OUTBOX_COLUMNS(EO_COLUMN_DESC)};

/* The registry's columns that an entry is made from, as read. */
#define REGISTRY_COLUMNS(X) \
	X(REG_RELID, "relid", REGCLASSOID) \
	X(REG_MODE, "mode", CHAROID) \
	X(REG_SLOTS, "slots", INT4OID) \
	X(REG_OWNER, "owner", REGROLEOID) \
	X(REG_SEQ, "seq", REGCLASSOID) \
	X(REG_EVERY, "partition_interval", INTERVALOID) \
	X(REG_PREMAKE, "premake", INT4OID) \
	X(REG_RETENTION, "retention", INTERVALOID)

enum
{
	REG_NONE = 0,
	REGISTRY_COLUMNS(EO_COLUMN_ENUM)
	REG_NCOLS_PLUS_1
};
#define REG_NCOLS (REG_NCOLS_PLUS_1 - 1)

static const EoColumn registry_columns[] = {REGISTRY_COLUMNS(EO_COLUMN_DESC)};

/* What the backend knows about the registry. */
typedef struct OutboxStore
{
	bool		valid;
	Oid			registry_relid; /* eo_internal.eo_outboxes */
	Oid			token_seq;		/* eo_internal.eo_outbox_token_seq */
	SPIPlanPtr	find_plan;
} OutboxStore;

static OutboxStore store;
static HTAB *outboxes = NULL;
static MemoryContext CacheContext = NULL;
static bool callback_registered = false;

/* Sequences eo_outbox_next_seq may draw from, and their outboxes' tables. */
static List *approved_seqs = NIL;
static List *approved_tables = NIL;


/* ---- cache ---- */

static void
free_entry_plans(EoOutbox *ob)
{
	/* (they may be running further up the stack: see eo_free_plan_later) */
	eo_free_plan_later(ob->emit_plan);
	eo_free_plan_later(ob->page_plan);
	eo_free_plan_later(ob->old_plan);
	eo_free_plan_later(ob->probe_plan);
	eo_free_plan_later(ob->pages_plan);
	ob->emit_plan = NULL;
	ob->page_plan = NULL;
	ob->old_plan = NULL;
	ob->probe_plan = NULL;
	ob->pages_plan = NULL;
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

/*
 * Forget what this backend's fetches knew about the doorbells
 * (outbox_relay_fetch.c): one was rolled back, and its pages are free
 * again.
 */
void
eo_ob_forget_fetches(void)
{
	HASH_SEQ_STATUS status;
	EoOutbox   *ob;

	if (outboxes == NULL)
		return;
	hash_seq_init(&status, outboxes);
	while ((ob = (EoOutbox *) hash_seq_search(&status)) != NULL)
		for (int i = 0; i < EO_BELLS; i++)
			ob->bells[i].known = false;
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
	if (!OidIsValid(relid) || relid == store.registry_relid ||
		list_member_oid(approved_seqs, relid) || list_member_oid(approved_tables, relid))
	{
		list_free(approved_seqs);
		list_free(approved_tables);
		approved_seqs = NIL;
		approved_tables = NIL;
	}
}

/* Make other backends (and this one) re-read the registry. */
void
eo_ob_registry_changed(void)
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
	eo_free_plan_later(store.find_plan);
	store.find_plan = NULL;
	if (CacheContext != NULL)
		MemoryContextReset(CacheContext);
	else
		CacheContext = AllocSetContextCreate(TopMemoryContext, "eo outbox cache",
											 ALLOCSET_SMALL_SIZES);
}

/* Find the registry (SPI connected, acting as the owner). */
static void
load_store(void)
{
	HASHCTL		ctl;
	Oid			types[1] = {TEXTOID};

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(ob_invalidate, (Datum) 0);
		callback_registered = true;
	}
	reset_cache();

	store.registry_relid = eo_own_relation("eo_outboxes", RELKIND_RELATION);
	store.token_seq = eo_own_relation("eo_outbox_token_seq", RELKIND_SEQUENCE);

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = NAMEDATALEN;
	ctl.entrysize = sizeof(EoOutbox);
	ctl.hcxt = CacheContext;
	outboxes = hash_create("eo outboxes", 16, &ctl,
						   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);

	store.find_plan = eo_prepare_kept(psprintf("SELECT %s FROM eo_internal.eo_outboxes"
											   " WHERE name OPERATOR(pg_catalog.=) $1",
											   eo_columns_list(registry_columns, REG_NCOLS)),
									  1, types);
	store.valid = true;
}

/* Registry invalidations are common (ANALYZE): reload only if it is gone. */
static void
ensure_store(void)
{
	if (store.valid)
		return;
	if (!(OidIsValid(store.registry_relid) && store.find_plan != NULL &&
		  SearchSysCacheExists1(RELOID, ObjectIdGetDatum(store.registry_relid))))
		load_store();
	store.valid = true;
}

static Interval
interval_column(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;

	return *DatumGetIntervalP(SPI_getbinval(tup, desc, col, &isnull));
}

/* Connect SPI and act as the owner, with the registry loaded. */
static void
registry_begin(EoIdentity *saved)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(saved);
	ensure_store();
}

static void
registry_end(EoIdentity *saved)
{
	eo_restore_identity(saved);
	SPI_finish();
}

/*
 * Read outbox `name` from the registry, as the owner (nobody else may read
 * eo_internal); false if it is not there.  With the latest snapshot, as
 * the catalog is read: after waiting for a lock on an outbox that was
 * being dropped, its row is gone as its table is, whatever snapshot the
 * statement that waited started with.
 */
bool
eo_ob_read_registry(const char *name, EoRegistryRow *row)
{
	EoIdentity	saved;
	Datum		values[1];
	bool		found;

	registry_begin(&saved);
	values[0] = CStringGetTextDatum(name);
	if (SPI_execute_snapshot(store.find_plan, values, NULL, GetLatestSnapshot(),
							 InvalidSnapshot, true, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "eo: outbox lookup failed");
	found = SPI_processed == 1;
	if (found)
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		seq;

		row->relid = DatumGetObjectId(SPI_getbinval(tup, desc, REG_RELID, &isnull));
		row->mode = DatumGetChar(SPI_getbinval(tup, desc, REG_MODE, &isnull));
		row->slots = DatumGetInt32(SPI_getbinval(tup, desc, REG_SLOTS, &isnull));
		row->owner = DatumGetObjectId(SPI_getbinval(tup, desc, REG_OWNER, &isnull));
		seq = SPI_getbinval(tup, desc, REG_SEQ, &isnull);
		row->seq = isnull ? InvalidOid : DatumGetObjectId(seq);
		row->every = interval_column(tup, desc, REG_EVERY);
		row->premake = DatumGetInt32(SPI_getbinval(tup, desc, REG_PREMAKE, &isnull));
		row->retention = interval_column(tup, desc, REG_RETENTION);
	}
	registry_end(&saved);
	return found;
}

/*
 * Refuse the outbox unless its table is the one eo made: owned by the
 * extension owner, exactly eo's columns and types, partitioned on
 * created_at (table mode) with the sequence eo made.
 */
void
eo_ob_verify_columns(const EoOutbox *ob)
{
	char	   *what = psprintf("table of outbox \"%s\"", ob->name);
	bool		table_mode = ob->mode == EO_OUTBOX_TABLE;
	int			ncols = table_mode ? TABLE_MODE_COLUMNS : WAL_MODE_COLUMNS;
	Relation	rel;
	char	   *problem;

	rel = relation_open(ob->relid, AccessShareLock);
	/* eo's columns in eo's order; dropped columns are no columns */
	problem = eo_columns_mismatch(RelationGetDescr(rel), outbox_columns, ncols, true);
	if (problem == NULL && table_mode)
	{
		PartitionKey key = RelationGetPartitionKey(rel);

		if (key->strategy != PARTITION_STRATEGY_RANGE || key->partnatts != 1 ||
			key->partattrs[0] != get_attnum(ob->relid, "created_at"))
			problem = pstrdup("it is not partitioned by range of created_at");
	}
	relation_close(rel, NoLock);
	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("%s is not the table eo made: %s", what, problem),
				 errhint("Drop the outbox with eo_outbox_drop and create it again.")));
}

/*
 * Refuse the outbox unless its table is the one eo made: owned by the
 * extension owner, exactly eo's columns and types, partitioned on
 * created_at (table mode) with the sequence eo made.
 */
void
eo_ob_verify(const EoOutbox *ob)
{
	bool		table_mode = ob->mode == EO_OUTBOX_TABLE;

	eo_check_own_relation(ob->relid, table_mode ? RELKIND_PARTITIONED_TABLE : RELKIND_RELATION,
						  false, psprintf("table of outbox \"%s\"", ob->name));
	eo_ob_verify_columns(ob);
	if (table_mode)
		eo_check_own_relation(ob->seqid, RELKIND_SEQUENCE, false,
							  psprintf("sequence of outbox \"%s\"", ob->name));
}

/* schema.table of the outbox as named now, quoted. */
static char *
current_qualname(Oid relid)
{
	char	   *rel = get_rel_name(relid);
	char	   *nsp = rel ? get_namespace_name(get_rel_namespace(relid)) : NULL;

	if (rel == NULL || nsp == NULL)
		return NULL;
	return psprintf("%s.%s", quote_identifier(nsp), quote_identifier(rel));
}

/* Re-read one outbox from the registry and verify it; false if not there. */
static bool
reload_entry(EoOutbox *ob, LOCKMODE lockmode)
{
	EoRegistryRow row;
	MemoryContext old;
	char	   *qualname;

	/* the outbox may be another one now */
	memset(ob->bells, 0, sizeof(ob->bells));
	ob->bell_last = 0;
	ob->bell_clock = 0;
	if (!eo_ob_read_registry(ob->name, &row))
		return false;

	/*
	 * Lock the table before looking at it: a drop in progress is waited
	 * for here, and if it took the table, the registry is read again (the
	 * row went with it if the drop was eo_outbox_drop's).
	 */
	LockRelationOid(row.relid, lockmode);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(row.relid)) &&
		!eo_ob_read_registry(ob->name, &row))
		return false;
	if (row.relid != ob->relid || row.mode != ob->mode)
		free_entry_plans(ob);
	ob->relid = row.relid;
	ob->mode = row.mode;
	ob->slots = row.slots;
	ob->owner = row.owner;
	ob->seqid = row.seq;
	ob->every = row.every;
	ob->premake = row.premake;
	ob->retention = row.retention;
	eo_ob_verify(ob);

	ob->view = get_relname_relid(psprintf("%s_v", ob->name), eo_catalog()->schema);
	if (ob->mode == EO_OUTBOX_TABLE)
	{
		if (!OidIsValid(ob->view))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_TABLE),
					 errmsg("the view of outbox \"%s\" is missing from schema \"%s\"",
							ob->name, EO_INTERNAL_SCHEMA),
					 errhint("Call eo_outbox_create('%s') again: it gives the outbox back what it lacks.",
							 ob->name)));
		eo_check_own_relation(ob->view, RELKIND_VIEW, true,
							  psprintf("view of outbox \"%s\"", ob->name));
	}

	old = MemoryContextSwitchTo(CacheContext);
	if (ob->view_name == NULL)
		ob->view_name = eo_internal_name(psprintf("%s_v", ob->name));
	qualname = current_qualname(ob->relid);
	if (ob->qualname == NULL || strcmp(ob->qualname, qualname) != 0)
		free_entry_plans(ob);	/* they name the table as it was named */
	if (ob->qualname)
		pfree(ob->qualname);
	ob->qualname = qualname;
	if (ob->wal_prefix == NULL)
		ob->wal_prefix = psprintf("eo:%s", ob->name);
	MemoryContextSwitchTo(old);
	ob->valid = true;
	return true;
}

/*
 * The outbox called `name`, its table locked with `lockmode` and verified.
 * The lock is taken before the entry is trusted: taking it accepts
 * invalidations, after which a dropped or changed table is noticed.
 */
EoOutbox *
eo_ob_lookup(const char *name, LOCKMODE lockmode, bool missing_ok)
{
	EoOutbox   *ob;
	bool		found;

	if (strlen(name) >= NAMEDATALEN)
		goto missing;
	if (!store.valid || outboxes == NULL)
	{
		EoIdentity	saved;

		registry_begin(&saved);
		registry_end(&saved);
	}
	ob = (EoOutbox *) hash_search(outboxes, name, HASH_ENTER, &found);
	if (!found)
	{
		char		key[NAMEDATALEN];

		strlcpy(key, name, NAMEDATALEN);
		memset(ob, 0, sizeof(*ob));
		strlcpy(ob->name, key, NAMEDATALEN);
	}
	for (;;)
	{
		if (!ob->valid && !reload_entry(ob, lockmode))
			break;
		LockRelationOid(ob->relid, lockmode);
		if (ob->valid)
			return ob;
	}
	/* The entry stays (invalid): a call further up the stack may use it. */
	free_entry_plans(ob);
missing:
	if (!missing_ok)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("outbox \"%s\" does not exist", name),
				 strchr(name, '.') != NULL ?
				 errhint("An outbox is named without a schema (its name is unique in the database): "
						 "the name given to eo_outbox_create, not its table's qualified name.") : 0));
	return NULL;
}

Oid
eo_ob_token_seq(void)
{
	ensure_store();
	return store.token_seq;
}

/* The names of every outbox in `mode`, read as the owner. */
List *
eo_ob_names(char mode)
{
	EoIdentity	saved;
	List	   *names = NIL;
	MemoryContext caller = CurrentMemoryContext;

	registry_begin(&saved);
	if (SPI_execute(psprintf("SELECT name FROM eo_internal.eo_outboxes"
							 " WHERE mode OPERATOR(pg_catalog.=) '%c' ORDER BY name", mode),
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "eo: registry scan failed");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *name = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		MemoryContext old = MemoryContextSwitchTo(caller);

		names = lappend(names, pstrdup(name));
		MemoryContextSwitchTo(old);
	}
	registry_end(&saved);
	return names;
}

/* The caller needs INSERT on the outbox table to emit, SELECT to relay. */
void
eo_ob_check_privilege(EoOutbox *ob, AclMode mode, const char *action)
{
	Oid			caller = GetUserId();

	if (pg_class_aclcheck(ob->relid, caller, mode) == ACLCHECK_OK)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to %s outbox \"%s\"", action, ob->name),
			 errhint("Grant %s on table %s to role \"%s\".",
					 mode == ACL_INSERT ? "INSERT" : "SELECT", ob->qualname,
					 GetUserNameFromId(caller, false))));
}

void
eo_ob_check_member(Oid owner, const char *action, const char *object)
{
	if (has_privs_of_role(GetUserId(), owner))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to %s %s", action, object),
			 errdetail("It belongs to role \"%s\".", GetUserNameFromId(owner, true)),
			 errhint("Act as a member of that role.")));
}

/* Only members of the role that created an outbox may administer it. */
void
eo_ob_check_owner(EoOutbox *ob, const char *action)
{
	eo_ob_check_member(ob->owner, action, psprintf("outbox \"%s\"", ob->name));
}

/*
 * An event's slot as an SQL expression of its aggregateid column.  The
 * relay's queries use exactly the expression of the index, so that the
 * planner matches them.
 */
char *
eo_ob_slot_expr_for(int32 slots, const char *column)
{
	return psprintf("((pg_catalog.hashtext(%s) OPERATOR(pg_catalog.&) 2147483647)"
					" OPERATOR(pg_catalog.%%) %d)", column, slots);
}

char *
eo_ob_slot_expr(const EoOutbox *ob, const char *alias)
{
	return eo_ob_slot_expr_for(ob->slots, psprintf("%s.aggregateid", alias));
}

/*
 * After running `plan` (as the caller): did the outbox's table name still
 * mean the table eo recorded?  If not (a schema was renamed, another table
 * made under the old name), forget the entry and raise an error, which
 * rolls back whatever the statement did.
 */
void
eo_ob_check_plan(EoOutbox *ob, SPIPlanPtr plan)
{
	if (eo_plan_relations_are(plan, ob->view, ob->relid))
		return;
	ob->valid = false;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("the table name of outbox \"%s\" now means another relation", ob->name),
			 errdetail("eo made table %s; its schema or name was renamed or replaced, and the statement was rolled back.",
					   ob->qualname),
			 errhint("Try again: eo looks the table up by OID again.")));
}

/* The partitions' CHECK of seq and txid (see eo_outbox_row_check). */
char *
eo_ob_row_check_expr(const EoOutbox *ob)
{
	char	   *seq = psprintf("%s.%s",
							   quote_identifier(get_namespace_name(get_rel_namespace(ob->seqid))),
							   quote_identifier(get_rel_name(ob->seqid)));

	return psprintf("eo_internal.eo_outbox_row_check(txid, seq, %s::pg_catalog.regclass)",
					quote_literal_cstr(seq));
}

/* ---- the seq column ---- */

/* The value eo_outbox_next_seq drew last, not yet checked by a row. */
static int64 drawn_seq;
static Oid	drawn_from;			/* ... from this sequence */
static LocalTransactionId drawn_lxid = InvalidLocalTransactionId;

/* The transaction that drew an outbox seq last (any outbox, any way). */
static LocalTransactionId xact_drew_lxid = InvalidLocalTransactionId;

/*
 * Every seq an event gets is drawn by a call that notes it here, so that
 * a relay's fetch knows whether its own transaction may hold events
 * (take_cut in outbox_relay_fetch.c).
 */
void
eo_ob_note_seq_drawn(void)
{
	xact_drew_lxid = EO_MY_LXID;
}

bool
eo_ob_xact_drew_seq(void)
{
	return xact_drew_lxid == EO_MY_LXID;
}

/*
 * The table of the outbox whose seq sequence `seqid` is, from the registry;
 * an error if it is none.  Cached (approved_seqs, approved_tables): only
 * registered outboxes' sequences may be drawn from through
 * eo_outbox_next_seq.
 */
static Oid
approved_table(Oid seqid)
{
	EoIdentity	saved;
	Oid			types[1] = {REGCLASSOID};
	Datum		values[1] = {ObjectIdGetDatum(seqid)};
	Oid			table = InvalidOid;
	MemoryContext old;
	ListCell   *s,
			   *t;

	forboth(s, approved_seqs, t, approved_tables)
		if (lfirst_oid(s) == seqid)
			return lfirst_oid(t);

	registry_begin(&saved);
	if (SPI_execute_with_args("SELECT relid FROM eo_internal.eo_outboxes WHERE seq OPERATOR(pg_catalog.=) $1",
							  1, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "eo: outbox lookup failed");
	if (SPI_processed == 1)
	{
		bool		isnull;

		table = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	registry_end(&saved);
	if (!OidIsValid(table))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("sequence %u is not the seq sequence of an outbox", seqid)));
	eo_check_own_relation(seqid, RELKIND_SEQUENCE, false, "outbox sequence");
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(ob_invalidate, (Datum) 0);
		callback_registered = true;
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	approved_seqs = lappend_oid(approved_seqs, seqid);
	approved_tables = lappend_oid(approved_tables, table);
	MemoryContextSwitchTo(old);
	return table;
}

/*
 * Drawing from an outbox's sequence takes what inserting into the outbox
 * takes: INSERT on it.  (nextval_internal checks nothing: without this,
 * anyone could burn another outbox's values, or read its event rate.)
 */
static void
approve_sequence(Oid seqid)
{
	Oid			table = approved_table(seqid);

	if (pg_class_aclcheck(table, GetUserId(), ACL_INSERT) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to draw seq of an outbox without INSERT on %s",
						get_rel_name(table))));
}

/*
 * eo_internal.eo_outbox_next_seq(seq regclass) returns int8: the seq
 * column's default.  The transaction id is assigned first (see the top of
 * this file); the value is remembered for eo_outbox_row_check.
 */
Datum
eo_outbox_next_seq(PG_FUNCTION_ARGS)
{
	Oid			seqid = PG_GETARG_OID(0);

	approve_sequence(seqid);
	eo_cluster_check_seq(seqid);	/* before the first seq of a new cluster */
	(void) GetTopTransactionId();
	eo_ob_note_seq_drawn();
	drawn_seq = nextval_internal(seqid, false);
	drawn_from = seqid;
	drawn_lxid = EO_MY_LXID;
	PG_RETURN_INT64(drawn_seq);
}

/*
 * eo_internal.eo_outbox_row_check(txid, seq, sequence): the CHECK of every
 * outbox partition, naming the outbox's own sequence.  Rows are checked
 * one at a time right after their defaults are computed (INSERT, INSERT
 * ... SELECT and COPY alike), so the row's seq must be the value drawn
 * last in this transaction, from this outbox's sequence (a value drawn
 * from another outbox's, through a table made LIKE it, would be a
 * duplicate here), and each drawn value is good for one row only.
 */
Datum
eo_outbox_row_check(PG_FUNCTION_ARGS)
{
	bool		drawn = drawn_lxid == EO_MY_LXID;
	bool		ok;

	ok = !PG_ARGISNULL(0) && !PG_ARGISNULL(1) && !PG_ARGISNULL(2) && drawn &&
		PG_GETARG_INT64(1) == drawn_seq && PG_GETARG_OID(2) == drawn_from &&
		FullTransactionIdEquals(PG_GETARG_FULLTRANSACTIONID(0), GetTopFullTransactionIdIfAny());
	drawn_lxid = InvalidLocalTransactionId;
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("seq and txid of an outbox event are set by eo"),
				 errdetail("The relay orders and delivers events by these columns."),
				 errhint("Insert events without the seq and txid columns.  To restore events, restore the whole dump, or its sections in order, into an empty database: not --data-only after --schema-only.")));
	PG_RETURN_BOOL(true);
}
