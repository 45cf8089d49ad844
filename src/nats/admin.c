/*-------------------------------------------------------------------------
 * admin.c
 *	  eo_nats's stream and consumer commands: what an operator of eo_nats
 *	  needs of JetStream without another tool (Debian packages no NATS
 *	  command line client), and what the tests read the stream with.
 *
 *	  stream-add:	  a file-backed stream taking --subjects (comma-separated),
 *					  with --max-msg-size and --duplicate-window (default
 *					  120 s); nothing changes if it exists as asked, and an
 *					  existing one with other settings is left alone (said)
 *	  stream-update:  the settings given, changed; the others kept
 *	  stream-info:	  its configuration and state, one "name: value" per line
 *	  stream-delete:  the stream and its messages, with --yes only
 *	  consumer-info:  a durable's settings and state
 *	  consumer-delete: a durable (its position, not the messages)
 *	  dump:			  every message stored, one JSON object per line:
 *					  {"seq":..,"subject":..,"headers":{..},"data":".."}
 *
 * Exit status: 0 done, 1 NATS refused or the object is not there, and
 * nats_connect's codes for the connection.
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eo_nats.h"

#define NS_PER_SEC 1000000000LL


/* The stream's info, or NULL after a line saying why. */
static jsStreamInfo *
stream_get(jsCtx *js, const char *stream)
{
	jsStreamInfo *si = NULL;
	jsErrCode	code = 0;
	natsStatus	s = js_GetStreamInfo(&si, js, stream, NULL, &code);

	if (s != NATS_OK)
	{
		log_msg("error", "stream \"%s\": %s", stream,
				s == NATS_NOT_FOUND ? "it does not exist" : nats_error(s));
		return NULL;
	}
	return si;
}

/* --subjects split at commas into subjects[] (at most 64); the copy to free. */
static char *
split_subjects(const char *list, const char **subjects, int *n)
{
	char	   *copy = strdup(list);
	char	   *save = NULL;

	*n = 0;
	for (char *t = strtok_r(copy, ",", &save); t && *n < 64; t = strtok_r(NULL, ",", &save))
		subjects[(*n)++] = t;
	return copy;
}

/* Does the stream's configuration differ from what cfg asks?  Says how in why. */
static bool
differs(const jsStreamConfig *have, const Config *cfg, char *why, size_t len)
{
	const char *subjects[64];
	int			n;
	char	   *copy = split_subjects(cfg->subjects, subjects, &n);
	int64_t		window = (int64_t) (cfg->duplicate_window_secs ? cfg->duplicate_window_secs : 120) * NS_PER_SEC;
	bool		same = have->SubjectsLen == n;

	for (int i = 0; same && i < n; i++)
		same = strcmp(have->Subjects[i], subjects[i]) == 0;
	free(copy);
	if (!same)
		snprintf(why, len, "other subjects");
	else if (have->Duplicates != window)
		snprintf(why, len, "a duplicate window of %lld s, not %lld s",
				 (long long) (have->Duplicates / NS_PER_SEC), (long long) (window / NS_PER_SEC));
	else if (cfg->max_msg_size > 0 && have->MaxMsgSize != cfg->max_msg_size)
		snprintf(why, len, "a max_msg_size of %d, not %lld", (int) have->MaxMsgSize,
				 (long long) cfg->max_msg_size);
	else
		return false;
	return true;
}

/* Apply what cfg gives to sc (subjects into the caller's array). */
static char *
settings_into(jsStreamConfig *sc, const Config *cfg, const char **subjects)
{
	char	   *copy = NULL;
	int			n;

	if (cfg->subjects)
	{
		copy = split_subjects(cfg->subjects, subjects, &n);
		sc->Subjects = subjects;
		sc->SubjectsLen = n;
	}
	if (cfg->duplicate_window_secs > 0)
		sc->Duplicates = (int64_t) cfg->duplicate_window_secs * NS_PER_SEC;
	if (cfg->max_msg_size > 0)
		sc->MaxMsgSize = (int32_t) cfg->max_msg_size;
	return copy;
}

static int
stream_add(const Config *cfg, jsCtx *js)
{
	jsStreamConfig sc;
	jsStreamInfo *si = NULL;
	jsErrCode	code = 0;
	const char *subjects[64];
	char	   *copy;
	char		why[128];
	natsStatus	s;

	if (js_GetStreamInfo(&si, js, cfg->stream, NULL, &code) == NATS_OK)
	{
		bool		other = differs(si->Config, cfg, why, sizeof(why));

		if (other)
			log_msg("error", "stream \"%s\" exists with %s: nothing changed"
					" (eo_nats stream-update changes it)", cfg->stream, why);
		else
			log_msg("info", "stream \"%s\" exists as asked: nothing changed", cfg->stream);
		jsStreamInfo_Destroy(si);
		return other ? EO_EXIT_FAILED : EO_EXIT_OK;
	}
	jsStreamConfig_Init(&sc);
	sc.Name = cfg->stream;
	sc.Storage = js_FileStorage;
	sc.Duplicates = 120 * NS_PER_SEC;
	copy = settings_into(&sc, cfg, subjects);
	s = js_AddStream(&si, js, &sc, NULL, &code);
	if (s != NATS_OK)
		log_msg("error", "stream \"%s\" not made: %s (code %d)", cfg->stream, nats_error(s), (int) code);
	else
		log_msg("info", "stream \"%s\" made for \"%s\"", cfg->stream, cfg->subjects);
	jsStreamInfo_Destroy(si);
	free(copy);
	return s == NATS_OK ? EO_EXIT_OK : EO_EXIT_FAILED;
}

static int
stream_update(const Config *cfg, jsCtx *js)
{
	jsStreamInfo *si;
	jsStreamInfo *after = NULL;
	jsErrCode	code = 0;
	const char *subjects[64];
	char	   *copy;
	natsStatus	s = NATS_ERR;

	if ((si = stream_get(js, cfg->stream)) != NULL)
	{
		const char **theirs = si->Config->Subjects;
		int			ntheirs = si->Config->SubjectsLen;

		copy = settings_into(si->Config, cfg, subjects);
		s = js_UpdateStream(&after, js, si->Config, NULL, &code);
		if (s != NATS_OK)
			log_msg("error", "stream \"%s\" not changed: %s (code %d)", cfg->stream,
					nats_error(s), (int) code);
		else
			log_msg("info", "stream \"%s\" changed: duplicate window %lld s, max_msg_size %d",
					cfg->stream, (long long) (after->Config->Duplicates / NS_PER_SEC),
					(int) after->Config->MaxMsgSize);
		/* the library frees its own subjects, not ours */
		si->Config->Subjects = theirs;
		si->Config->SubjectsLen = ntheirs;
		jsStreamInfo_Destroy(after);
		jsStreamInfo_Destroy(si);
		free(copy);
	}
	return s == NATS_OK ? EO_EXIT_OK : EO_EXIT_FAILED;
}

static int
stream_info(const Config *cfg, jsCtx *js)
{
	jsStreamInfo *si;
	int			rc;

	if ((si = stream_get(js, cfg->stream)) != NULL)
	{
		printf("name: %s\n", si->Config->Name);
		for (int i = 0; i < si->Config->SubjectsLen; i++)
			printf("subject: %s\n", si->Config->Subjects[i]);
		printf("messages: %llu\n", (unsigned long long) si->State.Msgs);
		printf("first_seq: %llu\n", (unsigned long long) si->State.FirstSeq);
		printf("last_seq: %llu\n", (unsigned long long) si->State.LastSeq);
		printf("consumers: %lld\n", (long long) si->State.Consumers);
		printf("duplicate_window_seconds: %lld\n",
			   (long long) (si->Config->Duplicates / NS_PER_SEC));
		printf("max_msg_size: %d\n", (int) si->Config->MaxMsgSize);
	}
	rc = si != NULL ? EO_EXIT_OK : EO_EXIT_FAILED;
	jsStreamInfo_Destroy(si);
	return rc;
}

static int
stream_delete(const Config *cfg, jsCtx *js)
{
	int			rc;
	jsStreamInfo *si;
	jsErrCode	code = 0;
	natsStatus	s = NATS_ERR;

	if ((si = stream_get(js, cfg->stream)) != NULL && !cfg->yes)
	{
		log_msg("error", "stream \"%s\" holds %llu messages: --yes deletes it with them",
				cfg->stream, (unsigned long long) si->State.Msgs);
		rc = EO_EXIT_USAGE;
	}
	else if (si != NULL)
	{
		s = js_DeleteStream(js, cfg->stream, NULL, &code);
		if (s == NATS_OK)
			log_msg("info", "stream \"%s\" deleted, with its %llu messages", cfg->stream,
					(unsigned long long) si->State.Msgs);
		else
			log_msg("error", "stream \"%s\" not deleted: %s", cfg->stream, nats_error(s));
		rc = s == NATS_OK ? EO_EXIT_OK : EO_EXIT_FAILED;
	}
	else
		rc = EO_EXIT_FAILED;
	jsStreamInfo_Destroy(si);
	return rc;
}

static int
consumer_info(const Config *cfg, jsCtx *js)
{
	jsConsumerInfo *ci = NULL;
	jsErrCode	code = 0;
	natsStatus	s;

	s = js_GetConsumerInfo(&ci, js, cfg->stream, cfg->durable, NULL, &code);
	if (s == NATS_OK)
	{
		printf("stream: %s\n", ci->Stream);
		printf("durable: %s\n", ci->Name);
		printf("filter_subject: %s\n", ci->Config->FilterSubject ? ci->Config->FilterSubject : "");
		printf("ack_wait_ms: %lld\n", (long long) (ci->Config->AckWait / 1000000));
		printf("max_ack_pending: %lld\n", (long long) ci->Config->MaxAckPending);
		printf("pending: %llu\n", (unsigned long long) ci->NumPending);
		printf("ack_pending: %lld\n", (long long) ci->NumAckPending);
		printf("redelivered: %lld\n", (long long) ci->NumRedelivered);
		printf("delivered_stream_seq: %llu\n", (unsigned long long) ci->Delivered.Stream);
		printf("ack_floor_stream_seq: %llu\n", (unsigned long long) ci->AckFloor.Stream);
	}
	else
		log_msg("error", "durable \"%s\" of stream \"%s\": %s", cfg->durable, cfg->stream,
				s == NATS_NOT_FOUND ? "it does not exist" : nats_error(s));
	jsConsumerInfo_Destroy(ci);
	return s == NATS_OK ? EO_EXIT_OK : EO_EXIT_FAILED;
}

static int
consumer_delete(const Config *cfg, jsCtx *js)
{
	jsErrCode	code = 0;
	natsStatus	s;

	s = js_DeleteConsumer(js, cfg->stream, cfg->durable, NULL, &code);
	if (s == NATS_OK)
		log_msg("info", "durable \"%s\" of stream \"%s\" deleted", cfg->durable, cfg->stream);
	else
		log_msg("error", "durable \"%s\" of stream \"%s\" not deleted: %s", cfg->durable,
				cfg->stream, s == NATS_NOT_FOUND ? "it does not exist" : nats_error(s));
	return s == NATS_OK ? EO_EXIT_OK : EO_EXIT_FAILED;
}

static void
print_message(natsMsg *m, uint64_t seq)
{
	const char **keys = NULL;
	int			nkeys = 0;
	JsonBuf		b;
	char		num[32];
	char	   *data = strndup(natsMsg_GetData(m) ? natsMsg_GetData(m) : "",
							   (size_t) natsMsg_GetDataLength(m));

	json_init(&b);
	snprintf(num, sizeof(num), "{\"seq\":%llu,\"subject\":", (unsigned long long) seq);
	json_add(&b, num);
	json_string(&b, natsMsg_GetSubject(m));
	json_add(&b, ",\"headers\":{");
	if (natsMsgHeader_Keys(m, &keys, &nkeys) == NATS_OK)
	{
		for (int k = 0; k < nkeys; k++)
		{
			const char *v = NULL;

			(void) natsMsgHeader_Get(m, keys[k], &v);
			json_add(&b, k > 0 ? "," : "");
			json_string(&b, keys[k]);
			json_add(&b, ":");
			json_string(&b, v ? v : "");
		}
		free((void *) keys);
	}
	json_add(&b, "},\"data\":");
	json_string(&b, data);
	json_add(&b, "}");
	puts(b.data);
	free(b.data);
	free(data);
}

static int
dump(const Config *cfg, jsCtx *js)
{
	jsStreamInfo *si;
	jsErrCode	code = 0;

	if ((si = stream_get(js, cfg->stream)) == NULL)
	{
		return EO_EXIT_FAILED;
	}
	for (uint64_t seq = si->State.FirstSeq; seq > 0 && seq <= si->State.LastSeq; seq++)
	{
		natsMsg    *m = NULL;

		if (js_GetMsg(&m, js, cfg->stream, seq, NULL, &code) == NATS_OK)
			print_message(m, seq);
		natsMsg_Destroy(m);
	}
	jsStreamInfo_Destroy(si);
	return EO_EXIT_OK;
}

/* ---- each command on a JetStream context of its own connection ---- */

static int
with_jetstream(const Config *cfg, int (*command) (const Config *cfg, jsCtx *js))
{
	natsConnection *nc;
	int			rc;
	jsCtx	   *js = nats_jetstream(cfg, &nc, &rc);

	if (js == NULL)
		return rc;
	rc = command(cfg, js);
	jsCtx_Destroy(js);
	natsConnection_Destroy(nc);
	return rc;
}

int
stream_add_main(const Config *cfg)
{
	return with_jetstream(cfg, stream_add);
}

int
stream_update_main(const Config *cfg)
{
	return with_jetstream(cfg, stream_update);
}

int
stream_info_main(const Config *cfg)
{
	return with_jetstream(cfg, stream_info);
}

int
stream_delete_main(const Config *cfg)
{
	return with_jetstream(cfg, stream_delete);
}

int
consumer_info_main(const Config *cfg)
{
	return with_jetstream(cfg, consumer_info);
}

int
consumer_delete_main(const Config *cfg)
{
	return with_jetstream(cfg, consumer_delete);
}

int
dump_main(const Config *cfg)
{
	return with_jetstream(cfg, dump);
}
