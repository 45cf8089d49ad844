/*-------------------------------------------------------------------------
 * pgconn.c
 *	  A libpq session that comes back after the server does.
 *
 * Each call of the relay API is a transaction of its own (autocommit), so
 * a session holds no lock and no snapshot between calls, and losing it
 * loses nothing: an unacknowledged page comes back when its lease ends.
 * Connecting is retried with backoff until it succeeds or a stop is
 * requested.  The session's date and time settings are fixed, so that
 * timestamps read as text are the same whatever the server's defaults.
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <string.h>

#include "eo_nats.h"

/* This process's session (one per process), counted for PgStatement. */
static long session = 0;

PGconn *
pg_connect(const Config *cfg)
{
	const char *keys[] = {"dbname", "fallback_application_name", NULL};
	const char *values[] = {cfg->pg, "eo_nats", NULL};

	for (int attempt = 0; !stop_requested; attempt++)
	{
		PGconn	   *conn = PQconnectdbParams(keys, values, 1);
		PGresult   *res;

		if (PQstatus(conn) == CONNECTION_OK)
		{
			res = PQexec(conn, "SET DateStyle = ISO; SET TimeZone = 'UTC';"
						 " SET statement_timeout = 0; SET lock_timeout = '10s';"
						 " SET idle_session_timeout = 0; SET idle_in_transaction_session_timeout = 0");
			if (pg_ok(conn, res, PGRES_COMMAND_OK, "setting up the session"))
			{
				PQclear(res);
				session++;
				log_msg("info", "connected to PostgreSQL database \"%s\" as \"%s\"",
						PQdb(conn), PQuser(conn));
				return conn;
			}
			PQclear(res);
		}
		else
			log_msg("warning", "cannot connect to PostgreSQL: %s; trying again",
					strtok(PQerrorMessage(conn), "\n"));
		PQfinish(conn);
		sleep_ms(backoff_ms(attempt, 10000));
	}
	return NULL;
}

/* The session, or a new one if it was lost. */
PGconn *
pg_ensure(PGconn *conn, const Config *cfg)
{
	if (conn != NULL && PQstatus(conn) == CONNECTION_OK)
		return conn;
	if (conn != NULL)
	{
		log_msg("warning", "lost the connection to PostgreSQL; reconnecting");
		PQfinish(conn);
	}
	return pg_connect(cfg);
}

bool
pg_conn_lost(PGconn *conn)
{
	return PQstatus(conn) != CONNECTION_OK;
}

/* Did `res` come back as `want`?  If not, log why (with the SQLSTATE). */
bool
pg_ok(PGconn *conn, PGresult *res, ExecStatusType want, const char *what)
{
	const char *state;
	const char *msg;

	if (res != NULL && PQresultStatus(res) == want)
		return true;
	state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	msg = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	log_msg("error", "%s failed: %s%s%s", what,
			state ? state : "", state ? ": " : "",
			msg ? msg : strtok(PQerrorMessage(conn), "\n"));
	return false;
}

/* Did res fail with this SQLSTATE? */
bool
sqlstate_is(PGresult *res, const char *sqlstate)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	return state != NULL && strcmp(state, sqlstate) == 0;
}

/*
 * Run st with params: prepared first if this session has not yet (a
 * failed PQprepare's result is returned as the statement's), and once
 * more if the server no longer knows it (26000: DISCARD ALL) and no
 * transaction block was aborted by that.  For sessions of their own: a
 * pooler in transaction mode that moves a session between server
 * connections (PgBouncer before 1.21) loses the statements every time.
 * A statement whose result columns changed (0A000, "cached plan must not
 * change result type": a table of a SELECT * altered) fails this once and
 * is prepared again, under a new name, at its next use.
 */
PGresult *
pg_exec_statement(PGconn *conn, PgStatement *st, const char *const *params)
{
	PGresult   *res;

	for (int attempt = 0;; attempt++)
	{
		if (st->session != session)
		{
			snprintf(st->prepared_as, sizeof(st->prepared_as), "%s_%d", st->name, st->version);
			res = PQprepare(conn, st->prepared_as, st->sql, st->nparams, st->types);
			if (PQresultStatus(res) != PGRES_COMMAND_OK)
				return res;
			PQclear(res);
			st->session = session;
		}
		res = PQexecPrepared(conn, st->prepared_as, st->nparams, params, NULL, NULL, 0);
		if (sqlstate_is(res, "0A000"))
		{
			st->version++;
			st->session = 0;
		}
		if (attempt > 0 || PQresultStatus(res) != PGRES_FATAL_ERROR || !sqlstate_is(res, "26000"))
			return res;
		st->session = 0;
		if (PQtransactionStatus(conn) != PQTRANS_IDLE)
			return res;
		PQclear(res);
	}
}
