/*-------------------------------------------------------------------------
 * validate.c
 *	  Argument checks for the SQL-facing functions.
 *
 * Each validator raises exactly one clear error with its own SQLSTATE (the
 * README lists them) or returns the value, detoasted and ready to store.
 * Nothing here touches storage.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "eo.h"
#include "outbox.h"

/*
 * The one check of a text argument: not null (22004), not empty (22023)
 * unless `empty_ok`, at most `limit` bytes (`too_long`: 54000 for values,
 * 42622 for names).  `what` names the argument in the message.
 */
static text *
check_text(Datum value, bool isnull, const char *what, int limit, int too_long,
		   bool empty_ok)
{
	text	   *t;

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	t = DatumGetTextPP(value);
	if (VARSIZE_ANY_EXHDR(t) == 0 && !empty_ok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what)));
	if (VARSIZE_ANY_EXHDR(t) > limit)
		ereport(ERROR,
				(errcode(too_long),
				 errmsg("%s is too long", what),
				 errdetail("It is %zu bytes; the limit is %d bytes.",
						   (size_t) VARSIZE_ANY_EXHDR(t), limit)));
	return t;
}

/* A text argument with no limit of eo's own: eo_emit's aggregatetype, ... */
text *
eo_check_required_text(Datum value, bool isnull, const char *what)
{
	return check_text(value, isnull, what, MaxAllocSize, ERRCODE_PROGRAM_LIMIT_EXCEEDED, false);
}

text *
eo_check_key(Datum value, bool isnull)
{
	return check_text(value, isnull, "idempotency key", EO_MAX_KEY_BYTES,
					  ERRCODE_PROGRAM_LIMIT_EXCEEDED, false);
}

text *
eo_check_fingerprint(Datum value, bool isnull)
{
	if (isnull)
		return NULL;
	return check_text(value, false, "fingerprint", EO_MAX_FINGERPRINT_BYTES,
					  ERRCODE_PROGRAM_LIMIT_EXCEEDED, true);
}

/*
 * Does `fp` read as an interval with a unit ('30 seconds', '5 min',
 * 'PT30S')?  A number alone or '12:30' does not count: fingerprints like
 * those are plausible, an interval spelled with its unit is not.
 */
static bool
reads_as_interval(const text *fp)
{
	int			len = VARSIZE_ANY_EXHDR(fp);
	char		str[64];
	char		workbuf[MAXDATELEN + MAXDATEFIELDS];
	char	   *field[MAXDATEFIELDS];
	int			ftype[MAXDATEFIELDS];
	int			nf;
	int			dtype;
	struct pg_itm_in itm;
	bool		letter = false;

	/* Cheap filters first: every claim with a fingerprint comes here. */
	if (len == 0 || len >= (int) sizeof(str) ||
		strchr("0123456789+-.@P", *VARDATA_ANY(fp)) == NULL)
		return false;
	memcpy(str, VARDATA_ANY(fp), len);
	str[len] = '\0';
	for (int i = 0; i < len; i++)
		letter |= (str[i] >= 'a' && str[i] <= 'z') || (str[i] >= 'A' && str[i] <= 'Z');
	if (!letter)
		return false;
	if (str[0] == 'P')
		return DecodeISO8601Interval(str, &dtype, &itm) == 0 && dtype == DTK_DELTA;
	return ParseDateTime(str, workbuf, sizeof(workbuf), field, ftype, MAXDATEFIELDS, &nf) == 0 &&
		DecodeInterval(field, ftype, nf, INTERVAL_FULL_RANGE, &dtype, &itm) == 0 &&
		dtype == DTK_DELTA;
}

/*
 * eo_claim('k', '30 seconds') passes the interval as the fingerprint (the
 * second argument) and claims in transaction mode, without a lease.  It
 * is not refused, since a fingerprint may be any text, but warned of (a
 * WARNING also reaches the server log, where drivers that hide notices
 * do not).
 */
void
eo_warn_fingerprint_as_lease(const text *fingerprint)
{
	if (fingerprint != NULL && reads_as_interval(fingerprint))
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 errmsg("fingerprint \"%s\" looks like a lease", text_to_cstring(fingerprint)),
				 errdetail("The second argument of eo_claim is the fingerprint: this claim has no lease and belongs to the transaction."),
				 errhint("For a lease, name it: eo_claim(key, lease => '%s').", text_to_cstring(fingerprint))));
}

/* A jsonb argument of at most EO_MAX_RESULT_BYTES, or NULL. */
static Jsonb *
check_jsonb(Datum value, bool isnull, const char *what)
{
	if (isnull)
		return NULL;

	/* Judge the full size before detoasting it. */
	if (toast_raw_datum_size(value) > EO_MAX_RESULT_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s is too large", what),
				 errdetail("It is %zu bytes; the limit is %d bytes.",
						   (size_t) toast_raw_datum_size(value),
						   EO_MAX_RESULT_BYTES)));
	return DatumGetJsonbP(value);
}

Jsonb *
eo_check_result(Datum value, bool isnull)
{
	return check_jsonb(value, isnull, "result");
}

/* eo_recovery_point's point (a name, required) and state (or NULL). */
text *
eo_check_recovery_point(Datum value, bool isnull)
{
	return check_text(value, isnull, "recovery point", EO_MAX_POINT_BYTES,
					  ERRCODE_PROGRAM_LIMIT_EXCEEDED, false);
}

Jsonb *
eo_check_recovery_state(Datum value, bool isnull)
{
	return check_jsonb(value, isnull, "recovery state");
}

/* eo_redrive_dead's key_prefix: NULL (any key) or a non-empty prefix. */
text *
eo_check_key_prefix(Datum value, bool isnull)
{
	if (isnull)
		return NULL;
	return check_text(value, false, "key prefix", EO_MAX_KEY_BYTES,
					  ERRCODE_PROGRAM_LIMIT_EXCEEDED, false);
}

/*
 * An interval as microseconds, months counted as 30 days and days as 24 h.
 * Computed in double precision, so that no interval, however absurd, can
 * overflow into a small or negative number before it is compared.
 */
double
eo_interval_usecs(const Interval *iv)
{
	return (double) iv->time
		+ (double) iv->day * USECS_PER_DAY
		+ (double) iv->month * DAYS_PER_MONTH * USECS_PER_DAY;
}

/*
 * A lease: a key's (eo_claim, eo_extend) or a relay page's
 * (eo_relay_fetch, eo_relay_extend); positive and at most eo.max_lease.
 */
int64
eo_check_lease(Datum value, bool isnull, EoLeaseKind kind)
{
	double		usecs;
	double		max_usecs = (double) eo_max_lease_secs * USECS_PER_SEC;

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lease must not be null")));
	usecs = eo_interval_usecs(DatumGetIntervalP(value));
	if (usecs <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease must be positive"),
				 kind == EO_LEASE_KEY ? errhint("Pass NULL to claim in transaction mode.") : 0));
	if (usecs > max_usecs)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease is longer than eo.max_lease"),
				 errdetail("eo.max_lease is %d seconds.", eo_max_lease_secs),
				 errhint("Take a shorter lease and renew it with %s.",
						 kind == EO_LEASE_KEY ? "eo_extend" : "eo_relay_extend")));
	return (int64) usecs;
}

/*
 * An interval argument that must lie in [min_usecs, max_usecs]; its
 * documented bounds go into the message.
 */
Interval *
eo_check_interval(Datum value, bool isnull, const char *what,
				  int64 min_usecs, int64 max_usecs)
{
	Interval   *iv;
	double		usecs;

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	iv = DatumGetIntervalP(value);
	usecs = eo_interval_usecs(iv);
	if (usecs < (double) min_usecs || usecs > (double) max_usecs)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between %s and %s", what,
						eo_usecs_text(min_usecs), eo_usecs_text(max_usecs))));
	return iv;
}

/* A bound for a message: "0", "1 minute", "366 days". */
char *
eo_usecs_text(int64 usecs)
{
	if (usecs == 0)
		return "0";
	if (usecs % USECS_PER_DAY == 0)
		return psprintf("%lld day%s", (long long) (usecs / USECS_PER_DAY),
						usecs == USECS_PER_DAY ? "" : "s");
	if (usecs % USECS_PER_HOUR == 0)
		return psprintf("%lld hour%s", (long long) (usecs / USECS_PER_HOUR),
						usecs == USECS_PER_HOUR ? "" : "s");
	if (usecs % USECS_PER_MINUTE == 0)
		return psprintf("%lld minute%s", (long long) (usecs / USECS_PER_MINUTE),
						usecs == USECS_PER_MINUTE ? "" : "s");
	if (usecs % USECS_PER_SEC == 0)
		return psprintf("%lld second%s", (long long) (usecs / USECS_PER_SEC),
						usecs == USECS_PER_SEC ? "" : "s");
	return psprintf("%lld ms", (long long) (usecs / 1000));
}

int64
eo_check_retry_after(Datum value, bool isnull)
{
	double		usecs;

	if (isnull)
		return 0;
	usecs = eo_interval_usecs(DatumGetIntervalP(value));
	if (usecs < 0 || usecs > (double) EO_MAX_RETRY_AFTER_SECS * USECS_PER_SEC)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("retry_after must be between 0 and 366 days")));
	return (int64) usecs;
}

/*
 * Error texts are diagnostics, not data: an overlong one is cut (at a
 * character boundary) rather than refused, so that recording a failure
 * never fails.
 */
text *
eo_clip_error(Datum value, bool isnull)
{
	text	   *t;
	int			len;

	if (isnull)
		return NULL;
	t = DatumGetTextPP(value);
	len = VARSIZE_ANY_EXHDR(t);
	if (len <= EO_MAX_ERROR_BYTES)
		return t;
	len = pg_mbcliplen(VARDATA_ANY(t), len, EO_MAX_ERROR_BYTES);
	return cstring_to_text_with_len(VARDATA_ANY(t), len);
}

/*
 * A role named by a text argument (an owner), or `dflt` if NULL.  Text, not
 * regrole, in the SQL signature: a call with an untyped literal prefers a
 * text parameter, so a regrole one would lose to an overload that someone
 * put in an earlier-resolved schema (public) with a text parameter.
 */
Oid
eo_check_role(Datum value, bool isnull, Oid dflt)
{
	if (isnull)
		return dflt;
	return get_role_oid(text_to_cstring(DatumGetTextPP(value)), false);
}

/*
 * A role's name for a message, quoted; a role dropped since eo recorded it
 * (an owner is kept as an OID) is named by its OID.
 */
char *
eo_role_name(Oid role)
{
	char	   *name = GetUserNameFromId(role, true);

	return name != NULL ? psprintf("\"%s\"", name) :
		psprintf("with OID %u (dropped)", role);
}

/*
 * A SQLSTATE argument (eo_fail's sqlstate): five digits or upper-case
 * letters.  NULL if none is given.  Any such code is accepted, so that
 * recording a failure never fails on it; eo_sqlstate_may_be_final says
 * which may be replayed.
 */
char *
eo_check_sqlstate(Datum value, bool isnull)
{
	char	   *s;

	if (isnull)
		return NULL;
	s = text_to_cstring(DatumGetTextPP(value));
	if (strlen(s) != 5 || !eo_sqlstate_chars(s, 5))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid SQLSTATE \"%s\"", s),
				 errdetail("A SQLSTATE is five digits or upper-case letters.")));
	return s;
}

/*
 * An outbox name: the table's name too, and part of the NOTIFY channel and
 * the WAL message prefix, so it is kept to plain lower-case identifiers.
 */
char *
eo_check_outbox_name(Datum value, bool isnull, const char *what)
{
	text	   *t = check_text(value, isnull, what, EO_OUTBOX_MAX_NAME, ERRCODE_NAME_TOO_LONG, false);
	char	   *s = text_to_cstring(t);
	int			len = VARSIZE_ANY_EXHDR(t);

	for (int i = 0; i < len; i++)
	{
		char		c = s[i];

		if (!((c >= 'a' && c <= 'z') || c == '_' || (i > 0 && c >= '0' && c <= '9')))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_NAME),
					 errmsg("invalid %s \"%s\"", what, s),
					 errdetail("An outbox name is a lower-case letter or underscore followed by lower-case letters, digits and underscores.")));
	}
	return s;
}

char *
eo_check_group_name(Datum value, bool isnull)
{
	return text_to_cstring(check_text(value, isnull, "consumer group", EO_GROUP_MAX_NAME,
									  ERRCODE_NAME_TOO_LONG, false));
}

char *
eo_check_scope_name(Datum value, bool isnull)
{
	return text_to_cstring(check_text(value, isnull, "scope", EO_SCOPE_MAX_NAME,
									  ERRCODE_NAME_TOO_LONG, false));
}
