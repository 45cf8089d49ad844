/*-------------------------------------------------------------------------
 * log.c
 *	  eo_nats's log: one line per message on stderr (systemd's journal
 *	  keeps it), control bytes in it made '?' (so that no value a producer
 *	  or publisher chose can forge a line), and repeated errors of one
 *	  cause said once per interval with a count.
 *
 * Why the limit.  While NATS or PostgreSQL is away, every event and every
 * retry meets the same error; a backlog of 100,000 events would write as
 * many lines per ack-wait.  log_limited() writes the first line of a
 * cause, leaves out the others for LOG_LIMIT_SECS, and says how many it
 * left out with the next line of that cause (or at exit).
 *
 * Called from libnats' threads too (log_msg only): each line is one
 * fprintf, so lines never interleave.  log_limited() is for the main
 * thread alone.
 *-------------------------------------------------------------------------
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "eo_nats.h"

bool		log_verbose = false;

#define LOG_LIMIT_SECS 30
#define LOG_LIMIT_CAUSES 32

/* A cause seen lately: when it was last written, and how many left out since. */
typedef struct LimitedCause
{
	char		key[160];
	time_t		written;
	long		left_out;
} LimitedCause;

static LimitedCause causes[LOG_LIMIT_CAUSES];

static void log_line(const char *level, const char *suffix, const char *fmt, va_list ap)
			__attribute__((format(printf, 3, 0)));

static void
log_line(const char *level, const char *suffix, const char *fmt, va_list ap)
{
	struct timeval tv;
	struct tm	tm;
	char		when[32];
	char		text[4096];

	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	vsnprintf(text, sizeof(text), fmt, ap);
	/*
	 * One line, whatever a value in it holds: a producer's aggregate, a
	 * publisher's Nats-Msg-Id or subject, a server's message.
	 */
	for (char *c = text; *c; c++)
		if ((unsigned char) *c < 0x20 || *c == 0x7f)
			*c = '?';
	fprintf(stderr, "%s.%03dZ eo_nats %s: %s%s\n", when, (int) (tv.tv_usec / 1000), level,
			text, suffix);
	fflush(stderr);
}

void
log_msg(const char *level, const char *fmt,...)
{
	va_list		ap;

	if (strcmp(level, "debug") == 0 && !log_verbose)
		return;
	va_start(ap, fmt);
	log_line(level, "", fmt, ap);
	va_end(ap);
}

/* The slot of `key`: its own, a free one, or the one written longest ago. */
static LimitedCause *
cause_slot(const char *key)
{
	LimitedCause *oldest = &causes[0];

	for (int i = 0; i < LOG_LIMIT_CAUSES; i++)
	{
		if (strncmp(causes[i].key, key, sizeof(causes[i].key) - 1) == 0 && causes[i].key[0])
			return &causes[i];
		if (causes[i].written < oldest->written)
			oldest = &causes[i];
	}
	if (oldest->left_out > 0)
		log_msg("warning", "%ld more lines like \"%s\" were left out", oldest->left_out, oldest->key);
	memset(oldest, 0, sizeof(*oldest));
	snprintf(oldest->key, sizeof(oldest->key), "%s", key);
	return oldest;
}

/*
 * A line whose cause is `key` (a short text naming the kind of failure,
 * not the event): written unless one of the same cause was written within
 * LOG_LIMIT_SECS, then counted instead.
 */
void
log_limited(const char *key, const char *level, const char *fmt,...)
{
	LimitedCause *c = cause_slot(key);
	time_t		now = time(NULL);
	char		suffix[96] = "";
	va_list		ap;

	if (c->written != 0 && now - c->written < LOG_LIMIT_SECS)
	{
		c->left_out++;
		return;
	}
	if (c->left_out > 0)
		snprintf(suffix, sizeof(suffix), " (and %ld more like it in the last %ld s)",
				 c->left_out, (long) (now - c->written));
	c->written = now;
	c->left_out = 0;
	va_start(ap, fmt);
	log_line(level, suffix, fmt, ap);
	va_end(ap);
}

/* At exit: how many lines of each cause were left out since its last one. */
void
log_limited_flush(void)
{
	for (int i = 0; i < LOG_LIMIT_CAUSES; i++)
		if (causes[i].left_out > 0)
		{
			log_msg("warning", "%ld more lines like \"%s\" were left out", causes[i].left_out,
					causes[i].key);
			causes[i].left_out = 0;
		}
}

/*
 * `s` for a log line: control bytes as '?', cut to fit `len`, so that a
 * value a producer wrote cannot forge log lines.
 */
const char *
printable(const char *s, char *buf, size_t len)
{
	size_t		n = 0;

	for (; *s && n + 1 < len; s++)
		buf[n++] = (unsigned char) *s < 0x20 || *s == 0x7f ? '?' : *s;
	buf[n] = '\0';
	return buf;
}
