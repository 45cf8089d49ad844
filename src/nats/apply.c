/*-------------------------------------------------------------------------
 * apply.c
 *	  eo_nats apply: the consumer side.  JetStream messages from a durable
 *	  pull consumer are applied in a database, each exactly once, with
 *	  eo_claim(event id) in the same transaction as their effect; the
 *	  message is acknowledged to JetStream only after COMMIT.
 *
 * The messages of one fetch (--batch) are applied in one transaction,
 * each with the steps below and one COMMIT for all, then answered; if any
 * statement of the batch fails, nothing of it is committed and each
 * message is applied again on its own, in its own transaction:
 *	  BEGIN; SELECT status FROM eo.eo_claim(<Nats-Msg-Id>, scope => ...);
 *	  claimed:	 run --sql ($1 id, $2 subject, $3 payload, $4 headers,
 *				 $5 when JetStream stored it); COMMIT;
 *				 then ack
 *	  duplicate: COMMIT, waiting for the synchronous standbys, if any,
 *				 past the key's own commit; ack (it was applied before: a
 *				 redelivery)
 *	  busy:		 ROLLBACK; nak with a delay (another session holds the key,
 *				 or a retry is not due yet)
 *	  dead:		 ROLLBACK; nak with a long delay: kept for a fixed --sql and
 *				 eo_redrive_dead (--terminate-dead: terminate it)
 * Killed between COMMIT and ack, the message comes back, and eo_claim says
 * duplicate: nothing is applied twice.  A COMMIT that comes with a
 * WARNING (a cancelled wait for synchronous standbys) is acknowledged only
 * once a later commit confirms it (commit_confirmed), and a duplicate only
 * once the key's commit is confirmed too (duplicates_confirmed).
 *
 * Failures (errors.c says whose fault each is).  A message is given up
 * only for a cause of its own: eo_claim refuses its id, or its payload
 * cannot be JSON (terminated); --sql or COMMIT fails on its data
 * (recorded with eo_fail, never final: a retry in 5 s, dead after
 * eo.max_attempts, and then kept, see answer()).  A passing trouble (a
 * lost connection, a serialization failure, eo being updated) records
 * nothing: the message and the rest of the fetch are offered again, and
 * apply waits with backoff.  A mistake in the set-up (an unknown scope,
 * no EXECUTE on eo_claim, --sql naming a missing table) stops apply with
 * EO_EXIT_CONFIG, every message of the fetch given back: fixed and
 * started again, it applies them all.
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eo_nats.h"

#define RETRY_MS 5000
#define DEAD_RETRY_MS 60000		/* a dead key's message, kept: offered again this often */

typedef enum
{
	APPLIED, DUPLICATE, BUSY, DEAD, REFUSED, FAILED_RETRY,
	PASSING,					/* a passing trouble: offer it again, wait */
	STOP,						/* the set-up's fault: give it back, stop */
	LOST						/* the connection went: JetStream redelivers */
} Outcome;

/* What became of the messages, for the log. */
typedef struct Tally
{
	long long	applied;
	long long	duplicates;
	long long	failed;			/* offered again after a failure */
	long long	busy;
	long long	terminated;
} Tally;

typedef struct Applier
{
	const Config *cfg;
	PGconn	   *pg;
	Tally		tally;
	bool		failed;			/* anything failed: --once exits 1 */
	int			pauses;			/* passing troubles in a row */
	int			stop_code;		/* >= 0: stop with this exit code */
	bool		sql_worked;		/* the last --sql run succeeded */
	int			sql_failures;	/* --sql failed on this many messages in a row */
	bool		slow_down;		/* back off after this fetch (--sql looks wrong) */
	bool		not_yet;		/* the start's checks met a passing trouble */
} Applier;

/*
 * --sql failed on the data of this many messages in a row, none applied
 * in between: it may be --sql that is wrong (a cast of $1 to uuid, a
 * column it forgets), not each message.  apply says so and backs off
 * after each fetch until --sql works again; it does not stop, for whoever
 * may publish could then stop it with three messages (docs/nats.md).
 */
#define SQL_FAILURES_MAX 3

/* The message's headers as a JSON object {key: value or [values]}. */
static char *
headers_json(natsMsg *msg)
{
	const char **keys = NULL;
	int			nkeys = 0;
	JsonBuf		b;

	json_init(&b);
	json_add(&b, "{");
	if (natsMsgHeader_Keys(msg, &keys, &nkeys) == NATS_OK)
	{
		for (int k = 0; k < nkeys; k++)
		{
			const char **values = NULL;
			int			nvalues = 0;

			json_add(&b, k > 0 ? "," : "");
			json_string(&b, keys[k]);
			json_add(&b, ":");
			if (natsMsgHeader_Values(msg, keys[k], &values, &nvalues) != NATS_OK || nvalues == 0)
				json_add(&b, "null");
			else if (nvalues == 1)
				json_string(&b, values[0]);
			else
			{
				json_add(&b, "[");
				for (int v = 0; v < nvalues; v++)
				{
					json_add(&b, v > 0 ? "," : "");
					json_string(&b, values[v]);
				}
				json_add(&b, "]");
			}
			free((void *) values);
		}
		free((void *) keys);
	}
	json_add(&b, "}");
	return b.data;
}

/*
 * When JetStream stored the message, as timestamptz text (UTC), into buf;
 * NULL if the message carries no JetStream metadata.
 */
static const char *
stored_at(natsMsg *msg, char *buf, size_t len)
{
	jsMsgMetaData *meta = NULL;
	time_t		secs;
	struct tm	tm;
	char		date[32];

	if (natsMsg_GetMetaData(&meta, msg) != NATS_OK)
		return NULL;
	secs = (time_t) (meta->Timestamp / 1000000000LL);
	gmtime_r(&secs, &tm);
	strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S", &tm);
	snprintf(buf, len, "%s.%06lld+00", date, (long long) (meta->Timestamp % 1000000000LL) / 1000);
	jsMsgMetaData_Destroy(meta);
	return buf;
}

/* One message, as --sql's parameters. */
typedef struct Args
{
	char	   *payload;
	char	   *headers;
	char		stored[48];
	const char *params[5];
} Args;

/* False (the message is refused) if its payload cannot be JSON text. */
static bool
args_make(Args *a, natsMsg *msg, const char *id)
{
	const char *data = natsMsg_GetData(msg) ? natsMsg_GetData(msg) : "";
	int			len = natsMsg_GetDataLength(msg);

	if (memchr(data, '\0', (size_t) len) != NULL)
	{
		log_msg("error", "event %s: its payload holds a NUL byte, so it is no JSON text:"
				" JetStream will not deliver it again", id);
		return false;
	}
	a->payload = strndup(data, (size_t) len);
	a->headers = headers_json(msg);
	a->params[0] = id;
	a->params[1] = natsMsg_GetSubject(msg);
	a->params[2] = a->payload[0] ? a->payload : "null";
	a->params[3] = a->headers;
	a->params[4] = stored_at(msg, a->stored, sizeof(a->stored));
	return true;
}

static void
args_free(Args *a)
{
	free(a->payload);
	free(a->headers);
}

static const Oid claim_types[2] = {25, 25};
static const Oid fail_types[4] = {25, 25, 25, 25};
static const Oid sql_types[5] = {25, 25, 3802, 3802, 1184};	/* text, text, jsonb, jsonb, timestamptz */

/* Each message's statements (unnamed: see PgStatement in eo_nats.h). */
static PgStatement claim_stmt = {"SELECT status FROM @eo.eo_claim($1, scope => $2)", 2, claim_types};
static PgStatement fail_stmt = {"SELECT @eo.eo_fail($1, $2, retry_after => '5 s'::pg_catalog.interval,"
" scope => $3, sqlstate => $4, final => false)", 4, fail_types};
static PgStatement sql_stmt = {NULL, 5, sql_types, true};	/* --sql */

/*
 * What every transaction of apply begins with, in its first pipeline:
 * BEGIN (read committed, whatever the session's default says now).  Not
 * READ WRITE: a server fenced with default_transaction_read_only (an HA
 * manager's, or a standby) must refuse apply's writes (25006: the session
 * is replaced).  One a trigger set read-only costs a new session; the pin
 * sets it back for the next.
 *
 * Code run in the session (--sql's tables' triggers) may change its
 * settings for the rest of it, or LISTEN.  On eo 0.4.0 and later the
 * transaction asks, with eo_session_pin_at_commit, that this be put right
 * when it commits, after all its code has run; one that rolls back takes
 * its changes with it; so each transaction begins as apply set its
 * session up.  On an older eo the settings are pinned again here, at the
 * start of the next (pg_pin_statement()), and the rest is put right
 * before COMMIT (commit_steps).  Fills steps[] (MAX_LEAD_STEPS at most);
 * returns how many.
 */
#define MAX_LEAD_STEPS 2

static int
lead_steps(PgStep *steps)
{
	PgStatement *at_commit = pg_pin_at_commit_statement();

	steps[0] = (PgStep) {NULL, "BEGIN ISOLATION LEVEL READ COMMITTED", NULL};
	steps[1] = (PgStep) {at_commit ? at_commit : pg_pin_statement(), NULL, pg_pin_params()};
	return 2;
}

/* BEGIN and the lead steps alone (a message applied on its own); false if any failed. */
static bool
begin_pinned(Applier *a)
{
	PgStep		steps[MAX_LEAD_STEPS];
	PGresult   *res[MAX_LEAD_STEPS];
	int			n = lead_steps(steps);
	bool		ok;

	ok = pg_pipeline(a->pg, steps, n, res);
	for (int j = 0; j < n; j++)
	{
		ExecStatusType got = PQresultStatus(res[j]);

		if (ok && got != PGRES_COMMAND_OK && got != PGRES_TUPLES_OK)
		{
			ok = false;
			(void) pg_ok(a->pg, res[j], PGRES_COMMAND_OK, "beginning a transaction");
		}
		PQclear(res[j]);
	}
	return ok;
}

/*
 * st with params in a transaction of its own, after the settings are
 * pinned again (the two in one round trip): st's result, or the pinning's
 * if that failed, or NULL if the pipeline could not run.
 */
static PGresult *
pinned_statement(Applier *a, PgStatement *st, const char *const *params)
{
	PgStep		steps[2] = {{pg_pin_statement(), NULL, pg_pin_params()}, {st, NULL, params}};
	PGresult   *res[2];

	if (!pg_pipeline(a->pg, steps, 2, res))
		return NULL;
	if (PQresultStatus(res[0]) != PGRES_TUPLES_OK)
	{
		PQclear(res[1]);
		return res[0];
	}
	PQclear(res[0]);
	return res[1];
}

/* Run `sql` (no parameters); true if it came back as `want`, else logged. */
static bool
run(PGconn *pg, const char *sql, ExecStatusType want)
{
	PGresult   *res = pg_exec(pg, sql);
	bool		ok = pg_ok(pg, res, want, sql);

	PQclear(res);
	return ok;
}

/*
 * A failure `kind` of statement `what`, after its transaction was rolled
 * back: the outcome of the message unless the failure was its own.
 */
static Outcome
not_the_message(Applier *a, ErrorKind kind, PGresult *res, const char *what)
{
	if (pg_conn_lost(a->pg))
		return LOST;
	if (kind == ERR_TRANSIENT)
		return PASSING;
	log_msg("error", "stopping: %s failed with %s, which is about the set-up, not the message:"
			" fix it (see the line before) and start eo_nats apply again; every message of"
			" this fetch is given back to JetStream, none was given up",
			what, sqlstate_of(res) ? sqlstate_of(res) : "an error");
	return STOP;
}

/* After --sql or COMMIT failed on the message's data: eo_fail, in a new transaction. */
static Outcome
record_failure(Applier *a, const char *id, PGresult *err)
{
	const char *message = PQresultErrorField(err, PG_DIAG_MESSAGE_PRIMARY);
	const char *params[4] = {id, message ? message : "failed", a->cfg->scope, sqlstate_of(err)};
	PGresult   *res;
	Outcome		o;

	if (!run(a->pg, "ROLLBACK", PGRES_COMMAND_OK))
		return LOST;
	res = pinned_statement(a, &fail_stmt, params);
	if (!pg_ok(a->pg, res, PGRES_TUPLES_OK, "eo_fail"))
		o = not_the_message(a, pg_error_kind(a->pg, res, BLAME_NONE), res, "eo_fail");
	else
		/* dead: eo.max_attempts failures; rejected: a final failure */
		o = strcmp(PQgetvalue(res, 0, 0), "retry") == 0 ? FAILED_RETRY : DEAD;
	PQclear(res);
	return o;
}

/*
 * --sql or COMMIT failed: whose fault was it?  A failure on the message's
 * data is recorded against it (eo_fail, never final: it may be --sql that
 * is wrong for messages like it, and a fix of --sql must find them; dead
 * after eo.max_attempts, and even then kept, see answer()) only when --sql
 * has just worked on another message; before that it may be --sql that is
 * wrong for every message (a cast of $1 to uuid, a column it forgets), and
 * an apply restarted by systemd with the same --sql would use up each
 * message's attempts.  So then the message is only offered again, and
 * from SQL_FAILURES_MAX failures in a row on, apply backs off after each
 * fetch, saying that --sql looks wrong.  The rest of the fetch goes on:
 * a message --sql can apply ends the run, and the failures after it count
 * against their messages again.
 */
static Outcome
sql_failed(Applier *a, PGresult *res, const char *id, const char *what)
{
	ErrorKind	kind = pg_error_kind(a->pg, res, BLAME_DATA);
	Outcome		o;

	(void) pg_ok(a->pg, res, PGRES_COMMAND_OK, what);
	if (pg_conn_lost(a->pg))
		return LOST;
	if (kind == ERR_MESSAGE && ++a->sql_failures >= SQL_FAILURES_MAX)
	{
		log_limited("sql suspect", "error", "%s failed on %d messages in a row, none applied"
					" between (the last with %s): --sql, not each message, looks wrong; fix it"
					" (nothing is recorded against them, they are offered again; apply backs"
					" off until --sql works)", what, a->sql_failures, sqlstate_of(res));
		a->slow_down = true;
	}
	if (kind == ERR_MESSAGE && !a->sql_worked)
		return run(a->pg, "ROLLBACK", PGRES_COMMAND_OK) ? FAILED_RETRY : LOST;
	if (kind == ERR_MESSAGE)
	{
		o = record_failure(a, id, res);
		a->sql_worked = false;
		return o;
	}
	if (!run(a->pg, "ROLLBACK", PGRES_COMMAND_OK))
		return LOST;
	return not_the_message(a, kind, res, what);
}

/*
 * eo_claim failed: the id is the message's own fault (too long, not in
 * the database's encoding), or the set-up's (an unknown scope, 42704; a
 * scope of another role or no EXECUTE, 42501), or passing.
 */
static Outcome
claim_failed(Applier *a, PGresult *res, const char *id)
{
	ErrorKind	kind = pg_error_kind(a->pg, res, BLAME_CLAIM);

	(void) pg_ok(a->pg, res, PGRES_TUPLES_OK, "eo_claim");
	if (pg_conn_lost(a->pg) || !run(a->pg, "ROLLBACK", PGRES_COMMAND_OK))
		return LOST;
	if (kind != ERR_MESSAGE)
		return not_the_message(a, kind, res, "eo_claim");
	log_msg("error", "event %s cannot be claimed (%s): JetStream will not deliver it again",
			id, sqlstate_of(res));
	return REFUSED;
}

/* What eo_claim's status means for the message: STOP for a status this program does not know. */
static Outcome
status_outcome(const char *status)
{
	return strcmp(status, "claimed") == 0 ? APPLIED :
		strcmp(status, "duplicate") == 0 ? DUPLICATE : strcmp(status, "busy") == 0 ? BUSY :
		strcmp(status, "dead") == 0 || strcmp(status, "rejected") == 0 ? DEAD : STOP;
}

/* The same, said in the log if it stops (the claim is rolled back but for claimed). */
static Outcome
claim_status(Applier *a, const char *status)
{
	char		shown[32];
	Outcome		o = status_outcome(status);

	if (o == STOP)
		log_msg("error", "stopping: eo_claim answered \"%s\", a status this eo_nats does not know",
				printable(status, shown, sizeof(shown)));
	return o;
}

/*
 * COMMIT, and on an eo older than 0.4.0 what goes before it: the deferred
 * triggers fired now; every LISTEN dropped (UNLISTEN * and a LISTEN of
 * the transaction take effect at COMMIT, in order: the session never
 * listens, and is never sent notifications it would not read); then
 * synchronous_commit durable for the transaction, whatever --sql's
 * triggers (deferred ones among them) set for it.  A deferred trigger
 * that defers again what it makes fires at COMMIT, after the durable
 * step, and can still make the commit one a crash takes back: on 0.4.0
 * eo_session_pin_at_commit (lead_steps) closes that too.  Fills steps[]
 * (MAX_COMMIT_STEPS at most) ending with COMMIT; returns how many.
 */
#define MAX_COMMIT_STEPS 4

static int
commit_steps(PgStep *steps)
{
	int			n = 0;

	if (pg_pin_at_commit_statement() == NULL)
	{
		steps[n++] = (PgStep) {NULL, "SET CONSTRAINTS ALL IMMEDIATE", NULL};
		steps[n++] = (PgStep) {NULL, "UNLISTEN *", NULL};
		steps[n++] = (PgStep) {&pg_durable_stmt, NULL, NULL};
	}
	steps[n++] = (PgStep) {NULL, "COMMIT", NULL};
	return n;
}

/*
 * pg_pipeline for steps that end with a COMMIT, which can wait for
 * synchronous standbys as long as they are gone: a stop cancels it, so
 * that apply stops within a second.  Cancelled before its commit record,
 * the COMMIT fails (57014, a passing trouble: nothing is recorded against
 * the messages); cancelled in its wait for the standbys, it succeeds with
 * a WARNING, and commit_confirmed answers for it.  A stop that came
 * before could cancel nothing: the transaction is rolled back instead,
 * and false returned with every res[] NULL.
 */
static bool
commit_pipeline(PGconn *pg, const PgStep *steps, int n, PGresult **res)
{
	bool		ok = stop_cancels(pg);

	if (ok)
		ok = pg_pipeline(pg, steps, n, res);
	else
	{
		for (int j = 0; j < n; j++)
			res[j] = NULL;
		if (PQtransactionStatus(pg) != PQTRANS_IDLE)
			(void) run(pg, "ROLLBACK", PGRES_COMMAND_OK);
	}
	(void) stop_cancels(NULL);
	return ok;
}

/*
 * A step that makes its transaction's COMMIT wait for the synchronous
 * standbys, where there are any.  A transaction waits for them at COMMIT
 * only if it wrote WAL before its commit record (RecordTransactionCommit);
 * an xid alone does not make it.  So, where synchronous_standby_names
 * names any, it writes an empty transactional logical message (prefix
 * "eo_nats", which every role may write, and which a logical decoding
 * client of another prefix passes over); elsewhere nothing.
 */
static const PgStep standby_barrier = {
	NULL, "SELECT CASE WHEN pg_catalog.current_setting('synchronous_standby_names')"
	" OPERATOR(pg_catalog.<>) '' THEN pg_catalog.pg_logical_emit_message(true, 'eo_nats', '') END",
	NULL
};

/*
 * The barrier, then COMMIT, in one round trip, after BEGIN if `begin`
 * (else in the open transaction): true if all went through.  The durable
 * step first: on an eo older than 0.4.0 nothing puts back at COMMIT what a
 * trigger of the transaction before set for the session
 * (synchronous_commit local, client_min_messages error), and the barrier
 * would then wait for no standby, or its WARNING not be heard.
 */
static bool
barrier_and_commit(PGconn *pg, bool begin)
{
	const PgStep steps[4] = {{NULL, "BEGIN", NULL}, {&pg_durable_stmt, NULL, NULL},
	standby_barrier, {NULL, "COMMIT", NULL}};
	const PgStep *from = begin ? steps : steps + 1;
	int			n = begin ? 4 : 3;
	PGresult   *res[4];
	bool		ok = commit_pipeline(pg, from, n, res);

	for (int j = 0; j < n; j++)
	{
		ExecStatusType got = PQresultStatus(res[j]);

		ok = ok && (got == PGRES_COMMAND_OK || got == PGRES_TUPLES_OK);
		PQclear(res[j]);
	}
	if (!ok && !pg_conn_lost(pg) && PQtransactionStatus(pg) != PQTRANS_IDLE)
		(void) run(pg, "ROLLBACK", PGRES_COMMAND_OK);
	return ok;
}

/*
 * Whether a COMMIT that succeeded is as durable as a COMMIT promises,
 * given the WARNINGs counted before it was sent.  A cancel during its
 * wait for synchronous standbys (eo_nats's own at a stop, a
 * pg_cancel_backend) ends the wait with a WARNING ("canceling wait for
 * synchronous replication"), and the COMMIT then succeeds: committed
 * here, maybe not on the standby a failover promotes.  Acknowledged then,
 * the message would be gone with such a failover.  So after a COMMIT
 * with a WARNING (any: a trigger's RAISE WARNING costs one more commit),
 * a transaction with the standby barrier is committed: its COMMIT waits
 * for the standbys as far as its own commit record, past the first one's,
 * and one that comes without a WARNING confirms both.  False if a stop
 * was asked or the session failed first: the messages are then left
 * unacknowledged, and come back.
 */
static bool
commit_confirmed(Applier *a, uint64_t warnings_before)
{
	for (int attempt = 0; pg_warnings_seen() != warnings_before; attempt++)
	{
		if (attempt == 0)
			log_limited("unconfirmed commit", "warning",
						"a COMMIT came with a WARNING (a cancelled wait for synchronous standbys?):"
						" its messages are acknowledged once a later commit confirms it");
		else
			sleep_ms(backoff_ms(attempt, 1000));
		if (stop_requested)
			return false;
		warnings_before = pg_warnings_seen();
		if (!barrier_and_commit(a->pg, true))
			return false;
	}
	return true;
}

/*
 * End the open transaction of claims that found only duplicates (and
 * busy or dead keys), so that the duplicates can be acknowledged.  Such a
 * key was committed by an earlier transaction, which may have had its
 * wait for the standbys cancelled, or been cut off in it by a lost
 * session: visible here, maybe not on the standby.  The claims wrote
 * nothing, so a plain COMMIT would wait for no standby; with the barrier
 * it waits past the keys' own commit records.
 */
static bool
duplicates_confirmed(Applier *a)
{
	uint64_t	warnings = pg_warnings_seen();

	return barrier_and_commit(a->pg, false) && commit_confirmed(a, warnings);
}

/* commit_steps for one message: APPLIED, or what their failure means for it. */
static Outcome
commit_one(Applier *a, const char *id)
{
	PgStep		steps[MAX_COMMIT_STEPS];
	PGresult   *res[MAX_COMMIT_STEPS];
	int			n = commit_steps(steps);
	Outcome		o = APPLIED;
	uint64_t	warnings = pg_warnings_seen();

	if (!commit_pipeline(a->pg, steps, n, res))
		return LOST;
	for (int j = 0; j < n; j++)
	{
		ExecStatusType got = PQresultStatus(res[j]);

		/* a deferred constraint fails the first; the rest are then aborted */
		if (o == APPLIED && got != PGRES_COMMAND_OK && got != PGRES_TUPLES_OK)
			o = sql_failed(a, res[j], id, "COMMIT");
		PQclear(res[j]);
	}
	if (o == APPLIED)
		crash_point("after-commit");
	if (o == APPLIED && !commit_confirmed(a, warnings))
		o = LOST;
	return o;
}

/* --sql and COMMIT, once the message's id is claimed. */
static Outcome
apply_claimed(Applier *a, const Args *args, const char *id)
{
	PGresult   *res = pg_exec_statement(a->pg, &sql_stmt, args->params);
	Outcome		o;

	if (PQresultStatus(res) != PGRES_TUPLES_OK && PQresultStatus(res) != PGRES_COMMAND_OK)
		o = sql_failed(a, res, id, "--sql");
	else
		o = commit_one(a, id);
	PQclear(res);
	return o;
}

/* Claim, apply and commit one message's event.  See the header. */
static Outcome
apply_one(Applier *a, natsMsg *msg, const char *id)
{
	const char *claim_params[2] = {id, a->cfg->scope};
	Args		args;
	PGresult   *res;
	Outcome		o;

	if (!args_make(&args, msg, id))
		return REFUSED;
	if (!begin_pinned(a))
	{
		args_free(&args);
		if (!pg_conn_lost(a->pg) && PQtransactionStatus(a->pg) != PQTRANS_IDLE)
			(void) run(a->pg, "ROLLBACK", PGRES_COMMAND_OK);
		return pg_conn_lost(a->pg) ? LOST : PASSING;
	}
	res = pg_exec_statement(a->pg, &claim_stmt, claim_params);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		o = claim_failed(a, res, id);
	else if ((o = claim_status(a, PQgetvalue(res, 0, 0))) == APPLIED)
		o = apply_claimed(a, &args, id);
	else if (o == DUPLICATE)
		o = duplicates_confirmed(a) ? DUPLICATE : LOST;
	else if (!run(a->pg, "ROLLBACK", PGRES_COMMAND_OK))
		o = LOST;
	PQclear(res);
	args_free(&args);
	return o;
}

/* Run `sql` (no parameters); true if it came back as `want` (errors stay quiet). */
static bool
quiet_ok(PGconn *pg, const char *sql, ExecStatusType want)
{
	PGresult   *res = pg_exec(pg, sql);
	bool		ok = PQresultStatus(res) == want;

	PQclear(res);
	return ok;
}

/*
 * Claim ids[from..to) (at most PG_PIPELINE_MAX - 1) in one round trip,
 * after BEGIN if `begin`: out[i] as eo_claim said.  False if any step
 * failed or a status is not known.
 */
static bool
claim_chunk(Applier *a, const char **ids, int from, int to, bool begin, Outcome *out)
{
	PgStep		steps[PG_PIPELINE_MAX];
	PGresult   *res[PG_PIPELINE_MAX];
	const char *params[PG_PIPELINE_MAX][2];
	int			lead = begin ? lead_steps(steps) : 0;
	int			n = lead;
	bool		ok;

	for (int i = from; i < to; i++, n++)
	{
		params[n][0] = ids[i];
		params[n][1] = a->cfg->scope;
		steps[n] = (PgStep) {&claim_stmt, NULL, params[n]};
	}
	ok = pg_pipeline(a->pg, steps, n, res);
	for (int j = 0; j < n; j++)
	{
		ExecStatusType got = PQresultStatus(res[j]);

		if (ok && j < lead)
			ok = got == PGRES_COMMAND_OK || got == PGRES_TUPLES_OK;
		else if (ok)
		{
			Outcome    *o = &out[from + j - lead];	/* a claim's */

			ok = got == PGRES_TUPLES_OK && PQntuples(res[j]) == 1;
			*o = ok ? status_outcome(PQgetvalue(res[j], 0, 0)) : STOP;
			ok = *o != STOP;
		}
		PQclear(res[j]);
	}
	return ok;
}

/*
 * --sql for message i (its settings pinned again before it if `pin`: an
 * earlier --sql's trigger changed one the server reports), then COMMIT if
 * `commit`, in one round trip.
 */
static bool
sql_and_commit(Applier *a, natsMsg *msg, const char *id, bool pin, bool commit)
{
	PgStep		steps[2 + MAX_COMMIT_STEPS] = {{0}};
	PGresult   *res[2 + MAX_COMMIT_STEPS];
	Args		args;
	int			n = 0;
	bool		ok = true;

	if (msg != NULL)
	{
		(void) args_make(&args, msg, id);
		if (pin)
			steps[n++] = (PgStep) {pg_pin_statement(), NULL, pg_pin_params()};
		steps[n++] = (PgStep) {&sql_stmt, NULL, args.params};
	}
	if (commit)
		n += commit_steps(steps + n);
	ok = commit ? commit_pipeline(a->pg, steps, n, res) : pg_pipeline(a->pg, steps, n, res);
	for (int j = 0; j < n; j++)
	{
		ExecStatusType got = PQresultStatus(res[j]);

		ok = ok && (got == PGRES_COMMAND_OK || (steps[j].st != NULL && got == PGRES_TUPLES_OK));
		PQclear(res[j]);
	}
	if (msg != NULL)
		args_free(&args);
	return ok;
}

/* Whether a fetch's claims found any key done before (a redelivery). */
static bool
any_duplicate(const Outcome *out, int n)
{
	for (int i = 0; i < n; i++)
		if (out[i] == DUPLICATE)
			return true;
	return false;
}

/* Every answer of a fetch left for the redelivery: nothing is told JetStream. */
static void
lost_all(Outcome *out, int n)
{
	for (int i = 0; i < n; i++)
		out[i] = LOST;
}

/*
 * Apply the n messages of a fetch (ids[i] its Nats-Msg-Id, all with
 * JSON payloads) in one transaction: each claimed and, if new, applied,
 * then one COMMIT for all, so that a batch pays for one commit (one WAL
 * flush), not one per message.  Their outcomes in out[]: APPLIED (new),
 * DUPLICATE, BUSY or DEAD as eo_claim said, or LOST for every one when
 * the COMMIT was not confirmed (commit_confirmed).  Returns false, with nothing
 * of the batch committed, if any statement failed, COMMIT was refused,
 * or eo_claim said something else: the caller then applies each message
 * on its own (apply_one), where a failure is judged for that message.
 *
 * Round trips: BEGIN and the claims go together (in chunks of a
 * pipeline's size), then --sql of each new message but the last, then
 * the last one's with COMMIT.  A message a fetch (the paced case) is two
 * round trips, not four: what the server spends per statement is mostly
 * its socket's wake-up, read and write.  The claims all come before the
 * first --sql; in one transaction that changes nothing: the effects run
 * in the messages' order, and an id twice in the fetch is claimed, then
 * a duplicate, as before.
 */
static bool
apply_batch(Applier *a, natsMsg **msgs, const char **ids, int n, Outcome *out)
{
	PGconn	   *pg = a->pg;
	int			chunk = PG_PIPELINE_MAX - MAX_LEAD_STEPS;
	int			last = -1;
	bool		ok = true;
	uint64_t	warnings;

	for (int from = 0; ok && from < n; from += chunk)
		ok = claim_chunk(a, ids, from, from + chunk < n ? from + chunk : n, from == 0, out);
	for (int i = 0; ok && i < n; i++)
		if (out[i] == APPLIED)
			last = i;
	for (int i = 0; ok && i < last; i++)
		if (out[i] == APPLIED)
			ok = sql_and_commit(a, msgs[i], ids[i], pg_reported_moved(a->pg), false);
	if (ok && last < 0 && any_duplicate(out, n))
	{
		/* nothing written: the duplicates' own commits are to be confirmed */
		if (!duplicates_confirmed(a))
			lost_all(out, n);
		return true;
	}
	warnings = pg_warnings_seen();
	if (ok)
		ok = sql_and_commit(a, last >= 0 ? msgs[last] : NULL, last >= 0 ? ids[last] : NULL,
							pg_reported_moved(a->pg), true);
	if (!ok && !pg_conn_lost(pg) && PQtransactionStatus(pg) != PQTRANS_IDLE)
		(void) quiet_ok(pg, "ROLLBACK", PGRES_COMMAND_OK);
	if (ok)
		crash_point("after-commit");
	/* committed, but not confirmed: every answer waits for the redelivery */
	if (ok && !commit_confirmed(a, warnings))
		lost_all(out, n);
	return ok;
}

/* Tell JetStream what became of the message, and count it. */
static void
answer(Applier *a, natsMsg *msg, Outcome o, const char *id)
{
	natsStatus	s = NATS_OK;
	char		scope[80];

	switch (o)
	{
		case APPLIED:
		case DUPLICATE:
			/*
			 * No need to wait for the server to confirm the ack: if it is
			 * lost, the message comes back and eo_claim says duplicate.
			 */
			s = natsMsg_Ack(msg, NULL);
			(*(o == APPLIED ? &a->tally.applied : &a->tally.duplicates))++;
			if (o == APPLIED)
			{
				a->sql_worked = true;
				a->sql_failures = 0;
			}
			break;
		case BUSY:
			s = natsMsg_NakWithDelay(msg, RETRY_MS, NULL);
			a->tally.busy++;
			break;
		case FAILED_RETRY:
		case PASSING:
			s = natsMsg_NakWithDelay(msg, RETRY_MS, NULL);
			a->tally.failed++;
			a->failed = true;
			break;
		case STOP:
			s = natsMsg_Nak(msg, NULL);		/* at once: for the next start */
			break;
		case DEAD:
			a->failed = true;
			if (!a->cfg->terminate_dead)
			{
				/*
				 * Its --sql failed eo.max_attempts times: on its data, or
				 * because --sql is wrong for messages like it.  Kept, so
				 * that a fixed --sql and eo_redrive_dead() apply it.
				 */
				log_limited("dead", "error", "event %s is dead (--sql failed on it eo.max_attempts"
							" times; eo_status('%s', '%s')): kept, offered again every %d s;"
							" fix --sql and run eo_redrive_dead('%s'), or give --terminate-dead",
							id, id, printable(a->cfg->scope, scope, sizeof(scope)),
							DEAD_RETRY_MS / 1000, scope);
				s = natsMsg_NakWithDelay(msg, DEAD_RETRY_MS, NULL);
				a->tally.failed++;
				break;
			}
			log_msg("error", "event %s is dead (--sql failed on it eo.max_attempts times;"
					" eo_status('%s', '%s')): --terminate-dead: JetStream will not deliver it"
					" again", id, id, printable(a->cfg->scope, scope, sizeof(scope)));
			/* fall through */
		case REFUSED:
			s = natsMsg_Term(msg, NULL);
			a->tally.terminated++;
			a->failed = true;
			break;
		case LOST:
			a->failed = true;
			break;				/* JetStream delivers it again after AckWait */
	}
	if (s != NATS_OK)
		log_limited("nats answer", "warning", "JetStream did not take the answer for event %s: %s"
					" (it will deliver the message again; eo_claim says duplicate)",
					id, nats_error(s));
}

/*
 * The stream's subject if it has one (a stream of several needs
 * --filter), or --filter; malloc'd, or NULL after a line saying why.
 */
static char *
filter_of(jsCtx *js, const Config *cfg)
{
	jsStreamInfo *si = NULL;
	jsErrCode	code = 0;
	char	   *filter = NULL;
	natsStatus	s;

	if (cfg->filter)
		return strdup(cfg->filter);
	s = js_GetStreamInfo(&si, js, cfg->stream, NULL, &code);
	if (s != NATS_OK)
		log_msg("error", "stream \"%s\": %s", cfg->stream,
				s == NATS_NOT_FOUND ? "it does not exist" : nats_error(s));
	else if (si->Config->SubjectsLen != 1)
		log_msg("error", "stream \"%s\" takes %d subjects: give --filter", cfg->stream,
				si->Config->SubjectsLen);
	else
		filter = strdup(si->Config->Subjects[0]);
	jsStreamInfo_Destroy(si);
	return filter;
}


/*
 * An existing durable with other settings than --ack-wait and --batch
 * ask (MaxAckPending is twice --batch) is updated, rather than refused by
 * the subscription; one that does not exist is made by it.
 */
static bool
durable_ready(jsCtx *js, const Config *cfg)
{
	jsConsumerInfo *ci = NULL;
	jsConsumerInfo *after = NULL;
	jsErrCode	code = 0;
	int64_t		ack_wait = (int64_t) cfg->ack_wait_ms * 1000000;
	int64_t		pending = (int64_t) cfg->batch * 2;
	natsStatus	s = js_GetConsumerInfo(&ci, js, cfg->stream, cfg->durable, NULL, &code);

	if (s != NATS_OK)
		return true;			/* made by js_PullSubscribe, or its error said there */
	if (ci->Config->AckWait != ack_wait || ci->Config->MaxAckPending != pending)
	{
		log_msg("info", "durable \"%s\": ack wait %lld ms and max ack pending %lld become"
				" %d ms and %lld (--ack-wait, twice --batch)", cfg->durable,
				(long long) (ci->Config->AckWait / 1000000), (long long) ci->Config->MaxAckPending,
				cfg->ack_wait_ms, (long long) pending);
		ci->Config->AckWait = ack_wait;
		ci->Config->MaxAckPending = pending;
		s = js_UpdateConsumer(&after, js, cfg->stream, ci->Config, NULL, &code);
		if (s != NATS_OK)
			log_msg("error", "durable \"%s\" not updated: %s (code %d); eo_nats consumer-delete"
					" deletes it, and apply makes it again from the stream's first message",
					cfg->durable, nats_error(s), (int) code);
		jsConsumerInfo_Destroy(after);
	}
	jsConsumerInfo_Destroy(ci);
	return s == NATS_OK;
}

static natsSubscription *
subscribe(jsCtx *js, const Config *cfg)
{
	natsSubscription *sub = NULL;
	jsSubOptions so;
	jsErrCode	code = 0;
	char	   *filter;
	natsStatus	s;

	if (!durable_ready(js, cfg) || (filter = filter_of(js, cfg)) == NULL)
		return NULL;
	jsSubOptions_Init(&so);
	so.Stream = cfg->stream;
	so.Config.AckPolicy = js_AckExplicit;
	so.Config.AckWait = (int64_t) cfg->ack_wait_ms * 1000000;	/* redelivery after */
	so.Config.MaxAckPending = cfg->batch * 2;
	s = js_PullSubscribe(&sub, js, filter, cfg->durable, NULL, &so, &code);
	free(filter);
	if (s != NATS_OK)
	{
		log_msg("error", "cannot subscribe to stream \"%s\" as durable \"%s\": %s (code %d)",
				cfg->stream, cfg->durable, nats_error(s), (int) code);
		return NULL;
	}
	return sub;
}

/*
 * Messages [from, n) given back after a passing trouble or a stop (their
 * turn did not come); LOST: none, JetStream redelivers after AckWait.
 */
static void
give_back(Applier *a, natsMsg **msgs, const char **ids, int from, int n, Outcome o)
{
	for (int i = from; o != LOST && i < n; i++)
		answer(a, msgs[i], o, ids[i]);
}

/*
 * The session, made again if it was lost (by the batch, or by the message
 * before): false, with stop_code set, if apply is to stop instead.
 */
static bool
session_back(Applier *a)
{
	int			rc;

	if (!pg_conn_lost(a->pg))
		return true;
	if ((a->pg = pg_ensure(a->pg, a->cfg, &rc)) != NULL)
		return true;
	a->stop_code = rc;
	return false;
}

/*
 * The messages of one fetch: those without a Nats-Msg-Id or with a
 * payload that cannot be JSON are answered at once; the rest are applied
 * as one batch (apply_batch), or, if that fails, one by one until one
 * meets a trouble that is not its own, when the rest are given back.
 * A message whose turn ends the session is given back alone, and the
 * session made again for the next: it may be the message's own doing
 * (a trigger that ends it, a backend that crashes on its data), and
 * given back with the whole fetch it would hold the fetch for ever.
 * Answers go to JetStream only after the transaction that decided them
 * committed.  Returns the worst outcome: PASSING, STOP or LOST, or
 * APPLIED for all went its own way.
 */
static Outcome
apply_list(Applier *a, natsMsgList *list)
{
	natsMsg   **msgs = calloc((size_t) list->Count + 1, sizeof(natsMsg *));
	const char **ids = calloc((size_t) list->Count + 1, sizeof(char *));
	Outcome    *out = calloc((size_t) list->Count + 1, sizeof(Outcome));
	Outcome		worst = APPLIED;
	int			n = 0;

	for (int i = 0; i < list->Count; i++)
	{
		natsMsg    *msg = list->Msgs[i];
		const char *id = NULL;
		Args		args;

		if (natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) != NATS_OK || id == NULL || id[0] == '\0')
		{
			/*
			 * Not a message eo_nats forward made: it can never be
			 * claimed, and offered again for ever it would take a place
			 * of MaxAckPending each time.  The stream keeps it.
			 */
			log_msg("error", "a message on \"%s\" has no Nats-Msg-Id, so it cannot be claimed:"
					" terminated (the stream keeps it; eo_nats dump shows it)",
					natsMsg_GetSubject(msg));
			natsMsg_Term(msg, NULL);
			a->tally.terminated++;
			a->failed = true;
			continue;
		}
		if (!args_make(&args, msg, id))
		{
			answer(a, msg, REFUSED, id);
			continue;
		}
		args_free(&args);
		msgs[n] = msg;
		ids[n++] = id;
	}
	if (n > 0 && apply_batch(a, msgs, ids, n, out))
		for (int i = 0; i < n; i++)
			answer(a, msgs[i], out[i], ids[i]);
	else
		for (int i = 0; i < n; i++)
		{
			Outcome		o;

			if (stop_requested)
			{
				give_back(a, msgs, ids, i, n, STOP);	/* at once, for the next start */
				break;
			}
			if (!session_back(a))
			{
				give_back(a, msgs, ids, i, n, STOP);
				worst = STOP;	/* with the stop_code pg_ensure gave */
				break;
			}
			o = apply_one(a, msgs[i], ids[i]);
			if (o == LOST)
			{
				/* maybe its own doing (its --sql's trigger ended the session): not the others' */
				answer(a, msgs[i], PASSING, ids[i]);
				worst = PASSING;
				continue;
			}
			answer(a, msgs[i], o, ids[i]);
			if (o == PASSING || o == STOP)
			{
				give_back(a, msgs, ids, i + 1, n, o);
				worst = o;
				break;
			}
		}
	free(msgs);
	free(ids);
	free(out);
	return worst;
}

/*
 * --scope can be claimed in: it exists, belongs to this role (or one it
 * is a member of), and is text the database can hold.  Found out with a
 * claim that is rolled back, so that a mistake in it stops apply (exit 3)
 * rather than being taken for a fault of each message's id.
 */
static bool
scope_usable(Applier *a)
{
	const char *params[2] = {"eo_nats: is the scope usable?", a->cfg->scope};
	PGresult   *res;
	bool		ok;

	if (!run(a->pg, "BEGIN", PGRES_COMMAND_OK))
		return false;
	res = pg_exec_statement(a->pg, &claim_stmt, params);
	ok = pg_ok(a->pg, res, PGRES_TUPLES_OK, "claiming in --scope");
	if (!ok && pg_error_kind(a->pg, res, BLAME_NONE) == ERR_TRANSIENT)
		a->not_yet = true;		/* read-only (fenced, a standby), or lost: not the scope */
	else if (!ok)
		log_msg("error", "--scope \"%s\" cannot be claimed in by role \"%s\" (see the line"
				" before): make it with eo_scope_create(name, owner => role); stopping",
				a->cfg->scope, PQuser(a->pg));
	PQclear(res);
	return (pg_conn_lost(a->pg) || run(a->pg, "ROLLBACK", PGRES_COMMAND_OK)) && ok;
}

/*
 * Checks before the first message: the role may use eo_claim and eo_fail
 * (nothing is granted to PUBLIC), and --sql prepares (a syntax error, a
 * table or function it names that is not there, as the search_path
 * finds them).  False after a line saying what to fix.
 */
static bool
ready_to_apply(Applier *a)
{
	PGresult   *res = pg_exec(a->pg,
							  "SELECT p.proname FROM pg_catalog.pg_proc p, pg_catalog.pg_extension e"
							  " WHERE e.extname OPERATOR(pg_catalog.=) 'eo'"
							  " AND p.pronamespace OPERATOR(pg_catalog.=) e.extnamespace"
							  " AND p.proname OPERATOR(pg_catalog.=) ANY ('{eo_claim,eo_fail}')"
							  " AND NOT (pg_catalog.has_function_privilege(p.oid, 'EXECUTE')"
							  " AND pg_catalog.has_schema_privilege(e.extnamespace, 'USAGE'))"
							  " LIMIT 1");
	bool		ok = pg_ok(a->pg, res, PGRES_TUPLES_OK, "checking privileges");

	if (ok && PQntuples(res) > 0)
	{
		log_msg("error", "role \"%s\" may not call eo's %s: GRANT USAGE on eo's schema and"
				" EXECUTE on eo_claim and eo_fail to it (docs/nats.md); stopping",
				PQuser(a->pg), PQgetvalue(res, 0, 0));
		ok = false;
	}
	PQclear(res);
	if (ok)
		ok = scope_usable(a);
	if (ok && (res = pg_check_statement(a->pg, &sql_stmt)) != NULL)
	{
		(void) pg_ok(a->pg, res, PGRES_COMMAND_OK, "preparing --sql");
		log_msg("error", "--sql cannot run as given%s; stopping",
				a->cfg->search_path ? "" : " (it runs with search_path pg_catalog, pg_temp:"
				" name tables and functions with their schema, or give --search-path)");
		PQclear(res);
		ok = false;
	}
	return ok;
}

/* The exit status: a stop's, or 1 if --once met any failure. */
static int
exit_status(Applier *a)
{
	if (a->stop_code >= 0)
		return a->stop_code;
	return a->cfg->once && a->failed ? EO_EXIT_FAILED : EO_EXIT_OK;
}

static void
log_tally(const char *what, const Tally *t)
{
	log_msg(strcmp(what, "stopping") == 0 ? "info" : "debug",
			"%s: %lld applied, %lld duplicates, %lld failed and %lld busy (offered again),"
			" %lld terminated", what, t->applied, t->duplicates, t->failed, t->busy, t->terminated);
}

/* One fetch, applied; false to stop. */
static bool
apply_fetch(Applier *a, natsSubscription *sub)
{
	natsMsgList list = {0};
	natsStatus	s;
	Outcome		worst;
	int			rc;
	Tally		before = a->tally;

	if ((a->pg = pg_ensure(a->pg, a->cfg, &rc)) == NULL)
	{
		a->stop_code = rc;
		return false;
	}
	/* short, so that a stop is heard within a second; --once waits longer to be sure */
	s = natsSubscription_Fetch(&list, sub, a->cfg->batch, a->cfg->once ? 2000 : 500, NULL);
	if (s == NATS_TIMEOUT)
		return !a->cfg->once;
	if (s != NATS_OK)
	{
		log_limited("fetch", "warning", "fetching from JetStream: %s", nats_error(s));
		a->failed = true;
		sleep_ms(backoff_ms(a->pauses++, 30000));
		return !(a->cfg->once && a->pauses > 4);
	}
	worst = apply_list(a, &list);
	natsMsgList_Destroy(&list);
	if (log_verbose)
	{
		Tally		d = {a->tally.applied - before.applied, a->tally.duplicates - before.duplicates,
		a->tally.failed - before.failed, a->tally.busy - before.busy,
		a->tally.terminated - before.terminated};

		log_tally("fetch", &d);
	}
	if (worst == STOP)
	{
		if (a->stop_code < 0)
			a->stop_code = EO_EXIT_CONFIG;
		return false;
	}
	if (worst == PASSING || a->slow_down)
		sleep_ms(backoff_ms(a->pauses++, 30000));
	else
		a->pauses = 0;
	a->slow_down = false;
	return !(a->cfg->once && a->pauses > 4);
}

/*
 * ready_to_apply, tried again in a new session with backoff while what
 * stops it passes (a server that refuses writes: fenced by an HA
 * manager's default_transaction_read_only, a standby not yet promoted).
 * False, with stop_code set, if apply is to stop.
 */
static bool
checked_at_start(Applier *a)
{
	int			rc;

	for (int tries = 0;; tries++)
	{
		a->not_yet = false;
		if (ready_to_apply(a))
			return true;
		if (!a->not_yet)
			a->stop_code = EO_EXIT_CONFIG;
		else if (a->cfg->once && tries >= 4)
			a->stop_code = EO_EXIT_FAILED;
		else if (!stop_requested)
		{
			sleep_ms(backoff_ms(tries, 10000));
			if ((a->pg = pg_ensure(a->pg, a->cfg, &rc)) != NULL)
				continue;
			a->stop_code = rc;
		}
		return false;
	}
}

int
apply_main(const Config *cfg)
{
	Applier		a = {.cfg = cfg, .stop_code = -1};
	natsConnection *nc = NULL;
	jsCtx	   *js = NULL;
	natsSubscription *sub = NULL;
	int			rc;

	sql_stmt.sql = cfg->sql;
	if ((a.pg = pg_ensure(NULL, cfg, &rc)) == NULL)
		return rc;
	if (!checked_at_start(&a))
		;						/* stop_code says why */
	else if ((js = nats_jetstream(cfg, &nc, &rc)) == NULL)
		a.stop_code = rc;
	else if ((sub = subscribe(js, cfg)) == NULL)
		a.stop_code = EO_EXIT_CONFIG;
	else
	{
		log_msg("info", "applying stream \"%s\" (durable \"%s\", scope \"%s\")",
				cfg->stream, cfg->durable, cfg->scope);
		while (!stop_requested && apply_fetch(&a, sub))
			;
		log_tally("stopping", &a.tally);
	}
	PQfinish(a.pg);
	natsSubscription_Destroy(sub);
	jsCtx_Destroy(js);
	natsConnection_Destroy(nc);
	return exit_status(&a);
}
