/*-------------------------------------------------------------------------
 * json.c
 *	  JSON text built in a growing buffer: what eo_nats writes of messages
 *	  (dump), of their headers (apply's $4) and of event headers.
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eo_nats.h"

void
json_init(JsonBuf *b)
{
	b->cap = 256;
	b->len = 0;
	b->data = malloc(b->cap);
	b->data[0] = '\0';
}

void
json_add(JsonBuf *b, const char *s)
{
	size_t		n = strlen(s);

	if (b->len + n + 1 > b->cap)
	{
		b->cap = (b->len + n + 1) * 2;
		b->data = realloc(b->data, b->cap);
	}
	memcpy(b->data + b->len, s, n + 1);
	b->len += n;
}

/*
 * `s` as a JSON string: quoted, with '"', '\\' and control bytes escaped,
 * and every byte at which `escape_at` (if given) says true written as
 * \uXXXX too.
 */
void
json_quote(JsonBuf *b, const char *s, bool (*escape_at) (const char *c))
{
	char		esc[8];

	json_add(b, "\"");
	for (const unsigned char *c = (const unsigned char *) s; *c; c++)
	{
		if (escape_at != NULL && escape_at((const char *) c))
			snprintf(esc, sizeof(esc), "\\u%04x", *c);
		else if (*c == '"' || *c == '\\')
			snprintf(esc, sizeof(esc), "\\%c", *c);
		else if (*c < 0x20)
			snprintf(esc, sizeof(esc), "\\u%04x", *c);
		else
			snprintf(esc, sizeof(esc), "%c", *c);
		json_add(b, esc);
	}
	json_add(b, "\"");
}

void
json_string(JsonBuf *b, const char *s)
{
	json_quote(b, s, NULL);
}
