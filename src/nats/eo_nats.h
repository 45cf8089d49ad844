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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>
#include <nats/nats.h>

/* What the command line said (see usage() in eo_nats.c). */
typedef struct Config
{
	const char *command;		/* forward, apply, stream-add, stream-info, dump */
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
	int			linger_ms;		/* after a wake-up, before the fetch */
	int			lease_secs;
	int			ack_wait_ms;	/* how long to wait for PubAcks of a page */
	/* apply */
	const char *durable;
	const char *filter;
	const char *sql;
	const char *scope;
	int			batch;
	/* stream-add */
	const char *subjects;
	int64_t		max_msg_size;
	int			duplicate_window_secs;
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

/* natsmsg.c: JSON text, and an event as a JetStream message */
typedef struct JsonBuf
{
	char	   *data;
	size_t		len;
	size_t		cap;
} JsonBuf;

extern void json_init(JsonBuf *b);
extern void json_add(JsonBuf *b, const char *s);
extern void json_string(JsonBuf *b, const char *s);

extern bool subject_template_valid(const char *template, char *why, size_t len);
extern natsMsg *eo_event_msg(const Config *cfg, const Event *e, int64_t max_payload,
							 char *why, size_t len);

/* eo_nats.c: logging and the stop flag */
extern volatile int stop_requested;
extern bool log_verbose;
extern void log_msg(const char *level, const char *fmt,...)
			__attribute__((format(printf, 2, 3)));
extern void sleep_ms(int64_t ms);
extern void crash_point(const char *point);
extern const char *printable(const char *s, char *buf, size_t len);
extern int64_t backoff_ms(int attempt, int64_t max_ms);

/* natsconn.c: connect to NATS with the options given, secrets unlogged */
extern natsConnection *nats_connect(const Config *cfg);
extern const char *nats_error(natsStatus s);

/* pgconn.c: a libpq session that comes back after the server does */
extern PGconn *pg_connect(const Config *cfg);
extern PGconn *pg_ensure(PGconn *conn, const Config *cfg);
extern bool pg_ok(PGconn *conn, PGresult *res, ExecStatusType want, const char *what);
extern bool pg_conn_lost(PGconn *conn);
extern bool sqlstate_is(PGresult *res, const char *sqlstate);

/*
 * A statement run often: parsed and planned once per session (PQprepare
 * under a name made from `name`), again after a reconnect, if the server
 * lost it, or once its result columns changed (a table altered under it).
 */
typedef struct PgStatement
{
	const char *name;
	const char *sql;
	int			nparams;
	const Oid  *types;			/* NULL: the server infers them */
	long		session;		/* the session it is prepared in (0: none yet) */
	int			version;		/* prepared again under a new name */
	char		prepared_as[64];
} PgStatement;

extern PGresult *pg_exec_statement(PGconn *conn, PgStatement *st, const char *const *params);

/* forward.c, apply.c, admin.c: the commands */
extern int	forward_main(const Config *cfg);
extern int	apply_main(const Config *cfg);
extern int	stream_add_main(const Config *cfg);
extern int	stream_info_main(const Config *cfg);
extern int	dump_main(const Config *cfg);

#endif							/* EO_NATS_H */
