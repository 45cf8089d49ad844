/*-------------------------------------------------------------------------
 * outbox_cluster.c
 *	  Relay positions across pg_dump / pg_restore into another cluster.
 *
 * A slot's position is a snapshot (outbox_relay.c): which events' transactions
 * were visible.  Transaction ids mean something only in the cluster that
 * assigned them.  pg_dump carries the events with their txids and the
 * slots with their snapshots, all of the old cluster; restored into a new
 * cluster (a new system identifier), the old snapshots still judge the
 * old events correctly, but not the new cluster's events, nor the old
 * events against the new cluster's snapshots.  (Restored into another
 * database of the same cluster, or copied by pg_upgrade or a physical
 * backup, ids keep their meaning and nothing changes.)
 *
 * So every outbox records the system identifier its seq values and the
 * slots' positions belong to.  The first time anything touches the outbox
 * in another cluster - a producer drawing seq, a relay, monitoring, the
 * maintenance pass - and before any event of the new cluster exists, it is
 * converted, under a lock on its registry row:
 *   - only once the restore has finished: while the outbox lacks the
 *     objects a restore makes last (its trigger, and every partition's
 *     CHECK: pg_dump puts them after all table and sequence data, and
 *     nobody but the extension owner can make them), anything that
 *     touches it fails, loudly, and converts nothing;
 *   - the boundary B is the highest seq of the old cluster: the larger of
 *     the sequence's value (it came with the dump) and the largest seq the
 *     outbox holds; every old event has seq <= B, every new one seq > B;
 *   - each slot keeps its old state for the events seq <= B (the "old
 *     section", served first by outbox_relay_fetch.c's serve_old and judged by the old
 *     snapshots, as all of them committed before the dump), and starts
 *     afresh for seq > B with a position that sees no transaction, so
 *     every new event is delivered;
 *   - a page that was outstanding in the old cluster is released.
 * Nothing acknowledged before the dump is delivered again, and every event
 * not acknowledged is.  A database restored twice before its relays
 * finished the first restore's old section redelivers that whole section.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "compat.h"
#include "eo.h"
#include "outbox.h"

/*
 * Outboxes (by seq sequence) known to be in this cluster's terms, and the
 * transaction that converted one: until it commits, nothing is cached (it
 * may still roll back, and then the outbox must be converted again).
 */
static List *checked = NIL;
static LocalTransactionId converted_in = InvalidLocalTransactionId;

static int64
this_cluster(void)
{
	return (int64) GetSystemIdentifier();
}

/*
 * Has the restore of the outbox (table `relid`) finished?  The objects
 * pg_dump restores after every row and sequence value: the NOTIFY trigger
 * (of eo's function) and each partition's CHECK.
 */
static bool
restore_finished(Oid relid)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(relid)};
	bool		isnull;

	if (SPI_execute_with_args("SELECT EXISTS (SELECT FROM pg_catalog.pg_trigger t"
							  "   WHERE t.tgrelid OPERATOR(pg_catalog.=) $1"
							  "   AND t.tgname OPERATOR(pg_catalog.=) 'eo_notify'"
							  "   AND t.tgfoid OPERATOR(pg_catalog.=) 'eo_internal.eo_outbox_notify()'::pg_catalog.regprocedure)"
							  " AND NOT EXISTS (SELECT FROM pg_catalog.pg_inherits i"
							  "   WHERE i.inhparent OPERATOR(pg_catalog.=) $1"
							  "   AND NOT EXISTS (SELECT FROM pg_catalog.pg_constraint c"
							  "     WHERE c.conrelid OPERATOR(pg_catalog.=) i.inhrelid"
							  "     AND c.conname OPERATOR(pg_catalog.=) 'eo_outbox_row'))",
							  1, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "eo: checking the outbox's restore failed");
	return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Convert the outbox registered with sequence `seqid` if its sysid is not
 * this cluster's.  Returns true if this call converted it.
 */
static bool
convert(Oid seqid)
{
	Oid			types[2] = {REGCLASSOID, INT8OID};
	Datum		values[2] = {ObjectIdGetDatum(seqid), Int64GetDatum(this_cluster())};
	char	   *name;
	Oid			relid;
	bool		isnull;
	int			rc;

	/* Locks the registry row: one converter, everyone else waits and sees it done. */
	rc = SPI_execute_with_args("SELECT name, relid FROM eo_internal.eo_outboxes"
							   " WHERE seq OPERATOR(pg_catalog.=) $1"
							   " AND (sysid IS NULL OR sysid OPERATOR(pg_catalog.<>) $2) FOR UPDATE",
							   2, types, values, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "eo: outbox cluster check failed");
	if (SPI_processed == 0)
		return false;
	name = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	if (!restore_finished(relid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("outbox \"%s\" was restored from another cluster, and its restore has not finished",
						name),
				 errdetail("Its trigger or its partitions' constraints, which a restore makes last, are missing; until they are there, eo does not use it."),
				 errhint("Let the restore finish: pg_restore's post-data section makes them.")));
	ereport(LOG,
			(errmsg("eo: outbox \"%s\" was restored into another cluster; converting its consumer positions",
					name)));
	rc = SPI_execute_with_args(psprintf(
										"WITH o AS (UPDATE eo_internal.eo_outboxes"
										"   SET sysid = $2,"
										"       boundary = GREATEST(coalesce(pg_catalog.pg_sequence_last_value($1), 0),"
										"                           coalesce((SELECT pg_catalog.max(seq) FROM %s), 0))"
										"   WHERE seq OPERATOR(pg_catalog.=) $1 RETURNING name, boundary)"
										" UPDATE eo_internal.eo_outbox_slots s SET sysid = $2,"
										"   old_hi = o.boundary,"
										"   old_seq = CASE WHEN s.old_hi IS NULL THEN s.pos_lo OPERATOR(pg_catalog.-) 1"
										"                  ELSE s.old_seq END,"
										"   old_pos_snap = CASE WHEN s.old_hi IS NULL THEN s.pos_snap"
										"                  ELSE '3:3:'::pg_catalog.pg_snapshot END,"
										"   old_pos_lo = CASE WHEN s.old_hi IS NULL THEN s.pos_lo ELSE 0 END,"
										"   old_batch_snap = CASE WHEN s.old_hi IS NULL THEN s.batch_snap END,"
										"   old_acked_seq = CASE WHEN s.old_hi IS NULL THEN s.acked_seq END,"
										"   pos_snap = '3:3:', pos_lo = o.boundary OPERATOR(pg_catalog.+) 1,"
										"   batch_snap = NULL, batch_hi = NULL, batch_lo = NULL, acked_seq = NULL,"
										"   hist_xid = '{}', hist_seq = '{}', page_old = false,"
										"   page_state = CASE WHEN s.page_state OPERATOR(pg_catalog.=) 'o' THEN 'r'"
										"                ELSE s.page_state END,"
										"   lease_expires_at = NULL, holder_pid = NULL"
										" FROM o WHERE s.outbox OPERATOR(pg_catalog.=) o.name"
										" AND (s.sysid IS NULL OR s.sysid OPERATOR(pg_catalog.<>) $2)",
										eo_internal_name(psprintf("%s_v", name))),
							   2, types, values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "eo: outbox cluster conversion failed");
	return true;
}

/*
 * By the outbox's seq sequence: the producers' path (eo_outbox_next_seq)
 * and every other.  Connects SPI and acts as the owner itself.
 */
void
eo_cluster_check_seq(Oid seqid)
{
	EoIdentity	saved;
	MemoryContext old;
	bool		converted;

	if (list_member_oid(checked, seqid))
		return;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&saved);
	converted = convert(seqid);
	eo_restore_identity(&saved);
	SPI_finish();
	if (converted)
		converted_in = EO_MY_LXID;
	if (converted_in == EO_MY_LXID)
		return;
	old = MemoryContextSwitchTo(TopMemoryContext);
	checked = lappend_oid(checked, seqid);
	MemoryContextSwitchTo(old);
}

/*
 * A slot row read by the relay must be in this cluster's terms too (a
 * restore loads slots before the outbox can be converted; converting
 * converts them all).  Loud if not: judging its snapshots against this
 * cluster's transactions would skip events.
 */
void
eo_cluster_check_slot(int64 sysid, const char *outbox)
{
	if (sysid == this_cluster())
		return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("a consumer position of outbox \"%s\" belongs to another cluster", outbox),
			 errdetail("It was restored after the outbox was converted to this cluster."),
			 errhint("Restore the whole database in one go, with pg_restore or psql.")));
}

void
eo_cluster_check(EoOutbox *ob)
{
	if (ob->mode == EO_OUTBOX_TABLE)
		eo_cluster_check_seq(ob->seqid);
}
