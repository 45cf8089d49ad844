/*-------------------------------------------------------------------------
 * admin.c
 *	  eo_nats stream-add, stream-info and dump: what a forwarder's operator
 *	  needs of JetStream without another tool (Debian packages no NATS
 *	  command line client), and what the tests read the stream with.
 *
 *	  stream-add:  a file-backed stream taking --subjects (comma-separated),
 *				   with --max-msg-size and --duplicate-window (default 120 s)
 *	  stream-info: its configuration and state, one "name: value" per line
 *	  dump:		   every message stored, one JSON object per line:
 *				   {"seq":..,"subject":..,"headers":{..},"data":".."}
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eo_nats.h"

static jsCtx *
jetstream(const Config *cfg, natsConnection **nc)
{
	jsCtx	   *js = NULL;

	*nc = nats_connect(cfg);
	if (*nc == NULL || natsConnection_JetStream(&js, *nc, NULL) != NATS_OK)
	{
		log_msg("error", "JetStream is not available: %s", nats_error(NATS_ERR));
		return NULL;
	}
	return js;
}

static void
done(jsCtx *js, natsConnection *nc)
{
	jsCtx_Destroy(js);
	natsConnection_Destroy(nc);
}

int
stream_add_main(const Config *cfg)
{
	natsConnection *nc;
	jsCtx	   *js = jetstream(cfg, &nc);
	jsStreamConfig sc;
	jsStreamInfo *si = NULL;
	jsErrCode	code = 0;
	char	   *copy = strdup(cfg->subjects);
	const char *subjects[64];
	int			n = 0;
	char	   *save = NULL;
	natsStatus	s;

	if (js == NULL)
		return 1;
	for (char *t = strtok_r(copy, ",", &save); t && n < 64; t = strtok_r(NULL, ",", &save))
		subjects[n++] = t;
	jsStreamConfig_Init(&sc);
	sc.Name = cfg->stream;
	sc.Subjects = subjects;
	sc.SubjectsLen = n;
	sc.Storage = js_FileStorage;
	sc.Duplicates = (int64_t) cfg->duplicate_window_secs * 1000000000LL;
	if (cfg->max_msg_size > 0)
		sc.MaxMsgSize = (int32_t) cfg->max_msg_size;
	s = js_AddStream(&si, js, &sc, NULL, &code);
	if (s != NATS_OK)
		log_msg("error", "stream \"%s\" not made: %s (code %d)", cfg->stream, nats_error(s), (int) code);
	else
		log_msg("info", "stream \"%s\" made for \"%s\"", cfg->stream, cfg->subjects);
	jsStreamInfo_Destroy(si);
	free(copy);
	done(js, nc);
	return s == NATS_OK ? 0 : 1;
}

int
stream_info_main(const Config *cfg)
{
	natsConnection *nc;
	jsCtx	   *js = jetstream(cfg, &nc);
	jsStreamInfo *si = NULL;
	jsErrCode	code = 0;
	natsStatus	s;

	if (js == NULL)
		return 1;
	s = js_GetStreamInfo(&si, js, cfg->stream, NULL, &code);
	if (s == NATS_OK)
	{
		printf("name: %s\n", si->Config->Name);
		for (int i = 0; i < si->Config->SubjectsLen; i++)
			printf("subject: %s\n", si->Config->Subjects[i]);
		printf("messages: %llu\n", (unsigned long long) si->State.Msgs);
		printf("first_seq: %llu\n", (unsigned long long) si->State.FirstSeq);
		printf("last_seq: %llu\n", (unsigned long long) si->State.LastSeq);
		printf("duplicate_window_seconds: %lld\n",
			   (long long) (si->Config->Duplicates / 1000000000LL));
		printf("max_msg_size: %d\n", (int) si->Config->MaxMsgSize);
	}
	else
		log_msg("error", "stream \"%s\": %s", cfg->stream, nats_error(s));
	jsStreamInfo_Destroy(si);
	done(js, nc);
	return s == NATS_OK ? 0 : 1;
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

int
dump_main(const Config *cfg)
{
	natsConnection *nc;
	jsCtx	   *js = jetstream(cfg, &nc);
	jsStreamInfo *si = NULL;
	jsErrCode	code = 0;
	natsStatus	s;

	if (js == NULL)
		return 1;
	s = js_GetStreamInfo(&si, js, cfg->stream, NULL, &code);
	if (s != NATS_OK)
	{
		log_msg("error", "stream \"%s\": %s", cfg->stream, nats_error(s));
		done(js, nc);
		return 1;
	}
	for (uint64_t seq = si->State.FirstSeq; seq > 0 && seq <= si->State.LastSeq; seq++)
	{
		natsMsg    *m = NULL;

		if (js_GetMsg(&m, js, cfg->stream, seq, NULL, &code) == NATS_OK)
			print_message(m, seq);
		natsMsg_Destroy(m);
	}
	jsStreamInfo_Destroy(si);
	done(js, nc);
	return 0;
}
