/*-------------------------------------------------------------------------
 * errors.c
 *	  What a failed statement means for the message or page at hand: its
 *	  own fault, a passing trouble, or a mistake only a person can fix.
 *
 * The rule that matters: a message is given up (terminated, or its key
 * failed until dead) only for a cause that belongs to that message.  An
 * error about the set-up (a privilege, a missing scope, table or
 * function, eo's schema or version, the credentials) would meet every
 * message the same way, and giving them up would lose them all for one
 * typo; so those stop the program (EXIT_CONFIG) with every message
 * given back, and passing troubles (a lost connection, a serialization
 * failure, an update of eo in progress) are waited out.  What is not
 * known to be the message's or to pass is taken for the set-up: stopping
 * loses nothing, giving up might.
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "eo_nats.h"

static bool
in_classes(const char *state, const char *const *classes)
{
	for (; *classes != NULL; classes++)
		if (strncmp(state, *classes, strlen(*classes)) == 0)
			return true;
	return false;
}

/*
 * The kind of a failure with SQLSTATE `state` (NULL: none, the
 * connection's) of a statement that `blames`:
 *	  BLAME_CLAIM: eo_claim of the message's id refused the id itself
 *				   (class 22: empty, not in the database's encoding; 54:
 *				   too long), or replayed the final failure of its --sql
 *				   (eo_claim raises it again, with its SQLSTATE: one of
 *				   BLAME_DATA's, the only ones apply records);
 *				   the scope was checked at start (apply.c);
 *	  BLAME_DATA:  the user's --sql or its COMMIT failed on the message's
 *				   data (22 data exception, 23 constraint, 44 check
 *				   option, 54 a limit, P0 raised by a function);
 *	  BLAME_NONE:  a statement of eo's own (a relay call), whose failure
 *				   is never about one message.
 */
ErrorKind
sql_error_kind(const char *state, Blame blames)
{
	static const char *const passing[] = {
		"08", "40", "53", "55", "57", "58", "XX", "25006", NULL
	};
	/* a replayed final failure is raised with its own SQLSTATE: as --sql's */
	static const char *const claim[] = {"22", "23", "44", "54", "P0", NULL};
	static const char *const data[] = {"22", "23", "44", "54", "P0", NULL};

	if (state == NULL || strlen(state) != 5)
		return ERR_TRANSIENT;
	if (blames == BLAME_CLAIM && in_classes(state, claim))
		return ERR_MESSAGE;
	if (blames == BLAME_DATA && in_classes(state, data))
		return ERR_MESSAGE;
	if (in_classes(state, passing))
		return ERR_TRANSIENT;
	return ERR_CONFIG;
}

/* The kind of a NATS status met connecting or subscribing. */
ErrorKind
nats_error_kind(natsStatus s)
{
	return s == NATS_CONNECTION_AUTH_FAILED || s == NATS_NOT_PERMITTED ||
		s == NATS_INVALID_ARG || s == NATS_NOT_FOUND ? ERR_CONFIG : ERR_TRANSIENT;
}
