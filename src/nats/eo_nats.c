/*-------------------------------------------------------------------------
 * eo_nats.c
 *	  The command line of eo_nats, logging, the stop flag and backoff.
 *
 *	  eo_nats forward  --outbox O --group G [--subject T] [--stream S] ...
 *	  eo_nats apply    --stream S --durable D --sql SQL [--scope SC] ...
 *	  eo_nats stream-add --stream S --subjects 'a.>,b' [--max-msg-size N]
 *	  eo_nats stream-info --stream S
 *	  eo_nats dump --stream S
 *
 * Secrets never come from the command line (other users see it in ps):
 * the NATS password and token come from $NATS_PASSWORD and $NATS_TOKEN,
 * credentials and keys from files, the PostgreSQL password from libpq's
 * own places (PGPASSFILE, ~/.pgpass, PGPASSWORD).  Nothing of them is ever
 * logged: log lines name the server by URL only, without user info.
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "eo_nats.h"

volatile int stop_requested = 0;
bool		log_verbose = false;

static void
on_signal(int signo)
{
	stop_requested = 1;
}

/* One line on stderr: time, level, message (systemd's journal keeps it). */
void
log_msg(const char *level, const char *fmt,...)
{
	struct timeval tv;
	struct tm	tm;
	char		when[32];
	va_list		ap;

	if (strcmp(level, "debug") == 0 && !log_verbose)
		return;
	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	fprintf(stderr, "%s.%03dZ eo_nats %s: ", when, (int) (tv.tv_usec / 1000), level);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
}

/*
 * `s` for a log line: control bytes as '?', cut to fit `len`, so that a
 * value a producer wrote cannot forge log lines.
 */
const char *
printable(const char *s, char *buf, size_t len)
{
	size_t		n = 0;

	for (; *s && n + 1 < len; s++)
		buf[n++] = (unsigned char) *s < 0x20 || *s == 0x7f ? '?' : *s;
	buf[n] = '\0';
	return buf;
}

/*
 * A test's kill -9 at a named point (EO_NATS_CRASH_AT=<point>): the
 * tests use it to stop the process exactly where a crash is hardest to
 * recover from (after JetStream stored a page, before eo heard of it).
 */
void
crash_point(const char *point)
{
	const char *at = getenv("EO_NATS_CRASH_AT");

	if (at != NULL && strcmp(at, point) == 0)
	{
		log_msg("info", "crash point %s: killing this process", point);
		raise(SIGKILL);
	}
}

/* Sleep, in steps short enough to notice a stop request. */
void
sleep_ms(int64_t ms)
{
	while (ms > 0 && !stop_requested)
	{
		int64_t		step = ms > 100 ? 100 : ms;
		struct timespec ts = {step / 1000, (step % 1000) * 1000000};

		nanosleep(&ts, NULL);
		ms -= step;
	}
}

/*
 * The wait before retry number `attempt` (0, 1, ...): doubling from 100 ms
 * up to `max_ms`, with jitter, so that forwarders that lost a server at
 * the same moment do not all come back at the same moment.
 */
int64_t
backoff_ms(int attempt, int64_t max_ms)
{
	int64_t		ms = 100;

	for (int i = 0; i < attempt && ms < max_ms; i++)
		ms *= 2;
	if (ms > max_ms)
		ms = max_ms;
	return ms / 2 + random() % (ms / 2 + 1);
}

static void
usage(FILE *out)
{
	fprintf(out,
			"Usage:\n"
			"  eo_nats forward --outbox NAME --group NAME [options]\n"
			"  eo_nats apply --stream NAME --durable NAME --scope NAME --sql SQL [options]\n"
			"  eo_nats stream-add --stream NAME --subjects LIST [--max-msg-size BYTES]\n"
			"                     [--duplicate-window SECONDS]\n"
			"  eo_nats stream-info --stream NAME\n"
			"  eo_nats dump --stream NAME\n"
			"\n"
			"PostgreSQL:\n"
			"  --pg CONNINFO          libpq connection string or URI (default: PG* variables)\n"
			"NATS (password in $NATS_PASSWORD, token in $NATS_TOKEN):\n"
			"  --nats URLS            server URLs, comma-separated (default nats://127.0.0.1:4222)\n"
			"  --creds FILE           user JWT and nkey seed (.creds file)\n"
			"  --nkey FILE --nkey-public KEY   nkey seed file and its public key\n"
			"  --user NAME            user name (password from $NATS_PASSWORD)\n"
			"  --tls                  require TLS; --ca FILE, --cert FILE, --key FILE\n"
			"forward:\n"
			"  --outbox NAME --group NAME   the consumer group to deliver\n"
			"  --subject TEMPLATE     default {outbox}.{aggregatetype}; also {aggregateid},\n"
			"                         {type}, {group}\n"
			"  --stream NAME          the stream that must take every event (checked at start,\n"
			"                         and on each publish)\n"
			"  --max-events N         events per page (default 500)\n"
			"  --slots N              slots of the group per page (default 1024: all free ones)\n"
			"  --linger-ms MS         after a wake-up, wait this long for more events\n"
			"                         before fetching (default 0: latency first)\n"
			"  --lease SECONDS        a page's lease (default 30)\n"
			"  --ack-wait MS          how long to wait for JetStream's acknowledgements\n"
			"                         (default 10000)\n"
			"apply:\n"
			"  --durable NAME         the durable pull consumer (made if missing)\n"
			"  --filter SUBJECT       its filter subject\n"
			"  --sql SQL              run for each new event in the transaction of its\n"
			"                         eo_claim: $1 event id, $2 subject, $3 payload (jsonb),\n"
			"                         $4 headers (jsonb), $5 when JetStream stored it\n"
			"  --scope NAME           the eo scope to claim the event ids in\n"
			"  --batch N              messages per fetch (default 100)\n"
			"  --ack-wait MS          JetStream redelivers a message not answered in this\n"
			"                         time (the durable's AckWait, default 10000)\n"
			"all:\n"
			"  --once                 stop when caught up (for scripts and tests)\n"
			"  --verbose              log every page\n");
}

static int
positive(const char *arg, const char *name)
{
	char	   *end;
	long		v = strtol(arg, &end, 10);

	if (*arg == '\0' || *end != '\0' || v <= 0 || v > 1000000000)
	{
		fprintf(stderr, "eo_nats: %s must be a positive integer, not \"%s\"\n", name, arg);
		exit(2);
	}
	return (int) v;
}

static bool
parse(int argc, char **argv, Config *cfg)
{
	static const struct option opts[] = {
		{"pg", required_argument, NULL, 'P'},
		{"nats", required_argument, NULL, 'N'},
		{"creds", required_argument, NULL, 'C'},
		{"nkey", required_argument, NULL, 'K'},
		{"nkey-public", required_argument, NULL, 'p'},
		{"user", required_argument, NULL, 'u'},
		{"tls", no_argument, NULL, 'T'},
		{"ca", required_argument, NULL, 'a'},
		{"cert", required_argument, NULL, 'c'},
		{"key", required_argument, NULL, 'k'},
		{"outbox", required_argument, NULL, 'o'},
		{"group", required_argument, NULL, 'g'},
		{"subject", required_argument, NULL, 's'},
		{"stream", required_argument, NULL, 'S'},
		{"max-events", required_argument, NULL, 'm'},
		{"slots", required_argument, NULL, 'n'},
		{"linger-ms", required_argument, NULL, 'L'},
		{"lease", required_argument, NULL, 'l'},
		{"ack-wait", required_argument, NULL, 'w'},
		{"durable", required_argument, NULL, 'd'},
		{"filter", required_argument, NULL, 'f'},
		{"sql", required_argument, NULL, 'q'},
		{"scope", required_argument, NULL, 'x'},
		{"batch", required_argument, NULL, 'b'},
		{"subjects", required_argument, NULL, 'j'},
		{"max-msg-size", required_argument, NULL, 'z'},
		{"duplicate-window", required_argument, NULL, 'D'},
		{"once", no_argument, NULL, '1'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int			c;

	memset(cfg, 0, sizeof(*cfg));
	cfg->pg = "";
	cfg->nats_url = "nats://127.0.0.1:4222";
	cfg->subject = "{outbox}.{aggregatetype}";
	cfg->max_events = 500;
	cfg->slots = 1024;
	cfg->lease_secs = 30;
	cfg->ack_wait_ms = 10000;
	cfg->batch = 100;
	cfg->duplicate_window_secs = 120;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1)
	{
		switch (c)
		{
			case 'P': cfg->pg = optarg; break;
			case 'N': cfg->nats_url = optarg; break;
			case 'C': cfg->creds_file = optarg; break;
			case 'K': cfg->nkey_seed_file = optarg; break;
			case 'p': cfg->nkey_public = optarg; break;
			case 'u': cfg->user = optarg; break;
			case 'T': cfg->tls = true; break;
			case 'a': cfg->ca_file = optarg; break;
			case 'c': cfg->cert_file = optarg; break;
			case 'k': cfg->key_file = optarg; break;
			case 'o': cfg->outbox = optarg; break;
			case 'g': cfg->group = optarg; break;
			case 's': cfg->subject = optarg; break;
			case 'S': cfg->stream = optarg; break;
			case 'm': cfg->max_events = positive(optarg, "--max-events"); break;
			case 'n': cfg->slots = positive(optarg, "--slots"); break;
			case 'L': cfg->linger_ms = atoi(optarg) < 0 ? 0 : atoi(optarg); break;
			case 'l': cfg->lease_secs = positive(optarg, "--lease"); break;
			case 'w': cfg->ack_wait_ms = positive(optarg, "--ack-wait"); break;
			case 'd': cfg->durable = optarg; break;
			case 'f': cfg->filter = optarg; break;
			case 'q': cfg->sql = optarg; break;
			case 'x': cfg->scope = optarg; break;
			case 'b': cfg->batch = positive(optarg, "--batch"); break;
			case 'j': cfg->subjects = optarg; break;
			case 'z': cfg->max_msg_size = positive(optarg, "--max-msg-size"); break;
			case 'D': cfg->duplicate_window_secs = positive(optarg, "--duplicate-window"); break;
			case '1': cfg->once = true; break;
			case 'v': cfg->verbose = true; break;
			case 'h': usage(stdout); exit(0);
			default: return false;
		}
	}
	/* the command, wherever it was among the options (getopt moved it last) */
	if (optind != argc - 1)
		return false;
	cfg->command = argv[optind];
	return true;
}

/* What a command needs, or a message saying what is missing. */
static const char *
missing(const Config *cfg)
{
	if (strcmp(cfg->command, "forward") == 0)
		return !cfg->outbox ? "--outbox" : !cfg->group ? "--group" : NULL;
	if (strcmp(cfg->command, "apply") == 0)
		return !cfg->stream ? "--stream" : !cfg->durable ? "--durable" : !cfg->sql ? "--sql" :
			!cfg->scope ? "--scope (event ids are claimed in a scope of their own)" : NULL;
	if (strcmp(cfg->command, "stream-add") == 0)
		return !cfg->stream ? "--stream" : !cfg->subjects ? "--subjects" : NULL;
	if (strcmp(cfg->command, "stream-info") == 0 || strcmp(cfg->command, "dump") == 0)
		return !cfg->stream ? "--stream" : NULL;
	return "a command (forward, apply, stream-add, stream-info or dump)";
}

int
main(int argc, char **argv)
{
	Config		cfg;
	const char *need;
	struct sigaction sa;
	int			rc;

	if (!parse(argc, argv, &cfg))
	{
		usage(stderr);
		return 2;
	}
	if ((need = missing(&cfg)) != NULL)
	{
		fprintf(stderr, "eo_nats %s: %s is required (eo_nats --help)\n", cfg.command, need);
		return 2;
	}
	log_verbose = cfg.verbose;
	srandom((unsigned) (time(NULL) ^ getpid()));

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (strcmp(cfg.command, "forward") == 0)
		rc = forward_main(&cfg);
	else if (strcmp(cfg.command, "apply") == 0)
		rc = apply_main(&cfg);
	else if (strcmp(cfg.command, "stream-add") == 0)
		rc = stream_add_main(&cfg);
	else if (strcmp(cfg.command, "stream-info") == 0)
		rc = stream_info_main(&cfg);
	else
		rc = dump_main(&cfg);
	nats_Close();
	return rc;
}
