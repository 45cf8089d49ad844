/*-------------------------------------------------------------------------
 * outbox.c
 *	  Outboxes: the registry and its cache, eo_outbox_create /
 *	  eo_outbox_drop, eo_emit (table or WAL mode), the NOTIFY trigger, and
 *	  the seq column's default and check.
 *
 * An outbox is a table with Debezium's outbox-router columns plus two
 * that the relay (relay.c) needs:
 *
 *	 txid  xid8  DEFAULT pg_current_xact_id()              the writing transaction
 *	 seq   int8  DEFAULT eo_internal.eo_outbox_next_seq()  insertion order
 *
 * eo_outbox_next_seq assigns the transaction id before it draws seq, so
 * every event's transaction id was assigned no later than its seq: relay.c
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
#include "access/xlog.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/sequence.h"
#include "commands/trigger.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "partitioning/partdefs.h"
#include "replication/message.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
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
#include "utils/partcache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
#include "utils/xid8.h"

#include "compat.h"
#include "eo.h"
#include "outbox.h"

PG_FUNCTION_INFO_V1(eo_outbox_create);
PG_FUNCTION_INFO_V1(eo_outbox_drop);
PG_FUNCTION_INFO_V1(eo_emit);
PG_FUNCTION_INFO_V1(eo_outbox_notify);
PG_FUNCTION_INFO_V1(eo_outbox_next_seq);
PG_FUNCTION_INFO_V1(eo_outbox_row_check);

/* The columns eo makes, in table order (WAL mode: the first seven). */
static const struct
{
	const char *name;
	Oid			type;
}			outbox_columns[] =
{
	{"id", UUIDOID},
	{"aggregatetype", TEXTOID},
	{"aggregateid", TEXTOID},
	{"type", TEXTOID},
	{"payload", JSONBOID},
	{"headers", JSONBOID},
	{"created_at", TIMESTAMPTZOID},
	{"txid", XID8OID},
	{"seq", INT8OID},
};
/* The columns both modes make (outbox_columns' first seven), as DDL. */
#define DEBEZIUM_COLUMNS \
	" id pg_catalog.uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid()," \
	" aggregatetype pg_catalog.text NOT NULL," \
	" aggregateid pg_catalog.text NOT NULL," \
	" type pg_catalog.text NOT NULL," \
	" payload pg_catalog.jsonb," \
	" headers pg_catalog.jsonb," \
	" created_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.now()"
#define TABLE_MODE_COLUMNS 9
#define WAL_MODE_COLUMNS 7
#define CREATED_AT_ATTNUM 7

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

/* One row of the registry. */
typedef struct RegistryRow
{
	Oid			relid;
	char		mode;
	int32		slots;
	Oid			owner;
	Oid			seq;
	Interval	every;
	int32		premake;
	Interval	retention;
} RegistryRow;

/* ---- cache ---- */

static void
free_entry_plans(EoOutbox *ob)
{
	/* (they may be running further up the stack: see eo_free_plan_later) */
	eo_free_plan_later(ob->emit_plan);
	eo_free_plan_later(ob->page_plan);
	eo_free_plan_later(ob->old_plan);
	eo_free_plan_later(ob->probe_plan);
	ob->emit_plan = NULL;
	ob->page_plan = NULL;
	ob->old_plan = NULL;
	ob->probe_plan = NULL;
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
static void
registry_changed(void)
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

	store.find_plan = eo_prepare_kept(
									  "SELECT relid, mode, slots, owner, seq, partition_interval, premake, retention"
									  " FROM eo_internal.eo_outboxes WHERE name OPERATOR(pg_catalog.=) $1",
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
static bool
read_registry(const char *name, RegistryRow *row)
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

		row->relid = DatumGetObjectId(SPI_getbinval(tup, desc, 1, &isnull));
		row->mode = DatumGetChar(SPI_getbinval(tup, desc, 2, &isnull));
		row->slots = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
		row->owner = DatumGetObjectId(SPI_getbinval(tup, desc, 4, &isnull));
		seq = SPI_getbinval(tup, desc, 5, &isnull);
		row->seq = isnull ? InvalidOid : DatumGetObjectId(seq);
		row->every = interval_column(tup, desc, 6);
		row->premake = DatumGetInt32(SPI_getbinval(tup, desc, 7, &isnull));
		row->retention = interval_column(tup, desc, 8);
	}
	registry_end(&saved);
	return found;
}

/*
 * Refuse the outbox unless its table is the one eo made: owned by the
 * extension owner, exactly eo's columns and types, partitioned on
 * created_at (table mode) with the sequence eo made.
 */
static void
verify_columns(const EoOutbox *ob)
{
	char	   *what = psprintf("table of outbox \"%s\"", ob->name);
	bool		table_mode = ob->mode == EO_OUTBOX_TABLE;
	int			ncols = table_mode ? TABLE_MODE_COLUMNS : WAL_MODE_COLUMNS;
	Relation	rel;
	TupleDesc	desc;
	char	   *problem = NULL;

	AttrNumber	created_at = InvalidAttrNumber;
	int			n = 0;

	rel = relation_open(ob->relid, AccessShareLock);
	desc = RelationGetDescr(rel);
	/* eo's columns in eo's order; dropped columns are no columns */
	for (int i = 0; i < desc->natts && problem == NULL; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped)
			continue;
		if (n >= ncols)
			problem = psprintf("it has a column \"%s\" eo did not make", NameStr(att->attname));
		else if (strcmp(NameStr(att->attname), outbox_columns[n].name) != 0 ||
				 att->atttypid != outbox_columns[n].type)
			problem = psprintf("column %d is not \"%s\" of type %s", n + 1,
							   outbox_columns[n].name, format_type_be(outbox_columns[n].type));
		if (n == CREATED_AT_ATTNUM - 1)
			created_at = att->attnum;
		n++;
	}
	if (problem == NULL && n != ncols)
		problem = psprintf("it has %d columns, not %d", n, ncols);
	if (problem == NULL && table_mode)
	{
		PartitionKey key = RelationGetPartitionKey(rel);

		if (key->strategy != PARTITION_STRATEGY_RANGE || key->partnatts != 1 ||
			key->partattrs[0] != created_at)
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
static void
verify_outbox(const EoOutbox *ob)
{
	bool		table_mode = ob->mode == EO_OUTBOX_TABLE;

	eo_check_own_relation(ob->relid, table_mode ? RELKIND_PARTITIONED_TABLE : RELKIND_RELATION,
						  false, psprintf("table of outbox \"%s\"", ob->name));
	verify_columns(ob);
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
	RegistryRow row;
	MemoryContext old;
	char	   *qualname;

	ob->bell_known = false;		/* the outbox may be another one now */
	if (!read_registry(ob->name, &row))
		return false;

	/*
	 * Lock the table before looking at it: a drop in progress is waited
	 * for here, and if it took the table, the registry is read again (the
	 * row went with it if the drop was eo_outbox_drop's).
	 */
	LockRelationOid(row.relid, lockmode);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(row.relid)) &&
		!read_registry(ob->name, &row))
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
	verify_outbox(ob);

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
				 errmsg("outbox \"%s\" does not exist", name)));
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

static void
check_member(Oid owner, const char *action, const char *object)
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
	check_member(ob->owner, action, psprintf("outbox \"%s\"", ob->name));
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

/*
 * The INSERT, run as the caller (see the top of this file), for an outbox
 * that eo_emit_direct (emit.c) cannot write to.
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
	a.aggregatetype = required_text(fcinfo, 1, "aggregatetype");
	a.aggregateid = required_text(fcinfo, 2, "aggregateid");
	a.type = required_text(fcinfo, 3, "type");
	a.payload = PG_ARGISNULL(4) ? NULL : PG_GETARG_JSONB_P(4);
	a.headers = PG_ARGISNULL(5) ? NULL : PG_GETARG_JSONB_P(5);
	a.id = new_uuid();

	PreventCommandIfReadOnly("eo_emit()");	/* an event is a write, in both modes */
	ob = eo_ob_lookup(name, RowExclusiveLock, false);
	eo_ob_check_privilege(ob, ACL_INSERT, "emit to");
	if (ob->mode == EO_OUTBOX_WAL)
		emit_to_wal(ob, &a);
	else if (!eo_emit_direct(ob, &a))
		emit_to_table(ob, &a);

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
	AclResult	acl;

	a->name = eo_check_outbox_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "outbox name");
	if (PG_ARGISNULL(1))
		a->nsp = eo_catalog()->api_schema;
	else
		a->nsp = get_namespace_oid(NameStr(*PG_GETARG_NAME(1)), false);
	if (a->nsp == eo_catalog()->schema)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("outboxes cannot be made in schema \"%s\"", EO_INTERNAL_SCHEMA)));
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

	a->every = eo_check_interval(PG_GETARG_DATUM(4), PG_ARGISNULL(4), "partition_interval",
								 USECS_PER_MINUTE, (int64) 366 * USECS_PER_DAY);
	if (a->every->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("partition_interval must be between 1 minute and 366 days"),
				 errdetail("Months are not allowed: give days, hours or minutes.")));

	a->premake = PG_ARGISNULL(5) ? 4 : PG_GETARG_INT32(5);
	if (a->premake < 1 || a->premake > 1000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("premake must be between 1 and 1000")));

	a->retention = eo_check_interval(PG_GETARG_DATUM(6), PG_ARGISNULL(6), "retention",
									 0, (int64) EO_MAX_RETENTION_DAYS * USECS_PER_DAY);
	a->notify = PG_ARGISNULL(7) ? false : PG_GETARG_BOOL(7);
}

static void
run_sql(const char *sql)
{
	int			rc = SPI_execute(sql, false, 0);

	if (rc < 0)
		elog(ERROR, "eo: \"%s\" failed: %s", sql, SPI_result_code_string(rc));
}

/* The highest seq eo_internal.<tmp> holds, or 0. */
static int64
max_seq(const char *tmp)
{
	bool		isnull;
	Datum		d;

	if (SPI_execute(psprintf("SELECT pg_catalog.max(seq) FROM %s", eo_internal_name(tmp)),
					true, 1) != SPI_OK_SELECT)
		elog(ERROR, "eo: reading the outbox's last seq failed");
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? 0 : DatumGetInt64(d);
}

/*
 * The sequence of the seq column of eo_internal.<tmp>: the one it owns, or
 * a new one in eo_internal (starting above every seq the table holds) if
 * it has none (an outbox DROP EXTENSION ... CASCADE left behind).
 */
static Oid
ensure_seq(const CreateArgs *a, const char *tmp, Oid relid)
{
	AttrNumber	seq_att = get_attnum(relid, "seq");
	char	   *seqname = psprintf("%s_seq_seq", a->name);
	ListCell   *lc;

	foreach(lc, getOwnedSequences(relid))
	{
		Oid			owned = lfirst_oid(lc);
		Oid			table;
		int32		col;

		if (sequenceIsOwned(owned, DEPENDENCY_AUTO, &table, &col) && col == seq_att)
			return owned;
	}
	run_sql(psprintf("CREATE SEQUENCE %s AS pg_catalog.int8 CACHE 1 START %lld",
					 eo_internal_name(seqname), (long long) max_seq(tmp) + 1));
	run_sql(psprintf("ALTER SEQUENCE %s OWNED BY %s.seq",
					 eo_internal_name(seqname), eo_internal_name(tmp)));
	return get_relname_relid(seqname, eo_catalog()->schema);
}

/*
 * eo_internal.<name>_v, the view eo's statements name instead of the
 * table (see the top of this file): every column, bound to the table by
 * OID, with the caller's rights (security_invoker), usable by anyone who
 * may use the table itself.
 */
static void
ensure_view(const char *name, const char *tmp)
{
	char	   *view = eo_internal_name(psprintf("%s_v", name));

	run_sql(psprintf("CREATE OR REPLACE VIEW %s WITH (security_invoker = true) AS"
					 " SELECT id, aggregatetype, aggregateid, type, payload, headers,"
					 " created_at, txid, seq FROM %s", view, eo_internal_name(tmp)));
	run_sql(psprintf("GRANT SELECT, INSERT ON TABLE %s TO PUBLIC", view));
}

/*
 * Give a table-mode outbox, as eo_internal.<tmp>, everything eo makes
 * besides its columns: the seq default, the index, the trigger, the
 * comment; what it has already is kept.  Returns its sequence.
 */
static Oid
complete_table_mode(const CreateArgs *a, const char *tmp, const char *channel)
{
	char	   *table = eo_internal_name(tmp);
	Oid			relid = get_relname_relid(tmp, eo_catalog()->schema);
	Oid			seq = ensure_seq(a, tmp, relid);

	run_sql(psprintf("ALTER TABLE %s ALTER COLUMN seq SET DEFAULT"
					 " eo_internal.eo_outbox_next_seq(%s::pg_catalog.regclass)",
					 table, quote_literal_cstr(eo_internal_name(get_rel_name(seq)))));
	run_sql(psprintf("CREATE INDEX IF NOT EXISTS %s ON %s ((%s), seq)",
					 quote_identifier(psprintf("%s_slot_seq", a->name)), table,
					 eo_ob_slot_expr_for(a->slots, "aggregateid")));
	run_sql(psprintf("DROP TRIGGER IF EXISTS eo_notify ON %s", table));
	run_sql(psprintf("CREATE TRIGGER eo_notify BEFORE INSERT ON %s"
					 " FOR EACH STATEMENT EXECUTE FUNCTION eo_internal.eo_outbox_notify(%s)",
					 table, quote_literal_cstr(channel != NULL ? channel : "")));
	run_sql(psprintf("COMMENT ON TABLE %s IS %s", table,
					 quote_literal_cstr(psprintf("eo outbox \"%s\": insert-only; "
												 "write with eo_emit() or INSERT, read with eo_relay_fetch()",
												 a->name))));
	ensure_view(a->name, tmp);
	return seq;
}

/* The table of a table-mode outbox, made as eo_internal.<tmp>. */
static void
create_table_mode(const char *tmp)
{
	run_sql(psprintf(
					 "CREATE TABLE %s (" DEBEZIUM_COLUMNS ","
					 " txid pg_catalog.xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),"
					 " seq pg_catalog.int8 NOT NULL"
					 ") PARTITION BY RANGE (created_at)",
					 eo_internal_name(tmp)));
}

static void
create_wal_mode(const CreateArgs *a, const char *tmp)
{
	char	   *table = eo_internal_name(tmp);

	run_sql(psprintf(
					 "CREATE TABLE %s (" DEBEZIUM_COLUMNS ","
					 " CONSTRAINT %s CHECK (false)"
					 ")",
					 table, quote_identifier(psprintf("%s_wal_mode_use_eo_emit", a->name))));
	run_sql(psprintf("COMMENT ON TABLE %s IS %s", table,
					 quote_literal_cstr(psprintf("eo outbox \"%s\" in WAL mode: eo_emit() writes "
												 "logical decoding messages with prefix \"eo:%s\"; "
												 "this table stays empty",
												 a->name, a->name))));
}

/*
 * An existing table `name` in the target schema, to be adopted as the
 * outbox (a schema-only restore, or DROP EXTENSION ... CASCADE, left it
 * without its registry entry): it must be owned by the extension owner
 * and have exactly eo's columns and partitioning.  It is moved into
 * eo_internal for the repairs and back after.
 */
static void
adoptable(void *arg)
{
	EoOutbox   *ob = (EoOutbox *) arg;

	eo_check_own_relation(ob->relid, ob->mode == EO_OUTBOX_TABLE ? RELKIND_PARTITIONED_TABLE :
						  RELKIND_RELATION, false, "it");
	verify_columns(ob);
}

static void
check_adoptable(const CreateArgs *a, Oid relid)
{
	EoOutbox	ob;
	ErrorData  *why;

	memset(&ob, 0, sizeof(ob));
	strlcpy(ob.name, a->name, NAMEDATALEN);
	ob.relid = relid;
	ob.mode = a->mode;
	if (eo_try(adoptable, &ob, &why))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_DUPLICATE_TABLE),
			 errmsg("relation \"%s\" already exists", a->name),
			 errdetail("It is not a %s-mode outbox table eo made, which eo_outbox_create would adopt: %s",
					   a->mode == EO_OUTBOX_TABLE ? "table" : "WAL", why->message)));
}

static void
register_outbox(const CreateArgs *a, Oid relid, Oid owner, Oid seq, const char *channel)
{
	Oid			types[11] = {TEXTOID, CHAROID, INT4OID, INTERVALOID, INT4OID, INTERVALOID,
		TEXTOID, REGCLASSOID, REGROLEOID, REGCLASSOID, INT8OID};
	Datum		values[11];
	char		nulls[11];
	int			rc;

	memset(nulls, ' ', sizeof(nulls));
	values[0] = CStringGetTextDatum(a->name);
	values[1] = CharGetDatum(a->mode);
	values[2] = Int32GetDatum(a->slots);
	values[3] = IntervalPGetDatum(a->every);
	values[4] = Int32GetDatum(a->premake);
	values[5] = IntervalPGetDatum(a->retention);
	values[6] = channel ? CStringGetTextDatum(channel) : (Datum) 0;
	nulls[6] = channel ? ' ' : 'n';
	values[7] = ObjectIdGetDatum(relid);
	values[8] = ObjectIdGetDatum(owner);
	values[9] = ObjectIdGetDatum(seq);
	nulls[9] = OidIsValid(seq) ? ' ' : 'n';
	values[10] = Int64GetDatum((int64) GetSystemIdentifier());
	rc = SPI_execute_with_args("INSERT INTO eo_internal.eo_outboxes (name, mode, slots,"
							   " partition_interval, premake, retention, channel, relid, owner, seq,"
							   " sysid, created_at)"
							   " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, pg_catalog.now())",
							   11, types, values, nulls, false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "eo: outbox registration failed: %s", SPI_result_code_string(rc));
}

/*
 * A WAL-mode outbox's events are logical decoding messages with prefix
 * "eo:<name>", which anyone who may call pg_logical_emit_message (PUBLIC,
 * unless revoked) can write too: say so when one is made.
 */
static void
warn_forgeable(const char *name)
{
	bool		isnull;

	if (SPI_execute("SELECT pg_catalog.bool_or(pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE'))"
					" FROM pg_catalog.pg_proc p WHERE p.proname OPERATOR(pg_catalog.=) 'pg_logical_emit_message'"
					" AND p.pronamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace",
					true, 1) != SPI_OK_SELECT)
		elog(ERROR, "eo: checking pg_logical_emit_message failed");
	if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
		ereport(WARNING,
				(errmsg("any role can write messages that look like events of outbox \"%s\"", name),
				 errdetail("pg_logical_emit_message, which anyone may call, writes messages with any prefix, \"eo:%s\" too.",
						   name),
				 errhint("REVOKE EXECUTE ON FUNCTION pg_logical_emit_message FROM PUBLIC (each of its forms), unless something else needs it.")));
}

/*
 * Every partition (all in eo_internal, checked) with eo's CHECK of seq and
 * txid, which a DROP EXTENSION ... CASCADE took away.
 */
static void
complete_partitions(EoOutbox *ob)
{
	ListCell   *lc;

	foreach(lc, eo_ob_partitions(ob))
	{
		EoPartition *p = (EoPartition *) lfirst(lc);

		if (!OidIsValid(get_relation_constraint_oid(p->relid, "eo_outbox_row", true)))
			run_sql(psprintf("ALTER TABLE %s ADD CONSTRAINT eo_outbox_row CHECK (%s) NOT VALID",
							 p->name, eo_ob_row_check_expr(ob)));
	}
}

/*
 * eo_outbox_create(name, schema, mode, slots, partition_interval, premake,
 * retention, notify) returns regclass.  The table is made in eo_internal
 * under a name of this backend's, where names refer to nothing anyone else
 * made, finished there (sequence, index, trigger, grants, partitions), and
 * then moved by OID into the caller's schema under its own name.  A table
 * of that name that eo made earlier (left by a schema-only restore or by
 * DROP EXTENSION ... CASCADE) is adopted: moved in, completed, moved back.
 */
Datum
eo_outbox_create(PG_FUNCTION_ARGS)
{
	CreateArgs	a;
	Oid			caller = GetUserId();
	char	   *tmp = psprintf("eo_new_outbox_%d", MyProcPid);
	char	   *channel;
	Oid			relid;
	Oid			seq = InvalidOid;
	EoIdentity	saved;
	RegistryRow existing;

	check_create_args(fcinfo, &a);
	/* No NOTIFY in WAL mode (decoders stream), nor if not wanted: a
	 * transaction that sent one cannot PREPARE TRANSACTION. */
	channel = (a.mode == EO_OUTBOX_TABLE && a.notify) ? psprintf("eo_%s", a.name) : NULL;

	if (read_registry(a.name, &existing))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("outbox \"%s\" already exists", a.name)));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&saved);
	eo_lock_internal_schema();	/* all of it is made there first */
	relid = get_relname_relid(a.name, a.nsp);
	if (OidIsValid(relid))
	{
		/* whoever created it is not known any more: an administrator's call */
		if (!has_privs_of_role(caller, eo_catalog()->owner))
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_TABLE),
					 errmsg("relation \"%s\" already exists", a.name),
					 errdetail("Adopting a table eo made earlier takes the rights of the extension's owner.")));
		check_adoptable(&a, relid);
		eo_move_relation(relid, eo_catalog()->schema, tmp);
	}
	else if (a.mode == EO_OUTBOX_TABLE)
		create_table_mode(tmp);
	else
		create_wal_mode(&a, tmp);
	relid = get_relname_relid(tmp, eo_catalog()->schema);
	if (a.mode == EO_OUTBOX_TABLE)
	{
		/* its IF [NOT] EXISTS notices name eo's temporary table: not news */
		int			nest = NewGUCNestLevel();

		(void) set_config_option("client_min_messages", "warning", PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
		seq = complete_table_mode(&a, tmp, channel);
		AtEOXact_GUC(true, nest);
	}
	if (caller != eo_catalog()->owner)
		run_sql(psprintf("GRANT SELECT, INSERT ON TABLE %s TO %s WITH GRANT OPTION",
						 eo_internal_name(tmp),
						 quote_identifier(GetUserNameFromId(caller, false))));
	register_outbox(&a, relid, caller, seq, channel);
	if (a.mode == EO_OUTBOX_TABLE)
	{
		EoOutbox	ob;

		memset(&ob, 0, sizeof(ob));
		strlcpy(ob.name, a.name, NAMEDATALEN);
		ob.relid = relid;
		ob.mode = a.mode;
		ob.every = *a.every;
		ob.premake = a.premake;
		ob.seqid = seq;
		verify_outbox(&ob);
		complete_partitions(&ob);
		(void) eo_ob_make_partitions(&ob);
	}
	eo_move_relation(relid, a.nsp, a.name);
	registry_changed();
	if (a.mode == EO_OUTBOX_WAL)
		warn_forgeable(a.name);
	eo_restore_identity(&saved);
	SPI_finish();

	PG_RETURN_OID(relid);
}

/*
 * eo_outbox_drop(name): the table, its partitions, groups and positions.
 * A table someone else dropped or replaced is only unregistered: eo drops
 * nothing it did not make.
 */
Datum
eo_outbox_drop(PG_FUNCTION_ARGS)
{
	char	   *name = eo_check_outbox_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "outbox name");
	RegistryRow row;
	EoIdentity	saved;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	int			rc;

	if (!read_registry(name, &row))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("outbox \"%s\" does not exist", name)));
	check_member(row.owner, "drop", psprintf("outbox \"%s\"", name));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&saved);
	LockRelationOid(row.relid, AccessExclusiveLock);
	if (SearchSysCacheExists1(RELOID, ObjectIdGetDatum(row.relid)) &&
		get_rel_relkind(row.relid) == (row.mode == EO_OUTBOX_TABLE ?
									   RELKIND_PARTITIONED_TABLE : RELKIND_RELATION))
	{
		Oid			view = get_relname_relid(psprintf("%s_v", name), eo_catalog()->schema);

		eo_check_own_relation(row.relid, get_rel_relkind(row.relid), false,
							  psprintf("table of outbox \"%s\"", name));
		if (OidIsValid(view))
			eo_drop_relation(view, true);
		eo_drop_relation(row.relid, false);
	}
	values[0] = CStringGetTextDatum(name);
	rc = SPI_execute_with_args("WITH s AS (DELETE FROM eo_internal.eo_outbox_slots"
							   "   WHERE outbox OPERATOR(pg_catalog.=) $1),"
							   " g AS (DELETE FROM eo_internal.eo_outbox_groups"
							   "   WHERE outbox OPERATOR(pg_catalog.=) $1)"
							   " DELETE FROM eo_internal.eo_outboxes WHERE name OPERATOR(pg_catalog.=) $1",
							   1, types, values, NULL, false, 0);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "eo: outbox removal failed: %s", SPI_result_code_string(rc));
	registry_changed();
	eo_restore_identity(&saved);
	SPI_finish();
	PG_RETURN_VOID();
}
