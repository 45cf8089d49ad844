/*
 * bench/nats/pipeline.c -- the hand-written halves of the NATS pipeline
 * that bench/nats.sh runs against eo_nats: what teams write today.
 *
 *   pipeline relay hand  a FOR UPDATE SKIP LOCKED relay: in one
 *                        transaction, lock up to --batch rows of hand_outbox
 *                        (bigserial id), publish each to JetStream with
 *                        Nats-Msg-Id, wait for every PubAck, DELETE the rows,
 *                        COMMIT; poll every --poll ms when there is nothing.
 *   pipeline relay pgq   the same publisher over PgQ: pgq.next_batch (and
 *                        pgq.ticker() when there is none), get_batch_events,
 *                        publish, wait, pgq.finish_batch, COMMIT.
 *   pipeline consume     a durable pull consumer applying each message in
 *                        its own transaction: INSERT INTO processed (id) ON
 *                        CONFLICT DO NOTHING, the effect if it was new,
 *                        COMMIT, then ack.
 *
 * Every message's payload is the event's JSON; the effect is the same
 * INSERT INTO applied that eo_nats apply runs for eo ($1 id, $3 payload,
 * $5 stored-at), so the three pipelines differ only in what eo replaces.
 * A benchmark aid, not a product: it stops at the first error.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <nats/nats.h>

static const char *pg_conninfo = "";
static const char *nats_url = "nats://127.0.0.1:4222";
static const char *subject = "bench.e";
static const char *stream = "BENCH";
static const char *durable = "hand";
static int	batch = 500;
static int	poll_ms = 50;

static void
die(const char *what, const char *detail)
{
	fprintf(stderr, "pipeline: %s: %s\n", what, detail ? detail : "");
	exit(1);
}

/*
 * Run q (a string literal: its address names it), prepared at its first
 * use: each statement is parsed and planned once per process, as
 * eo_nats forward does with its own (one session per process here).
 */
static PGresult *
sql(PGconn *pg, const char *q, int n, const char *const *params, ExecStatusType want)
{
	static const char *prepared[32];
	static int	nprepared = 0;
	char		name[16];
	int			i = 0;
	PGresult   *res;

	while (i < nprepared && prepared[i] != q)
		i++;
	snprintf(name, sizeof(name), "s%d", i);
	if (i == nprepared)
	{
		if (nprepared == 32)
			die("prepare", "too many statements");
		res = PQprepare(pg, name, q, n, NULL);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			die(q, PQerrorMessage(pg));
		PQclear(res);
		prepared[nprepared++] = q;
	}
	res = PQexecPrepared(pg, name, n, params, NULL, NULL, 0);
	if (PQresultStatus(res) != want)
		die(q, PQerrorMessage(pg));
	return res;
}

static void
run(PGconn *pg, const char *q)
{
	PQclear(sql(pg, q, 0, NULL, PGRES_COMMAND_OK));
}

static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* ---- relay ---- */

static int	failed_acks;

static void
on_puback(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
	if (pa == NULL)
		__atomic_add_fetch(&failed_acks, 1, __ATOMIC_SEQ_CST);
	natsMsg_Destroy(msg);
}

/* Publish rows (id column 0, payload column 1) with Msg-Id prefix+id. */
static void
publish_rows(jsCtx *js, PGresult *res, const char *prefix)
{
	jsPubOptions po;

	for (int i = 0; i < PQntuples(res); i++)
	{
		natsMsg    *m = NULL;
		char		id[64];

		snprintf(id, sizeof(id), "%s%s", prefix, PQgetvalue(res, i, 0));
		if (natsMsg_Create(&m, subject, NULL, PQgetvalue(res, i, 1), PQgetlength(res, i, 1)) != NATS_OK ||
			natsMsgHeader_Set(m, "Nats-Msg-Id", id) != NATS_OK ||
			js_PublishMsgAsync(js, &m, NULL) != NATS_OK)
			die("publish", nats_GetLastError(NULL));
	}
	jsPubOptions_Init(&po);
	po.MaxWait = 10000;
	if (js_PublishAsyncComplete(js, &po) != NATS_OK || failed_acks > 0)
		die("publish", "a message was not acknowledged by JetStream");
}

/* One page of the hand-written relay; false if there was nothing. */
static int
relay_hand(PGconn *pg, jsCtx *js)
{
	char		n[16];
	const char *params[1] = {n};
	PGresult   *res;
	int			rows;

	snprintf(n, sizeof(n), "%d", batch);
	run(pg, "BEGIN");
	res = sql(pg, "SELECT id, payload FROM hand_outbox ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
			  1, params, PGRES_TUPLES_OK);
	rows = PQntuples(res);
	if (rows > 0)
	{
		char	   *ids = malloc((size_t) rows * 21 + 3);
		size_t		len = 0;

		publish_rows(js, res, "h-");
		ids[len++] = '{';
		for (int i = 0; i < rows; i++)
			len += (size_t) sprintf(ids + len, "%s%s", i > 0 ? "," : "", PQgetvalue(res, i, 0));
		strcpy(ids + len, "}");
		PQclear(sql(pg, "DELETE FROM hand_outbox WHERE id = ANY ($1::bigint[])",
					1, (const char *const[]) {ids}, PGRES_COMMAND_OK));
		free(ids);
	}
	PQclear(res);
	run(pg, "COMMIT");
	return rows;
}

/* One batch of the PgQ relay; false if there was none. */
static int
relay_pgq(PGconn *pg, jsCtx *js)
{
	PGresult   *res;
	PGresult   *ev;
	char	   *id;
	int			rows;

	run(pg, "BEGIN");
	res = sql(pg, "SELECT pgq.next_batch('benchq', 'relay')", 0, NULL, PGRES_TUPLES_OK);
	if (PQgetisnull(res, 0, 0))
	{
		PQclear(res);
		run(pg, "COMMIT");
		PQclear(sql(pg, "SELECT pgq.ticker()", 0, NULL, PGRES_TUPLES_OK));
		return 0;
	}
	id = strdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	ev = sql(pg, "SELECT ev_id, ev_data FROM pgq.get_batch_events($1)", 1,
			 (const char *const[]) {id}, PGRES_TUPLES_OK);
	rows = PQntuples(ev);
	publish_rows(js, ev, "q-");
	PQclear(ev);
	PQclear(sql(pg, "SELECT pgq.finish_batch($1)", 1, (const char *const[]) {id}, PGRES_TUPLES_OK));
	run(pg, "COMMIT");
	free(id);
	return rows;
}

static void
relay_main(const char *kind, natsConnection *nc, PGconn *pg)
{
	jsCtx	   *js = NULL;
	jsOptions	jo;
	int			(*page) (PGconn *, jsCtx *) = strcmp(kind, "pgq") == 0 ? relay_pgq : relay_hand;

	jsOptions_Init(&jo);
	jo.PublishAsync.AckHandler = on_puback;
	jo.PublishAsync.MaxPending = batch;
	if (natsConnection_JetStream(&js, nc, &jo) != NATS_OK)
		die("JetStream", nats_GetLastError(NULL));
	for (;;)
		if (page(pg, js) == 0)
			sleep_ms(poll_ms);
}

/* ---- consumer ---- */

static void
stored_at(natsMsg *msg, char *buf, size_t len)
{
	jsMsgMetaData *meta = NULL;
	time_t		secs;
	struct tm	tm;
	char		date[32];

	if (natsMsg_GetMetaData(&meta, msg) != NATS_OK)
		die("metadata", nats_GetLastError(NULL));
	secs = (time_t) (meta->Timestamp / 1000000000LL);
	gmtime_r(&secs, &tm);
	strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S", &tm);
	snprintf(buf, len, "%s.%06lld+00", date, (long long) (meta->Timestamp % 1000000000LL) / 1000);
	jsMsgMetaData_Destroy(meta);
}

static void
apply_one(PGconn *pg, natsMsg *msg)
{
	const char *id = NULL;
	char		stored[48];
	char	   *payload = strndup(natsMsg_GetData(msg), (size_t) natsMsg_GetDataLength(msg));
	PGresult   *res;

	if (natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) != NATS_OK)
		die("message", "no Nats-Msg-Id");
	stored_at(msg, stored, sizeof(stored));
	run(pg, "BEGIN");
	res = sql(pg, "INSERT INTO processed (id) VALUES ($1) ON CONFLICT DO NOTHING", 1,
			  (const char *const[]) {id}, PGRES_COMMAND_OK);
	if (strcmp(PQcmdTuples(res), "1") == 0)
		PQclear(sql(pg, "INSERT INTO applied (id, produced_at, stored_at, applied_at)"
					" VALUES ($1, ($2::jsonb ->> 't')::timestamptz, $3, clock_timestamp())",
					3, (const char *const[]) {id, payload, stored}, PGRES_COMMAND_OK));
	PQclear(res);
	run(pg, "COMMIT");
	natsMsg_Ack(msg, NULL);
	free(payload);
}

static void
consume_main(natsConnection *nc, PGconn *pg)
{
	jsCtx	   *js = NULL;
	natsSubscription *sub = NULL;
	jsSubOptions so;
	jsErrCode	code = 0;

	if (natsConnection_JetStream(&js, nc, NULL) != NATS_OK)
		die("JetStream", nats_GetLastError(NULL));
	jsSubOptions_Init(&so);
	so.Stream = stream;
	so.Config.AckPolicy = js_AckExplicit;
	so.Config.MaxAckPending = batch * 2;
	if (js_PullSubscribe(&sub, js, subject, durable, NULL, &so, &code) != NATS_OK)
		die("subscribe", nats_GetLastError(NULL));
	for (;;)
	{
		natsMsgList list = {0};
		natsStatus	s = natsSubscription_Fetch(&list, sub, batch, 2000, &code);

		if (s == NATS_TIMEOUT)
			continue;
		if (s != NATS_OK)
			die("fetch", nats_GetLastError(NULL));
		for (int i = 0; i < list.Count; i++)
			apply_one(pg, list.Msgs[i]);
		natsMsgList_Destroy(&list);
	}
}

int
main(int argc, char **argv)
{
	static struct option opts[] = {
		{"pg", required_argument, NULL, 'p'},
		{"nats", required_argument, NULL, 'n'},
		{"subject", required_argument, NULL, 's'},
		{"stream", required_argument, NULL, 'S'},
		{"durable", required_argument, NULL, 'd'},
		{"batch", required_argument, NULL, 'b'},
		{"poll", required_argument, NULL, 'w'},
		{NULL, 0, NULL, 0}
	};
	natsConnection *nc = NULL;
	PGconn	   *pg;
	int			c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1)
		switch (c)
		{
			case 'p': pg_conninfo = optarg; break;
			case 'n': nats_url = optarg; break;
			case 's': subject = optarg; break;
			case 'S': stream = optarg; break;
			case 'd': durable = optarg; break;
			case 'b': batch = atoi(optarg); break;
			case 'w': poll_ms = atoi(optarg); break;
			default: return 2;
		}
	if (optind >= argc)
		die("usage", "pipeline relay hand|pgq | pipeline consume  [--pg ...] [--nats ...]");
	pg = PQconnectdb(pg_conninfo);
	if (PQstatus(pg) != CONNECTION_OK)
		die("PostgreSQL", PQerrorMessage(pg));
	if (natsConnection_ConnectTo(&nc, nats_url) != NATS_OK)
		die("NATS", nats_GetLastError(NULL));
	if (strcmp(argv[optind], "relay") == 0 && optind + 1 < argc)
		relay_main(argv[optind + 1], nc, pg);
	else if (strcmp(argv[optind], "consume") == 0)
		consume_main(nc, pg);
	else
		die("usage", "pipeline relay hand|pgq | pipeline consume");
	return 0;
}
