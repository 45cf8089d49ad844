/*-------------------------------------------------------------------------
 * settings.c
 *	  eo's settings (eo.*): their variables, their check hooks, and their
 *	  definition, which _PG_init (eo.c) calls first.
 *
 * Low in the files: the rest of eo reads these variables, and the only
 * call out of here is to sqlstates.c (the check of eo.final_sqlstates).
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "eo.h"

int			eo_max_attempts = 5;
int			eo_max_lease_secs = SECS_PER_DAY;
int			eo_retention_secs = 7 * SECS_PER_DAY;
int			eo_partition_interval_secs = SECS_PER_DAY;
int			eo_naptime_secs = 10;
char	   *eo_databases = NULL;
bool		eo_track_counts = true;
char	   *eo_final_sqlstates = NULL;
int			eo_tombstone_retention_secs = 0;

/*
 * eo.databases must be a list of names: refused at reload (the old value
 * stays), not found wrong by every pass.
 */
static bool
check_databases(char **newval, void **extra, GucSource source)
{
	char	   *copy = pstrdup(*newval);
	List	   *names;
	ListCell   *lc;
	bool		ok = SplitIdentifierString(copy, ',', &names);

	if (!ok)
		GUC_check_errdetail("List syntax is invalid.");
	foreach(lc, names)
	{
		if (ok && ((char *) lfirst(lc))[0] == '\0')
		{
			GUC_check_errdetail("A database name is empty.");
			ok = false;
		}
	}
	list_free(names);
	pfree(copy);
	return ok;
}

/*
 * eo.final_sqlstates: refused when an entry is not a class or a SQLSTATE,
 * or names one that may not be final (outcome.c).
 */
static bool
check_final_sqlstates(char **newval, void **extra, GucSource source)
{
	char	   *bad;
	bool		malformed;

	if (eo_sqlstate_list_valid(*newval, &bad, &malformed))
		return true;
	if (malformed)
		GUC_check_errdetail("\"%s\" is neither a SQLSTATE class (two characters) nor a SQLSTATE (five).", bad);
	else
		GUC_check_errdetail("\"%s\" may not be final: it is no error, or says something of the transaction, the connection or the server, not of the request.", bad);
	return false;
}

void
eo_define_settings(void)
{
	/*
	 * Superuser-settable rather than per user: whether a key is dead must not
	 * depend on which client happened to record its last failure.  It can
	 * still be set per database or per role with ALTER ... SET.
	 */
	DefineCustomIntVariable("eo.max_attempts",
							"Attempts after which a key becomes dead.",
							"Counts claims that took effect and failures recorded with eo_fail.",
							&eo_max_attempts,
							5, 1, 1000,
							PGC_SUSET, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("eo.max_lease",
							"Longest lease that eo_claim and eo_extend accept.",
							NULL,
							&eo_max_lease_secs,
							SECS_PER_DAY, 1, 30 * SECS_PER_DAY,
							PGC_SUSET, GUC_UNIT_S,
							NULL, NULL, NULL);

	/*
	 * Superuser-settable (not SIGHUP) so that eo_maintain() can be run by
	 * hand with other values; the worker uses the server's values.
	 */
	DefineCustomIntVariable("eo.retention",
							"How long a finished key is remembered, at least.",
							"Keys are removed by dropping whole time generations.",
							&eo_retention_secs,
							7 * SECS_PER_DAY, 1, 3650 * SECS_PER_DAY,
							PGC_SUSET, GUC_UNIT_S,
							NULL, NULL, NULL);

	/*
	 * The second tier (tombstones.c): off by default, so that claims of new
	 * keys probe nothing unless asked to.  Superuser-only as eo.retention.
	 */
	DefineCustomIntVariable("eo.tombstone_retention",
							"How long a compact tombstone of a finished key is kept after its full record (0: none).",
							"A claim that meets a tombstone is a duplicate with no result.",
							&eo_tombstone_retention_secs,
							0, 0, 3650 * SECS_PER_DAY,
							PGC_SUSET, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("eo.partition_interval",
							"How long one generation of the key store receives new keys.",
							NULL,
							&eo_partition_interval_secs,
							SECS_PER_DAY, 1, 30 * SECS_PER_DAY,
							PGC_SUSET, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("eo.naptime",
							"Time between two maintenance passes of the background worker.",
							NULL,
							&eo_naptime_secs,
							10, 1, 3600,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomStringVariable("eo.databases",
							   "Databases the background worker visits (comma-separated; empty: all).",
							   NULL,
							   &eo_databases,
							   "",
							   PGC_SIGHUP, GUC_LIST_INPUT,
							   check_databases, NULL, NULL);

	/* Like track_counts: off only to measure what counting costs. */
	DefineCustomBoolVariable("eo.track_counts",
							 "Counts claims, completions and maintenance passes for the eo_metrics views.",
							 "Needs eo in shared_preload_libraries.",
							 &eo_track_counts,
							 true,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	/*
	 * What eo_fail records as final (replayed by every later claim) when the
	 * caller does not say: data exceptions and the integrity violations that
	 * the same request would meet again.  Not 23503 (a row referred to may
	 * arrive later) nor 23001.  Superuser-only, as eo.max_attempts: whether
	 * a failure is replayed for good must not depend on which session (or
	 * which function it ran) recorded it; a caller says so per call with
	 * final => true or false.
	 */
	DefineCustomStringVariable("eo.final_sqlstates",
							   "SQLSTATEs and classes whose failures eo_fail records as final.",
							   "A final failure is replayed as the same error by every later eo_claim of the key.",
							   &eo_final_sqlstates,
							   "22, 23000, 23502, 23505, 23514, 23P01",
							   PGC_SUSET, GUC_LIST_INPUT,
							   check_final_sqlstates, NULL, NULL);

	MarkGUCPrefixReserved("eo");
}
