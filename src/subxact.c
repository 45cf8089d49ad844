/*-------------------------------------------------------------------------
 * subxact.c
 *	  The end of a step run in an internal subtransaction that failed.
 *
 * Maintenance steps, bounded lock waits and a relay's look before its
 * sleep each run in a subtransaction (BeginInternalSubTransaction) so that
 * a failure, or the look itself, leaves no lock or change behind.  Their
 * PG_CATCH blocks all end the same way, here: the error copied out, the
 * subtransaction rolled back, the caller's memory context and resource
 * owner back.  What to do with the error (report it, raise it again, or
 * take a lock timeout as an answer) is the caller's.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/resowner.h"

#include "eo.h"

/*
 * In the PG_CATCH of a subtransaction begun in memory context `cxt` under
 * resource owner `owner`: the error, copied into `cxt`.
 */
ErrorData *
eo_subxact_failed(MemoryContext cxt, ResourceOwner owner)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return edata;
}
