/*-------------------------------------------------------------------------
 * eo_nats.h
 *	  Declarations shared by eo_nats, the program that forwards an outbox's
 *	  consumer group to NATS JetStream and applies JetStream messages in a
 *	  database with eo_claim.
 *
 * Process model.  eo_nats is a client program, not part of the server: it
 * talks to PostgreSQL through libpq and to NATS through the NATS C client
 * (libnats), which runs threads of its own.  Those threads never touch
 * PostgreSQL: the only code they run here is the publish-acknowledgement
 * callback (forward.c), which records an outcome under a mutex.  Every
 * libpq call is made by the main thread.
 *-------------------------------------------------------------------------
 */
#ifndef EO_NATS_H
#define EO_NATS_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>
#include <nats/nats.h>

/*
 * Exit status, for systemd units and scripts (docs/nats.md, "Exit codes").
 * EO_EXIT_CONFIG: stopped because something must be fixed first (the
 * credentials, a privilege, a missing scope, group, stream or table);
 * every message held was given back, nothing acknowledged.
 */
#define EO_EXIT_OK 0
#define EO_EXIT_FAILED 1
#define EO_EXIT_USAGE 2
#define EO_EXIT_CONFIG 3

/* What the command line said (cli.c). */
typedef struct Config
{
	const char *command;		/* forward, apply, stream-add, ... (cli.c) */
	/* PostgreSQL: a conninfo string or URI; secrets from PGPASSFILE etc. */
	const char *pg;
	/* NATS */
	const char *nats_url;
	const char *creds_file;		/* JWT + nkey seed (.creds) */
	const char *nkey_seed_file;	/* nkey seed alone ... */
	const char *nkey_public;	/* ... with its public key */
	const char *user;			/* password from $NATS_PASSWORD */
	const char *ca_file;
	const char *cert_file;
	const char *key_file;
	bool		tls;
	/* forward */
	const char *outbox;
	const char *group;
	const char *subject;		/* template */
	const char *stream;			/* expected stream, checked at start */
	int			max_events;
	int			slots;			/* slots per fetch (eo_relay_fetch's slots) */
	int			linger_ms;		/* after a wake-up, before the fetch; -1: auto */
	int			lease_secs;
	int			ack_wait_ms;	/* how long to wait for PubAcks of a page */
	/* apply */
	const char *durable;
	const char *filter;
	const char *sql;
	const char *scope;
	const char *search_path;	/* for --sql; NULL: pg_catalog, pg_temp */
	bool		terminate_dead;	/* a dead key's message terminated, not kept */
	int			batch;
	/* stream-add, stream-update (0 or NULL: not given) */
	const char *subjects;
	int64_t		max_msg_size;
	int			duplicate_window_secs;
	bool		yes;			/* stream-delete: really */
	/* all */
	bool		once;			/* forward/apply: stop when caught up */
	bool		verbose;
} Config;

/* One event of a page, as eo_relay_fetch gave it (strings of the result). */
typedef struct Event
{
	long long	token;			/* the lease token of its slot's page */
	long long	seq;
	const char *id;
	const char *aggregatetype;
	const char *aggregateid;
	const char *type;
	const char *payload;		/* JSON */
	const char *headers;		/* JSON, or NULL */
	const char *created_at;		/* RFC 3339, UTC */
	const char *header_lines;	/* "key<TAB>value" lines, or NULL */
} Event;

/* log.c: lines on stderr; repeated causes limited */
extern bool log_verbose;
extern void log_msg(const char *level, const char *fmt,...)
			__attribute__((format(printf, 2, 3)));
extern void log_limited(const char *key, const char *level, const char *fmt,...)
			__attribute__((format(printf, 3, 4)));
extern void log_limited_flush(void);
extern const char *printable(const char *s, char *buf, size_t len);

/* process.c: the stop flag, signals, sleeping, backoff, crash points */
extern volatile sig_atomic_t stop_requested;
extern void signals_install(void);
extern bool stop_cancels(PGconn *conn);
extern void sleep_ms(int64_t ms);
extern void crash_point(const char *point);
extern int64_t backoff_ms(int attempt, int64_t max_ms);

/* json.c: JSON text */
typedef struct JsonBuf
{
	char	   *data;
	size_t		len;
	size_t		cap;
} JsonBuf;

extern void json_init(JsonBuf *b);
extern void json_add(JsonBuf *b, const char *s);
extern void json_quote(JsonBuf *b, const char *s, bool (*escape_at) (const char *c));
extern void json_string(JsonBuf *b, const char *s);

/* errors.c: whose fault a failure is */
typedef enum
{
	ERR_MESSAGE,				/* the message's own: give it up, or record it */
	ERR_TRANSIENT,				/* passing: wait, and offer the message again */
	ERR_CONFIG					/* the set-up's: stop, give every message back */
} ErrorKind;

typedef enum
{
	BLAME_NONE,					/* eo's own statement (a relay call) */
	BLAME_CLAIM,				/* eo_claim of a message's id */
	BLAME_DATA					/* the user's --sql, or its COMMIT */
} Blame;

extern ErrorKind sql_error_kind(const char *sqlstate, Blame blames);
extern ErrorKind nats_error_kind(natsStatus s);

/* natsmsg.c: an event as a JetStream message */
extern bool subject_template_valid(const char *template, char *why, size_t len);
extern natsMsg *eo_event_msg(const Config *cfg, const Event *e, int64_t max_payload,
							 char *why, size_t len);

/* cli.c: the command line */
extern int	cli_parse(int argc, char **argv, Config *cfg);

/*
 * natsconn.c: connect to NATS with the options given, secrets unlogged.
 * NULL after a stop, or with *exit_code set when it gave up.
 */
extern natsConnection *nats_connect(const Config *cfg, int *exit_code);
extern const char *nats_error(natsStatus s);
extern jsCtx *nats_jetstream(const Config *cfg, natsConnection **nc, int *exit_code);

/*
 * pgconn.c: a libpq session that comes back after the server does, with
 * search_path pinned and eo's schema found.  pg_ensure gives NULL after a
 * stop, or with *exit_code set when it gave up (EO_EXIT_CONFIG: the
 * credentials, the database or eo are missing).
 */
extern PGconn *pg_ensure(PGconn *conn, const Config *cfg, int *exit_code);
extern bool pg_ok(PGconn *conn, PGresult *res, ExecStatusType want, const char *what);
extern bool pg_conn_lost(PGconn *conn);
extern uint64_t pg_warnings_seen(void);
extern bool sqlstate_is(PGresult *res, const char *sqlstate);
extern const char *sqlstate_of(PGresult *res);
extern ErrorKind pg_error_kind(PGconn *conn, PGresult *res, Blame blames);
extern PGresult *pg_exec(PGconn *conn, const char *sql);

/* forward's linger after the bell (linger.c) */
typedef struct Linger
{
	int			fixed_ms;		/* --linger-ms; -1: auto */
	double		rate;			/* events a second, smoothed */
	double		last;			/* when the last page with events was fetched */
} Linger;

extern void linger_init(Linger *l, int fixed_ms);
extern void linger_saw(Linger *l, int events);
extern int	linger_ms(const Linger *l);
extern bool linger_expects_within(const Linger *l, int ms);

/*
 * A statement eo_nats sends, with its parameters' types.  In `sql`,
 * "@eo." stands for eo's schema, as found at connect: eo's functions are
 * always called by their full names.  Code run in the session is not
 * eo_nats's (--sql writes the application's tables, and their owners'
 * triggers run in the session), and PREPARE and DEALLOCATE work from
 * PL/pgSQL, so a statement prepared under a name it could use could be
 * replaced by one that answers "duplicate" to every claim
 * (test/t/124_nats_statements.pl).  So eo_nats's own statements are
 * prepared by name (once a session, under "eo_nats_<n>", between
 * transactions) only where the session refuses PREPARE and DEALLOCATE
 * under those names (eo 0.4.0's src/statement_names.c, checked at
 * connect); elsewhere, and the user's --sql always, they go unnamed,
 * parsed from this text every time.
 */
typedef struct PgStatement
{
	const char *sql;
	int			nparams;
	const Oid  *types;			/* NULL: the server infers them */
	bool		verbatim;		/* the user's SQL: no @eo. in it is replaced */
	long		session;		/* the session `text` was made for (0: none yet) */
	char	   *text;			/* sql with eo's schema in it */
	long		prepared;		/* the session it was prepared in as `name` (0: none) */
	char		name[32];
} PgStatement;

extern const char *pg_statement_text(PgStatement *st);
extern PGresult *pg_check_statement(PGconn *conn, PgStatement *st);
extern PGresult *pg_exec_statement(PGconn *conn, PgStatement *st, const char *const *params);
extern void pg_statement_prepare(PGconn *conn, PgStatement *st);
extern const char *pg_statement_name(PgStatement *st);
extern void pg_statement_gone(PGconn *conn, PgStatement *st, PGresult *res);
extern void pg_conn_break(PGconn *conn);
extern PgStatement *pg_pin_statement(void);
extern PgStatement *pg_pin_at_commit_statement(void);
extern bool pg_eo_at_least(int major, int minor);
extern PgStatement pg_durable_stmt;
extern const char *const *pg_pin_params(void);
extern bool pg_reported_moved(PGconn *conn);

/* pgpipe.c: statements in one round trip */
typedef struct PgStep
{
	PgStatement *st;			/* a statement with params, or */
	const char *sql;			/* a command without parameters */
	const char *const *params;
} PgStep;

#define PG_PIPELINE_MAX 64		/* steps in one pipeline: their answers fit a socket buffer */

extern bool pg_pipeline(PGconn *conn, const PgStep *steps, int n, PGresult **res);

/* forward.c, apply.c, admin.c: the commands */
extern int	forward_main(const Config *cfg);
extern int	apply_main(const Config *cfg);
extern int	stream_add_main(const Config *cfg);
extern int	stream_update_main(const Config *cfg);
extern int	stream_info_main(const Config *cfg);
extern int	stream_delete_main(const Config *cfg);
extern int	consumer_info_main(const Config *cfg);
extern int	consumer_delete_main(const Config *cfg);
extern int	dump_main(const Config *cfg);

#endif							/* EO_NATS_H */
