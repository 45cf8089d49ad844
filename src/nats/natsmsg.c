/*-------------------------------------------------------------------------
 * natsmsg.c
 *	  An outbox event as a JetStream message: subject, headers, payload.
 *
 * Subject: the --subject template with {outbox}, {group},
 * {aggregatetype}, {aggregateid} and {type} replaced; in a replaced value
 * every byte other than A-Z, a-z, 0-9, '_' and '-' becomes '_', so that a
 * value can neither add subject tokens ('.') nor wildcards ('*', '>').
 * The exact values travel in headers.
 *
 * Headers: Nats-Msg-Id (the event id: JetStream's deduplication key),
 * Eo-Outbox, Eo-Type, Eo-Aggregate-Type, Eo-Aggregate-Id, Eo-Created-At
 * (RFC 3339, UTC), Eo-Headers (the event's headers as JSON, whole), and
 * each of the event's own headers that can be one (see forward.c).  A
 * value that holds CR or LF is sent as its JSON string.
 *
 * Payload: the event's payload as JSON text ("null" for none).
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "eo_nats.h"

static const char *const variables[] = {
	"outbox", "group", "aggregatetype", "aggregateid", "type", NULL
};

/* Which template variable starts at `p` (just after '{'), or -1. */
static int
variable_at(const char *p, size_t *len)
{
	for (int v = 0; variables[v] != NULL; v++)
	{
		size_t		n = strlen(variables[v]);

		if (strncmp(p, variables[v], n) == 0 && p[n] == '}')
		{
			*len = n + 1;
			return v;
		}
	}
	return -1;
}

bool
subject_template_valid(const char *template, char *why, size_t len)
{
	size_t		skip;

	if (template[0] == '\0' || strchr(template, ' ') != NULL || strlen(template) > 256)
	{
		snprintf(why, len, "a subject template must be 1 to 256 bytes without spaces");
		return false;
	}
	for (const char *p = template; *p; p++)
		if (*p == '{' && variable_at(p + 1, &skip) < 0)
		{
			snprintf(why, len, "unknown variable at \"%s\" (known: {outbox}, {group},"
					 " {aggregatetype}, {aggregateid}, {type})", p);
			return false;
		}
	return true;
}

static const char *
variable_value(const Config *cfg, const Event *e, int v)
{
	switch (v)
	{
		case 0:
			return cfg->outbox;
		case 1:
			return cfg->group;
		case 2:
			return e->aggregatetype;
		case 3:
			return e->aggregateid;
		default:
			return e->type;
	}
}

/* A subject token character, or '_' for one that cannot be. */
static char
token_char(unsigned char c)
{
	return ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			(c >= '0' && c <= '9') || c == '_' || c == '-') ? (char) c : '_';
}

/*
 * The subject of event e, malloc'd.  A replaced value gives at most
 * EO_SUBJECT_VALUE_MAX bytes (the server closes a connection whose
 * protocol line is too long, which would stop every slot's delivery);
 * the exact value is in the headers.
 */
#define EO_SUBJECT_VALUE_MAX 64

static char *
subject_of(const Config *cfg, const Event *e)
{
	size_t		cap = 64;
	size_t		used = 0;
	char	   *out = malloc(cap);

	for (const char *p = cfg->subject; *p;)
	{
		size_t		skip = 0;
		int			v = *p == '{' ? variable_at(p + 1, &skip) : -1;
		const char *value = v < 0 ? NULL : variable_value(cfg, e, v);
		size_t		need = v < 0 ? 1 : strlen(value) + 1;

		if (used + need + 1 > cap)
		{
			cap = (used + need + 1) * 2;
			out = realloc(out, cap);
		}
		if (v < 0)
		{
			out[used++] = *p++;
			continue;
		}
		for (const unsigned char *c = (const unsigned char *) value;
			 *c && c - (const unsigned char *) value < EO_SUBJECT_VALUE_MAX; c++)
			out[used++] = token_char(*c);
		if (value[0] == '\0')
			out[used++] = '_';
		p += skip + 1;
	}
	out[used] = '\0';
	return out;
}

/*
 * Does "nats-" (any case) start at `c`?  nats-server finds a header by the
 * first place its name appears in the header block, values included: a
 * producer's value holding "Nats-Msg-Id" could otherwise stand for eo's.
 */
static bool
nats_name_at(const char *c)
{
	return strncasecmp(c, "nats-", 5) == 0;
}

/* Does `s` hold "nats-", in any case? */
static bool
holds_nats_name(const char *s)
{
	for (; *s; s++)
		if (nats_name_at(s))
			return true;
	return false;
}

/*
 * `value` fit for a header: as is, or as its JSON string if it is empty
 * (libnats misreads an empty value), holds CR or LF, or holds "nats-".
 */
static char *
header_value(const char *value)
{
	JsonBuf		b;

	if (value[0] != '\0' && strpbrk(value, "\r\n") == NULL && !holds_nats_name(value))
		return strdup(value);
	json_init(&b);
	json_quote(&b, value, nats_name_at);
	return b.data;
}

/*
 * JSON text (the event's headers object) with the first letter of every
 * "nats-" escaped: in JSON text letters outside strings are only those of
 * true, false and null, so every "nats-" is inside a string, where
 * "\u004e" means "N".
 */
static char *
guarded_json(const char *json)
{
	JsonBuf		b;
	char		one[8];

	json_init(&b);
	for (const char *c = json; *c; c++)
	{
		if (nats_name_at(c))
			snprintf(one, sizeof(one), "\\u%04x", (unsigned char) *c);
		else
			snprintf(one, sizeof(one), "%c", *c);
		json_add(&b, one);
	}
	return b.data;
}

/* Set a header on msg; counts its bytes into *bytes. */
static bool
set_header(natsMsg *msg, const char *key, const char *value, size_t *bytes)
{
	char	   *safe = header_value(value);
	natsStatus	s = natsMsgHeader_Add(msg, key, safe);

	*bytes += strlen(key) + strlen(safe) + 4;	/* "key: value\r\n" */
	free(safe);
	return s == NATS_OK;
}

/*
 * The event's own header lines ("key<TAB>value\n..."), each as a header
 * of its own while the header block stays under EO_HEADERS_BUDGET; the
 * rest are in Eo-Headers only.
 */
#define EO_HEADERS_BUDGET 16384
#define EO_HEADERS_MAX 65000	/* JetStream refuses a header block of 64 KB */

static bool
set_event_headers(natsMsg *msg, const char *lines, size_t *bytes)
{
	char	   *copy;
	char	   *save = NULL;
	bool		ok = true;

	if (lines == NULL)
		return true;
	copy = strdup(lines);
	for (char *line = strtok_r(copy, "\n", &save); line && ok; line = strtok_r(NULL, "\n", &save))
	{
		char	   *tab = strchr(line, '\t');

		if (tab == NULL || *bytes + strlen(line) + 4 > EO_HEADERS_BUDGET)
			continue;
		*tab = '\0';
		ok = set_header(msg, line, tab + 1, bytes);
	}
	free(copy);
	return ok;
}

/*
 * The message for event e, or NULL with the reason in `why` (a message
 * over the server's max_payload, or one the library refuses).
 */
natsMsg *
eo_event_msg(const Config *cfg, const Event *e, int64_t max_payload, char *why, size_t len)
{
	char	   *subject = subject_of(cfg, e);
	natsMsg    *msg = NULL;
	size_t		bytes = strlen("NATS/1.0\r\n\r\n");
	size_t		payload = strlen(e->payload);
	bool		ok;

	ok = natsMsg_Create(&msg, subject, NULL, e->payload, (int) payload) == NATS_OK;
	ok = ok && set_header(msg, "Nats-Msg-Id", e->id, &bytes);
	ok = ok && set_header(msg, "Eo-Outbox", cfg->outbox, &bytes);
	ok = ok && set_header(msg, "Eo-Type", e->type, &bytes);
	ok = ok && set_header(msg, "Eo-Aggregate-Type", e->aggregatetype, &bytes);
	ok = ok && set_header(msg, "Eo-Aggregate-Id", e->aggregateid, &bytes);
	ok = ok && set_header(msg, "Eo-Created-At", e->created_at, &bytes);
	if (e->headers != NULL)
	{
		char	   *guarded = guarded_json(e->headers);

		ok = ok && natsMsgHeader_Set(msg, "Eo-Headers", guarded) == NATS_OK;
		bytes += strlen("Eo-Headers") + strlen(guarded) + 4;
		free(guarded);
	}
	ok = ok && set_event_headers(msg, e->header_lines, &bytes);
	if (cfg->stream)
		bytes += strlen("Nats-Expected-Stream") + strlen(cfg->stream) + 4;
	if (!ok)
		snprintf(why, len, "the message could not be made: %s", nats_error(NATS_ERR));
	else if (bytes > EO_HEADERS_MAX)
	{
		snprintf(why, len, "its headers are %zu bytes, over the %d that JetStream takes",
				 bytes, EO_HEADERS_MAX);
		ok = false;
	}
	else if (max_payload > 0 && (int64_t) (bytes + payload) > max_payload)
	{
		snprintf(why, len, "it is %zu bytes with its headers, over the server's max_payload"
				 " of %lld bytes", bytes + payload, (long long) max_payload);
		ok = false;
	}
	free(subject);
	if (!ok)
	{
		natsMsg_Destroy(msg);
		return NULL;
	}
	return msg;
}
