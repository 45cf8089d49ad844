/*-------------------------------------------------------------------------
 * compat.h
 *	  Every PostgreSQL-version difference eo cares about, in one place.
 *
 * eo supports PostgreSQL 15 and later, tested on 15, 17 and 18
 * (tools/matrix.sh).  No other file tests PG_VERSION_NUM: a call that
 * differs between versions goes through an eo_* macro or inline here.
 *-------------------------------------------------------------------------
 */
#ifndef EO_COMPAT_H
#define EO_COMPAT_H

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "storage/itemptr.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"

#if PG_VERSION_NUM < 150000
#error "eo needs PostgreSQL 15 or later"
#endif

/*
 * Named wait events for extensions arrived in 17; before, every extension
 * wait shows as "Extension".
 */
#if PG_VERSION_NUM >= 170000
#include "utils/wait_event.h"
#define EO_WAIT_EVENT_LAUNCHER WaitEventExtensionNew("EoLauncherMain")
#else
#define EO_WAIT_EVENT_LAUNCHER PG_WAIT_EXTENSION
#endif

/* Datum conversions for item pointers arrived in 16. */
#ifndef DatumGetItemPointer
#define DatumGetItemPointer(X) ((ItemPointer) DatumGetPointer(X))
#define ItemPointerGetDatum(X) PointerGetDatum(X)
#endif

/*
 * Index maintenance after a direct heap write (keystore.c).  16 added the
 * "only summarizing indexes" case to both calls.
 */
#include "access/tableam.h"
#include "executor/executor.h"
#if PG_VERSION_NUM >= 160000
typedef TU_UpdateIndexes EoUpdateIndexes;
#define EO_UPDATE_NEEDS_INDEXES(u) ((u) != TU_None)
#define EO_UPDATE_ONLY_SUMMARIZING(u) ((u) == TU_Summarizing)
#define eo_insert_index_tuples(rri, slot, estate, only_summarizing) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, false, NULL, NIL, (only_summarizing))
#else
typedef bool EoUpdateIndexes;
#define EO_UPDATE_NEEDS_INDEXES(u) (u)
#define EO_UPDATE_ONLY_SUMMARIZING(u) false
#define eo_insert_index_tuples(rri, slot, estate, only_summarizing) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, false, NULL, NIL)
#endif

/* LogLogicalMessage() takes a "flush" argument from 17 on. */
#if PG_VERSION_NUM >= 170000
#define eo_log_logical_message(prefix, message, size, transactional) \
	LogLogicalMessage((prefix), (message), (size), (transactional), false)
#else
#define eo_log_logical_message(prefix, message, size, transactional) \
	LogLogicalMessage((prefix), (message), (size), (transactional))
#endif

/* The local transaction id moved into PGPROC.vxid in 17. */
#include "storage/proc.h"
#if PG_VERSION_NUM >= 170000
#define EO_MY_LXID (MyProc->vxid.lxid)
#else
#define EO_MY_LXID (MyProc->lxid)
#endif

/* PGPROC lost its pgprocno field in 17; MyProcNumber is this backend's. */
#if PG_VERSION_NUM >= 170000
#define EO_MY_PROCNO ((int) MyProcNumber)
#else
#define EO_MY_PROCNO (MyProc->pgprocno)
#endif

/* pg_namespace_aclcheck() became object_aclcheck() in 16. */
#include "utils/acl.h"
#if PG_VERSION_NUM >= 160000
#include "catalog/pg_namespace.h"
#define eo_namespace_aclcheck(nspid, roleid, mode) \
	object_aclcheck(NamespaceRelationId, (nspid), (roleid), (mode))
#else
#define eo_namespace_aclcheck(nspid, roleid, mode) \
	pg_namespace_aclcheck((nspid), (roleid), (mode))
#endif

/* index_beginscan() takes instrumentation (none here) from 18 on. */
#if PG_VERSION_NUM >= 180000
#define eo_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), (norderbys))
#else
#define eo_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), (norderbys))
#endif

/*
 * The primary key's index: from 18 on the caller says whether a deferrable
 * one will do (eo's tables have none).
 */
#include "utils/relcache.h"
#if PG_VERSION_NUM >= 180000
#define eo_primary_key_index(rel) RelationGetPrimaryKeyIndex((rel), false)
#else
#define eo_primary_key_index(rel) RelationGetPrimaryKeyIndex(rel)
#endif

/*
 * A database left invalid by an interrupted DROP DATABASE cannot be
 * connected to: marked since minor releases of August 2023 (15.4).
 */
#include "catalog/pg_database.h"
#ifdef DATCONNLIMIT_INVALID_DB
#define eo_database_is_invalid(datform) database_is_invalid_form(datform)
#else
#define eo_database_is_invalid(datform) false
#endif

/*
 * A setting's record, or NULL if there is none of that name.  16 made
 * find_option public; before, the array of settings, kept sorted by
 * name compared ASCII case-insensitively (guc.c's guc_name_compare), is
 * searched the same way.
 */
#include "utils/guc_tables.h"
#if PG_VERSION_NUM >= 160000
static inline struct config_generic *
eo_find_setting(const char *name)
{
	return find_option(name, false, true, ERROR);
}
#else
static inline int
eo_setting_name_cmp(const void *key, const void *elem)
{
	const char *a = *(const char *const *) key;
	const char *b = (*(struct config_generic *const *) elem)->name;

	for (; *a && *b; a++, b++)
	{
		char		ca = (*a >= 'A' && *a <= 'Z') ? *a + ('a' - 'A') : *a;
		char		cb = (*b >= 'A' && *b <= 'Z') ? *b + ('a' - 'A') : *b;

		if (ca != cb)
			return ca - cb;
	}
	return *a ? 1 : (*b ? -1 : 0);
}

static inline struct config_generic *
eo_find_setting(const char *name)
{
	struct config_generic **found = bsearch(&name, get_guc_variables(), GetNumConfigOptions(),
											sizeof(struct config_generic *), eo_setting_name_cmp);

	return found ? *found : NULL;
}
#endif

#endif							/* EO_COMPAT_H */
