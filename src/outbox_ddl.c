/*-------------------------------------------------------------------------
 * outbox_ddl.c
 *	  DDL on relations named by OID: attach a partition, move a table into
 *	  another schema, drop.
 *
 * Why not SQL: a statement names a table by schema and name, and the owner
 * of a schema (in PostgreSQL 15+ the database owner, for public) can make
 * that name mean another table at any moment, by renaming the schema or
 * the table's neighbours.  DDL that eo runs with its owner's rights on an
 * outbox table outside eo_internal therefore goes through these calls,
 * which take the table by the OID eo recorded.  Names appear only for
 * objects in eo_internal, which nobody else can create or rename there.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/objectaddress.h"
#include "catalog/pg_class.h"
#include "catalog/pg_namespace.h"
#include "commands/event_trigger.h"
#include "commands/tablecmds.h"
#include "nodes/parsenodes.h"
#include "parser/parser.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "eo.h"
#include "outbox.h"

/*
 * ALTER TABLE <parent> ATTACH PARTITION eo_internal.<partition> FOR VALUES
 * FROM (lo) TO (hi), with the parent taken by OID.  The statement text
 * names the parent only for messages: AlterTable() works on context.relid.
 */
void
eo_attach_partition(Oid parent, const char *partition, const char *lo, const char *hi)
{
	char	   *sql = psprintf("ALTER TABLE %s.%s ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%s)",
							   quote_identifier(get_namespace_name(get_rel_namespace(parent))),
							   quote_identifier(get_rel_name(parent)),
							   eo_internal_name(partition),
							   quote_literal_cstr(lo), quote_literal_cstr(hi));
	RawStmt    *raw = linitial_node(RawStmt, raw_parser(sql, RAW_PARSE_DEFAULT));
	AlterTableStmt *stmt = castNode(AlterTableStmt, raw->stmt);
	AlterTableUtilityContext context;
	LOCKMODE	lockmode = AlterTableGetLockLevel(stmt->cmds);

	LockRelationOid(parent, lockmode);
	memset(&context, 0, sizeof(context));
	context.relid = parent;
	context.queryString = sql;

	EventTriggerAlterTableStart((Node *) stmt);
	EventTriggerAlterTableRelid(parent);
	AlterTable(stmt, lockmode, &context);
	EventTriggerAlterTableEnd();
	CommandCounterIncrement();
}

/*
 * Move relation `relid` (with its indexes, constraints and owned
 * sequences) into schema `nsp`, then rename it to `newname` there.  The
 * schema is locked against DROP SCHEMA; a name already taken in it is an
 * error (42P07), as for ALTER TABLE.
 */
void
eo_move_relation(Oid relid, Oid nsp, const char *newname)
{
	Relation	rel = relation_open(relid, AccessExclusiveLock);
	Oid			old = RelationGetNamespace(rel);
	ObjectAddresses *moved;

	LockDatabaseObject(NamespaceRelationId, nsp, 0, AccessShareLock);
	if (!SearchSysCacheExists1(NAMESPACEOID, ObjectIdGetDatum(nsp)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_SCHEMA),
				 errmsg("schema with OID %u does not exist", nsp)));
	CheckSetNamespace(old, nsp);
	moved = new_object_addresses();
	AlterTableNamespaceInternal(rel, old, nsp, moved);
	free_object_addresses(moved);
	relation_close(rel, NoLock);
	CommandCounterIncrement();

	RenameRelationInternal(relid, newname, false, false);
	CommandCounterIncrement();
}

/*
 * DROP of relation `relid`.  With `cascade`, for eo's own objects in
 * eo_internal: nobody else may make anything that depends on them (a view
 * of another role that names one would otherwise keep eo from ever
 * dropping it), so what does goes with them.  Without, for an outbox
 * table: views of it that others made stop the drop.
 */
void
eo_drop_relation(Oid relid, bool cascade)
{
	ObjectAddress object;

	ObjectAddressSet(object, RelationRelationId, relid);
	performDeletion(&object, cascade ? DROP_CASCADE : DROP_RESTRICT, 0);
	CommandCounterIncrement();
}
