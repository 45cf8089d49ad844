/*-------------------------------------------------------------------------
 * worker.c
 *	  The background launcher and its per-database maintenance passes.
 *
 * Process model.  With shared_preload_libraries = 'eo' the postmaster
 * starts one launcher ("eo launcher").  It connects to no database, wakes
 * every eo.naptime, lists the databases that accept connections (limited
 * to eo.databases if set), and starts one short-lived dynamic worker
 * ("eo worker") per database that has none running.  That worker connects,
 * returns at once if eo is not installed there, runs one maintenance pass
 * in short transactions, and exits.
 *
 * Why short-lived workers rather than one resident worker per database:
 * a resident connection would make DROP DATABASE fail ("being accessed by
 * other users"); a pass lasts well under the 5 s DROP DATABASE waits for
 * other sessions to leave.  It also makes DROP EXTENSION, a crash of a
 * worker and a change of settings need no special handling: the next pass
 * starts from the catalog as it is then.
 *
 * The launcher starts only once recovery has finished, so nothing runs on
 * a standby until it is promoted, and is not registered in binary-upgrade
 * mode.  After a crash the postmaster restarts it like any backend.
 *
 * Settings.  A pass connects like any session, so it gets the settings
 * made with ALTER DATABASE / ALTER ROLE ... SET, which the database owner
 * may make.  Those that could stop or subvert a pass (read-only
 * transactions, timeouts, search_path, the table access method ...) are
 * pinned to fixed values first (pin_session).  eo's own settings are
 * superuser-only, so per-database values of them are a superuser's
 * choice, and the pass honours them.
 *
 * Failures.  Each step runs in its own transaction; a step that fails is
 * logged and the pass goes on with the next one, so one broken object
 * never stops the rest of the maintenance.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/heapam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "compat.h"
#include "eo.h"


PGDLLEXPORT void eo_launcher_main(Datum main_arg);
PGDLLEXPORT void eo_db_worker_main(Datum main_arg);
PGDLLEXPORT void eo_first_generation_main(Datum main_arg);

/* The launcher's handle on the pass running in each database. */
typedef struct DbPass
{
	Oid			dboid;
	BackgroundWorkerHandle *handle;
} DbPass;

static DbPass *passes = NULL;
static int	npasses = 0;

void
eo_register_launcher(void)
{
	BackgroundWorker worker;

	/*
	 * Parallel query draws its workers from the same slots as eo's passes,
	 * and any role can start a parallel query: with as many parallel
	 * workers allowed as there are slots, those queries can leave none for
	 * a pass.
	 */
	if (max_parallel_workers > max_worker_processes - 2)
		ereport(WARNING,
				(errmsg("eo: parallel queries can take every background worker slot and stop eo's maintenance passes"),
				 errdetail("max_parallel_workers is %d and max_worker_processes is %d.",
						   max_parallel_workers, max_worker_processes),
				 errhint("Set max_worker_processes to at least max_parallel_workers + 1 + the number of databases eo serves, or lower max_parallel_workers.")));

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 10;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "eo");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "eo_launcher_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "eo launcher");
	snprintf(worker.bgw_type, BGW_MAXLEN, "eo launcher");
	RegisterBackgroundWorker(&worker);
}

/*
 * Connecting waits for a lock on the database, for which anyone can queue
 * a DROP DATABASE behind an open transaction (locks.c): that wait is
 * bounded too, at a priority that ALTER DATABASE or ROLE ... SET cannot
 * override.  A connection that gives up ends the process (FATAL), and the
 * database waits for the next pass.
 */
static void
bound_lock_waits(void)
{
	SetConfigOption("lock_timeout", CppAsString2(EO_LOCK_WAIT_MS), PGC_SUSET, PGC_S_OVERRIDE);
}

/* Is this database named in eo.databases (or is the list empty)? */
static bool
database_selected(const char *datname)
{
	char	   *copy;
	List	   *names;
	ListCell   *lc;
	bool		found = false;

	if (eo_databases == NULL || eo_databases[0] == '\0')
		return true;
	copy = pstrdup(eo_databases);
	if (!SplitIdentifierString(copy, ',', &names))
	{
		ereport(LOG,
				(errmsg("eo: invalid eo.databases list \"%s\"", eo_databases)));
		return false;
	}
	foreach(lc, names)
		found |= strcmp((char *) lfirst(lc), datname) == 0;
	return found;
}

/* The databases a pass should visit, read from pg_database. */
static List *
databases_to_visit(void)
{
	List	   *oids = NIL;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	MemoryContext caller = CurrentMemoryContext;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "eo: listing databases");

	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);
		MemoryContext old;

		/*
		 * A database that does not allow connections is still kept (its
		 * owner may set that, and must not stop the worker by it);
		 * templates are not.
		 */
		if (db->datistemplate || eo_database_is_invalid(db) ||
			!database_selected(NameStr(db->datname)))
			continue;
		old = MemoryContextSwitchTo(caller);
		oids = lappend_oid(oids, db->oid);
		MemoryContextSwitchTo(old);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);

	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	return oids;
}

static DbPass *
pass_slot(Oid dboid)
{
	for (int i = 0; i < npasses; i++)
		if (passes[i].dboid == dboid)
			return &passes[i];
	passes = passes == NULL
		? MemoryContextAlloc(TopMemoryContext, sizeof(DbPass))
		: repalloc(passes, sizeof(DbPass) * (npasses + 1));
	passes[npasses].dboid = dboid;
	passes[npasses].handle = NULL;
	return &passes[npasses++];
}

static bool
pass_running(DbPass *pass)
{
	pid_t		pid;

	return pass->handle != NULL &&
		GetBackgroundWorkerPid(pass->handle, &pid) != BGWH_STOPPED;
}

/* Start a pass in `dboid` unless one runs; false if no worker slot is free. */
static bool
start_pass(Oid dboid)
{
	DbPass	   *pass = pass_slot(dboid);
	BackgroundWorker worker;

	if (pass_running(pass))
		return true;			/* the previous pass has not finished */
	if (pass->handle != NULL)
		pfree(pass->handle);
	pass->handle = NULL;

	eo_db_worker_init(&worker, "eo_db_worker_main", "eo worker", dboid);
	if (RegisterDynamicBackgroundWorker(&worker, &pass->handle))
		return true;
	pass->handle = NULL;
	return false;
}

/*
 * Start a pass in every database.  When worker slots run out, the next
 * round starts with the first database left out, so that every database
 * is served in turn however few slots there are.
 */
static void
start_passes(List *oids)
{
	static int	first = 0;
	int			n = list_length(oids);

	for (int i = 0; i < n; i++)
	{
		int			at = (first + i) % n;

		if (!start_pass(list_nth_oid(oids, at)))
		{
			first = at;
			ereport(LOG,
					(errmsg("eo: no background worker slot free; %d of %d databases wait for the next pass",
							n - i, n),
					 errhint("Raise max_worker_processes, or limit eo.databases.")));
			return;
		}
	}
	first = 0;
}

/*
 * Milliseconds until the next pass is due.  Passes are paced by a deadline,
 * not by the wait's timeout, so that wake-ups between passes (a reload, a
 * worker that exits) neither skip nor add a pass.
 */
static long
ms_until(TimestampTz deadline)
{
	long		secs;
	int			usecs;

	TimestampDifference(GetCurrentTimestamp(), deadline, &secs, &usecs);
	return secs * 1000L + usecs / 1000;
}

void
eo_launcher_main(Datum main_arg)
{
	TimestampTz last_pass = 0;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	bound_lock_waits();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	for (;;)
	{
		long		wait_ms;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		wait_ms = last_pass == 0 ? 0 :
			ms_until(TimestampTzPlusMilliseconds(last_pass, eo_naptime_secs * 1000L));
		if (wait_ms <= 0)
		{
			List	   *oids = databases_to_visit();

			last_pass = GetCurrentTimestamp();
			start_passes(oids);
			list_free(oids);
			wait_ms = eo_naptime_secs * 1000L;
		}

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 wait_ms, EO_WAIT_EVENT_LAUNCHER);
		ResetLatch(MyLatch);
	}
}

/*
 * Is eo installed here, and may this step go on?  The step takes a share
 * lock on the extension when it is free at once, so that the owner's DROP
 * or ALTER EXTENSION waits for the step instead of pulling tables away
 * from under it.  It never waits for that lock: anyone can queue a DROP
 * EXTENSION for it behind an open transaction (locks.c).  When it is not
 * free, a superuser or a member of the owner holding or awaiting it is
 * about to drop or change eo, and the database is left alone this pass;
 * anyone else's request will fail its ownership check once granted, so
 * the step goes on without the lock (its other waits are bounded).
 */
static bool
extension_present(void)
{
	static bool reported = false;	/* once per pass (a process) */
	Oid			ext = get_extension_oid("eo", true);
	LOCKTAG		tag;
	bool		trusted;
	char	   *who;

	if (!OidIsValid(ext))
		return false;
	if (!OidIsValid(get_namespace_oid(EO_INTERNAL_SCHEMA, true)))
	{
		ereport(LOG,
				(errmsg("eo: skipping database \"%s\": eo's SQL objects are older than its library",
						get_database_name(MyDatabaseId)),
				 errhint("Run ALTER EXTENSION eo UPDATE there.")));
		return false;
	}
	SET_LOCKTAG_OBJECT(tag, MyDatabaseId, ExtensionRelationId, ext, 0);
	if (eo_lock_within(&tag, AccessShareLock, 0))
		return OidIsValid(get_extension_oid("eo", true));	/* not dropped meanwhile */

	who = eo_lock_blockers(&tag, AccessShareLock, eo_catalog()->owner, &trusted);
	if (trusted)
	{
		ereport(LOG,
				(errmsg("eo: leaving database \"%s\" for the next pass: extension eo is being dropped or changed",
						get_database_name(MyDatabaseId)),
				 errdetail("%s.", who)));
		eo_stat_count(EO_STAT_LOCK_WAITS_GIVEN_UP);
		return false;
	}
	if (who != NULL && !reported)
	{
		reported = true;
		ereport(LOG,
				(errmsg("eo: a lock request on extension eo that will be refused is queued in database \"%s\"; maintenance goes on without waiting for it",
						get_database_name(MyDatabaseId)),
				 errdetail("%s.", who),
				 errhint("Only the extension's owner may drop or change it; end those sessions with pg_terminate_backend().")));
	}
	return true;
}

/*
 * A step's error, reported and rolled back.  A lock that was not free
 * within lock_timeout is no error of eo's: the step's objects are left
 * for the next pass (log_lock_waits, pinned on, has named who held it).
 */
static void
step_failed(const char *activity, EoStep which)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	ErrorData  *edata = CopyErrorData();
	bool		lock = edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE;

	MemoryContextSwitchTo(old);
	if (!lock)
		EmitErrorReport();
	AbortCurrentTransaction();
	FlushErrorState();
	if (lock)
	{
		ereport(LOG,
				(errmsg("%s: left for the next pass, a lock was not free within %d ms",
						activity, EO_LOCK_WAIT_MS),
				 errdetail_internal("%s", edata->message)));
		eo_stat_count(EO_STAT_LOCK_WAITS_GIVEN_UP);
	}
	eo_stat_step_failed(which);
	FreeErrorData(edata);
}

/*
 * Run `step` in a transaction of its own, as worker_spi does, if eo is
 * still installed.  Returns false (and does nothing) once it is not.  A
 * step that fails is logged and rolled back; the pass goes on.
 */
static bool
run_in_transaction(const char *activity, EoStep which, void (*step) (void *), void *arg)
{
	volatile bool present = true;

	PG_TRY();
	{
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		pgstat_report_activity(STATE_RUNNING, activity);

		present = extension_present();
		if (present)
			step(arg);

		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		HOLD_INTERRUPTS();
		step_failed(activity, which);
		RESUME_INTERRUPTS();
	}
	PG_END_TRY();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
	return present;
}

/*
 * Settings a database owner could use (ALTER DATABASE ... SET) to stop or
 * subvert a pass, pinned for this session at the highest priority.
 */
static void
pin_session(void)
{
	static const char *const pinned[][2] = {
		{"search_path", EO_SAFE_SEARCH_PATH},
		{"default_transaction_read_only", "off"},
		{"default_transaction_isolation", "read committed"},
		{"default_transaction_deferrable", "off"},
		{"statement_timeout", "0"},
		/*
		 * a lock someone holds or queued for (an open ANALYZE, a prepared
		 * transaction, a DROP that will be refused: locks.c) makes that
		 * object's step give up until the next pass, not the pass hang; no
		 * writer queues behind a pass for longer; and before giving up, the
		 * wait is logged with who holds the lock and who queues for it
		 */
		{"lock_timeout", CppAsString2(EO_LOCK_WAIT_MS)},
		{"log_lock_waits", "on"},
		{"deadlock_timeout", CppAsString2(EO_LOCK_WAIT_LOG_MS)},
		{"exit_on_error", "off"},	/* an object's error must stay an error */
		{"idle_in_transaction_session_timeout", "0"},
		{"transaction_timeout", "0"},	/* 17 and later */
		{"default_table_access_method", "heap"},
		{"default_tablespace", ""},
		{"temp_tablespaces", ""},
		{"session_replication_role", "origin"},
		{"DateStyle", "ISO, MDY"},
		{"IntervalStyle", "postgres"},
		{"standard_conforming_strings", "on"},
		{"plan_cache_mode", "auto"},
		{"enable_seqscan", "on"},
		{"check_function_bodies", "on"},
		{"client_min_messages", "notice"},
		{"transform_null_equals", "off"},
		{"idle_session_timeout", "0"},
		/*
		 * what makes a pass slow or draws on shared resources: JIT
		 * compilation and parallel workers (from the pool that queries and
		 * replication share) for statements that touch a few rows
		 */
		{"jit", "off"},
		{"max_parallel_workers_per_gather", "0"},
		{"force_parallel_mode", "off"},	/* 15 */
		{"debug_parallel_query", "off"},	/* 16 and later */
		{"parallel_setup_cost", "1000"},
		{"parallel_tuple_cost", "0.1"},
		{"min_parallel_table_scan_size", "8MB"},
		{"min_parallel_index_scan_size", "512kB"},
		/*
		 * plan shapes and costs eo's statements were written for (the
		 * server's own defaults: a pass ignores postgresql.conf's too)
		 */
		{"random_page_cost", "4"},
		{"seq_page_cost", "1"},
		{"cpu_tuple_cost", "0.01"},
		{"cpu_index_tuple_cost", "0.005"},
		{"cpu_operator_cost", "0.0025"},
		{"effective_cache_size", "4GB"},
		{"work_mem", "4MB"},
		{"hash_mem_multiplier", "2"},
		{"join_collapse_limit", "8"},
		{"from_collapse_limit", "8"},
		{"geqo", "on"},
		{"geqo_threshold", "12"},
		{"cursor_tuple_fraction", "0.1"},
		{"enable_indexscan", "on"},
		{"enable_indexonlyscan", "on"},
		{"enable_bitmapscan", "on"},
		{"enable_tidscan", "on"},
		{"enable_sort", "on"},
		{"enable_hashagg", "on"},
		{"enable_hashjoin", "on"},
		{"enable_mergejoin", "on"},
		{"enable_nestloop", "on"},
		{"enable_material", "on"},
		{"enable_partition_pruning", "on"},
		{"constraint_exclusion", "partition"},
	};

	/*
	 * Who the session is: ALTER DATABASE ... SET session_authorization or
	 * role would otherwise make the pass run (and be logged) as a role the
	 * database owner chose.  Checking a role name reads the catalog, hence
	 * the transaction; a setting made with GUC_ACTION_SET outlives it.
	 */
	StartTransactionCommand();
	(void) set_config_option("session_authorization",
							 GetUserNameFromId(BOOTSTRAP_SUPERUSERID, false), PGC_SUSET,
							 PGC_S_OVERRIDE, GUC_ACTION_SET, true, 0, false);
	(void) set_config_option("role", "none", PGC_SUSET,
							 PGC_S_OVERRIDE, GUC_ACTION_SET, true, 0, false);
	for (int i = 0; i < lengthof(pinned); i++)
		if (GetConfigOption(pinned[i][0], true, false) != NULL)
			(void) set_config_option(pinned[i][0], pinned[i][1], PGC_SUSET,
									 PGC_S_OVERRIDE, GUC_ACTION_SET, true, 0, false);
	CommitTransactionCommand();
}

/*
 * What both kinds of database worker do first: connect to the database
 * `main_arg` names (even one closed to connections: its owner may close
 * it, and must not stop eo by that) and pin the session.
 */
static void
connect_to_database(Datum main_arg)
{
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	bound_lock_waits();
	BackgroundWorkerInitializeConnectionByOid(DatumGetObjectId(main_arg), InvalidOid,
											  BGWORKER_BYPASS_ALLOWCONN);
	pin_session();
	pgstat_report_appname("eo worker");
}

typedef struct ReclaimArg
{
	EoPassStats stats;
	bool		more;
} ReclaimArg;

static void
reclaim(void *arg)
{
	ReclaimArg *r = (ReclaimArg *) arg;

	r->more = false;			/* stays so if the step fails */
	eo_reclaim_step(&r->stats, &r->more);
}

static void
switch_generation(void *arg)
{
	eo_switch_step((EoPassStats *) arg);
}

static void
retire(void *arg)
{
	eo_retire_step((EoPassStats *) arg);
}

static void
outbox_partitions(void *arg)
{
	eo_outbox_step((EoPassStats *) arg);
}

static void
fencing_epochs(void *arg)
{
	eo_fencing_keep();
}

static void
drop_retired(void *arg)
{
	eo_drop_step((EoPassStats *) arg);
}

void
eo_db_worker_main(Datum main_arg)
{
	ReclaimArg	r = {{0}, true};
	TimestampTz started;

	/*
	 * Read before connecting, while the settings are the server's own (the
	 * postmaster's: its files and ALTER SYSTEM), not yet a database's or a
	 * role's, which pin_session overrides.  An HA manager makes a node it
	 * just promoted read-only that way until it knows the old primary is
	 * gone (pg_auto_failover does): no pass writes there meanwhile.
	 */
	bool		server_read_only = DefaultXactReadOnly;

	connect_to_database(main_arg);
	if (server_read_only)
	{
		ereport(DEBUG1,
				(errmsg("eo: no pass while the server's configuration sets default_transaction_read_only")));
		proc_exit(0);
	}
	started = GetCurrentTimestamp();

	/*
	 * Each step commits on its own: the switch's lock must not be held while
	 * keys are moved, and a table is dropped only once its retirement has
	 * committed (in an earlier pass).
	 */
	if (!run_in_transaction("eo: dropping retired generations", EO_STEP_DROP, drop_retired, &r.stats))
		proc_exit(0);			/* not installed here (any more) */
	while (r.more)
	{
		CHECK_FOR_INTERRUPTS();
		if (!run_in_transaction("eo: reclaiming expired leases", EO_STEP_RECLAIM, reclaim, &r))
			proc_exit(0);
	}
	if (!run_in_transaction("eo: switching key generations", EO_STEP_SWITCH, switch_generation, &r.stats) ||
		!run_in_transaction("eo: retiring key generations", EO_STEP_RETIRE, retire, &r.stats) ||
		!run_in_transaction("eo: keeping outbox partitions", EO_STEP_OUTBOX, outbox_partitions, &r.stats) ||
		!run_in_transaction("eo: keeping fencing token epochs", EO_STEP_RECLAIM, fencing_epochs, NULL))
		proc_exit(0);
	eo_stat_pass_done(&r.stats, started);

	if (r.stats.outbox_failures > 0)
		ereport(LOG,
				(errmsg("eo: %lld outboxes could not be maintained in this pass (see the warnings above)",
						(long long) r.stats.outbox_failures)));
	if (r.stats.reclaimed > 0 || r.stats.switched > 0 || r.stats.dropped > 0)
		ereport(LOG,
				(errmsg("eo: reclaimed %lld expired leases (%lld now dead), switched %lld, retired %lld and dropped %lld generations",
						(long long) r.stats.reclaimed, (long long) r.stats.dead,
						(long long) r.stats.switched, (long long) r.stats.retired,
						(long long) r.stats.dropped)));
	proc_exit(0);
}

/*
 * The first key generation, made by a helper process in a transaction of
 * its own (keystore.c asks for it): a claim's transaction that made it
 * itself would hold it invisible, and every other claim waiting, until
 * that transaction ended, which could be long (a batch) or never by
 * itself (a prepared transaction).
 */
static void
first_generation(void *arg)
{
	eo_ks_make_first_generation();
}

void
eo_first_generation_main(Datum main_arg)
{
	connect_to_database(main_arg);
	(void) run_in_transaction("eo: making the first key generation", EO_STEP_SWITCH, first_generation, NULL);
	proc_exit(0);
}
