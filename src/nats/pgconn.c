/*-------------------------------------------------------------------------
 * pgconn.c
 *	  A libpq session that comes back after the server does, and that
 *	  resolves names only to eo's objects and the catalog's.
 *
 * Each call of the relay API is a transaction of its own (autocommit), so
 * a session holds no lock and no snapshot between calls, and losing it
 * loses nothing: an unacknowledged page comes back when its lease ends.
 * Connecting is retried with backoff until it succeeds, a stop is
 * requested, or the server says something waiting cannot mend (the
 * credentials, the database, eo missing).
 *
 * Names.  The database's owner is not trusted (docs/security.md): she can
 * set the session's search_path (ALTER DATABASE ... SET) and put
 * functions and operators in a schema of hers that look like the
 * catalog's or eo's.  So every session sets search_path to pg_catalog,
 * pg_temp before anything else (pg_catalog first: no look-alike of a
 * built-in is ever chosen, and pg_temp last: no temporary object either),
 * finds the schema eo is installed in from pg_extension, and names eo's
 * functions with it (@eo. in a PgStatement).  apply's --search-path sets
 * another search_path afterwards, for the user's own --sql only.
 *
 * The session's date and time settings are fixed too, so that timestamps
 * read as text are the same whatever the server's defaults.
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eo_nats.h"

/* This process's session (one per process), counted for PgStatement. */
static long session = 0;

/* eo's schema as an identifier ("eo", public), found at each connect. */
static char eo_schema[200];

/*
 * Everything the database's owner can set (ALTER DATABASE ... SET) that
 * would change what eo_nats's statements or a --sql mean, or how long
 * they may run: set back to PostgreSQL's defaults.  (client_encoding is
 * a connection keyword: see pg_connect.)
 */
#define SESSION_SETUP \
	"SET search_path = pg_catalog, pg_temp; SET DateStyle = 'ISO, MDY'; SET TimeZone = 'UTC';" \
	" SET IntervalStyle = postgres; SET standard_conforming_strings = on;" \
	" SET transform_null_equals = off; SET array_nulls = on; SET bytea_output = hex;" \
	" SET default_transaction_isolation = 'read committed'; SET client_min_messages = warning;" \
	" SET statement_timeout = 0; SET lock_timeout = '10s';" \
	" SET idle_session_timeout = 0; SET idle_in_transaction_session_timeout = 0"

/*
 * The rest that the owner (ALTER DATABASE/ROLE ... SET) may have set,
 * back to PostgreSQL's built-in values: what a number, a time zone
 * abbreviation, an XML value or a text search means, whether an error
 * ends the session (exit_on_error: every batch with a failure would be
 * lost and fetched again for ever), row security.  And PostgreSQL 17's
 * transaction_timeout, where the server has it, off whoever set it.
 */
#define OWNER_SETTINGS \
	"SELECT pg_catalog.set_config(name, CASE WHEN name OPERATOR(pg_catalog.=) 'transaction_timeout'" \
	"  THEN '0' ELSE boot_val END, false) FROM pg_catalog.pg_settings" \
	" WHERE name OPERATOR(pg_catalog.=) 'transaction_timeout'" \
	" OR (name OPERATOR(pg_catalog.=) ANY ('{timezone_abbreviations,extra_float_digits,xmloption," \
	"xmlbinary,default_text_search_config,gin_fuzzy_search_limit,lc_monetary,lc_numeric,lc_time," \
	"row_security,exit_on_error,backslash_quote,quote_all_identifiers}')" \
	"  AND source OPERATOR(pg_catalog.=) ANY ('{database,user,database user}'))"

/*
 * apply acknowledges a message to JetStream once its transaction has
 * committed: a commit that a crash can still take back (synchronous_commit
 * off, or local on a server with synchronous standbys) would lose it.
 */
#define DURABLE_COMMITS \
	"SELECT pg_catalog.set_config('synchronous_commit', 'on', false)" \
	" WHERE pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.=) ANY ('{off,local}')"

/*
 * eo's schema (quoted), eo's version, its schema's owner, whether that is
 * a superuser or eo's owner, and a function beside eo's in that schema
 * under the name of one eo_nats calls that is not eo's own (not a member
 * of the extension), if there is one.
 */
#define FIND_EO \
	"SELECT pg_catalog.quote_ident(n.nspname), e.extversion," \
	" pg_catalog.pg_get_userbyid(n.nspowner)," \
	" n.nspowner OPERATOR(pg_catalog.=) e.extowner OR r.rolsuper," \
	" (SELECT p.oid::pg_catalog.regprocedure::pg_catalog.text FROM pg_catalog.pg_proc p" \
	"   WHERE p.pronamespace OPERATOR(pg_catalog.=) n.oid" \
	"   AND p.proname OPERATOR(pg_catalog.=) ANY ('{eo_relay_fetch,eo_relay_ack,eo_relay_ack_pages," \
	"eo_relay_wait,eo_claim,eo_fail}')" \
	"   AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend d" \
	"     WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass" \
	"     AND d.objid OPERATOR(pg_catalog.=) p.oid" \
	"     AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass" \
	"     AND d.refobjid OPERATOR(pg_catalog.=) e.oid AND d.deptype OPERATOR(pg_catalog.=) 'e')" \
	"   LIMIT 1)" \
	" FROM pg_catalog.pg_extension e" \
	" JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace" \
	" JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner" \
	" WHERE e.extname OPERATOR(pg_catalog.=) 'eo'"

PGresult *
pg_exec(PGconn *conn, const char *sql)
{
	return PQexecParams(conn, sql, 0, NULL, NULL, NULL, NULL, 0);
}

/*
 * A connection the server refused for a reason waiting will not mend:
 * a password needed and none given, a wrong one, no such role or
 * database, no pg_hba.conf entry, no CONNECT privilege.  libpq gives no
 * SQLSTATE for a refused connection, so this reads the server's message
 * (in English; in another language such a refusal is retried, logged
 * once per 30 s).
 */
static bool
refused_for_good(PGconn *conn)
{
	static const char *const phrases[] = {
		"authentication failed", "does not exist", "no pg_hba.conf entry",
		"permission denied", "password is required", "no password supplied", NULL
	};
	const char *msg = PQerrorMessage(conn);

	if (PQconnectionNeedsPassword(conn))
		return true;
	for (int i = 0; phrases[i] != NULL; i++)
		if (strstr(msg, phrases[i]) != NULL)
			return true;
	return false;
}

/* Find eo in the session's database; false (after saying why) if it is not there. */
static bool
find_eo(PGconn *conn)
{
	static bool warned = false;
	PGresult   *res = pg_exec(conn, FIND_EO);

	if (!pg_ok(conn, res, PGRES_TUPLES_OK, "finding eo's schema"))
	{
		PQclear(res);
		return false;
	}
	if (PQntuples(res) == 0)
	{
		log_msg("error", "eo is not installed in database \"%s\": run CREATE EXTENSION eo"
				" there (as a superuser), or give --pg the database that has it", PQdb(conn));
		PQclear(res);
		return false;
	}
	snprintf(eo_schema, sizeof(eo_schema), "%s", PQgetvalue(res, 0, 0));
	if (!PQgetisnull(res, 0, 4))
	{
		log_msg("error", "function %s in eo's schema %s is not eo's (not a member of the"
				" extension): a role that can create in that schema put it beside eo's, where"
				" it could be called instead; drop it, or create eo in a schema of its own"
				" (docs/security.md); stopping", PQgetvalue(res, 0, 4), eo_schema);
		PQclear(res);
		return false;
	}
	if (!warned && strcmp(PQgetvalue(res, 0, 3), "t") != 0)
		log_msg("warning", "eo is in schema %s, which role \"%s\" owns: that role can put"
				" functions beside eo's there (eo_nats calls eo's by their full names, and"
				" stops if one is ambiguous); create eo in a schema of its own"
				" (docs/security.md)", eo_schema, PQgetvalue(res, 0, 2));
	warned = true;
	log_msg("debug", "eo %s is in schema %s", PQgetvalue(res, 0, 1), eo_schema);
	PQclear(res);
	return true;
}

/* --search-path, for the user's --sql (apply). */
static bool
set_search_path(PGconn *conn, const char *path)
{
	const char *params[1] = {path};
	PGresult   *res = PQexecParams(conn, "SELECT pg_catalog.set_config('search_path', $1, false)",
								   1, NULL, params, NULL, NULL, 0);
	bool		ok = pg_ok(conn, res, PGRES_TUPLES_OK, "setting --search-path");

	PQclear(res);
	return ok;
}

/* The session made ready: settings, eo found.  *config if no use trying again. */
static bool
session_setup(PGconn *conn, const Config *cfg, bool *config)
{
	PGresult   *res = PQexec(conn, SESSION_SETUP);	/* several commands: not PQexecParams */
	bool		ok = pg_ok(conn, res, PGRES_COMMAND_OK, "setting up the session");

	PQclear(res);
	if (ok)
	{
		res = pg_exec(conn, OWNER_SETTINGS);
		ok = pg_ok(conn, res, PGRES_TUPLES_OK, "resetting the owner's settings");
		PQclear(res);
	}
	*config = ok;				/* past the settings, a failure is the set-up's */
	if (ok)
		ok = find_eo(conn);
	if (ok && strcmp(cfg->command, "apply") == 0)
	{
		res = pg_exec(conn, DURABLE_COMMITS);
		ok = pg_ok(conn, res, PGRES_TUPLES_OK, "setting synchronous_commit");
		PQclear(res);
	}
	if (ok && cfg->search_path != NULL)
		ok = set_search_path(conn, cfg->search_path);
	if (!ok && pg_conn_lost(conn))
		*config = false;
	return ok;
}

/* The server's notices, into the log (one line each, limited). */
static void
on_notice(void *arg, const char *message)
{
	log_limited("notice", "warning", "PostgreSQL: %s", message);
}

/*
 * Connection keywords: connect_timeout and tcp_user_timeout before --pg
 * (which may set others), client_encoding after it: eo_nats reads and
 * sends UTF-8 (JetStream's payloads, a JSON text), whatever the database,
 * the role or PGCLIENTENCODING say.
 */
static PGconn *
pg_connect(const Config *cfg, int *exit_code)
{
	const char *keys[] = {"connect_timeout", "tcp_user_timeout", "dbname", "client_encoding",
	"fallback_application_name", NULL};
	const char *values[] = {"10", "30000", cfg->pg, "UTF8", "eo_nats", NULL};

	for (int attempt = 0; !stop_requested; attempt++)
	{
		PGconn	   *conn = PQconnectdbParams(keys, values, 1);
		bool		config = false;

		if (PQstatus(conn) == CONNECTION_OK)
			PQsetNoticeProcessor(conn, on_notice, NULL);
		if (PQstatus(conn) == CONNECTION_OK && session_setup(conn, cfg, &config))
		{
			session++;
			log_msg("info", "connected to PostgreSQL database \"%s\" as \"%s\"",
					PQdb(conn), PQuser(conn));
			return conn;
		}
		if (PQstatus(conn) != CONNECTION_OK)
		{
			config = refused_for_good(conn);
			log_limited("pg connect", config ? "error" : "warning",
						"cannot connect to PostgreSQL: %s%s", strtok(PQerrorMessage(conn), "\n"),
						config ? "" : "; trying again");
		}
		if (config || (cfg->once && attempt >= 4))
		{
			if (config && PQstatus(conn) != CONNECTION_OK)
				log_msg("error", "stopping: fix --pg, the role's password (~/.pgpass,"
						" PGPASSFILE) or its privileges, then start eo_nats again");
			*exit_code = config ? EO_EXIT_CONFIG : EO_EXIT_FAILED;
			PQfinish(conn);
			return NULL;
		}
		PQfinish(conn);
		sleep_ms(backoff_ms(attempt, 10000));
	}
	*exit_code = EO_EXIT_OK;
	return NULL;
}

/* The session, or a new one if it was lost. */
PGconn *
pg_ensure(PGconn *conn, const Config *cfg, int *exit_code)
{
	if (conn != NULL && PQstatus(conn) == CONNECTION_OK)
		return conn;
	if (conn != NULL)
	{
		log_msg("warning", "lost the connection to PostgreSQL; reconnecting");
		PQfinish(conn);
	}
	return pg_connect(cfg, exit_code);
}

bool
pg_conn_lost(PGconn *conn)
{
	return PQstatus(conn) != CONNECTION_OK;
}

const char *
sqlstate_of(PGresult *res)
{
	return res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
}

/* Did res fail with this SQLSTATE? */
bool
sqlstate_is(PGresult *res, const char *sqlstate)
{
	const char *state = sqlstate_of(res);

	return state != NULL && strcmp(state, sqlstate) == 0;
}

/* What a failed statement means (errors.c); a lost connection passes. */
ErrorKind
pg_error_kind(PGconn *conn, PGresult *res, Blame blames)
{
	if (pg_conn_lost(conn))
		return ERR_TRANSIENT;
	return sql_error_kind(sqlstate_of(res), blames);
}

/*
 * Did `res` come back as `want`?  If not, log why: the SQLSTATE, the
 * message, and the server's DETAIL and HINT (often the fix: "Relay as a
 * member of that role").  Repeats of one statement's SQLSTATE are
 * limited to a line per 30 s.
 */
bool
pg_ok(PGconn *conn, PGresult *res, ExecStatusType want, const char *what)
{
	const char *state;
	const char *msg;
	const char *detail;
	const char *hint;
	char		key[128];

	if (res != NULL && PQresultStatus(res) == want)
		return true;
	if (res != NULL && want == PGRES_TUPLES_OK && PQresultStatus(res) == PGRES_COMMAND_OK)
		return true;
	state = sqlstate_of(res);
	msg = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	detail = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL) : NULL;
	hint = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_HINT) : NULL;
	snprintf(key, sizeof(key), "%s %s", what, state ? state : "");
	log_limited(key, "error", "%s failed: %s%s%s%s%s%s%s", what,
				state ? state : "", state ? ": " : "",
				msg ? msg : strtok(PQerrorMessage(conn), "\n"),
				detail ? " DETAIL: " : "", detail ? detail : "",
				hint ? " HINT: " : "", hint ? hint : "");
	return false;
}

/* `sql` with every "@eo." made eo's schema, malloc'd. */
static char *
qualified(const char *sql)
{
	size_t		n = 0;
	char	   *out = malloc(strlen(sql) * (strlen(eo_schema) + 1) + 1);

	for (const char *p = sql; *p;)
	{
		if (strncmp(p, "@eo.", 4) == 0)
		{
			n += (size_t) sprintf(out + n, "%s.", eo_schema);
			p += 4;
		}
		else
			out[n++] = *p++;
	}
	out[n] = '\0';
	return out;
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
/* Prepare st in this session if it is not yet; NULL if done, else the failed result. */
PGresult *
pg_prepare(PGconn *conn, PgStatement *st)
{
	PGresult   *res;
	char	   *sql;

	if (st->session == session)
		return NULL;
	sql = st->verbatim ? strdup(st->sql) : qualified(st->sql);
	snprintf(st->prepared_as, sizeof(st->prepared_as), "%s_%d", st->name, st->version);
	res = PQprepare(conn, st->prepared_as, sql, st->nparams, st->types);
	free(sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		return res;
	PQclear(res);
	st->session = session;
	return NULL;
}

PGresult *
pg_exec_statement(PGconn *conn, PgStatement *st, const char *const *params)
{
	PGresult   *res;

	for (int attempt = 0;; attempt++)
	{
		if ((res = pg_prepare(conn, st)) != NULL)
			return res;
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
