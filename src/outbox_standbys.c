/*-------------------------------------------------------------------------
 * outbox_standbys.c
 *	  Consumer groups that hand out events only once the standbys that
 *	  could be promoted have them: no "ghost events" after an asynchronous
 *	  failover.
 *
 * Under asynchronous replication a relay can deliver an event whose
 * transaction the standby never received; promoted, that standby has no
 * such transaction, while a consumer has acted on it.  A group with
 * standby_slots (eo_group_set_standby_slots) closes that gap: a fetch
 * takes its snapshot S, then waits until every named physical replication
 * slot has flushed the WAL up to the insert position read after S.  Every
 * transaction S sees wrote its commit record before it became visible,
 * so before that position: each one is then on every named standby's
 * disk, and a promotion of any of them keeps it.  PostgreSQL 17's
 * synchronized_standby_slots holds logical decoding back the same way.
 *
 * The wait is the relay's alone.  Producers and claims never wait for it
 * (their commits are as fast as without it); a standby that falls behind
 * or is gone holds back the fetches of the groups that name it, each for
 * at most EO_STANDBY_WAIT_MS, after which the fetch hands out nothing new
 * and says why in a NOTICE (eo_nats logs it).  A slot that does not exist
 * holds back the same way, until it is made again or the group stops
 * naming it: dropping a standby for good is a change of the group too.
 * A physical slot's restart_lsn is the position its standby reported
 * flushed (the walsender moves it on each reply).
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogrecovery.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "replication/slot.h"
#include "replication/walsender_private.h"
#include "storage/latch.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
#include "utils/wait_event.h"

#include "eo.h"
#include "outbox.h"
#include "outbox_relay.h"

PG_FUNCTION_INFO_V1(eo_group_set_standby_slots);
PG_FUNCTION_INFO_V1(eo_relay_standbys);

/* What a named slot shows of its standby. */
typedef struct StandbyState
{
	bool		present;		/* a physical slot of that name exists */
	bool		active;			/* a walsender streams from it */
	pid_t		walsender;		/* ... that one */
	XLogRecPtr	flushed;		/* its standby's flush position */
} StandbyState;

static StandbyState
standby_state(const char *name)
{
	StandbyState st = {false, false, 0, InvalidXLogRecPtr};

	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	for (int i = 0; i < max_replication_slots; i++)
	{
		ReplicationSlot *s = &ReplicationSlotCtl->replication_slots[i];

		if (!s->in_use || strcmp(NameStr(s->data.name), name) != 0)
			continue;
		SpinLockAcquire(&s->mutex);
		if (s->data.database == InvalidOid)	/* physical */
		{
			st.present = true;
			st.active = s->active_pid != 0;
			st.walsender = s->active_pid;
			st.flushed = s->data.restart_lsn;
		}
		SpinLockRelease(&s->mutex);
		break;
	}
	LWLockRelease(ReplicationSlotControlLock);
	return st;
}

/*
 * The names of a name[] (NULL: none).  A NULL element (the column's check
 * refuses them; a restore could still bring one) reads as "", a slot that
 * never exists: the group waits rather than hands out.
 */
static int
slot_names(ArrayType *slots, Datum **names)
{
	bool	   *nulls;
	int			n;

	if (slots == NULL)
		return 0;
	deconstruct_array(slots, NAMEOID, NAMEDATALEN, false, TYPALIGN_CHAR, names, &nulls, &n);
	for (int i = 0; i < n; i++)
		if (nulls[i])
			(*names)[i] = DirectFunctionCall1(namein, CStringGetDatum(""));
	return n;
}

/*
 * How late the standby streaming through walsender `pid` flushes WAL
 * (pg_stat_replication.flush_lag), in ms; 0 if caught up or unknown.
 */
static long
flush_lag_ms(pid_t pid)
{
	long		lag = 0;

	for (int i = 0; pid != 0 && i < max_wal_senders; i++)
	{
		WalSnd	   *w = &WalSndCtl->walsnds[i];

		SpinLockAcquire(&w->mutex);
		if (w->pid == pid && w->flushLag > 0)
			lag = (long) (w->flushLag / 1000);
		SpinLockRelease(&w->mutex);
	}
	return lag;
}

/*
 * How long a fetch waits for the standbys under its locks: long enough
 * for the slowest one streaming (twice its flush lag), since each fetch
 * needs the WAL written at its own start, so a shorter wait than the lag
 * would hold the group back for as long as anything writes; at least
 * EO_STANDBY_WAIT_MS, at most EO_STANDBY_WAIT_MAX_MS.  A standby not
 * streaming counts for nothing here: eo_relay_wait waits for it.
 */
static long
fetch_wait_ms(Datum *names, int n)
{
	long		lag = 0;

	for (int i = 0; i < n; i++)
		lag = Max(lag, flush_lag_ms(standby_state(NameStr(*DatumGetName(names[i]))).walsender));
	return Min(Max(2 * lag, EO_STANDBY_WAIT_MS), EO_STANDBY_WAIT_MAX_MS);
}

/* The first of the slots that has not flushed `lsn`, or NULL. */
static const char *
first_behind(Datum *names, int n, XLogRecPtr lsn)
{
	for (int i = 0; i < n; i++)
	{
		const char *name = NameStr(*DatumGetName(names[i]));
		StandbyState st = standby_state(name);

		if (!st.present || st.flushed == InvalidXLogRecPtr || st.flushed < lsn)
			return name;
	}
	return NULL;
}

/*
 * The end of the WAL written so far, flushed here so that walsenders send
 * it: every transaction visible to a snapshot taken before wrote its
 * commit record below it (one with synchronous_commit off too, whose
 * record may not have been flushed yet).  GetXLogInsertRecPtr() is the
 * next record's start, which at a page's start is past the page header no
 * standby has yet; the end of the last record is before it.
 */
static XLogRecPtr
wal_flushed_to_now(void)
{
	XLogRecPtr	lsn = GetXLogInsertRecPtr();

	if (XLogSegmentOffset(lsn, wal_segment_size) == SizeOfXLogLongPHD)
		lsn -= SizeOfXLogLongPHD;
	else if (lsn % XLOG_BLCKSZ == SizeOfXLogShortPHD)
		lsn -= SizeOfXLogShortPHD;
	if (GetFlushRecPtr(NULL) < lsn)
		XLogFlush(lsn);
	return lsn;
}

/*
 * Wait at most timeout_ms until every slot of names[] has flushed `lsn`.
 * Returns NULL once they have, else the name of one that has not.
 * Polled (a standby's reply wakes no backend): first every 100 us or so,
 * as close as a healthy standby on a fast network is (a quarter of a
 * millisecond, measured: bench/standby.sh), then less often, up to every
 * 16 ms for one that lags.
 */
static const char *
wait_for_standbys(Datum *names, int n, XLogRecPtr lsn, long timeout_ms)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	const char *behind;
	long		nap_us = 100;

	while ((behind = first_behind(names, n, lsn)) != NULL)
	{
		long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);

		if (left <= 0)
			break;
		if (nap_us < 1000)
			pg_usleep(nap_us);	/* below WaitLatch's millisecond */
		else
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 Min(nap_us / 1000, left), PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
		nap_us = Min(nap_us * 2, 16000);
		CHECK_FOR_INTERRUPTS();
	}
	return behind;
}

/*
 * For a fetch, right after it took its snapshot: whether every slot of
 * `slots` has, within fetch_wait_ms, flushed the WAL of every transaction
 * the snapshot sees.  The fetch holds its locks meanwhile (the outbox's
 * among them, which retention's partition drop waits for), so the wait is
 * short: about a streaming standby's flush lag.  If they did
 * not, *lsn says up to where they must flush (eo_relay_wait waits for it,
 * holding no lock), and a NOTICE names the slot that held the fetch back.
 */
bool
eo_standbys_have_snapshot(ArrayType *slots, const char *grp, XLogRecPtr *lsn)
{
	Datum	   *names;
	int			n = slot_names(slots, &names);
	const char *behind;
	StandbyState st;

	*lsn = wal_flushed_to_now();
	behind = wait_for_standbys(names, n, *lsn, fetch_wait_ms(names, n));
	if (behind == NULL)
		return true;
	st = standby_state(behind);
	ereport(NOTICE,
			(errmsg("consumer group \"%s\" waits for standby slot \"%s\"", grp, behind),
			 errdetail(!st.present ? "No physical replication slot of that name exists." :
					   !st.active ? "No standby streams from it." :
					   "Its standby has not flushed the WAL of the transactions this fetch would hand out."),
			 errhint("Events are handed out once every standby the group names has them;"
					 " change the list with eo_group_set_standby_slots.")));
	return false;
}

/*
 * For eo_relay_wait after a fetch held back at `lsn`: wait, holding no
 * lock, at most timeout_ms until the standbys have flushed it.
 */
bool
eo_standbys_wait(ArrayType *slots, XLogRecPtr lsn, long timeout_ms)
{
	Datum	   *names;
	int			n = slot_names(slots, &names);

	return wait_for_standbys(names, n, lsn, timeout_ms) == NULL;
}

/* A name[] of valid slot names, without NULLs; NULL for none. */
static ArrayType *
check_slot_names(Datum value, bool isnull)
{
	ArrayType  *a;
	Datum	   *names;
	bool	   *nulls;
	int			n;

	if (isnull)
		return NULL;
	a = DatumGetArrayTypeP(value);
	if (ARR_NDIM(a) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("standby_slots must be a one-dimensional array")));
	deconstruct_array(a, NAMEOID, NAMEDATALEN, false, TYPALIGN_CHAR, &names, &nulls, &n);
	if (n == 0)
		return NULL;
	if (n > EO_MAX_STANDBY_SLOTS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("standby_slots names %d slots", n),
				 errdetail("A group waits for at most %d standbys.", EO_MAX_STANDBY_SLOTS)));
	for (int i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("standby_slots must not contain NULL")));
		(void) ReplicationSlotValidateName(NameStr(*DatumGetName(names[i])), ERROR);
		for (int j = 0; j < i; j++)
			if (namestrcmp(DatumGetName(names[j]), NameStr(*DatumGetName(names[i]))) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("standby_slots names slot \"%s\" twice",
								NameStr(*DatumGetName(names[i])))));
	}
	return a;
}

/* Warn of a named slot that cannot hold anything yet: the group would wait. */
static void
warn_missing(ArrayType *slots)
{
	Datum	   *names;
	int			n = slot_names(slots, &names);

	for (int i = 0; i < n; i++)
	{
		const char *name = NameStr(*DatumGetName(names[i]));

		if (!standby_state(name).present)
			ereport(WARNING,
					(errmsg("no physical replication slot \"%s\" exists", name),
					 errdetail("The group's fetches hand out nothing until it does and its standby has flushed their transactions."),
					 errhint("Make it with pg_create_physical_replication_slot and give it to the standby (primary_slot_name).")));
	}
}

/*
 * eo_group_set_standby_slots(outbox, consumer_group, standby_slots name[]):
 * the physical replication slots whose standbys must have a transaction
 * before the group hands out its events (NULL or empty: none, at once).
 * Same rights as eo_relay_fetch: a member of the group's role.
 */
Datum
eo_group_set_standby_slots(PG_FUNCTION_ARGS)
{
	char	   *grp = eo_check_group_name(PG_GETARG_DATUM(1), PG_ARGISNULL(1));
	ArrayType  *slots = check_slot_names(PG_GETARG_DATUM(2), PG_ARGISNULL(2));
	EoRelayCall call;
	Oid			types[4] = {TEXTOID, TEXTOID, INT4OID, NAMEARRAYOID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', slots == NULL ? 'n' : ' '};

	eo_relay_begin(&call, PG_GETARG_DATUM(0), PG_ARGISNULL(0), grp);
	values[0] = CStringGetTextDatum(call.ob->name);
	values[1] = CStringGetTextDatum(grp);
	values[2] = Int32GetDatum(call.group_id);
	values[3] = slots == NULL ? (Datum) 0 : PointerGetDatum(slots);
	if (SPI_execute_with_args("UPDATE eo_internal.eo_outbox_groups SET standby_slots = $4"
							  " WHERE outbox OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2"
							  " AND id OPERATOR(pg_catalog.=) $3",
							  4, types, values, nulls, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "eo: setting the standby slots of group \"%s\" failed", grp);
	eo_relay_end(&call);
	warn_missing(slots);
	PG_RETURN_VOID();
}

/* One row of eo_relay_standbys: the slot `name` as group grp of outbox sees it. */
static void
put_standby_row(ReturnSetInfo *rsinfo, const char *outbox, const char *grp, Datum name,
				XLogRecPtr now, bool with_group)
{
	StandbyState st = standby_state(NameStr(*DatumGetName(name)));
	Datum		values[7];
	bool		nulls[7] = {false};
	int			k = 0;

	if (with_group)
	{
		values[k++] = CStringGetTextDatum(outbox);
		values[k++] = CStringGetTextDatum(grp);
	}
	values[k++] = name;
	values[k++] = BoolGetDatum(st.present);
	values[k++] = BoolGetDatum(st.active);
	nulls[k] = nulls[k + 1] = (st.flushed == InvalidXLogRecPtr);
	values[k++] = LSNGetDatum(st.flushed);
	values[k++] = Int64GetDatum(st.flushed < now ? (int64) (now - st.flushed) : 0);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/* eo_metrics.relay_standbys: the rows of every group that waits, as the owner. */
static void
put_every_group(ReturnSetInfo *rsinfo, XLogRecPtr now)
{
	EoIdentity	saved;
	MemoryContext per_group;
	Datum	   *names;
	int			n;

	(void) eo_catalog();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eo: SPI_connect failed");
	eo_become_owner(&saved);
	if (SPI_execute("SELECT outbox, name, standby_slots FROM eo_internal.eo_outbox_groups"
					" WHERE standby_slots IS NOT NULL ORDER BY outbox, name", true, 0) != SPI_OK_SELECT)
		elog(ERROR, "eo: reading the groups' standby slots failed");
	/* thousands of groups of 64 slots each: each group's memory freed after it */
	per_group = AllocSetContextCreate(CurrentMemoryContext, "eo standby rows", ALLOCSET_SMALL_SIZES);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		HeapTuple	row = SPI_tuptable->vals[r];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		MemoryContext old = MemoryContextSwitchTo(per_group);
		ArrayType  *slots = DatumGetArrayTypeP(SPI_getbinval(row, desc, 3, &isnull));
		char	   *outbox = SPI_getvalue(row, desc, 1);
		char	   *grp = SPI_getvalue(row, desc, 2);

		n = slot_names(slots, &names);
		for (int i = 0; i < n; i++)
			put_standby_row(rsinfo, outbox, grp, names[i], now, true);
		MemoryContextSwitchTo(old);
		MemoryContextReset(per_group);
	}
	eo_restore_identity(&saved);
	SPI_finish();
}

/*
 * eo_relay_standbys(outbox, consumer_group): the standby slots the group
 * waits for, each with whether it exists, is streamed from, what its
 * standby flushed and how far that is behind the WAL written (bytes).
 * Same rights as eo_relay_fetch.  Without arguments
 * (eo_metrics.relay_standbys, for pg_monitor): every group's.
 */
Datum
eo_relay_standbys(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	XLogRecPtr	now = RecoveryInProgress() ? GetXLogReplayRecPtr(NULL) : GetXLogInsertRecPtr();
	Datum	   *names;
	int			n;

	InitMaterializedSRF(fcinfo, 0);
	if (PG_NARGS() == 2)
	{
		char	   *grp = eo_check_group_name(PG_GETARG_DATUM(1), PG_ARGISNULL(1));
		EoRelayCall call;

		eo_relay_begin(&call, PG_GETARG_DATUM(0), PG_ARGISNULL(0), grp);
		n = slot_names(call.standby_slots, &names);
		for (int i = 0; i < n; i++)
			put_standby_row(rsinfo, call.ob->name, grp, names[i], now, false);
		eo_relay_end(&call);
	}
	else
		put_every_group(rsinfo, now);
	return (Datum) 0;
}
