/*-------------------------------------------------------------------------
 * outbox_relay_headers.c
 *	  eo_relay_header_lines: an event's headers as "key<TAB>value" lines,
 *	  those a relay can carry as message headers (eo_nats forward's page).
 *
 * eo_nats forward sends each event's own headers along as NATS headers,
 * where a name is printable ASCII without ':' or space, and names that
 * hold "nats-" (the server's and the client library's) or begin "eo-"
 * (eo_nats's own) are taken.  A value goes as its string when it is a
 * JSON string without CR or LF (a header value is one line), else as its
 * JSON text.  In SQL that was a subquery per event (jsonb_each, two
 * regular expressions per key, string_agg): 100-130 µs of server CPU for
 * a page of 7 events (pgbench); here it is a walk over the object, and
 * forward's server CPU per event paced is 0.90x (bench/nats.sh,
 * docs/performance.md).
 *
 * Lines are ordered by the keys' bytes (the SQL form sorted by the
 * database's collation: header order means nothing to NATS).  NULL when
 * the headers are not an object or no key qualifies.  The whole object
 * also travels as Eo-Headers, so nothing the producer wrote is lost.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "eo.h"

PG_FUNCTION_INFO_V1(eo_relay_header_lines);

typedef struct HeaderLine
{
	char	   *key;
	int			key_len;
	JsonbValue	value;
} HeaderLine;

/* Printable ASCII but ':' (and so no space, tab or newline), not empty. */
static bool
key_is_name(const char *key, int len)
{
	if (len == 0)
		return false;
	for (int i = 0; i < len; i++)
		if (key[i] < '!' || key[i] > '~' || key[i] == ':')
			return false;
	return true;
}

/* Holds "nats-" anywhere or begins "eo-", in any case. */
static bool
key_is_taken(const char *key, int len)
{
	if (len >= 3 && pg_strncasecmp(key, "eo-", 3) == 0)
		return true;
	for (int i = 0; i + 5 <= len; i++)
		if (pg_strncasecmp(key + i, "nats-", 5) == 0)
			return true;
	return false;
}

static int
line_cmp(const void *a, const void *b)
{
	const HeaderLine *x = a;
	const HeaderLine *y = b;
	int			c = memcmp(x->key, y->key, Min(x->key_len, y->key_len));

	return c != 0 ? c : x->key_len - y->key_len;
}

/* A value as its one-line string, or as its JSON text. */
static void
append_value(StringInfo out, JsonbValue *v)
{
	if (v->type == jbvString &&
		memchr(v->val.string.val, '\r', v->val.string.len) == NULL &&
		memchr(v->val.string.val, '\n', v->val.string.len) == NULL)
		appendBinaryStringInfo(out, v->val.string.val, v->val.string.len);
	else if (v->type == jbvBinary)
		(void) JsonbToCString(out, v->val.binary.data, v->val.binary.len);
	else
	{
		Jsonb	   *scalar = JsonbValueToJsonb(v);

		(void) JsonbToCString(out, &scalar->root, VARSIZE(scalar));
	}
}

/* eo_relay_header_lines(headers): see the header. */
Datum
eo_relay_header_lines(PG_FUNCTION_ARGS)
{
	Jsonb	   *headers = PG_GETARG_JSONB_P(0);
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken token;
	HeaderLine *lines;
	int			n = 0;
	StringInfoData out;

	if (!JB_ROOT_IS_OBJECT(headers) || JB_ROOT_COUNT(headers) == 0)
		PG_RETURN_NULL();
	lines = palloc(sizeof(HeaderLine) * JB_ROOT_COUNT(headers));
	it = JsonbIteratorInit(&headers->root);
	while ((token = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (token == WJB_KEY)
		{
			lines[n].key = v.val.string.val;
			lines[n].key_len = v.val.string.len;
		}
		else if (token == WJB_VALUE)
		{
			lines[n].value = v;
			if (key_is_name(lines[n].key, lines[n].key_len) &&
				!key_is_taken(lines[n].key, lines[n].key_len))
				n++;
		}
	}
	if (n == 0)
		PG_RETURN_NULL();
	qsort(lines, n, sizeof(HeaderLine), line_cmp);
	initStringInfo(&out);
	for (int i = 0; i < n; i++)
	{
		if (i > 0)
			appendStringInfoChar(&out, '\n');
		appendBinaryStringInfo(&out, lines[i].key, lines[i].key_len);
		appendStringInfoChar(&out, '\t');
		append_value(&out, &lines[i].value);
	}
	PG_RETURN_TEXT_P(cstring_to_text_with_len(out.data, out.len));
}
