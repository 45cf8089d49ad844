/*-------------------------------------------------------------------------
 * outbox_create.c
 *	  eo_outbox_create and eo_outbox_drop: an outbox's table, view,
 *	  sequence, trigger and first partitions made (or adopted) and
 *	  registered, and all of it dropped again.
 *
 * The top of the outbox files: it calls the registry (outbox_registry.c),
 * the DDL by OID (outbox_ddl.c) and the partitions (outbox_partitions.c),
 * and nothing calls it.  Tables are made in eo_internal and only then
 * moved, by OID, into the schema the caller chose (see outbox_registry.c
 * for why statements never name the outbox table).
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "eo.h"
#include "outbox.h"

PG_FUNCTION_INFO_V1(eo_outbox_create);
PG_FUNCTION_INFO_V1(eo_outbox_drop);

/* The columns both modes make (outbox_columns' first seven), as DDL. */
#define DEBEZIUM_COLUMNS \
	" id pg_catalog.uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid()," \
	" aggregatetype pg_catalog.text NOT NULL," \
	" aggregateid pg_catalog.text NOT NULL," \
	" type pg_catalog.text NOT NULL," \
	" payload pg_catalog.jsonb," \
	" headers pg_catalog.jsonb," \
	" created_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.now()"

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
	eo_ob_verify_columns(ob);
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
	EoRegistryRow existing;

	check_create_args(fcinfo, &a);
	/* No NOTIFY in WAL mode (decoders stream), nor if not wanted: a
	 * transaction that sent one cannot PREPARE TRANSACTION. */
	channel = (a.mode == EO_OUTBOX_TABLE && a.notify) ? psprintf("eo_%s", a.name) : NULL;

	if (eo_ob_read_registry(a.name, &existing))
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
		eo_ob_verify(&ob);
		complete_partitions(&ob);
		(void) eo_ob_make_partitions(&ob);
	}
	eo_move_relation(relid, a.nsp, a.name);
	eo_ob_registry_changed();
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
	EoRegistryRow row;
	EoIdentity	saved;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	int			rc;

	if (!eo_ob_read_registry(name, &row))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("outbox \"%s\" does not exist", name)));
	eo_ob_check_member(row.owner, "drop", psprintf("outbox \"%s\"", name));

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
	eo_ob_registry_changed();
	eo_restore_identity(&saved);
	SPI_finish();
	PG_RETURN_VOID();
}
