/*-------------------------------------------------------------------------
 * pgpipe.c
 *	  Several statements in one round trip (libpq's pipeline mode).  The
 *	  server reads them together and answers them together: one wake-up,
 *	  one read and one write of its socket for all of them instead of one
 *	  each, which is most of what a short statement costs it.
 *
 * The caller sends everything before it reads anything, so the server's
 * answers to one pipeline must fit in the socket's buffers: a server
 * blocked writing answers stops reading, and both would wait for ever.
 * Callers keep pipelines short, and of statements with small answers
 * (PG_PIPELINE_MAX).
 *-------------------------------------------------------------------------
 */
#include <stdlib.h>

#include "eo_nats.h"

/*
 * Leave pipeline mode, reading first what is left of its answers (a send
 * or a read failed half way): up to the Sync, which is sent now if it was
 * not (without one, reading would wait for answers never asked for).
 * False if that cannot be done: the connection is of no further use.
 *
 * Two NULLs in a row end the reading too: libpq has nothing more to
 * read.  A server that said something and closed the session while it
 * was idle (an immediate shutdown's or a crash's WARNING) leaves libpq
 * so: the send fails (EPIPE), the next read returns that failure, and
 * every read after it NULL, with PQstatus still CONNECTION_OK, for ever
 * (libpq 15.20; the server's EOF is never read).  Waiting there for a
 * Sync spun a forwarder at 100% CPU, deaf to SIGTERM (TAP 128).
 */
static bool
pipeline_leave(PGconn *conn, bool synced)
{
	int			nulls = 0;

	if (PQexitPipelineMode(conn) == 1)
		return true;
	if (!synced && PQpipelineSync(conn) != 1)
		return false;
	while (PQstatus(conn) == CONNECTION_OK && nulls < 2)
	{
		PGresult   *res = PQgetResult(conn);
		bool		sync = PQresultStatus(res) == PGRES_PIPELINE_SYNC;

		nulls = res == NULL ? nulls + 1 : 0;
		PQclear(res);
		if (sync)
			break;
	}
	return PQexitPipelineMode(conn) == 1;
}

/*
 * Send step s: a statement with its parameters (by name where it is
 * prepared: see PgStatement), or a command without any (unnamed).
 */
static bool
send_step(PGconn *conn, const PgStep *s)
{
	const char *name = s->st != NULL ? pg_statement_name(s->st) : NULL;

	if (name != NULL)
		return PQsendQueryPrepared(conn, name, s->st->nparams, s->params, NULL, NULL, 0) == 1;
	if (s->st != NULL)
		return PQsendQueryParams(conn, pg_statement_text(s->st), s->st->nparams, s->st->types,
								 s->params, NULL, NULL, 0) == 1;
	return PQsendQueryParams(conn, s->sql, 0, NULL, NULL, NULL, NULL, 0) == 1;
}

/*
 * Run steps[0..n) in one pipeline with one Sync, their results in res[]
 * (each to be PQclear'ed; a step after one that failed comes back
 * PGRES_PIPELINE_ABORTED, and an explicit transaction stays aborted: the
 * caller rolls it back).  Returns false, every res[i]
 * NULL, if the pipeline could not be run: the connection broke, or the
 * pipeline could not be left (then the connection is of no further use;
 * pg_conn_lost says so).
 */
bool
pg_pipeline(PGconn *conn, const PgStep *steps, int n, PGresult **res)
{
	bool		ok;
	bool		synced;
	PGresult   *sync;

	for (int i = 0; i < n; i++)
	{
		res[i] = NULL;
		if (steps[i].st != NULL)
			pg_statement_prepare(conn, steps[i].st);	/* not in pipeline mode */
	}
	if (n > PG_PIPELINE_MAX || PQenterPipelineMode(conn) != 1)
		return false;
	ok = true;
	for (int i = 0; ok && i < n; i++)
		ok = send_step(conn, &steps[i]);
	synced = ok && PQpipelineSync(conn) == 1;
	ok = synced;
	for (int i = 0; ok && i < n; i++)
	{
		PGresult   *r;

		/* each step's results end with a NULL; the first is its answer */
		while ((r = PQgetResult(conn)) != NULL)
		{
			if (res[i] == NULL)
				res[i] = r;
			else
				PQclear(r);
		}
		ok = res[i] != NULL;
	}
	sync = ok ? PQgetResult(conn) : NULL;
	ok = ok && PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
	PQclear(sync);
	for (int i = 0; ok && i < n; i++)
		if (steps[i].st != NULL)
			pg_statement_gone(conn, steps[i].st, res[i]);
	if (pipeline_leave(conn, synced) && ok)
		return true;
	for (int i = 0; i < n; i++)
	{
		PQclear(res[i]);
		res[i] = NULL;
	}
	if (PQpipelineStatus(conn) != PQ_PIPELINE_OFF)
		pg_conn_break(conn);
	return false;
}
