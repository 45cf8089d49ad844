/*-------------------------------------------------------------------------
 * eo.c
 *	  Module entry point: the settings (settings.c), and with the preload
 *	  the shared memory of outbox_doorbell.c and stats.c and the worker's
 *	  registration.  Above every other file: nothing calls into it.
 *
 * eo works without shared_preload_libraries; everything here must be safe
 * to run when the library is loaded on first use by a backend.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "compat.h"
#include "eo.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;

static void
eo_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(add_size(eo_doorbell_shmem_size(), eo_stats_shmem_size()));
}

static void
eo_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	eo_doorbell_shmem_init();
	eo_stats_shmem_init();
	LWLockRelease(AddinShmemInitLock);
}

/* Shared memory is requested in a hook (since 15, the oldest eo supports). */
static void
eo_shmem_hooks(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = eo_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = eo_shmem_startup;
}

void
_PG_init(void)
{
	eo_define_settings();
	eo_reserve_statement_names();

	/*
	 * The worker, the relays' doorbells and the claim counters need the
	 * preload; everything else works without it.
	 */
	if (process_shared_preload_libraries_in_progress)
		eo_shmem_hooks();
	if (process_shared_preload_libraries_in_progress && !IsBinaryUpgrade)
		eo_register_launcher();
}
