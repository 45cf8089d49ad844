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
 *
 * Failover.  Every statement forward and apply make writes (a fetch's
 * lease, an acknowledgement, a claim, the user's --sql), so only a server
 * that takes writes will do.  --pg may name several hosts (libpq's
 * multi-host conninfo): libpq is asked for one that takes writes
 * (target_session_attrs=read-write, unless --pg or PGTARGETSESSIONATTRS
 * says otherwise), so after a failover the next connect finds the
 * promoted standby.  While no host takes writes (the primary gone, the
 * standby not yet promoted) every attempt fails, and is retried with
 * backoff like any refusal that waiting mends.  A session that lands on a
 * standby all the same (another target_session_attrs) is dropped at once,
 * and one whose statement was refused as read-only (25006) at the next
 * pg_ensure: kept, it would meet the same refusal for ever, even with
 * the primary named beside it.
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

/* The session was refused a write (25006): replace it at the next pg_ensure. */
static bool session_read_only = false;

/* The session cannot be used any more (pg_conn_break): make a new one. */
static bool session_broken = false;

/* The session refuses PREPARE under eo_nats's names (see PgStatement). */
static bool names_reserved = false;

/* Names given to prepared statements by this process (each session's are new). */
static long statements_named = 0;

/*
 * Everything the database's owner can set (ALTER DATABASE ... SET) that
 * would change what eo_nats's statements or a --sql mean, or how long
 * they may run: set back to PostgreSQL's defaults.  (client_encoding is
 * a connection keyword: see pg_connect.)  The role too: eo_nats runs as
 * the role it logs in as, whatever ALTER DATABASE ... SET role says
 * (the owner may name any role there, one with fewer rights or more).
 * And PL/pgSQL's ASSERTs on, which the owner could turn off for the
 * consumer's own functions (a custom setting: set before PL/pgSQL is
 * loaded, it holds once it is).
 */
#define SESSION_SETUP \
	"SET search_path = pg_catalog, pg_temp; SET DateStyle = 'ISO, MDY'; SET TimeZone = 'UTC';" \
	" SET IntervalStyle = postgres; SET standard_conforming_strings = on;" \
	" SET transform_null_equals = off; SET array_nulls = on; SET bytea_output = hex;" \
	" SET default_transaction_isolation = 'read committed';" \
	" SET client_min_messages = warning; SET statement_timeout = 0; SET lock_timeout = '10s';" \
	" SET idle_session_timeout = 0; SET idle_in_transaction_session_timeout = 0;" \
	" SET ROLE NONE; SET plpgsql.check_asserts = on"

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
#define DURABLE_VALUE \
	"CASE WHEN pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.=)" \
	" ANY ('{off,local}'::pg_catalog.text[]) THEN 'on'" \
	" ELSE pg_catalog.current_setting('synchronous_commit') END"
#define DURABLE_COMMITS "SELECT pg_catalog.set_config('synchronous_commit', " DURABLE_VALUE ", false)"

/*
 * The settings again, for apply: its session runs code that is not its
 * own (the triggers of the tables --sql writes), which may change any of
 * them for the rest of the session (set_config(..., false)).  PIN_NAMES
 * are those SESSION_SETUP, OWNER_SETTINGS and DURABLE_COMMITS set at
 * connect and --sql's search_path; their values are read once set up
 * (PIN_CAPTURE), so that what the server's configuration says stays
 * (lc_*, default_text_search_config), and what connect set is put back.
 * apply sends pg_pin_statement() first in every transaction it begins, in that
 * transaction's first pipeline, with pg_pin_params.
 *
 * Only what differs is set.  Each assignment costs (an lc_* one empties a
 * locale cache, timezone_abbreviations reads a file), and in the steady
 * state nothing differs: setting all of them every time cost 2.35x
 * apply's server CPU per message (docs/performance.md).  A setting shows
 * as the value it was set to, so one that reads the same is the same.  A
 * setting the server lacks (transaction_timeout before 17) reads NULL at
 * connect and is skipped.  Every name and operator is qualified: the
 * statement runs under whatever search_path the session has.
 */
#define PIN_NAMES \
	"{search_path,client_encoding,DateStyle,TimeZone,IntervalStyle,standard_conforming_strings," \
	"transform_null_equals,array_nulls,bytea_output,default_transaction_isolation," \
	"default_transaction_read_only,client_min_messages,statement_timeout,lock_timeout," \
	"idle_session_timeout,idle_in_transaction_session_timeout,extra_float_digits," \
	"timezone_abbreviations,xmloption,xmlbinary,default_text_search_config," \
	"gin_fuzzy_search_limit,lc_monetary,lc_numeric,lc_time,row_security,exit_on_error," \
	"backslash_quote,quote_all_identifiers,transaction_timeout,synchronous_commit,role," \
	"plpgsql.check_asserts}"
#define PIN_CAPTURE \
	"SELECT pg_catalog.array_agg(pg_catalog.current_setting(u.n, true) ORDER BY u.i)" \
	" FROM pg_catalog.unnest('" PIN_NAMES "'::pg_catalog.text[]) WITH ORDINALITY u(n, i)"
static const Oid pin_types[2] = {1009, 1009};	/* text[] */
static PgStatement pin_sql_stmt = {
	"SELECT pg_catalog.count(pg_catalog.set_config(p.n, p.v, false))"
	" FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) p(n, v)"
	" WHERE pg_catalog.current_setting(p.n, true) OPERATOR(pg_catalog.<>) p.v",
	2, pin_types, true
};

/*
 * The same in eo 0.4.0 and later, in C (src/session_pin.c): one short
 * call to parse instead of a statement over two arrays (apply's server
 * CPU per message 0.86x at one message a fetch, docs/performance.md).
 */
static PgStatement pin_call_stmt = {"SELECT @eo.eo_session_pin($1, $2)", 2, pin_types};

/*
 * eo 0.4.0's eo_session_pin_at_commit: sent after BEGIN, it pins at
 * COMMIT, after the transaction's code has run; in place of the pin and
 * SET CONSTRAINTS ALL IMMEDIATE, UNLISTEN * and the durable step before
 * COMMIT.
 */
static PgStatement pin_at_commit_stmt = {"SELECT @eo.eo_session_pin_at_commit($1, $2)", 2, pin_types};

/* The session's eo's version (found by find_eo), 0.0 before. */
static int	eo_major = 0;
static int	eo_minor = 0;

/* PIN_CAPTURE's answer in this session (malloc'd). */
static char *pin_values = NULL;

/*
 * The settings among them the server reports to the client when they
 * change (ParameterStatus, with the answer to the statement that changed
 * them), as they were once set up.  Within a transaction apply pins again
 * only when one of these moved: pinning before every --sql of a batch
 * cost 1.7x apply's server CPU per message at saturation
 * (docs/performance.md).  They are those that change what a message's
 * data means (client_encoding, DateStyle, TimeZone, IntervalStyle,
 * standard_conforming_strings); search_path on servers that report it.
 */
static const char *const reported[] = {"client_encoding", "DateStyle", "TimeZone", "IntervalStyle",
"standard_conforming_strings", "default_transaction_read_only", "search_path", "is_superuser"};
#define N_REPORTED (sizeof(reported) / sizeof(reported[0]))
static char *reported_values[N_REPORTED];

/*
 * Before COMMIT: durable, whatever code in the transaction set (SET LOCAL),
 * and its WARNINGs heard (a cancelled wait for synchronous standbys says
 * one: apply.c's commit_confirmed), for what is left of the transaction.
 */
PgStatement pg_durable_stmt = {
	"SELECT pg_catalog.set_config('synchronous_commit', " DURABLE_VALUE ", true),"
	" pg_catalog.set_config('client_min_messages', 'warning', true)", 0, NULL, true
};

/* --sql's search_path: --search-path, or pg_catalog, then temporary tables. */
static const char *
pin_search_path(const Config *cfg)
{
	static char *path = NULL;
	const char *given = cfg->search_path ? cfg->search_path : "pg_catalog";

	if (path == NULL && (path = malloc(strlen(given) + sizeof(", pg_temp"))) != NULL)
		sprintf(path, "%s, pg_temp", given);
	return path;
}

/* The statement that puts the session's settings back (see PIN_NAMES). */
PgStatement *
pg_pin_statement(void)
{
	return pg_eo_at_least(0, 4) ? &pin_call_stmt : &pin_sql_stmt;
}

/*
 * The statement that pins the settings (with pg_pin_params()) when the
 * transaction commits, or NULL where eo is older than 0.4.0: apply then
 * pins at the start of each transaction, and fires the deferred
 * triggers, drops the LISTENs and makes the commit durable before
 * COMMIT, statement by statement.
 */
PgStatement *
pg_pin_at_commit_statement(void)
{
	return pg_eo_at_least(0, 4) ? &pin_at_commit_stmt : NULL;
}

/* pg_pin_statement's parameters in this session: the settings' names and their values. */
const char *const *
pg_pin_params(void)
{
	static const char *params[2] = {PIN_NAMES, NULL};

	params[1] = pin_values;
	return params;
}

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
	"eo_relay_wait,eo_claim,eo_fail,eo_session_pin,eo_session_pin_at_commit,eo_statement_names_reserved," \
	"eo_relay_header_lines}')" \
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

/* `part` (len bytes) added to buf, after "; " unless first; cut to fit. */
static void
append_part(char *buf, size_t len, size_t *n, const char *part, int part_len)
{
	if (*n + 1 < len)
		*n += snprintf(buf + *n, len - *n, "%s%.*s", *n > 0 ? "; " : "", part_len, part);
}

/*
 * libpq's message for a failed connect, one line: each host's failure
 * ("connection to server at ... failed: ..."), joined with "; ", without
 * libpq's tab-indented hints.  In `reasons`, only what follows each
 * "failed: ", which names no host: the cause, for the log's limit, so
 * that each new cause is logged (the primary gone, then the standby
 * refusing as read-only) and repeats of one are not.
 */
static void
connect_error(PGconn *conn, char *text, size_t len, char *reasons, size_t reasons_len)
{
	const char *line = PQerrorMessage(conn);
	size_t		n = 0;
	size_t		r = 0;

	text[0] = reasons[0] = '\0';
	while (*line)
	{
		int			line_len = (int) strcspn(line, "\n");
		const char *next = line + line_len + (line[line_len] == '\n');
		const char *cause = strstr(line, "failed: ");

		if (line_len > 0 && line[0] != '\t')
		{
			cause = cause != NULL && cause < next ? cause + strlen("failed: ") : line;
			append_part(text, len, &n, line, line_len);
			append_part(reasons, reasons_len, &r, cause, (int) (line + line_len - cause));
		}
		line = next;
	}
}

/*
 * Said once, at the first connect: --pg names several hosts but lets
 * libpq take one that does not take writes.  libpq connects to the first
 * host that answers, a standby too; eo_nats cannot work there and waits
 * for it to be promoted, never trying the hosts after it.
 */
static void
warn_hosts(PGconn *conn)
{
	static bool checked = false;
	PQconninfoOption *opts = checked ? NULL : PQconninfo(conn);
	const char *hosts = NULL;
	const char *attrs = NULL;

	checked = true;
	for (PQconninfoOption *o = opts; o != NULL && o->keyword != NULL; o++)
	{
		if ((strcmp(o->keyword, "host") == 0 || strcmp(o->keyword, "hostaddr") == 0) &&
			o->val != NULL && strchr(o->val, ',') != NULL)
			hosts = o->val;
		if (strcmp(o->keyword, "target_session_attrs") == 0)
			attrs = o->val != NULL ? o->val : "any";	/* libpq's default */
	}
	if (hosts != NULL && attrs != NULL && strcmp(attrs, "read-write") != 0 &&
		strcmp(attrs, "primary") != 0)
		log_msg("warning", "--pg names several hosts (%s) with target_session_attrs=%s: libpq"
				" connects to the first that answers, a standby too, where eo_nats cannot"
				" write and waits, without trying the others, until it is promoted; give"
				" target_session_attrs=read-write (eo_nats's default) or primary, so that it"
				" finds the primary, also after a failover", hosts, attrs);
	PQconninfoFree(opts);
}

/*
 * Is the server a hot standby?  (PostgreSQL 14 and later report
 * in_hot_standby.)  It would refuse every statement eo_nats makes (25006)
 * until promoted: this attempt counts as failed, and the next looks again.
 */
static bool
on_standby(PGconn *conn)
{
	const char *standby = PQparameterStatus(conn, "in_hot_standby");

	if (standby == NULL || strcmp(standby, "on") != 0)
		return false;
	log_limited("pg standby", "warning", "PostgreSQL at \"%s\", port %s is a standby: eo_nats"
				" writes, so it needs the primary; trying again (with several hosts in --pg,"
				" give target_session_attrs=read-write, eo_nats's default, or primary: libpq"
				" then passes over standbys)", PQhost(conn), PQport(conn));
	return true;
}

/* A failed connect, logged (each cause once per 30 s); true if waiting will not mend it. */
static bool
connect_failed(PGconn *conn)
{
	bool		config = refused_for_good(conn);
	char		text[2048];
	char		reasons[160];
	char		key[180];

	connect_error(conn, text, sizeof(text), reasons, sizeof(reasons));
	snprintf(key, sizeof(key), "pg connect: %s", reasons);
	log_limited(key, config ? "error" : "warning", "cannot connect to PostgreSQL: %s%s", text,
				config ? "" : "; trying again");
	return config;
}

/*
 * The session's eo is at least major.minor: what eo_nats may call (eo
 * 0.4.0's eo_session_pin and eo_relay_header_lines, else the SQL forms).
 */
bool
pg_eo_at_least(int major, int minor)
{
	return eo_major > major || (eo_major == major && eo_minor >= minor);
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
	if (sscanf(PQgetvalue(res, 0, 1), "%d.%d", &eo_major, &eo_minor) != 2)
		eo_major = eo_minor = 0;	/* a version eo never had: the oldest forms */
	log_msg("debug", "eo %s is in schema %s", PQgetvalue(res, 0, 1), eo_schema);
	PQclear(res);
	return true;
}

/* --search-path, for the user's --sql (apply), temporary tables last. */
static bool
set_search_path(PGconn *conn, const Config *cfg)
{
	const char *params[1] = {pin_search_path(cfg)};
	PGresult   *res = PQexecParams(conn, "SELECT pg_catalog.set_config('search_path', $1, false)",
								   1, NULL, params, NULL, NULL, 0);
	bool		ok = pg_ok(conn, res, PGRES_TUPLES_OK, "setting --search-path");

	PQclear(res);
	return ok;
}

/* The values PIN_NAMES have now, set up: what pg_pin_statement() puts back. */
static bool
capture_pin_values(PGconn *conn)
{
	PGresult   *res = pg_exec(conn, PIN_CAPTURE);
	bool		ok = pg_ok(conn, res, PGRES_TUPLES_OK, "reading the session's settings");

	if (ok)
	{
		free(pin_values);
		ok = (pin_values = strdup(PQgetvalue(res, 0, 0))) != NULL;
	}
	PQclear(res);
	for (size_t i = 0; ok && i < N_REPORTED; i++)
	{
		const char *now = PQparameterStatus(conn, reported[i]);

		free(reported_values[i]);
		reported_values[i] = NULL;
		ok = now == NULL || (reported_values[i] = strdup(now)) != NULL;
	}
	return ok;
}

/* A reported setting is not what it was once set up (see `reported`). */
bool
pg_reported_moved(PGconn *conn)
{
	for (size_t i = 0; i < N_REPORTED; i++)
	{
		const char *now = PQparameterStatus(conn, reported[i]);

		if ((now == NULL) != (reported_values[i] == NULL) ||
			(now != NULL && strcmp(now, reported_values[i]) != 0))
			return true;
	}
	return false;
}

/*
 * Whether a statement eo_nats prepares by name is there under that name:
 * a pooler between eo_nats and the server may rename it (PgBouncer's
 * max_prepared_statements), and the names the server reserves would not
 * protect it.  A statement that does nothing is prepared and looked for
 * (left there: SQL's DEALLOCATE refuses eo_nats's names).
 */
static bool
names_kept(PGconn *conn)
{
	char		name[32];
	const char *params[1] = {name};
	PGresult   *res;
	bool		kept;

	snprintf(name, sizeof(name), "eo_nats_%ld", ++statements_named);
	res = PQprepare(conn, name, "SELECT", 0, NULL);
	kept = PQresultStatus(res) == PGRES_COMMAND_OK;
	PQclear(res);
	if (!kept)
		return false;
	res = PQexecParams(conn, "SELECT FROM pg_catalog.pg_prepared_statements"
					   " WHERE name OPERATOR(pg_catalog.=) $1 AND NOT from_sql",
					   1, (const Oid[]) {25}, params, NULL, NULL, 0);
	kept = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
	PQclear(res);
	if (!kept)
		log_msg("warning", "a statement eo_nats prepared is not under its name in the session"
				" (a pooler between eo_nats and PostgreSQL?): its statements go unnamed;"
				" connect eo_nats to PostgreSQL directly");
	return kept;
}

/*
 * Whether the session refuses PREPARE under eo_nats's names (eo 0.4.0's
 * src/statement_names.c): eo_statement_names_reserved() loads eo's
 * library, which reserves them, and says so.  Asked at connect, before
 * any code but eo_nats's has run in the session.
 */
static bool
reservation_holds(PGconn *conn)
{
	char		sql[300];
	PGresult   *res;
	bool		holds;

	snprintf(sql, sizeof(sql), "SELECT %s.eo_statement_names_reserved()", eo_schema);
	res = pg_exec(conn, sql);
	holds = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
		strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	return holds && names_kept(conn);
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
	if (ok)
		names_reserved = pg_eo_at_least(0, 4) && reservation_holds(conn);
	if (ok && cfg->search_path != NULL)
		ok = set_search_path(conn, cfg);
	if (ok)
		ok = capture_pin_values(conn);
	if (!ok && pg_conn_lost(conn))
		*config = false;
	return ok;
}

/* WARNINGs the server sent this process's sessions so far. */
static uint64_t warnings_seen = 0;

/*
 * The server's notices, into the log (one line each, limited), and
 * WARNINGs counted: a COMMIT that comes with one may not have done all a
 * COMMIT promises (apply.c: a cancelled wait for synchronous standbys).
 */
static void
on_notice(void *arg, const PGresult *res)
{
	const char *severity = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);

	if (severity != NULL && strcmp(severity, "WARNING") == 0)
		warnings_seen++;
	log_limited("notice", "warning", "PostgreSQL: %s", PQresultErrorMessage(res));
}

/* How many WARNINGs the server sent so far: compare two readings. */
uint64_t
pg_warnings_seen(void)
{
	return warnings_seen;
}

/*
 * Connection keywords before --pg, which may set others: connect_timeout;
 * tcp_user_timeout and keepalives, so that a session whose server's host
 * went away without a word (a failover after a crash of the machine, a
 * partition) is found dead in about 30 s, also while eo_nats waits for
 * the answer to a statement it sent (eo_relay_wait), where only
 * keepalives notice (the system's default waits two hours before the
 * first); target_session_attrs (see Failover in the header; "" leaves
 * it to PGTARGETSESSIONATTRS).  client_encoding after it: eo_nats reads
 * and sends UTF-8 (JetStream's payloads, a JSON text), whatever the
 * database, the role or PGCLIENTENCODING say.
 */
static PGconn *
pg_connect(const Config *cfg, int *exit_code)
{
	const char *keys[] = {"connect_timeout", "tcp_user_timeout", "keepalives_idle",
		"keepalives_interval", "keepalives_count", "target_session_attrs", "dbname",
	"client_encoding", "fallback_application_name", NULL};
	const char *values[] = {"10", "30000", "10", "5", "3",
		getenv("PGTARGETSESSIONATTRS") ? "" : "read-write", cfg->pg, "UTF8", "eo_nats",
	NULL};

	for (int attempt = 0; !stop_requested; attempt++)
	{
		PGconn	   *conn = PQconnectdbParams(keys, values, 1);
		bool		config = false;

		warn_hosts(conn);
		if (PQstatus(conn) != CONNECTION_OK)
			config = connect_failed(conn);
		else if (!on_standby(conn))
		{
			PQsetNoticeReceiver(conn, on_notice, NULL);
			if (session_setup(conn, cfg, &config))
			{
				session++;
				session_read_only = false;
				session_broken = false;
				log_msg("info", "connected to PostgreSQL database \"%s\" as \"%s\" at \"%s\", port %s",
						PQdb(conn), PQuser(conn), PQhost(conn), PQport(conn));
				return conn;
			}
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

/*
 * The session, or a new one if it was lost or refused a write (see
 * Failover; pg_error_kind said so then).
 */
PGconn *
pg_ensure(PGconn *conn, const Config *cfg, int *exit_code)
{
	if (conn != NULL && PQstatus(conn) == CONNECTION_OK && !session_read_only && !session_broken)
		return conn;
	if (conn != NULL)
	{
		if (!session_read_only)
			log_msg("warning", "lost the connection to PostgreSQL; reconnecting");
		PQfinish(conn);
	}
	return pg_connect(cfg, exit_code);
}

bool
pg_conn_lost(PGconn *conn)
{
	return PQstatus(conn) != CONNECTION_OK || session_broken;
}

/* The session is in a state no statement can follow (a pipeline not left): lost. */
void
pg_conn_break(PGconn *conn)
{
	(void) conn;
	session_broken = true;
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

/*
 * What a failed statement means (errors.c); a lost connection passes.  A
 * write refused as read-only (25006) passes too, and the session is
 * replaced at the next pg_ensure (see Failover).
 */
ErrorKind
pg_error_kind(PGconn *conn, PGresult *res, Blame blames)
{
	if (pg_conn_lost(conn))
		return ERR_TRANSIENT;
	if (sqlstate_is(res, "25006") && !session_read_only)
	{
		session_read_only = true;
		log_limited("pg read-only", "warning", "PostgreSQL at \"%s\", port %s refused a write"
					" as read-only (a standby, or default_transaction_read_only): reconnecting;"
					" with several hosts in --pg, give target_session_attrs=read-write (eo_nats's"
					" default) or primary, so that libpq finds the primary", PQhost(conn), PQport(conn));
	}
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

/* st's text for this session: "@eo." made eo's schema as found at connect. */
const char *
pg_statement_text(PgStatement *st)
{
	if (st->session != session)
	{
		free(st->text);
		st->text = st->verbatim ? strdup(st->sql) : qualified(st->sql);
		st->session = session;
	}
	return st->text;
}

/* Whether st parses and plans in this session: NULL if it does, else the failed result. */
PGresult *
pg_check_statement(PGconn *conn, PgStatement *st)
{
	PGresult   *res = PQprepare(conn, "", pg_statement_text(st), st->nparams, st->types);

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		return res;
	PQclear(res);
	return NULL;
}

/*
 * st prepared under a name of eo_nats's in this session, if the session
 * refuses those to code run in it and st was not yet (one round trip,
 * once a session).  Only eo_nats's own statements, whose results eo's
 * functions fix: the user's --sql goes unnamed (its tables' columns are
 * theirs to change, which a cached plan would refuse with 0A000, and its
 * plan theirs to have made each time).  Only between transactions: a
 * Parse that fails (a lock it waits for too long) would abort the one
 * open, and the statement's own error be lost.  If preparing fails, st
 * goes unnamed, and fails there the same way, where its caller looks.
 */
void
pg_statement_prepare(PGconn *conn, PgStatement *st)
{
	PGresult   *res;

	if (!names_reserved || st->prepared == session || st->verbatim ||
		PQtransactionStatus(conn) != PQTRANS_IDLE)
		return;
	snprintf(st->name, sizeof(st->name), "eo_nats_%ld", ++statements_named);
	res = PQprepare(conn, st->name, pg_statement_text(st), st->nparams, st->types);
	st->prepared = PQresultStatus(res) == PGRES_COMMAND_OK ? session : 0;
	PQclear(res);
}

/* st's name, if it was prepared in this session; else NULL: unnamed. */
const char *
pg_statement_name(PgStatement *st)
{
	return st->prepared == session && session != 0 ? st->name : NULL;
}

/*
 * After st ran by name: if its statement is gone (26000: code in the
 * session ran DEALLOCATE ALL), the session is replaced, and st prepared
 * again in the next.
 */
void
pg_statement_gone(PGconn *conn, PgStatement *st, PGresult *res)
{
	if (pg_statement_name(st) != NULL && sqlstate_is(res, "26000"))
	{
		log_limited("pg statement gone", "warning", "a statement eo_nats prepared is gone"
					" (DEALLOCATE ALL, by code run in the session): reconnecting");
		pg_conn_break(conn);
	}
}

/* Run st with params: by name where it is prepared (see PgStatement), else unnamed. */
PGresult *
pg_exec_statement(PGconn *conn, PgStatement *st, const char *const *params)
{
	const char *name;
	PGresult   *res;

	pg_statement_prepare(conn, st);
	if ((name = pg_statement_name(st)) == NULL)
		return PQexecParams(conn, pg_statement_text(st), st->nparams, st->types, params, NULL, NULL, 0);
	res = PQexecPrepared(conn, name, st->nparams, params, NULL, NULL, 0);
	pg_statement_gone(conn, st, res);
	return res;
}
