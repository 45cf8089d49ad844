/*-------------------------------------------------------------------------
 * outbox_doorbell.c
 *	  Waking idle relays when an emitting transaction commits, without
 *	  NOTIFY.
 *
 * NOTIFY costs every emitting transaction a place in one queue: PostgreSQL
 * serialises the commits of notifying transactions of a database on one
 * lock, held across the commit's WAL flush.  With the preload, eo keeps a
 * doorbell per outbox in shared memory instead: a counter that an emitting
 * transaction increments after its commit became visible (an xact callback
 * at XACT_EVENT_COMMIT), then setting the latch of every relay waiting on
 * that outbox in eo_relay_wait().  A relay reads the counter before the
 * snapshot of its eo_relay_fetch(); if it is unchanged when the relay comes
 * to wait, no transaction committed events since that snapshot (its commit
 * would have been visible to the snapshot, or rung after the read), so the
 * relay sleeps until the bell rings or its timeout ends.  Nothing waits for
 * a lock on the emitting side: an atomic increment, and a spinlock only
 * while some relay is waiting.
 *
 * Counters are per bucket (hash of database and outbox), so two outboxes
 * may share one: a spurious wake-up, never a missed one.  Prepared
 * transactions do not ring (COMMIT PREPARED runs in another backend): their
 * relays wake at their timeout, or by NOTIFY.
 *
 * Without the preload there is no shared memory: eo_relay_wait() sleeps
 * until its timeout, and relays in effect poll (or LISTEN).
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "eo.h"

#define EO_BELLS		256
#define EO_MAX_WAITERS	64

typedef struct Waiter
{
	int			procno;
	uint32		bell;
} Waiter;

typedef struct DoorbellShared
{
	slock_t		mutex;			/* protects nwaiters and waiters[] */
	pg_atomic_uint32 nwaiters;	/* read without the lock by ringers */
	Waiter		waiters[EO_MAX_WAITERS];
	pg_atomic_uint64 bells[EO_BELLS];
} DoorbellShared;

static DoorbellShared *shared = NULL;

/* Bells this transaction rings when it commits. */
static uint64 to_ring[EO_BELLS / 64];
static bool ring_registered = false;
static bool ring_pending = false;

/* This backend as a waiter. */
static bool waiting = false;	/* holds a waiter slot */
static bool exit_callback_registered = false;

Size
eo_doorbell_shmem_size(void)
{
	return MAXALIGN(sizeof(DoorbellShared));
}

/* Under AddinShmemInitLock, from eo.c's shared memory start-up. */
void
eo_doorbell_shmem_init(void)
{
	bool		found;

	shared = ShmemInitStruct("eo doorbells", sizeof(DoorbellShared), &found);
	if (found)
		return;
	SpinLockInit(&shared->mutex);
	pg_atomic_init_u32(&shared->nwaiters, 0);
	for (int i = 0; i < EO_BELLS; i++)
		pg_atomic_init_u64(&shared->bells[i], 0);
}

static uint32
bell_of(Oid outbox)
{
	return hash_combine(murmurhash32(MyDatabaseId), murmurhash32(outbox)) % EO_BELLS;
}

/* Ring the rung bells, then wake the relays waiting on them. */
static void
ring_now(void)
{
	int			wake[EO_MAX_WAITERS];
	int			nwake = 0;

	for (int b = 0; b < EO_BELLS; b++)
		if (to_ring[b / 64] & (UINT64CONST(1) << (b % 64)))
			pg_atomic_fetch_add_u64(&shared->bells[b], 1);	/* full barrier */

	if (pg_atomic_read_u32(&shared->nwaiters) == 0)
		return;
	SpinLockAcquire(&shared->mutex);
	for (uint32 i = 0; i < pg_atomic_read_u32(&shared->nwaiters); i++)
	{
		uint32		b = shared->waiters[i].bell;

		if (to_ring[b / 64] & (UINT64CONST(1) << (b % 64)))
			wake[nwake++] = shared->waiters[i].procno;
	}
	SpinLockRelease(&shared->mutex);
	for (int i = 0; i < nwake; i++)
		SetLatch(&GetPGProcByNumber(wake[i])->procLatch);
}

static void
doorbell_xact_callback(XactEvent event, void *arg)
{
	if (!ring_pending)
		return;
	if (event == XACT_EVENT_COMMIT)
		ring_now();
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
	{
		memset(to_ring, 0, sizeof(to_ring));
		ring_pending = false;
	}
}

/* The current transaction wrote events into `outbox`: ring at commit. */
void
eo_doorbell_ring_at_commit(Oid outbox)
{
	uint32		b;

	if (shared == NULL)
		return;
	if (!ring_registered)
	{
		RegisterXactCallback(doorbell_xact_callback, NULL);
		ring_registered = true;
	}
	b = bell_of(outbox);
	to_ring[b / 64] |= UINT64CONST(1) << (b % 64);
	ring_pending = true;
}

/*
 * The bell of `outbox` now; read before a relay's snapshot.  Without the
 * preload, 0.
 */
uint64
eo_doorbell_read(Oid outbox)
{
	uint64		v;

	if (shared == NULL)
		return 0;
	v = pg_atomic_read_u64(&shared->bells[bell_of(outbox)]);
	pg_memory_barrier();
	return v;
}

static void unregister_waiter(void);

/* A backend that ends while waiting (FATAL skips PG_FINALLY) gives back its slot. */
static void
doorbell_exit(int code, Datum arg)
{
	if (waiting)
		unregister_waiter();
}

static bool
register_waiter(uint32 bell)
{
	bool		ok = false;

	if (!exit_callback_registered)
	{
		before_shmem_exit(doorbell_exit, (Datum) 0);
		exit_callback_registered = true;
	}

	SpinLockAcquire(&shared->mutex);
	if (pg_atomic_read_u32(&shared->nwaiters) < EO_MAX_WAITERS)
	{
		uint32		n = pg_atomic_read_u32(&shared->nwaiters);

		shared->waiters[n].procno = EO_MY_PROCNO;
		shared->waiters[n].bell = bell;
		pg_atomic_write_u32(&shared->nwaiters, n + 1);
		ok = true;
	}
	SpinLockRelease(&shared->mutex);
	waiting = ok;
	return ok;
}

static void
unregister_waiter(void)
{
	SpinLockAcquire(&shared->mutex);
	for (uint32 i = 0; i < pg_atomic_read_u32(&shared->nwaiters); i++)
		if (shared->waiters[i].procno == EO_MY_PROCNO)
		{
			uint32		last = pg_atomic_read_u32(&shared->nwaiters) - 1;

			shared->waiters[i] = shared->waiters[last];
			pg_atomic_write_u32(&shared->nwaiters, last);
			break;
		}
	SpinLockRelease(&shared->mutex);
	waiting = false;
}

/*
 * Sleep until the bell of `outbox` differs from `seen` (true) or
 * `timeout_ms` has passed (false).  With every waiter slot taken the bell
 * is looked at every 100 ms instead; without the preload there is no bell
 * and the wait lasts the timeout.
 */
bool
eo_doorbell_wait(Oid outbox, uint64 seen, int64 timeout_ms)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	uint32		bell = bell_of(outbox);
	bool		registered = shared != NULL && register_waiter(bell);
	bool		rang = false;

	/*
	 * The waiter's entry stored before the bell is read, as a ringer
	 * increments the bell before it reads the entries: one of the two sees
	 * the other.  A spinlock's release lets a later read pass the store.
	 */
	pg_memory_barrier();
	PG_TRY();
	{
		for (;;)
		{
			long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);

			if (shared != NULL && eo_doorbell_read(outbox) != seen)
			{
				rang = true;
				break;
			}
			if (left <= 0)
				break;
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 registered ? left : Min(left, 100), PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_FINALLY();
	{
		if (registered)
			unregister_waiter();
	}
	PG_END_TRY();
	return rang;
}
