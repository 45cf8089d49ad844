/*-------------------------------------------------------------------------
 * outbox_relay_partitions.c
 *	  What a relay's fetch knows of its outbox's partitions: a list that
 *	  has every partition its snapshot can see events in, and the
 *	  created_at at or below which all those events lie.
 *
 * A fetch reads pages with statements planned over the outbox table, so
 * with this backend's partition list (relcache).  A backend takes in
 * invalidations when it locks a relation it does not hold yet; a fetch
 * whose transaction holds the outbox table already would read with the
 * old list after a partition was attached and written into, hand out the
 * slot's other events and move the slot past the new partition's for
 * good.  And PostgreSQL makes a commit visible to new snapshots before it
 * sends the transaction's invalidations: a transaction that attached a
 * partition and wrote events into it can be seen as committed by a
 * fetch's snapshot S while no invalidation says the partition exists.  So
 * after S a fetch compares its list with pg_inherits read with a snapshot
 * newer than S, and waits for the invalidations while they differ.
 *
 * Relcache and catalog reads only; nothing here runs SQL or consults
 * anything a user can put in a search path.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "miscadmin.h"
#include "partitioning/partbounds.h"
#include "partitioning/partdesc.h"
#include "storage/bufmgr.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "eo.h"
#include "outbox.h"

/* How long a fetch waits for a partition's invalidations before 40001. */
#define LIST_WAIT_MS 1000

static bool
partdesc_has(PartitionDesc pd, Oid relid)
{
	for (int i = 0; i < pd->nparts; i++)
		if (pd->oids[i] == relid)
			return true;
	return false;
}

/*
 * Does this backend's partition list of partitioned table rel have every
 * partition pg_inherits shows to a snapshot taken now, and so on down
 * each partition that is partitioned itself (eo makes none, a superuser
 * can)?  Detached partitions still in a list (omit_detached = false)
 * only make it longer, which is safe.  pg_inherits is scanned here rather
 * than through find_inheritance_children, which reads with the catalog
 * snapshot: that is kept until an invalidation arrives, the very thing
 * that has not arrived yet.
 */
static bool
list_is_current(Relation rel)
{
	PartitionDesc pd = RelationGetPartitionDesc(rel, false);
	Relation	inh = table_open(InheritsRelationId, AccessShareLock);
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		current = true;

	ScanKeyInit(&key, Anum_pg_inherits_inhparent, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(RelationGetRelid(rel)));
	scan = systable_beginscan(inh, InheritsParentIndexId, true, snapshot, 1, &key);
	while (current && HeapTupleIsValid(tup = systable_getnext(scan)))
		current = partdesc_has(pd, ((Form_pg_inherits) GETSTRUCT(tup))->inhrelid);
	systable_endscan(scan);
	UnregisterSnapshot(snapshot);
	table_close(inh, AccessShareLock);
	for (int i = 0; current && i < pd->nparts; i++)
	{
		Relation	part;

		if (pd->is_leaf[i])
			continue;
		check_stack_depth();
		part = relation_open(pd->oids[i], AccessShareLock);
		current = list_is_current(part);
		relation_close(part, NoLock);
	}
	return current;
}

/*
 * Make this backend's list of ob's partitions (and so the plans over the
 * outbox table) have every partition that a snapshot taken before this
 * call can see events in.  Invalidations are taken in; while pg_inherits
 * still shows a partition the list lacks, its transaction has committed
 * but not yet sent them, which takes microseconds: wait, up to
 * LIST_WAIT_MS, then fail with 40001 (nothing was handed out).
 */
void
eo_ob_await_partition_list(EoOutbox *ob)
{
	for (int waited = 0;; waited++)
	{
		Relation	rel;
		bool		current;

		AcceptInvalidationMessages();
		rel = relation_open(ob->relid, AccessShareLock);
		current = rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE || list_is_current(rel);
		relation_close(rel, NoLock);
		if (current)
			return;
		if (waited >= LIST_WAIT_MS)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("the partitions of outbox \"%s\" changed during the fetch", ob->name),
					 errdetail("A partition attached by a committed transaction is not known to this session yet."),
					 errhint("Fetch again.")));
		CHECK_FOR_INTERRUPTS();
		pg_usleep(1000L);
	}
}

/* 1 if table relid has blocks, 0 if none, -1 if it is not a plain table. */
static int
has_blocks(Oid relid)
{
	Relation	rel = relation_open(relid, AccessShareLock);
	int			blocks = -1;

	if (rel->rd_rel->relkind == RELKIND_RELATION)
		blocks = RelationGetNumberOfBlocks(rel) > 0 ? 1 : 0;
	relation_close(rel, NoLock);
	return blocks;
}

/*
 * A created_at at or below which lie all the events of ob that a snapshot
 * S taken before eo_ob_await_partition_list sees (DT_NOEND if no such
 * bound is known): the upper bound, less a microsecond, of the last
 * partition in bound order that has any blocks.  The relay's pages
 * statement compares created_at with it, so that the partitions made
 * ahead, empty, are pruned before the executor starts instead of costing
 * an index scan each per slot.
 *
 * Why an empty partition holds nothing S sees: a transaction S sees as
 * finished extended the file of every partition it wrote before it
 * committed, so the size read here, after S, shows it.  Vacuum gives back
 * only pages without tuples, and events are never deleted.  The list
 * read must have every partition S can see events in: the caller made
 * it so after S (eo_ob_await_partition_list); a partition attached since
 * holds nothing S sees.  With a DEFAULT partition, or a bound that is not
 * a finite time, there is no bound.
 */
TimestampTz
eo_ob_created_limit(EoOutbox *ob)
{
	TimestampTz limit = DT_NOBEGIN; /* no partition has blocks: S sees nothing */
	Relation	rel = relation_open(ob->relid, AccessShareLock);
	PartitionDesc pd;
	PartitionBoundInfo bi;

	pd = rel->rd_rel->relkind == RELKIND_PARTITIONED_TABLE ? RelationGetPartitionDesc(rel, false) : NULL;
	bi = pd != NULL ? pd->boundinfo : NULL;
	if (bi == NULL || bi->strategy != PARTITION_STRATEGY_RANGE || bi->default_index >= 0)
		limit = DT_NOEND;
	else
	{
		for (int i = bi->ndatums - 1; i >= 0; i--)
		{
			int			k = bi->indexes[i];
			int			blocks;
			TimestampTz hi;

			if (k < 0)
				continue;		/* a gap below datum i: a lower bound */
			blocks = pd->is_leaf[k] ? has_blocks(pd->oids[k]) : -1;
			if (blocks == 0)
				continue;
			hi = DatumGetTimestampTz(bi->datums[i][0]);
			limit = blocks > 0 && bi->kind[i][0] == PARTITION_RANGE_DATUM_VALUE &&
				!TIMESTAMP_NOT_FINITE(hi) ? hi - 1 : DT_NOEND;
			break;
		}
	}
	relation_close(rel, NoLock);
	return limit;
}
