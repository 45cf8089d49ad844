/*-------------------------------------------------------------------------
 * locks.c
 *	  Bounded lock waits for maintenance, and who is in the way.
 *
 * Why.  PostgreSQL takes the lock on an object before it checks whether
 * the caller may do what it asked: DROP EXTENSION, DROP SCHEMA and DROP
 * DATABASE by a role that owns nothing queue for an ACCESS EXCLUSIVE lock
 * and fail only once they get it.  Any role that can connect can hold a
 * weak lock on the object in one session (pg_get_object_address) and
 * queue such a DROP behind it in another; every later request for the
 * object, however weak, then queues behind the DROP, for as long as the
 * first session stays open.  So maintenance never waits without bound for
 * a lock that others can queue on: it waits at most EO_LOCK_WAIT_MS, then
 * leaves the object for the next pass and says who was in the way (the
 * pids, their roles and lock modes, as pg_locks shows them).
 *
 * Process model: any backend or worker, inside a transaction.  Reading
 * who is in the way copies the lock table (as pg_locks does), which is
 * done only after a wait has already failed.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/acl.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "eo.h"

/*
 * Take `mode` on `tag` waiting at most `timeout_ms` (0: not at all), and
 * keep it for the rest of the transaction or (!keep) let it go at once.
 * False if it was not had in time; the transaction is then as it was.
 * While it waits, requests that conflict with `mode` queue behind it: the
 * bound is also how long they may wait.
 */
static bool
lock_within(const LOCKTAG *tag, LOCKMODE mode, int timeout_ms, bool keep)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool locked = true;

	LockAcquireResult got = LockAcquire(tag, mode, false, true);

	if (got != LOCKACQUIRE_NOT_AVAIL)
	{
		/* as LockDatabaseObject: see what the holder we waited for did */
		if (got == LOCKACQUIRE_OK)
			AcceptInvalidationMessages();
		if (!keep)
			LockRelease(tag, mode, false);
		return true;
	}
	if (timeout_ms <= 0)
		return false;

	/* lock_timeout is how a wait gives up; a subtransaction undoes it. */
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		int			nest = NewGUCNestLevel();

		(void) set_config_option("lock_timeout", psprintf("%d", timeout_ms),
								 PGC_SUSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
		(void) LockAcquire(tag, mode, false, false);
		AcceptInvalidationMessages();
		/* (released here, by the subtransaction's resource owner, which holds it) */
		if (!keep)
			LockRelease(tag, mode, false);
		AtEOXact_GUC(true, nest);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata = eo_subxact_failed(cxt, owner);

		/*
		 * Any other error (a deadlock with whoever we waited for, a cancel)
		 * is the caller's, raised again once our subtransaction is gone: left
		 * open, it would make the caller's own recovery fail (a worker pass
		 * died FATAL, "unexpected state SUBABORT", after a deadlock).
		 */
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		FreeErrorData(edata);
		locked = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return locked;
}

/* Take `mode` on `tag` for the rest of the transaction, waiting at most `timeout_ms`. */
bool
eo_lock_within(const LOCKTAG *tag, LOCKMODE mode, int timeout_ms)
{
	return lock_within(tag, mode, timeout_ms, true);
}

/*
 * Wait at most `timeout_ms` until `mode` on `tag` could be had, without
 * keeping it: true if it could.  (A lock taken in the subtransaction of a
 * timed wait belongs to the transaction's resource owner afterwards, not
 * to the caller's, so a caller that wants to let it go later takes it
 * again itself once this says it is free.)
 */
bool
eo_lock_wait_within(const LOCKTAG *tag, LOCKMODE mode, int timeout_ms)
{
	return lock_within(tag, mode, timeout_ms, false);
}

/* Does a lock held with `mask`, or awaited in `waits`, conflict with `mode`? */
static bool
in_the_way(LOCKMASK mask, LOCKMODE waits, LOCKMODE mode, LOCKMODE *which, bool *waiting)
{
	for (LOCKMODE m = 1; m <= MaxLockMode; m++)
		if ((mask & LOCKBIT_ON(m)) && DoLockModesConflict(m, mode))
		{
			*which = m;
			*waiting = false;
			return true;
		}
	if (waits != NoLock && DoLockModesConflict(waits, mode))
	{
		*which = waits;
		*waiting = true;
		return true;
	}
	return false;
}

/* The role a backend connected as, or InvalidOid if it is gone. */
static Oid
backend_role(int pid)
{
	PGPROC	   *proc = BackendPidGetProc(pid);

	return proc == NULL ? InvalidOid : proc->roleId;
}

/* One session in the way of a lock request. */
typedef struct Blocker
{
	int			pid;			/* 0: a prepared transaction */
	Oid			role;			/* InvalidOid if not known */
	LOCKMODE	mode;
	bool		waiting;		/* queued for `mode`, not holding it */
	bool		trusted;		/* a superuser, or with the owner's privileges */
} Blocker;

/* Who holds or waits for a lock on `tag` that conflicts with `mode`. */
static List *
blockers(const LOCKTAG *tag, LOCKMODE mode, Oid owner)
{
	LockData   *data = GetLockStatusData();
	List	   *result = NIL;

	for (int i = 0; i < data->nelements; i++)
	{
		LockInstanceData *l = &data->locks[i];
		LOCKMODE	which;
		bool		waiting;
		Blocker    *b;

		if (memcmp(&l->locktag, tag, sizeof(LOCKTAG)) != 0 || l->pid == MyProcPid ||
			!in_the_way(l->holdMask, l->waitLockMode, mode, &which, &waiting))
			continue;
		b = palloc0(sizeof(Blocker));
		b->mode = which;
		b->waiting = waiting;
		b->pid = l->pid;
		b->role = l->pid == 0 ? InvalidOid : backend_role(l->pid);
		b->trusted = OidIsValid(b->role) &&
			(superuser_arg(b->role) || has_privs_of_role(b->role, owner));
		result = lappend(result, b);
	}
	return result;
}

/*
 * Does a prepared transaction hold a lock on `tag` that conflicts with
 * `mode`?  Then a wait for it lasts until COMMIT PREPARED or ROLLBACK
 * PREPARED, which may be hours if its coordinator is gone.
 */
bool
eo_lock_held_by_prepared(const LOCKTAG *tag, LOCKMODE mode)
{
	ListCell   *lc;

	foreach(lc, blockers(tag, mode, InvalidOid))
	{
		Blocker    *b = lfirst(lc);

		if (b->pid == 0 && !b->waiting)
			return true;
	}
	return false;
}

/*
 * Who holds or waits for a lock on `tag` that conflicts with `mode`, as
 * text for a message ("pid 12 (role \"alice\") holds AccessShareLock,
 * pid 13 (role \"bob\") waits for AccessExclusiveLock"), or NULL if nobody
 * does any more.  *trusted (if not NULL) says whether one of them is a
 * superuser or has the privileges of `owner`: a role entitled to what it
 * asked for, not one that only queues.
 */
char *
eo_lock_blockers(const LOCKTAG *tag, LOCKMODE mode, Oid owner, bool *trusted)
{
	StringInfoData buf;
	ListCell   *lc;

	initStringInfo(&buf);
	if (trusted != NULL)
		*trusted = false;
	foreach(lc, blockers(tag, mode, owner))
	{
		Blocker    *b = lfirst(lc);
		char	   *name = OidIsValid(b->role) ? GetUserNameFromId(b->role, true) : NULL;

		if (trusted != NULL && b->trusted)
			*trusted = true;
		if (b->pid == 0)
			appendStringInfo(&buf, "%sa prepared transaction (see pg_prepared_xacts) %s %s",
							 buf.len > 0 ? ", " : "", b->waiting ? "waits for" : "holds",
							 GetLockmodeName(DEFAULT_LOCKMETHOD, b->mode));
		else
			appendStringInfo(&buf, "%spid %d (role \"%s\") %s %s",
							 buf.len > 0 ? ", " : "", b->pid, name != NULL ? name : "?",
							 b->waiting ? "waits for" : "holds",
							 GetLockmodeName(DEFAULT_LOCKMETHOD, b->mode));
	}
	return buf.len > 0 ? buf.data : NULL;
}

/*
 * Cancel the requests queued for a lock on `tag` that conflict with
 * `mode`, made by sessions whose role is neither a superuser nor has the
 * privileges of `owner`, the object's owner: requests that will be
 * refused once granted (PostgreSQL locks first and checks ownership
 * after), and that meanwhile make everyone behind them wait.  Only
 * waiters: a lock someone holds is theirs.  Only for a superuser caller
 * (the worker; not an application whose call eo runs as its owner):
 * returns how many were cancelled, logging each.
 */
int
eo_cancel_doomed_waiters(const LOCKTAG *tag, LOCKMODE mode, Oid owner, const char *what)
{
	static int	logged = 0;		/* in this process */
	int			cancelled = 0;
	ListCell   *lc;

	if (!superuser_arg(GetOuterUserId()))
		return 0;
	foreach(lc, blockers(tag, mode, owner))
	{
		Blocker    *b = lfirst(lc);
		char	   *name;

		if (!b->waiting || b->trusted || b->pid == 0 || !OidIsValid(b->role))
			continue;
		name = GetUserNameFromId(b->role, true);
		if (!DatumGetBool(DirectFunctionCall1(pg_cancel_backend, Int32GetDatum(b->pid))))
			continue;
		cancelled++;
		/* the first of a pass is logged; one queued again and again is not news */
		ereport(logged++ == 0 ? LOG : DEBUG1,
				(errmsg("eo: cancelled the request of pid %d (role \"%s\") for %s on %s, queued in front of maintenance",
						b->pid, name != NULL ? name : "?",
						GetLockmodeName(DEFAULT_LOCKMETHOD, b->mode), what),
				 errdetail("Only its owner may drop or change %s: the request would have been refused once granted.",
						   what)));
	}
	return cancelled;
}
