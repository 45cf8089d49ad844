/*-------------------------------------------------------------------------
 * bgworker.c
 *	  Short-lived background workers of eo's in one database: how they are
 *	  described, and running one and waiting for it to end.
 *
 * A generic facility below the code that schedules with it: it knows a
 * worker's entry point only by its name in eo's library, nothing of what
 * the worker does.  The launcher (worker.c) starts one per database and
 * pass; the key store (keystore.c) runs the first-generation helper in
 * its own database and waits for it, so that the first generation is
 * made in a transaction of its own.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "postmaster/bgworker.h"

#include "eo.h"

/* A short-lived worker in database `dboid` that runs eo's `function`. */
void
eo_db_worker_init(BackgroundWorker *worker, const char *function, const char *name, Oid dboid)
{
	memset(worker, 0, sizeof(*worker));
	worker->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker->bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker->bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker->bgw_library_name, BGW_MAXLEN, "eo");
	snprintf(worker->bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(worker->bgw_name, BGW_MAXLEN, "%s for database %u", name, dboid);
	snprintf(worker->bgw_type, BGW_MAXLEN, "eo worker");
	worker->bgw_main_arg = ObjectIdGetDatum(dboid);
}

/*
 * Run eo's `function` in a worker of this database and wait for it to
 * end.  False if no background worker slot was free or it did not start
 * (the caller then does the work itself).
 */
bool
eo_run_helper(const char *function, const char *name)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	pid_t		pid;

	eo_db_worker_init(&worker, function, name, MyDatabaseId);
	worker.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
		return false;
	if (WaitForBackgroundWorkerStartup(handle, &pid) != BGWH_STARTED)
		return false;
	(void) WaitForBackgroundWorkerShutdown(handle);
	return true;
}
