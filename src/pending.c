/*-------------------------------------------------------------------------
 * pending.c
 *	  Deferred claims: a transaction-mode claim of a new key writes its row
 *	  once, at commit, already done and with its result.
 *
 * The hand-written pattern writes a key row twice (insert "in progress",
 * update to "done").  A transaction-mode claim needs neither write before
 * commit: nobody else may see the key before commit anyway, and a rollback
 * must leave no trace.  So eo_claim of a new key takes the key lock
 * (keystore.c), finds no row, and remembers the claim here; eo_complete
 * records the result here; just before commit (or PREPARE TRANSACTION) the
 * row is inserted once, as done.  A concurrent claimer of the key waits
 * for the key lock, which the lock manager releases only after the commit
 * has made the row visible, and then finds the row; after a rollback or a
 * crash it finds nothing and claims the key.
 *
 * Only the first EO_MAX_PENDING claims of a transaction are deferred, so a
 * batch consumer that claims 100,000 keys in one transaction does not hold
 * 100,000 locks: later claims write their row at once.  Any other call on
 * a pending key (eo_fail, eo_extend, eo_status, a lease token) first writes
 * the row as it is, then proceeds as for any row.
 *
 * Subtransactions: a claim or completion made in a subtransaction that
 * rolls back is undone here too (the key lock is released by the lock
 * manager); one that commits passes to its parent.
 *
 * Also here, as the other half of "this transaction's claims": the last
 * key this backend claimed in transaction mode whose row is written, and
 * where that row is (the held claim).  A hint only, to spare eo_complete
 * a lookup: eo_complete rewrites exactly that row version, and if it is
 * gone falls back to a lookup.  It is forgotten at the end of the
 * transaction and whenever a subtransaction aborts, so it can never name
 * a row this transaction does not hold.
 *
 * Process model: per backend, per transaction; entries live in
 * TopTransactionContext and are forgotten at transaction end.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "storage/proc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "eo.h"

typedef struct PendingClaim
{
	EoKey		row;			/* the row to write at commit */
	SubTransactionId claimed_in;
	SubTransactionId completed_in;	/* InvalidSubTransactionId: not yet */
	SubTransactionId written_in;	/* row written early (eo_pending_write) */
} PendingClaim;

static PendingClaim pending[EO_MAX_PENDING];
static int	npending = 0;
static LocalTransactionId pending_lxid = InvalidLocalTransactionId;
static bool callbacks_registered = false;

static EoKey held;				/* the held claim, valid in held_lxid */
static LocalTransactionId held_lxid = InvalidLocalTransactionId;

/* Entries of an earlier transaction are gone (their memory with it). */
static void
pending_check_xact(void)
{
	if (pending_lxid != EO_MY_LXID)
	{
		npending = 0;
		pending_lxid = EO_MY_LXID;
	}
}

/* Is `row` the key (`key`, `scope`)? */
static bool
same_key(const EoKey *row, const text *key, int32 scope)
{
	return row->scope == scope &&
		VARSIZE_ANY_EXHDR(row->key) == VARSIZE_ANY_EXHDR(key) &&
		memcmp(VARDATA_ANY(row->key), VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key)) == 0;
}

static int
pending_index(const text *key, int32 scope)
{
	pending_check_xact();
	for (int i = 0; i < npending; i++)
		if (pending[i].written_in == InvalidSubTransactionId &&
			same_key(&pending[i].row, key, scope))
			return i;
	return -1;
}

/* The pending claim of (`key`, `scope`) in this transaction, or NULL. */
EoKey *
eo_pending_get(const text *key, int32 scope)
{
	int			i = pending_index(key, scope);

	return i < 0 ? NULL : &pending[i].row;
}

bool
eo_pending_room(void)
{
	pending_check_xact();
	return npending < EO_MAX_PENDING;
}

static void
pending_remove(int i)
{
	pending[i] = pending[--npending];
}

/* Write the rows of every pending claim: the transaction is committing. */
static void
pending_write_all(void)
{
	if (npending == 0)
		return;
	if (!eo_ks_exists())
	{
		npending = 0;			/* eo was dropped: nowhere to remember keys */
		return;
	}
	eo_ks_begin(EO_KS_WRITE);
	while (npending > 0)
	{
		PendingClaim *p = &pending[npending - 1];

		if (p->written_in == InvalidSubTransactionId)
			eo_ks_insert_held(&p->row);
		npending--;
	}
}

static void
pending_xact_callback(XactEvent event, void *arg)
{
	if (pending_lxid != EO_MY_LXID)
		return;
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PRE_PREPARE:
			pending_write_all();
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			npending = 0;
			break;
		default:
			break;
	}
}

static void
pending_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						 SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		eo_pending_forget_held();
	if (pending_lxid != EO_MY_LXID)
		return;
	for (int i = npending - 1; i >= 0; i--)
	{
		PendingClaim *p = &pending[i];

		if (event == SUBXACT_EVENT_ABORT_SUB)
		{
			if (p->claimed_in >= mySubid)
			{
				pending_remove(i);
				continue;
			}
			if (p->written_in >= mySubid)
				p->written_in = InvalidSubTransactionId;	/* pending again */
			if (p->completed_in >= mySubid)
			{
				p->completed_in = InvalidSubTransactionId;
				p->row.state = EO_TXN_CLAIMED;
				p->row.result = NULL;
			}
		}
		else if (event == SUBXACT_EVENT_COMMIT_SUB)
		{
			if (p->claimed_in == mySubid)
				p->claimed_in = parentSubid;
			if (p->completed_in == mySubid)
				p->completed_in = parentSubid;
			if (p->written_in == mySubid)
				p->written_in = parentSubid;
		}
	}
}

static text *
copy_text(const text *t)
{
	return t == NULL ? NULL : (text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(t));
}

static void
register_callbacks(void)
{
	if (callbacks_registered)
		return;
	RegisterXactCallback(pending_xact_callback, NULL);
	RegisterSubXactCallback(pending_subxact_callback, NULL);
	callbacks_registered = true;
}

/* A copy of `row` in TopTransactionContext, without its result. */
static void
copy_row(EoKey *to, const EoKey *row)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);

	*to = *row;
	to->key = copy_text(row->key);
	to->fingerprint = copy_text(row->fingerprint);
	to->last_error = copy_text(row->last_error);
	to->result = NULL;
	MemoryContextSwitchTo(old);
}

/*
 * Remember a claim whose key lock this transaction holds and whose row is
 * not written (keystore.c returned EO_KS_DEFERRED).
 */
void
eo_pending_add(const EoKey *row)
{
	PendingClaim *p;

	register_callbacks();
	pending_check_xact();
	Assert(npending < EO_MAX_PENDING);

	p = &pending[npending];
	copy_row(&p->row, row);
	p->claimed_in = GetCurrentSubTransactionId();
	p->completed_in = InvalidSubTransactionId;
	p->written_in = InvalidSubTransactionId;
	npending++;
}

/* eo_complete of a pending claim: the row will be written done. */
void
eo_pending_set_done(EoKey *row, Jsonb *result)
{
	PendingClaim *p = (PendingClaim *) row;	/* row is the first member */
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);

	p->row.state = EO_DONE;
	p->row.result = result == NULL ? NULL :
		(Jsonb *) PG_DETOAST_DATUM_COPY(PointerGetDatum(result));
	p->row.updated_at = GetCurrentTimestamp();
	p->completed_in = GetCurrentSubTransactionId();
	MemoryContextSwitchTo(old);
}

/*
 * Write the row of the pending claim of (`key`, `scope`), if any, as it is now: the
 * caller is about to act on the key as a row.  The entry stays, marked
 * written, so that a rollback to a savepoint that undoes the write makes
 * the claim pending again.
 */
void
eo_pending_write(const text *key, int32 scope)
{
	int			i = pending_index(key, scope);

	if (i < 0)
		return;
	eo_ks_begin(EO_KS_WRITE);
	eo_ks_insert_held(&pending[i].row);
	pending[i].written_in = GetCurrentSubTransactionId();
}

/* ---- the held claim ---- */

/* This transaction claimed `row` in transaction mode and wrote its row. */
void
eo_pending_remember_held(const EoKey *row)
{
	register_callbacks();
	copy_row(&held, row);
	held_lxid = EO_MY_LXID;
}

void
eo_pending_forget_held(void)
{
	held_lxid = InvalidLocalTransactionId;
}

/* The held claim of (`key`, `scope`), if this transaction's last claim was of it. */
bool
eo_pending_take_held(text *key, int32 scope, EoKey *row)
{
	if (held_lxid != EO_MY_LXID || held_lxid == InvalidLocalTransactionId ||
		!same_key(&held, key, scope))
		return false;
	*row = held;
	row->key = key;
	return true;
}
