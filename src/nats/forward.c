/*-------------------------------------------------------------------------
 * forward.c
 *	  eo_nats forward: one consumer group of an outbox delivered to NATS
 *	  JetStream, at least once, deduplicated there by event id.
 *
 * The loop.  Fetch a page (eo_relay_fetch, its own transaction: the
 * next events of every free slot of the group, up to --max-events, each
 * slot's with a lease token of its own), publish its events to JetStream
 * with header Nats-Msg-Id = the event id, wait for JetStream's
 * acknowledgement (PubAck) of each, then acknowledge each slot's part to
 * eo (eo_relay_ack per token).  While events come, a page delivered whole
 * is acknowledged in the transaction of the next fetch, ahead of it (one
 * commit a page, not two: see fetch_in_one).  A forwarder killed anywhere in between
 * loses nothing: the page's lease ends, the page comes back, the events
 * are published again and JetStream drops the copies it already stored
 * (within the stream's duplicate window, which must outlast a lease).
 * Several forwarders of one group share its slots, as relays do.
 *
 * Order.  A page holds each slot's events in seq order, and an aggregate's
 * events are all in one slot.  They are published in waves: wave k holds
 * the k-th event of every aggregate of the page, and the next wave starts
 * only once every event of this one was acknowledged, so no event is
 * published before the one before it in its aggregate was stored.  Events
 * of different aggregates are in flight together.
 *
 * Failures.  An event JetStream does not acknowledge (no stream takes the
 * subject, the stream refuses it, the payload is over the server's
 * max_payload, no answer in --ack-wait) is logged with its id and cause;
 * its aggregate's later events are not published.  That slot's part is
 * then acknowledged up to its first event not delivered (eo_relay_ack
 * with upto_seq), so what was delivered is not handed out again, and the
 * rest comes back at the slot's next fetch, after a backoff.  The other
 * slots' parts are acknowledged whole: they are not held up.  Losing PostgreSQL or NATS: reconnect with backoff; nothing
 * is held meanwhile (a fetch holds its slot's row lock only for its own
 * statement), so claims, emits and eo's maintenance never wait for NATS.
 *
 * Threads.  libnats calls on_puback on a thread of its own; it only
 * records the outcome under `lock`.  Everything else, libpq included,
 * runs on the main thread.
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE			/* strcasestr */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eo_nats.h"

/*
 * A page, each event with its headers as "key<TAB>value" lines: only keys
 * that can be NATS header names (printable ASCII, no ':' or space) and
 * are not reserved (Nats-*, the library's and server's, and no name that
 * holds "nats-" at all, see natsmsg.c; Eo-*, ours); a
 * value as its string if it is a JSON string without CR or LF, else as
 * its JSON text.  The whole object also goes as Eo-Headers, so nothing a
 * producer wrote is lost and no header can make an event undeliverable.
 */
#define FETCH_COLUMNS \
	"SELECT lease_token, seq, id::text, aggregatetype, aggregateid, type," \
	" coalesce(payload::text, 'null'), headers::text," \
	" to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),"
#define FETCH_FROM " FROM @eo.eo_relay_fetch($1, $2, $3, make_interval(secs => $4), $5, true)"
#define FETCH_SQL FETCH_COLUMNS \
	" CASE WHEN jsonb_typeof(headers) = 'object' THEN" \
	"  (SELECT string_agg(h.key || E'\\t' || CASE WHEN jsonb_typeof(h.value) = 'string'" \
	"     AND h.value #>> '{}' !~ E'[\\r\\n]' THEN h.value #>> '{}' ELSE h.value::text END," \
	"     E'\\n' ORDER BY h.key)" \
	"   FROM jsonb_each(headers) h" \
	"   WHERE h.key ~ '^[!-9;-~]+$' AND h.key !~* '(nats-|^eo-)') END" FETCH_FROM

/*
 * The same with the lines made by eo 0.4.0's eo_relay_header_lines, which
 * follows the same rules (ordering by the keys' bytes, not the collation):
 * the subquery per event cost 100-130 µs of server CPU a page of 7.
 */
#define FETCH_SQL_LINES FETCH_COLUMNS " @eo.eo_relay_header_lines(headers)" FETCH_FROM

/*
 * Every parameter and literal typed (OIDs: text 25, int4 23, int8 20,
 * float8 701, interval 1186, int8[] 1016): an untyped one would let an
 * overload of eo's function that takes text there win over eo's own.
 */
static const Oid fetch_types[5] = {25, 25, 23, 701, 23};
static const Oid ack_types[4] = {25, 25, 20, 20};
static const Oid ack_pages_types[3] = {25, 25, 1016};
static const Oid wait_types[3] = {25, 25, 1186};

static PgStatement fetch_stmt = {FETCH_SQL, 5, fetch_types};
static PgStatement fetch_lines_stmt = {FETCH_SQL_LINES, 5, fetch_types};
static PgStatement ack_stmt = {"SELECT @eo.eo_relay_ack($1, $2, $3)", 3, ack_types};
static PgStatement ack_upto_stmt = {"SELECT @eo.eo_relay_ack($1, $2, $3, $4)", 4, ack_types};
static PgStatement ack_pages_stmt = {"SELECT @eo.eo_relay_ack_pages($1, $2, $3)", 3,
ack_pages_types};
static PgStatement ack_all_stmt = {"SELECT pg_catalog.sum(@eo.eo_relay_ack($1, $2, t))"
" FROM pg_catalog.unnest($3) t", 3, ack_pages_types};
static PgStatement wait_stmt = {"SELECT @eo.eo_relay_wait($1, '5 s'::pg_catalog.interval,"
" $2, $3)", 3, wait_types};
/*
 * While a page waits to be acknowledged with the next fetch: no longer than
 * the linger and ACK_WAIT_MS more ($4), so that the acknowledgement comes
 * soon after events stop coming.
 */
static const Oid wait_acking_types[4] = {25, 25, 1186, 1186};
static PgStatement wait_acking_stmt = {"SELECT @eo.eo_relay_wait($1, $4, $2, $3)", 4,
wait_acking_types};
#define ACK_WAIT_MS 200
static PgStatement wait_plain_stmt = {"SELECT @eo.eo_relay_wait($1,"
" '5 s'::pg_catalog.interval)", 1, wait_types};

typedef enum
{
	EV_WAITING,					/* not published yet */
	EV_IN_FLIGHT,
	EV_STORED,					/* acknowledged by JetStream */
	EV_FAILED,
	EV_HELD						/* an earlier event of its aggregate failed */
} EventState;

typedef struct Page
{
	PGresult   *res;
	int			n;
	Event	   *ev;
	EventState *state;
	char	  **cause;			/* of EV_FAILED, malloc'd */
	int		   *wave;			/* the event's rank in its aggregate */
	int			duplicates;		/* acknowledged as already stored */
} Page;

/* Slot parts of a page to acknowledge whole: their tokens and events. */
typedef struct Acks
{
	int			n;
	long long  *token;
	int		   *events;
	int			total;
} Acks;

typedef struct Forwarder
{
	const Config *cfg;
	PGconn	   *pg;
	natsConnection *nc;
	jsCtx	   *js;
	int64_t		max_payload;
	pthread_mutex_t lock;		/* guards page->state/cause during a wave */
	Page	   *page;			/* the page whose wave is in flight */
	bool		group_wait;		/* eo_relay_wait with the group exists (0.3.0) */
	bool		ack_pages;		/* so does eo_relay_ack_pages */
	Linger		linger;			/* the wait's, after the bell (linger.c) */
	Acks		pending;		/* a page delivered whole, not acknowledged
								 * yet: it goes with the next fetch */
	long long	events;			/* delivered since start */
	long long	pages;
	long long	not_delivered;	/* events that failed (each try counted) */
	bool		failed;			/* anything failed: --once exits 1 */
	int			stop_code;		/* >= 0: stop with this exit code */
} Forwarder;

/*
 * After a relay call failed: a passing trouble is waited out (the caller
 * backs off); a mistake in the set-up (no such outbox or group, a group
 * of a role this one is not a member of, eo's functions not executable
 * or missing, a WAL-mode outbox) stops the forwarder with EO_EXIT_CONFIG.
 * Nothing is acknowledged that JetStream did not confirm, either way.
 */
static void
relay_call_failed(Forwarder *f, PGresult *res, const char *what)
{
	f->failed = true;
	if (pg_error_kind(f->pg, res, BLAME_NONE) != ERR_CONFIG)
		return;
	log_msg("error", "stopping: %s failed with %s, which waiting will not mend; fix it (see"
			" the line before) and start eo_nats again: nothing was acknowledged that"
			" JetStream did not store", what, sqlstate_of(res));
	f->stop_code = EO_EXIT_CONFIG;
}

/*
 * Is this a stream's PubAck: a stream named (the one --stream names, if
 * given) and a sequence?  Any client that may publish to the reply
 * subject can answer a message no stream took; only a stream's
 * acknowledgement lets the page be acknowledged to eo.
 */
static bool
puback_from_stream(Forwarder *f, const jsPubAck *pa)
{
	if (pa->Stream == NULL || pa->Stream[0] == '\0' || pa->Sequence == 0)
		return false;
	return f->cfg->stream == NULL || strcmp(pa->Stream, f->cfg->stream) == 0;
}

/* libnats' thread: record what JetStream said about one message. */
static void
on_puback(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
	Forwarder  *f = closure;
	const char *id = NULL;

	pthread_mutex_lock(&f->lock);
	if (f->page != NULL && natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) == NATS_OK)
	{
		Page	   *p = f->page;

		for (int i = 0; i < p->n; i++)
		{
			if (p->state[i] != EV_IN_FLIGHT || strcmp(p->ev[i].id, id) != 0)
				continue;
			if (pa != NULL && !puback_from_stream(f, pa))
			{
				char		cause[300];

				snprintf(cause, sizeof(cause), "the acknowledgement came from \"%s\", not from"
						 " stream \"%s\" (no stream stored it, or another client answered)",
						 pa->Stream ? pa->Stream : "", f->cfg->stream ? f->cfg->stream : "a stream");
				p->state[i] = EV_FAILED;
				p->cause[i] = strdup(cause);
			}
			else if (pa != NULL)
			{
				p->state[i] = EV_STORED;
				p->duplicates += pa->Duplicate ? 1 : 0;
			}
			else if (pae != NULL && (pae->Err == NATS_NO_RESPONDERS ||
									 (pae->ErrText && strcasestr(pae->ErrText, "no responders"))))
			{
				char		cause[300];

				snprintf(cause, sizeof(cause), "no stream takes subject \"%s\" (%s)",
						 natsMsg_GetSubject(msg), natsStatus_GetText(pae->Err));
				p->state[i] = EV_FAILED;
				p->cause[i] = strdup(cause);
			}
			else
			{
				p->state[i] = EV_FAILED;
				p->cause[i] = strdup(pae && pae->ErrText && pae->ErrText[0]
									 ? pae->ErrText
									 : natsStatus_GetText(pae ? pae->Err : NATS_ERR));
			}
			break;
		}
	}
	pthread_mutex_unlock(&f->lock);
	natsMsg_Destroy(msg);
}

/* ---- the page ---- */

static bool ack_tokens(Forwarder *f, const char *tokens);

/* p->res, a fetch's rows, into the page's events. */
static void
page_read(Page *p)
{
	p->n = PQntuples(p->res);
	if (p->n == 0)
		return;
	p->ev = calloc(p->n, sizeof(Event));
	p->state = calloc(p->n, sizeof(EventState));
	p->cause = calloc(p->n, sizeof(char *));
	p->wave = calloc(p->n, sizeof(int));
	for (int i = 0; i < p->n; i++)
	{
		Event	   *e = &p->ev[i];

		e->token = atoll(PQgetvalue(p->res, i, 0));
		e->seq = atoll(PQgetvalue(p->res, i, 1));
		e->id = PQgetvalue(p->res, i, 2);
		e->aggregatetype = PQgetvalue(p->res, i, 3);
		e->aggregateid = PQgetvalue(p->res, i, 4);
		e->type = PQgetvalue(p->res, i, 5);
		e->payload = PQgetvalue(p->res, i, 6);
		e->headers = PQgetisnull(p->res, i, 7) ? NULL : PQgetvalue(p->res, i, 7);
		e->created_at = PQgetvalue(p->res, i, 8);
		e->header_lines = PQgetisnull(p->res, i, 9) ? NULL : PQgetvalue(p->res, i, 9);
		/* its rank in its aggregate: the earlier events of the same one */
		for (int j = i - 1; j >= 0; j--)
			if (strcmp(p->ev[j].aggregateid, e->aggregateid) == 0)
			{
				p->wave[i] = p->wave[j] + 1;
				break;
			}
	}
}

static PgStatement *
fetch_statement(void)
{
	return pg_eo_at_least(0, 4) ? &fetch_lines_stmt : &fetch_stmt;
}

/* The fetch on its own: its statement is its transaction. */
static bool
fetch_plain(Forwarder *f, Page *p, const char *const *params)
{
	p->res = pg_exec_statement(f->pg, fetch_statement(), params);
	if (!pg_ok(f->pg, p->res, PGRES_TUPLES_OK, "eo_relay_fetch"))
	{
		relay_call_failed(f, p->res, "eo_relay_fetch");
		PQclear(p->res);
		p->res = NULL;
		return false;
	}
	page_read(p);
	return true;
}

static void wait_for_events(Forwarder *f);
static void acks_free(Acks *a);
static char *acks_text(const Acks *a);
static bool ack(Forwarder *f, long long token, long long upto);

/*
 * The pending acknowledgement on its own (a fetch with it failed): whole,
 * else part by part (a lease that ended fails only its own part).
 */
static void
flush_pending(Forwarder *f)
{
	char	   *tokens;
	int			stop_code;

	if (f->pending.n == 0)
		return;
	tokens = acks_text(&f->pending);
	stop_code = f->stop_code;	/* a stop another call asked for: acknowledge still */
	if (ack_tokens(f, tokens))
		f->events += f->pending.total;
	else
		for (int i = 0; i < f->pending.n && f->stop_code == stop_code && !pg_conn_lost(f->pg); i++)
			if (ack(f, f->pending.token[i], -1))
				f->events += f->pending.events[i];
	free(tokens);
	acks_free(&f->pending);
}

/* The linger of the next wait, as an interval's text. */
static void
linger_text(Forwarder *f, char *buf, size_t size)
{
	snprintf(buf, size, "%d ms", linger_ms(&f->linger));
}

/* The first of the n steps of a pipeline that did not answer rows, or -1. */
static int
first_failed(PGresult **res, int n)
{
	for (int i = 0; i < n; i++)
		if (PQresultStatus(res[i]) != PGRES_TUPLES_OK)
			return i;
	return -1;
}

/*
 * The wait for new events (if `wait`: see wait_for_events), the last
 * page's acknowledgement (if one is pending) and the fetch of the next,
 * in one transaction sent in one round trip: eo_relay_wait,
 * eo_relay_ack_pages, the fetch, then Sync, which commits them (the
 * statements of a pipeline before its Sync are one transaction; the
 * session is read committed, set at connect).  A page costs the database
 * one transaction and one commit, with its WAL flush, where it cost three
 * transactions, two of them with a commit's flush, and three round trips
 * (docs/performance.md); no BEGIN and COMMIT of its own, which cost two
 * statements more a page.  The wait comes first, before anything is
 * locked or written: its transaction holds nothing while it sleeps.  The
 * acknowledgement's writes are the fetch's to see (a statement after
 * them); a fetch in a transaction that wrote slot rows before it is one
 * eo_relay_fetch serves like any other.  The answers fit the pipeline
 * (pgpipe.c): only the fetch's is large, and it is the last.  If anything
 * fails, nothing of it holds (the Sync rolls the transaction back): the
 * acknowledgement is made again on its own, and the fetch again unless it
 * was the fetch that failed or a stop cancelled the wait.  A commit that
 * fails at the Sync fails the pipeline: the acknowledgement stays pending,
 * for the next fetch, unless the session is lost (and its leases with it).
 */
static bool
fetch_in_one(Forwarder *f, Page *p, const char *const *params, bool wait)
{
	char		linger[32];
	char		timeout[32];
	char	   *tokens = acks_text(&f->pending);
	const char *wait_params[4] = {f->cfg->outbox, f->cfg->group, linger, timeout};
	const char *ack_params[3] = {f->cfg->outbox, f->cfg->group, tokens};
	PgStep		steps[3];
	PGresult   *res[3];
	int			n = 0;
	int			wait_at = -1;
	int			ack_at = -1;
	int			failed;
	bool		ok;

	linger_text(f, linger, sizeof(linger));
	snprintf(timeout, sizeof(timeout), "%d ms", linger_ms(&f->linger) + ACK_WAIT_MS);
	if (wait)
	{
		wait_at = n;
		steps[n++] = (PgStep) {f->pending.n > 0 ? &wait_acking_stmt : &wait_stmt, NULL, wait_params};
	}
	if (f->pending.n > 0)
	{
		ack_at = n;
		steps[n++] = (PgStep) {&ack_pages_stmt, NULL, ack_params};
	}
	steps[n++] = (PgStep) {fetch_statement(), NULL, params};
	/* prepared first (once a session): a stop's cancel is for the wait, not a PREPARE */
	for (int i = 0; i < n; i++)
		pg_statement_prepare(f->pg, steps[i].st);
	/* a stop cancels the wait: it would sleep up to 5 s */
	ok = (!wait || stop_cancels(f->pg)) && pg_pipeline(f->pg, steps, n, res);
	if (wait)
		(void) stop_cancels(NULL);
	free(tokens);
	if (!ok)
	{
		/* a stop before it, a commit that failed, or the session is gone with its leases */
		if (f->pg != NULL && pg_conn_lost(f->pg))
			acks_free(&f->pending);
		return false;
	}
	failed = first_failed(res, n);
	if (failed < 0)
	{
		f->events += f->pending.total;
		acks_free(&f->pending);
		p->res = res[n - 1];
		res[n - 1] = NULL;
	}
	else if (failed != ack_at && !stop_requested)
	{
		/* an acknowledgement that failed says why when made again, below */
		const char *what = failed == wait_at ? "eo_relay_wait" : "eo_relay_fetch";

		(void) pg_ok(f->pg, res[failed], PGRES_TUPLES_OK, what);
		relay_call_failed(f, res[failed], what);
	}
	for (int i = 0; i < n; i++)
		PQclear(res[i]);
	if (failed < 0)
	{
		page_read(p);
		return true;
	}
	flush_pending(f);
	/* the acknowledgement failed and the fetch did not run: it runs now */
	if (failed == ack_at && f->stop_code < 0 && !stop_requested && !pg_conn_lost(f->pg))
		return fetch_plain(f, p, params);
	return false;
}

/*
 * The next page, after waiting for new events if `wait`.  With a page
 * waiting to be acknowledged (eo 0.3.0 or later: may_ack_with_fetch), in
 * one transaction with the wait and that acknowledgement (fetch_in_one);
 * else the wait and the fetch each on its own: at a trickle, the two in
 * one transaction cost the relay's backend 1.08x the CPU per event
 * (bench/nats.sh at 5 events/s, 3 rounds, twice), for no commit saved.
 */
static bool
fetch(Forwarder *f, Page *p, bool wait)
{
	char		max[16];
	char		lease[16];
	char		slots[16];
	const char *params[5] = {f->cfg->outbox, f->cfg->group, max, lease, slots};

	snprintf(max, sizeof(max), "%d", f->cfg->max_events);
	snprintf(lease, sizeof(lease), "%d", f->cfg->lease_secs);
	snprintf(slots, sizeof(slots), "%d", f->cfg->slots);
	memset(p, 0, sizeof(*p));
	if (f->pending.n > 0)
		return fetch_in_one(f, p, params, wait);
	if (wait)
	{
		wait_for_events(f);
		if (stop_requested || f->stop_code >= 0)
			return false;
	}
	return fetch_plain(f, p, params);
}

static void
page_free(Page *p)
{
	for (int i = 0; i < p->n; i++)
		free(p->cause[i]);
	free(p->ev);
	free(p->state);
	free(p->cause);
	free(p->wave);
	PQclear(p->res);
	memset(p, 0, sizeof(*p));
}

static void
fail(Page *p, int i, const char *cause)
{
	p->state[i] = EV_FAILED;
	p->cause[i] = strdup(cause);
}

/* Publish event i of the page (async); false if it failed at once. */
static bool
publish(Forwarder *f, Page *p, int i)
{
	char		why[512];
	natsMsg    *msg = eo_event_msg(f->cfg, &p->ev[i], f->max_payload, why, sizeof(why));
	jsPubOptions po;
	natsStatus	s;

	if (msg == NULL)
	{
		fail(p, i, why);
		return false;
	}
	jsPubOptions_Init(&po);
	po.ExpectStream = f->cfg->stream;
	p->state[i] = EV_IN_FLIGHT;
	s = js_PublishMsgAsync(f->js, &msg, &po);
	natsMsg_Destroy(msg);		/* no effect if the library took it */
	if (s != NATS_OK)
	{
		fail(p, i, nats_error(s));
		return false;
	}
	return true;
}

/*
 * Wait for the wave's acknowledgements, --ack-wait at most, or half a
 * second once a stop was asked for (what is unconfirmed then is not
 * acknowledged to eo: the page comes back to the next forwarder);
 * what is still missing failed.
 */
static void
await_wave(Forwarder *f, Page *p)
{
	jsPubOptions po;
	natsStatus	s = NATS_TIMEOUT;
	int64_t		left = f->cfg->ack_wait_ms;
	bool		stopping = false;

	jsPubOptions_Init(&po);
	while (left > 0)
	{
		if (stop_requested && !stopping)
		{
			stopping = true;
			left = left < 500 ? left : 500;
		}
		po.MaxWait = left < 200 ? left : 200;
		s = js_PublishAsyncComplete(f->js, &po);
		if (s != NATS_TIMEOUT)
			break;
		left -= po.MaxWait;
	}
	if (s != NATS_OK)
	{
		natsMsgList pending;

		/* take back what is unanswered: it is not stored as far as we know */
		if (js_PublishAsyncGetPendingList(&pending, f->js) == NATS_OK)
			natsMsgList_Destroy(&pending);
	}
	pthread_mutex_lock(&f->lock);
	for (int i = 0; i < p->n; i++)
		if (p->state[i] == EV_IN_FLIGHT)
		{
			char		cause[128];

			snprintf(cause, sizeof(cause), "no acknowledgement from JetStream within %d ms (%s)",
					 f->cfg->ack_wait_ms, natsStatus_GetText(s));
			fail(p, i, cause);
		}
	pthread_mutex_unlock(&f->lock);
}

/*
 * Publish the page wave by wave.  An event whose aggregate had one fail
 * before it is held back.
 */
static void
publish_page(Forwarder *f, Page *p)
{
	int			waves = 0;

	for (int i = 0; i < p->n; i++)
		if (p->wave[i] + 1 > waves)
			waves = p->wave[i] + 1;

	pthread_mutex_lock(&f->lock);
	f->page = p;
	pthread_mutex_unlock(&f->lock);
	for (int w = 0; w < waves && !stop_requested; w++)
	{
		for (int i = 0; i < p->n; i++)
		{
			if (p->wave[i] != w)
				continue;
			/* the previous event of its aggregate, if any, must be stored */
			for (int j = i - 1; j >= 0; j--)
				if (strcmp(p->ev[j].aggregateid, p->ev[i].aggregateid) == 0)
				{
					if (p->state[j] != EV_STORED)
						p->state[i] = EV_HELD;
					break;
				}
			if (p->state[i] == EV_WAITING)
				(void) publish(f, p, i);
		}
		await_wave(f, p);
	}
	pthread_mutex_lock(&f->lock);
	f->page = NULL;
	pthread_mutex_unlock(&f->lock);
}

/* ---- acknowledging ---- */

/* eo_relay_ack of one slot's part, whole or (upto >= 0) up to seq upto. */
static bool
ack(Forwarder *f, long long token, long long upto)
{
	char		tok[32];
	char		seq[32];
	const char *params[4] = {f->cfg->outbox, f->cfg->group, tok, seq};
	PGresult   *res;
	bool		ok;

	snprintf(tok, sizeof(tok), "%lld", token);
	snprintf(seq, sizeof(seq), "%lld", upto);
	res = pg_exec_statement(f->pg, upto >= 0 ? &ack_upto_stmt : &ack_stmt, params);
	ok = pg_ok(f->pg, res, PGRES_TUPLES_OK, "eo_relay_ack");
	if (!ok && sqlstate_is(res, "55006"))
		log_msg("warning", "the page's lease (token %lld) ended before it was acknowledged:"
				" another forwarder delivers it again, and JetStream drops the copies",
				token);
	else if (!ok)
		relay_call_failed(f, res, "eo_relay_ack");
	PQclear(res);
	return ok;
}

/*
 * An event not delivered, said once per cause per 30 s (log.c): while
 * NATS is away every event of a backlog fails the same way, each ack-wait.
 */
static void
log_failure(Forwarder *f, Page *p, int i)
{
	char		agg_type[80],
				agg_id[80],
				type[80],
				cause[300],
				key[160];

	f->not_delivered++;
	snprintf(key, sizeof(key), "not delivered: %s", p->cause[i]);
	log_limited(key, "error", "event %s (outbox \"%s\", aggregate \"%s\" \"%s\", type \"%s\", seq %lld)"
			" was not delivered: %s",
			p->ev[i].id, f->cfg->outbox,
			printable(p->ev[i].aggregatetype, agg_type, sizeof(agg_type)),
			printable(p->ev[i].aggregateid, agg_id, sizeof(agg_id)),
			printable(p->ev[i].type, type, sizeof(type)), p->ev[i].seq,
			printable(p->cause[i], cause, sizeof(cause)));
}

/* How many of rows [from, to) (one slot's part) were stored, in order. */
static int
stored_prefix(Page *p, int from, int to)
{
	int			stored = from;

	while (stored < to && p->state[stored] == EV_STORED)
		stored++;
	return stored - from;
}

/*
 * Acknowledge the slot part of the page in rows [from, to) (one token):
 * whole if every event of it was stored, else up to the first that was
 * not.  Returns how many of its events were delivered.
 */
static int
settle_part(Forwarder *f, Page *p, int from, int to)
{
	int			stored = stored_prefix(p, from, to);

	if (stored == to - from)
		return ack(f, p->ev[from].token, -1) ? stored : 0;
	/* up to the first event not delivered; the rest comes back */
	return ack(f, p->ev[from].token, stored > 0 ? p->ev[from + stored - 1].seq : 0) ? stored : 0;
}

/* Every slot part of the page that was stored whole, into *a; how many. */
static int
whole_parts(Page *p, Acks *a)
{
	memset(a, 0, sizeof(*a));
	a->token = malloc(sizeof(long long) * (size_t) (p->n > 0 ? p->n : 1));
	a->events = malloc(sizeof(int) * (size_t) (p->n > 0 ? p->n : 1));
	for (int from = 0, to; from < p->n; from = to)
	{
		for (to = from + 1; to < p->n && p->ev[to].token == p->ev[from].token; to++)
			;
		if (stored_prefix(p, from, to) < to - from)
			continue;
		a->token[a->n] = p->ev[from].token;
		a->events[a->n++] = to - from;
		a->total += to - from;
	}
	return a->n;
}

static void
acks_free(Acks *a)
{
	free(a->token);
	free(a->events);
	memset(a, 0, sizeof(*a));
}

/* The tokens as an int8[] literal, malloc'd. */
static char *
acks_text(const Acks *a)
{
	char	   *text = malloc((size_t) a->n * 24 + 3);
	size_t		len = 0;

	text[len++] = '{';
	for (int i = 0; i < a->n; i++)
		len += (size_t) sprintf(text + len, "%s%lld", i > 0 ? "," : "", a->token[i]);
	strcpy(text + len, "}");
	return text;
}

/*
 * Acknowledge the parts of `tokens` whole in one statement (one
 * transaction, one commit); false if that failed (a token gone stale,
 * say), and then nothing of it was acknowledged.
 */
static bool
ack_tokens(Forwarder *f, const char *tokens)
{
	const char *params[3] = {f->cfg->outbox, f->cfg->group, tokens};
	PGresult   *res;
	bool		ok;

	res = pg_exec_statement(f->pg, f->ack_pages ? &ack_pages_stmt : &ack_all_stmt, params);
	if (f->ack_pages && sqlstate_is(res, "42883"))
	{
		/* eo older than 0.3.0 in this database: one eo_relay_ack per token */
		f->ack_pages = false;
		PQclear(res);
		res = pg_exec_statement(f->pg, &ack_all_stmt, params);
	}
	ok = PQresultStatus(res) == PGRES_TUPLES_OK;
	if (!ok && !sqlstate_is(res, "55006"))	/* a lease ended: said part by part */
	{
		(void) pg_ok(f->pg, res, PGRES_TUPLES_OK, "eo_relay_ack_pages");
		relay_call_failed(f, res, "eo_relay_ack_pages");
	}
	PQclear(res);
	return ok;
}

/*
 * Whether page p, stored whole, may wait for the next fetch to be
 * acknowledged: not with --once (there is none), nor on an eo without
 * eo_relay_ack_pages (0.3.0); and only when the next fetch comes soon: at
 * once (p was full), or after a wait likely to end in a ring.  At a
 * trickle the wait would end in its timeout, and the acknowledgement
 * would cost an empty fetch more than on its own.
 */
static bool
may_ack_with_fetch(Forwarder *f, const Page *p)
{
	if (f->cfg->once || !pg_eo_at_least(0, 3) || f->stop_code >= 0)
		return false;
	return p->n >= f->cfg->max_events ||
		linger_expects_within(&f->linger, linger_ms(&f->linger) + ACK_WAIT_MS);
}

/*
 * After a page: acknowledge what was stored, slot by slot, in order.
 * Returns true if every event was delivered.
 */
static bool
settle(Forwarder *f, Page *p)
{
	int			delivered = 0;
	bool		all = true;
	bool		wholes_acked = true;
	Acks		wholes;

	for (int i = 0; i < p->n; i++)
	{
		if (p->state[i] == EV_FAILED)
			log_failure(f, p, i);
		all = all && p->state[i] == EV_STORED;
	}
	if (all)
		crash_point("after-puback");
	if (whole_parts(p, &wholes) > 0 && all && f->pending.n == 0 && may_ack_with_fetch(f, p))
		f->pending = wholes;	/* with the next fetch (fetch_in_one) */
	else
	{
		if (wholes.n > 0)
		{
			char	   *tokens = acks_text(&wholes);

			wholes_acked = ack_tokens(f, tokens);
			delivered += wholes_acked ? wholes.total : 0;
			free(tokens);
		}
		acks_free(&wholes);
	}
	if (f->stop_code >= 0)
		return false;
	for (int from = 0, to; from < p->n; from = to)
	{
		for (to = from + 1; to < p->n && p->ev[to].token == p->ev[from].token; to++)
			;
		/* the parts left: stored in part, or all of them if that failed */
		if (!wholes_acked || stored_prefix(p, from, to) < to - from)
			delivered += settle_part(f, p, from, to);
	}
	f->events += delivered;
	if (!all)
		f->failed = true;
	else
	{
		f->pages++;
		log_msg("debug", "page of %d events delivered (%d already in JetStream)",
				p->n, p->duplicates);
	}
	return all;
}

/* ---- the loop ---- */

/* The expected stream, if named, must exist; say what it is. */
static bool
check_stream(Forwarder *f)
{
	jsStreamInfo *si = NULL;
	jsErrCode	code = 0;
	natsStatus	s;

	if (f->cfg->stream == NULL)
		return true;
	s = js_GetStreamInfo(&si, f->js, f->cfg->stream, NULL, &code);
	if (s != NATS_OK)
	{
		log_msg("error", "stream \"%s\": %s; stopping", f->cfg->stream,
				s == NATS_NOT_FOUND ? "it does not exist (eo_nats stream-add makes it)"
				: nats_error(s));
		return false;
	}
	if (si->Config->Duplicates / 1000000000LL < f->cfg->lease_secs * 2)
		log_msg("warning", "stream \"%s\" drops copies of an event only within %lld s,"
				" less than twice the page lease (%d s): an event whose page came back"
				" after a crash may be stored twice (eo_nats stream-update --duplicate-window"
				" changes it)",
				f->cfg->stream, (long long) (si->Config->Duplicates / 1000000000LL),
				f->cfg->lease_secs);
	jsStreamInfo_Destroy(si);
	return true;
}

static bool
nats_setup(Forwarder *f)
{
	jsOptions	jo;
	int			rc;
	natsStatus	s;

	f->nc = nats_connect(f->cfg, &rc);
	if (f->nc == NULL)
	{
		f->stop_code = rc;
		return false;
	}
	jsOptions_Init(&jo);
	jo.PublishAsync.AckHandler = on_puback;
	jo.PublishAsync.AckHandlerClosure = f;
	jo.PublishAsync.MaxPending = f->cfg->max_events;
	jo.Wait = f->cfg->ack_wait_ms;
	if ((s = natsConnection_JetStream(&f->js, f->nc, &jo)) != NATS_OK)
	{
		log_msg("error", "JetStream: %s", nats_error(s));
		f->stop_code = EO_EXIT_FAILED;
		return false;
	}
	f->max_payload = natsConnection_GetMaxPayload(f->nc);
	if (!check_stream(f))
	{
		f->stop_code = EO_EXIT_CONFIG;
		return false;
	}
	return true;
}

/*
 * A connection the library gave up on (closed: the server refused a
 * protocol line, say) is made again from scratch, as at the start.
 */
static bool
nats_reset(Forwarder *f)
{
	log_msg("warning", "the connection to NATS was closed; making a new one");
	jsCtx_Destroy(f->js);
	natsConnection_Destroy(f->nc);
	f->js = NULL;
	f->nc = NULL;
	return nats_setup(f);
}

/*
 * Wait for new events (eo_relay_wait), at most a few seconds, or until a
 * lease of the group can be taken over; then --linger-ms more, so that
 * the next page holds more than one commit's events.  On its own: with an
 * eo older than 0.3.0 (see fetch_in_one).
 */
static void
wait_for_events(Forwarder *f)
{
	char		linger[32];
	const char *params[3] = {f->cfg->outbox, f->cfg->group, linger};
	PGresult   *res;

	linger_text(f, linger, sizeof(linger));
	/* a stop cancels the wait: it would sleep up to 5 s */
	if (!stop_cancels(f->pg))
		return;
	res = pg_exec_statement(f->pg, f->group_wait ? &wait_stmt : &wait_plain_stmt, params);
	(void) stop_cancels(NULL);
	if (f->group_wait && sqlstate_is(res, "42883"))
	{
		/* eo older than 0.3.0 in this database (not updated yet): the plain doorbell */
		log_msg("warning", "this database's eo has no eo_relay_wait with a group (0.3.0):"
				" waiting without it (no --linger-ms) until ALTER EXTENSION eo UPDATE");
		f->group_wait = false;
	}
	else if (!stop_requested && !pg_ok(f->pg, res, PGRES_TUPLES_OK, "eo_relay_wait"))
		relay_call_failed(f, res, "eo_relay_wait");
	PQclear(res);
}

/* The exit status: a stop's, or 1 if --once met any failure. */
static int
exit_status(Forwarder *f)
{
	if (f->stop_code >= 0)
		return f->stop_code;
	return f->cfg->once && f->failed ? EO_EXIT_FAILED : EO_EXIT_OK;
}

int
forward_main(const Config *cfg)
{
	Forwarder	f;
	int			failures = 0;
	bool		caught_up = false;	/* the last page may have emptied the group */
	char		why[256];

	if (!subject_template_valid(cfg->subject, why, sizeof(why)))
	{
		log_msg("error", "--subject \"%s\": %s", cfg->subject, why);
		return EO_EXIT_USAGE;
	}
	memset(&f, 0, sizeof(f));
	f.cfg = cfg;
	f.group_wait = true;
	f.ack_pages = true;
	f.stop_code = -1;
	linger_init(&f.linger, cfg->linger_ms);
	pthread_mutex_init(&f.lock, NULL);
	if (nats_setup(&f))
		log_msg("info", "forwarding consumer group \"%s\" of outbox \"%s\" to subjects \"%s\"",
				cfg->group, cfg->outbox, cfg->subject);
	while (!stop_requested && f.stop_code < 0)
	{
		Page		p;
		int			rc;
		bool		wait;

		if (f.pending.n > 0 && (f.pg == NULL || pg_conn_lost(f.pg)))
			acks_free(&f.pending);	/* its leases ended with the session */
		if ((f.pg = pg_ensure(f.pg, cfg, &rc)) == NULL)
		{
			f.stop_code = rc;
			break;
		}
		if (natsConnection_IsClosed(f.nc))
		{
			flush_pending(&f);	/* what was stored, before a reconnect that may take long */
			if (!nats_reset(&f))
				break;
		}
		/*
		 * After an empty page, or one delivered whole and not full: wait
		 * before the fetch, not after an empty one.  eo_relay_wait (0.3.0)
		 * comes back at once unless the last fetch handed out everything
		 * committed before it and no commit rang since.
		 */
		wait = caught_up;
		caught_up = false;
		if (!fetch(&f, &p, wait))
		{
			if (cfg->once && failures >= 4)
				break;
			sleep_ms(backoff_ms(failures++, 10000));
			continue;
		}
		if (p.n == 0)
		{
			page_free(&p);
			if (cfg->once)
				break;
			failures = 0;
			caught_up = true;
			continue;
		}
		linger_saw(&f.linger, p.n);
		publish_page(&f, &p);
		if (settle(&f, &p))
		{
			failures = 0;
			caught_up = f.group_wait && !cfg->once && p.n < cfg->max_events;
		}
		else if (cfg->once && failures >= 4)
		{
			page_free(&p);
			break;				/* exit 1: what failed comes back to the next run */
		}
		else
			sleep_ms(backoff_ms(failures++, 30000));
		page_free(&p);
	}
	if (f.pending.n > 0 && f.pg != NULL && !pg_conn_lost(f.pg))
		flush_pending(&f);
	acks_free(&f.pending);
	log_msg("info", "stopping: %lld events delivered in %lld pages%s", f.events, f.pages,
			f.not_delivered > 0 ? "; some were not (see above): they come back" : "");
	PQfinish(f.pg);
	jsCtx_Destroy(f.js);
	natsConnection_Destroy(f.nc);
	return exit_status(&f);
}
