/*-------------------------------------------------------------------------
 * sqlstates.c
 *	  SQLSTATEs as eo_fail and eo.final_sqlstates see them: which may be
 *	  final (replayed by every later claim), and lists of them.
 *
 * Pure functions of their arguments, below both the settings (whose check
 * hook uses them) and the outcomes of failures (outcome.c).
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "eo.h"

/* Are the `len` characters at `s` digits and upper-case ASCII letters? */
bool
eo_sqlstate_chars(const char *s, int len)
{
	for (int i = 0; i < len; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'A' && s[i] <= 'Z')))
			return false;
	return true;
}

/*
 * May a failure with this SQLSTATE (or class, `len` 2 or 5) be final, that
 * is, raised again by every later claim?  Not one that is no error (00, 01,
 * 02), nor one that says something about the transaction, the connection
 * or the server rather than the request: a replayed 40001 would make
 * clients that retry it retry for ever, a replayed 08xxx or 57P01 makes
 * pools drop the connection, 57014 and P0004 cannot be caught by
 * PL/pgSQL's WHEN OTHERS, and XX000 means a bug.
 */
bool
eo_sqlstate_may_be_final(const char *s, int len)
{
	static const char *const never[] = {
		"00", "01", "02", "08", "40", "53", "57", "58", "F0", "XX", "P0004"
	};

	for (int i = 0; i < lengthof(never); i++)
	{
		int			n = strlen(never[i]);

		if (n <= len && strncmp(s, never[i], n) == 0)
			return false;
	}
	return true;
}

/*
 * Walk the entries of a SQLSTATE list (eo.final_sqlstates): classes of two
 * characters or SQLSTATEs of five, separated by commas and spaces.  Calls
 * `fn` on each until it returns true, and returns true with *entry at that
 * entry; returns false at the end, or at a malformed entry (*entry at it,
 * *malformed set).
 */
static bool
sqlstate_list_walk(const char *list, bool (*fn) (const char *entry, int len, const void *arg),
				   const void *arg, const char **entry, bool *malformed)
{
	const char *p = list;

	*malformed = false;
	for (;;)
	{
		int			len;

		p += strspn(p, ", ");
		len = strcspn(p, ", ");
		if (len == 0)
			return false;
		*entry = p;
		if ((len != 2 && len != 5) || !eo_sqlstate_chars(p, len))
		{
			*malformed = true;
			return false;
		}
		if (fn(p, len, arg))
			return true;
		p += len;
	}
}

/* An entry that may not be final. */
static bool
sqlstate_never_final(const char *entry, int len, const void *arg)
{
	return !eo_sqlstate_may_be_final(entry, len);
}

/*
 * For the setting's check hook: is every entry well formed, and one that
 * may be final?  If not, *bad is the first entry that is not (up to the
 * next separator), and *malformed says which of the two it breaks.
 */
bool
eo_sqlstate_list_valid(const char *list, char **bad, bool *malformed)
{
	const char *entry = NULL;

	if (!sqlstate_list_walk(list, sqlstate_never_final, NULL, &entry, malformed) &&
		!*malformed)
		return true;
	*bad = pnstrdup(entry, strcspn(entry, ", "));
	return false;
}

static bool
sqlstate_matches(const char *entry, int len, const void *arg)
{
	return strncmp(entry, (const char *) arg, len) == 0;
}

/* Does `list` name `sqlstate`, or its class? */
bool
eo_sqlstate_listed(const char *sqlstate, const char *list)
{
	const char *entry;
	bool		malformed;

	return sqlstate_list_walk(list, sqlstate_matches, sqlstate, &entry, &malformed);
}
