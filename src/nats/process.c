/*-------------------------------------------------------------------------
 * process.c
 *	  The process around the commands: the stop flag and its signals,
 *	  sleeping, backoff, and the tests' crash points.
 *
 * A stop (SIGTERM, SIGINT) must take effect within a second, also while
 * the main thread waits in the server (forward's eo_relay_wait sleeps up
 * to 5 s): while such a statement runs, the handler cancels it with
 * PQcancel, which libpq documents as safe in a signal handler.
 *-------------------------------------------------------------------------
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eo_nats.h"

volatile sig_atomic_t stop_requested = 0;

/* The statement to cancel on a stop, while one waits (see stop_cancels). */
static PGcancel *volatile cancel_on_stop = NULL;

static void
on_signal(int signo)
{
	PGcancel   *c = cancel_on_stop;
	char		err[128];

	stop_requested = 1;
	if (c != NULL)
		(void) PQcancel(c, err, sizeof(err));
}

void
signals_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/*
 * While `conn` runs a statement that may wait long, a stop cancels it
 * (NULL: no longer).  Returns false if a stop came already: then the
 * statement is not to be sent.
 */
bool
stop_cancels(PGconn *conn)
{
	PGcancel   *old = cancel_on_stop;

	cancel_on_stop = NULL;
	if (old != NULL)
		PQfreeCancel(old);
	if (conn != NULL)
		cancel_on_stop = PQgetCancel(conn);
	return !stop_requested;
}

/*
 * A test's kill -9 at a named point (EO_NATS_CRASH_AT=<point>): the
 * tests use it to stop the process exactly where a crash is hardest to
 * recover from (after JetStream stored a page, before eo heard of it).
 */
void
crash_point(const char *point)
{
	const char *at = getenv("EO_NATS_CRASH_AT");

	if (at != NULL && strcmp(at, point) == 0)
	{
		log_msg("info", "crash point %s: killing this process", point);
		raise(SIGKILL);
	}
}

/* Sleep, in steps short enough to notice a stop request. */
void
sleep_ms(int64_t ms)
{
	while (ms > 0 && !stop_requested)
	{
		int64_t		step = ms > 100 ? 100 : ms;
		struct timespec ts = {step / 1000, (step % 1000) * 1000000};

		nanosleep(&ts, NULL);
		ms -= step;
	}
}

/*
 * The wait before retry number `attempt` (0, 1, ...): doubling from 100 ms
 * up to `max_ms`, with jitter, so that forwarders that lost a server at
 * the same moment do not all come back at the same moment.
 */
int64_t
backoff_ms(int attempt, int64_t max_ms)
{
	int64_t		ms = 100;

	for (int i = 0; i < attempt && ms < max_ms; i++)
		ms *= 2;
	if (ms > max_ms)
		ms = max_ms;
	return ms / 2 + random() % (ms / 2 + 1);
}
