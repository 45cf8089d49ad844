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
 *	  BEGIN; SELECT status FROM eo_claim(<Nats-Msg-Id>, scope => ...);
 *	  claimed:	 run --sql ($1 id, $2 subject, $3 payload, $4 headers,
 *				 $5 when JetStream stored it); COMMIT;
 *				 then ack
 *	  duplicate: ROLLBACK; ack (it was applied before: a redelivery)
 *	  busy:		 ROLLBACK; nak with a delay (another session holds the key,
 *				 or a retry is not due yet)
 *	  dead:		 ROLLBACK; terminate the message (eo.max_attempts failures)
 * If --sql fails: ROLLBACK, then eo_fail(id, error, sqlstate) in a new
 * transaction (a retry after 5 s; 'dead' after eo.max_attempts, or at once
 * for a final SQLSTATE), and nak or terminate.  Killed between COMMIT and
 * ack, the message comes back, and eo_claim says duplicate: nothing is
 * applied twice.  Lost connections are made again with backoff; the
 * unacknowledged message is redelivered by JetStream.
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eo_nats.h"

#define RETRY_MS 5000

typedef enum
{
	APPLIED, DUPLICATE, BUSY, DEAD, REFUSED, FAILED_RETRY, LOST
} Outcome;

/*
 * Is this SQLSTATE worth trying again (a serialization failure, a lock
 * or statement timeout, the server short of resources, a connection
 * problem), rather than a refusal that the same message meets again?
 */
static bool
transient(const char *state)
{
	return state != NULL &&
		(strncmp(state, "40", 2) == 0 || strncmp(state, "53", 2) == 0 ||
		 strncmp(state, "08", 2) == 0 || strncmp(state, "57", 2) == 0 ||
		 strcmp(state, "55P03") == 0);
}

static const char *
sqlstate_of(PGresult *res)
{
	return res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
}

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

/* Run `sql`; true if it came back as `want`.  The result in *out if asked. */
static bool
run(PGconn *pg, const char *sql, int n, const Oid *types, const char *const *params,
	ExecStatusType want, const char *what, PGresult **out)
{
	PGresult   *res = PQexecParams(pg, sql, n, types, params, NULL, NULL, 0);
	bool		ok = pg_ok(pg, res, want, what);

	if (out != NULL && ok)
		*out = res;
	else
		PQclear(res);
	return ok;
}

/* After --sql failed: the attempt recorded with eo_fail, in a new transaction. */
static Outcome
record_failure(PGconn *pg, const Config *cfg, const char *id, PGresult *err)
{
	const char *message = err ? PQresultErrorField(err, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	const char *state = err ? PQresultErrorField(err, PG_DIAG_SQLSTATE) : NULL;
	const char *params[4] = {id, message ? message : "failed", cfg->scope, state};
	static const Oid types[4] = {25, 25, 25, 25};
	PGresult   *res;
	Outcome		o = FAILED_RETRY;

	if (!run(pg, "ROLLBACK", 0, NULL, NULL, PGRES_COMMAND_OK, "ROLLBACK", NULL))
		return LOST;
	if (!run(pg, "SELECT eo_fail($1, $2, retry_after => '5 s', scope => $3, sqlstate => $4)",
			 4, types, params, PGRES_TUPLES_OK, "eo_fail", &res))
		return pg_conn_lost(pg) ? LOST : FAILED_RETRY;
	/* dead: eo.max_attempts failures; rejected: a final failure */
	if (strcmp(PQgetvalue(res, 0, 0), "retry") != 0)
		o = DEAD;
	PQclear(res);
	return o;
}

/*
 * After BEGIN or eo_claim failed: roll back, and say whether the message
 * can be tried again (a transient error) or is refused for good (a key
 * eo_claim cannot take: too long, not in the database's encoding,
 * another role's, a final failure replayed).
 */
static Outcome
claim_failed(PGconn *pg, PGresult *res, const char *id)
{
	const char *state = sqlstate_of(res);

	if (pg_conn_lost(pg))
		return LOST;
	if (!run(pg, "ROLLBACK", 0, NULL, NULL, PGRES_COMMAND_OK, "ROLLBACK", NULL))
		return LOST;
	if (transient(state))
		return BUSY;
	log_msg("error", "event %s cannot be claimed (%s): JetStream will not deliver it again",
			id, state ? state : "no SQLSTATE");
	return REFUSED;
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

static const Oid claim_types[2] = {25, 25};
static const Oid sql_types[5] = {25, 25, 3802, 3802, 1184};	/* text, text, jsonb, jsonb, timestamptz */

/* Each message's two statements, prepared once per session (pgconn.c). */
static PgStatement claim_stmt = {"eo_claim", "SELECT status FROM eo_claim($1, scope => $2)", 2, claim_types};
static PgStatement sql_stmt = {"eo_apply", NULL, 5, sql_types};	/* --sql */

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

/* Claim, apply and commit one message's event.  See the header. */
static Outcome
apply_one(PGconn *pg, const Config *cfg, natsMsg *msg, const char *id)
{
	const char *claim_params[2] = {id, cfg->scope};
	Args		a;
	const char *const *params = a.params;
	PGresult   *res = NULL;
	Outcome		o = LOST;

	if (!args_make(&a, msg, id))
		return REFUSED;
	res = PQexecParams(pg, "BEGIN", 0, NULL, NULL, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		(void) pg_ok(pg, res, PGRES_COMMAND_OK, "BEGIN");
		o = pg_conn_lost(pg) ? LOST : BUSY;
		goto out;
	}
	PQclear(res);
	res = pg_exec_statement(pg, &claim_stmt, claim_params);
	if (!pg_ok(pg, res, PGRES_TUPLES_OK, "eo_claim"))
	{
		o = claim_failed(pg, res, id);
		goto out;
	}
	if (strcmp(PQgetvalue(res, 0, 0), "claimed") != 0)
	{
		const char *status = PQgetvalue(res, 0, 0);

		o = strcmp(status, "duplicate") == 0 ? DUPLICATE : strcmp(status, "busy") == 0 ? BUSY : DEAD;
		if (!run(pg, "ROLLBACK", 0, NULL, NULL, PGRES_COMMAND_OK, "ROLLBACK", NULL))
			o = LOST;
		goto out;
	}
	PQclear(res);
	res = pg_exec_statement(pg, &sql_stmt, params);
	if (PQresultStatus(res) != PGRES_TUPLES_OK && PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		(void) pg_ok(pg, res, PGRES_TUPLES_OK, "--sql");
		o = pg_conn_lost(pg) ? LOST : record_failure(pg, cfg, id, res);
		goto out;
	}
	PQclear(res);
	/* COMMIT can fail too (a deferred constraint, a serialization failure) */
	res = PQexecParams(pg, "COMMIT", 0, NULL, NULL, NULL, NULL, 0);
	if (PQresultStatus(res) == PGRES_COMMAND_OK)
	{
		o = APPLIED;
		crash_point("after-commit");
	}
	else
	{
		(void) pg_ok(pg, res, PGRES_COMMAND_OK, "COMMIT");
		o = pg_conn_lost(pg) ? LOST : record_failure(pg, cfg, id, res);
	}
out:
	PQclear(res);
	args_free(&a);
	return o;
}

/* Did a statement of the batch come back as `want` (errors stay quiet)? */
static bool
quiet_result(PGresult *res, ExecStatusType want, PGresult **out)
{
	ExecStatusType got = PQresultStatus(res);
	bool		ok = got == want || (want == PGRES_TUPLES_OK && got == PGRES_COMMAND_OK);

	if (ok && out != NULL)
		*out = res;
	else
		PQclear(res);
	return ok;
}

/* The same for a statement without parameters. */
static bool
quiet_ok(PGconn *pg, const char *sql, ExecStatusType want)
{
	return quiet_result(PQexecParams(pg, sql, 0, NULL, NULL, NULL, NULL, 0), want, NULL);
}

/*
 * Apply the n messages of a fetch (ids[i] its Nats-Msg-Id, all with
 * JSON payloads) in one transaction: each claimed and, if new, applied,
 * then one COMMIT for all, so that a batch pays for one commit (one WAL
 * flush), not one per message.  Their outcomes in out[]: APPLIED (new),
 * DUPLICATE, BUSY or DEAD as eo_claim said.  Returns false, with nothing
 * of the batch committed, if any statement failed or COMMIT was refused:
 * the caller then applies each message on its own (apply_one), where a
 * failure is recorded against that message alone.
 */
static bool
apply_batch(PGconn *pg, const Config *cfg, natsMsg **msgs, const char **ids, int n, Outcome *out)
{
	bool		ok = quiet_ok(pg, "BEGIN", PGRES_COMMAND_OK);

	for (int i = 0; ok && i < n; i++)
	{
		const char *claim_params[2] = {ids[i], cfg->scope};
		PGresult   *res = NULL;
		Args		a;
		const char *status;

		ok = quiet_result(pg_exec_statement(pg, &claim_stmt, claim_params), PGRES_TUPLES_OK, &res);
		if (!ok)
			break;
		status = PQgetvalue(res, 0, 0);
		out[i] = strcmp(status, "claimed") == 0 ? APPLIED :
			strcmp(status, "duplicate") == 0 ? DUPLICATE : strcmp(status, "busy") == 0 ? BUSY : DEAD;
		PQclear(res);
		if (out[i] != APPLIED)
			continue;
		(void) args_make(&a, msgs[i], ids[i]);
		ok = quiet_result(pg_exec_statement(pg, &sql_stmt, a.params), PGRES_TUPLES_OK, NULL);
		args_free(&a);
	}
	if (ok)
		ok = quiet_ok(pg, "COMMIT", PGRES_COMMAND_OK);
	else if (!pg_conn_lost(pg))
		(void) quiet_ok(pg, "ROLLBACK", PGRES_COMMAND_OK);
	if (ok)
		crash_point("after-commit");
	return ok;
}

/* Tell JetStream what became of the message. */
static void
answer(natsMsg *msg, Outcome o, const char *id, long long *applied)
{
	natsStatus	s = NATS_OK;

	switch (o)
	{
		case APPLIED:
			(*applied)++;
			/* fall through */
		case DUPLICATE:
			/*
			 * No need to wait for the server to confirm the ack: if it is
			 * lost, the message comes back and eo_claim says duplicate.
			 */
			s = natsMsg_Ack(msg, NULL);
			break;
		case BUSY:
		case FAILED_RETRY:
			s = natsMsg_NakWithDelay(msg, RETRY_MS, NULL);
			break;
		case DEAD:
			log_msg("error", "event %s is dead (eo.max_attempts failures, or a final one):"
					" JetStream will not deliver it again; see eo_status('%s')", id, id);
			/* fall through */
		case REFUSED:
			s = natsMsg_Term(msg, NULL);
			break;
		case LOST:
			break;				/* JetStream delivers it again after AckWait */
	}
	if (s != NATS_OK)
		log_msg("warning", "JetStream did not take the answer for event %s: %s"
				" (it will deliver the message again; eo_claim says duplicate)",
				id, nats_error(s));
}

/*
 * The subject the durable consumer takes: --filter, or else the stream's
 * subject if it has one (a stream of several needs --filter).  malloc'd.
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

static natsSubscription *
subscribe(jsCtx *js, const Config *cfg)
{
	natsSubscription *sub = NULL;
	jsSubOptions so;
	jsErrCode	code = 0;
	char	   *filter = filter_of(js, cfg);
	natsStatus	s;

	if (filter == NULL)
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
 * The messages of one fetch: those without a Nats-Msg-Id or with a
 * payload that cannot be JSON are answered at once; the rest are applied
 * as one batch (apply_batch), or, if that fails, one by one.  Answers go
 * to JetStream only after the transaction that decided them committed.
 */
static void
apply_list(PGconn *pg, const Config *cfg, natsMsgList *list, long long *applied)
{
	natsMsg   **msgs = calloc((size_t) list->Count + 1, sizeof(natsMsg *));
	const char **ids = calloc((size_t) list->Count + 1, sizeof(char *));
	Outcome    *out = calloc((size_t) list->Count + 1, sizeof(Outcome));
	int			n = 0;

	for (int i = 0; i < list->Count; i++)
	{
		natsMsg    *msg = list->Msgs[i];
		const char *id = NULL;
		Args		a;

		if (natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) != NATS_OK || id == NULL)
		{
			/* not ours, or headers the library could not read: leave it to a person */
			log_msg("error", "a message on \"%s\" has no Nats-Msg-Id, so it cannot be claimed;"
					" it is not acknowledged (JetStream offers it again in a minute)",
					natsMsg_GetSubject(msg));
			natsMsg_NakWithDelay(msg, 60000, NULL);
			continue;
		}
		if (!args_make(&a, msg, id))
		{
			answer(msg, REFUSED, id, applied);
			continue;
		}
		args_free(&a);
		msgs[n] = msg;
		ids[n++] = id;
	}
	if (n > 0 && apply_batch(pg, cfg, msgs, ids, n, out))
		for (int i = 0; i < n; i++)
			answer(msgs[i], out[i], ids[i], applied);
	else
		for (int i = 0; i < n && !stop_requested && !pg_conn_lost(pg); i++)
			answer(msgs[i], apply_one(pg, cfg, msgs[i], ids[i]), ids[i], applied);
	/* after a lost connection the rest come back after AckWait */
	free(msgs);
	free(ids);
	free(out);
}

int
apply_main(const Config *cfg)
{
	natsConnection *nc = nats_connect(cfg);
	jsCtx	   *js = NULL;
	natsSubscription *sub = NULL;
	PGconn	   *pg = NULL;
	long long	applied = 0;
	int			rc = 0;

	if (nc == NULL || natsConnection_JetStream(&js, nc, NULL) != NATS_OK ||
		(sub = subscribe(js, cfg)) == NULL)
		return 1;
	sql_stmt.sql = cfg->sql;
	log_msg("info", "applying stream \"%s\" (durable \"%s\")", cfg->stream, cfg->durable);
	while (!stop_requested)
	{
		natsMsgList list = {0};
		natsStatus	s;

		if ((pg = pg_ensure(pg, cfg)) == NULL)
			break;
		s = natsSubscription_Fetch(&list, sub, cfg->batch, 2000, NULL);
		if (s == NATS_TIMEOUT && cfg->once)
			break;
		if (s != NATS_OK && s != NATS_TIMEOUT)
		{
			log_msg("warning", "fetching from JetStream: %s", nats_error(s));
			sleep_ms(1000);
		}
		apply_list(pg, cfg, &list, &applied);
		natsMsgList_Destroy(&list);
	}
	log_msg("info", "stopping: %lld events applied", applied);
	PQfinish(pg);
	natsSubscription_Destroy(sub);
	jsCtx_Destroy(js);
	natsConnection_Destroy(nc);
	return rc;
}
