/*-------------------------------------------------------------------------
 * cli.c
 *	  eo_nats's command line: the commands, the options each takes, their
 *	  help, and the checks a value needs before anything connects.
 *
 * The conventions of a Unix tool: `--help` (or -h, or `eo_nats help
 * COMMAND`) for the program and for each command, `--version`, and one
 * line of error, exit 2, for an unknown command or option, an option the
 * command does not take, or a bad value.
 *
 * Secrets never come from the command line (other users see it in ps):
 * the NATS password and token come from $NATS_PASSWORD and $NATS_TOKEN,
 * credentials and keys from files, the PostgreSQL password from libpq's
 * own places (PGPASSFILE, ~/.pgpass, PGPASSWORD).
 *-------------------------------------------------------------------------
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eo_nats.h"

#ifndef EO_VERSION
#define EO_VERSION "unknown"
#endif

#define NATS_OPTS "nats creds nkey nkey-public user tls ca cert key verbose"

typedef struct Command
{
	const char *name;
	const char *options;		/* the long options it takes, space-separated */
	const char *synopsis;
	const char *help;			/* its own options, after the NATS ones */
} Command;

static const char nats_help[] =
"NATS (the password in $NATS_PASSWORD, a token in $NATS_TOKEN):\n"
"  --nats URLS            server URLs, comma-separated (default nats://127.0.0.1:4222)\n"
"  --creds FILE           user JWT and nkey seed (.creds file)\n"
"  --nkey FILE --nkey-public KEY   nkey seed file and its public key\n"
"  --user NAME            user name (password from $NATS_PASSWORD)\n"
"  --tls                  require TLS; --ca FILE, --cert FILE, --key FILE\n"
"  --verbose              log more (a line per page or fetch)\n";

static const char pg_help[] =
"PostgreSQL:\n"
"  --pg CONNINFO          libpq connection string or URI (default: the PG* variables);\n"
"                         with several hosts, the one that takes writes is used\n";

static const Command commands[] = {
	{"forward", "pg " NATS_OPTS " outbox group subject stream max-events slots linger-ms lease ack-wait once",
		"eo_nats forward --outbox NAME --group NAME [--stream NAME] [options]",
		"forward: deliver a consumer group of an outbox to JetStream\n"
		"  --outbox NAME --group NAME   the consumer group to deliver\n"
		"  --subject TEMPLATE     default {outbox}.{aggregatetype}; also {aggregateid},\n"
		"                         {type}, {group}\n"
		"  --stream NAME          the stream that must take every event (checked at start,\n"
		"                         and on each publish)\n"
		"  --max-events N         events per page (default 500)\n"
		"  --slots N              slots of the group per page (default 1024: all free ones)\n"
		"  --linger-ms MS|auto    after a wake-up, wait this long for more events\n"
		"                         before fetching (default auto: up to 30, when events\n"
		"                         come fast enough to fill pages; 0: latency first)\n"
		"  --lease SECONDS        a page's lease (default 30)\n"
		"  --ack-wait MS          how long to wait for JetStream's acknowledgements\n"
		"                         (default 10000)\n"
		"  --once                 stop when caught up; exit 1 if anything failed\n"},
	{"apply", "pg " NATS_OPTS " stream durable filter sql scope search-path batch ack-wait terminate-dead once",
		"eo_nats apply --stream NAME --durable NAME --scope NAME --sql SQL [options]",
		"apply: apply a stream's messages in a database, each once, with eo_claim\n"
		"  --stream NAME          the stream to read\n"
		"  --durable NAME         its durable pull consumer (made if missing, updated\n"
		"                         if --batch or --ack-wait changed)\n"
		"  --filter SUBJECT       the durable's filter subject\n"
		"  --scope NAME           the eo scope the event ids are claimed in\n"
		"  --sql SQL              run for each new event in the transaction of its\n"
		"                         eo_claim: $1 event id, $2 subject, $3 payload (jsonb),\n"
		"                         $4 headers (jsonb), $5 when JetStream stored it\n"
		"  --search-path LIST     search_path for --sql (default pg_catalog, pg_temp:\n"
		"                         name tables with their schema); list only schemas\n"
		"                         where no untrusted role can create objects\n"
		"  --batch N              messages per fetch and transaction (default 100)\n"
		"  --terminate-dead       terminate the message of a key that went dead (--sql\n"
		"                         failed on it eo.max_attempts times) instead of keeping\n"
		"                         it for eo_redrive_dead (offered again every 60 s)\n"
		"  --ack-wait MS          JetStream redelivers a message not answered in this\n"
		"                         time (the durable's AckWait, default 10000)\n"
		"  --once                 stop when caught up; exit 1 if anything failed\n"},
	{"stream-add", NATS_OPTS " stream subjects max-msg-size duplicate-window",
		"eo_nats stream-add --stream NAME --subjects LIST [--duplicate-window SECONDS]\n"
		"                   [--max-msg-size BYTES]",
		"stream-add: make a file-backed stream (nothing changes if it exists as asked)\n"
		"  --stream NAME --subjects LIST   its name and subjects, comma-separated\n"
		"  --duplicate-window SECONDS      JetStream drops a message id seen within\n"
		"                                  this time (default 120)\n"
		"  --max-msg-size BYTES            the largest message it takes\n"},
	{"stream-update", NATS_OPTS " stream subjects max-msg-size duplicate-window",
		"eo_nats stream-update --stream NAME [--subjects LIST] [--duplicate-window SECONDS]\n"
		"                      [--max-msg-size BYTES]",
		"stream-update: change what is given of a stream's settings\n"
		"  --stream NAME --subjects LIST --duplicate-window SECONDS --max-msg-size BYTES\n"},
	{"stream-info", NATS_OPTS " stream",
		"eo_nats stream-info --stream NAME",
		"stream-info: a stream's settings and state, one \"name: value\" per line\n"},
	{"stream-delete", NATS_OPTS " stream yes",
		"eo_nats stream-delete --stream NAME --yes",
		"stream-delete: delete a stream and every message in it\n"
		"  --yes                  really (without it, say what would be deleted)\n"},
	{"consumer-info", NATS_OPTS " stream durable",
		"eo_nats consumer-info --stream NAME --durable NAME",
		"consumer-info: a durable consumer's settings and state\n"},
	{"consumer-delete", NATS_OPTS " stream durable",
		"eo_nats consumer-delete --stream NAME --durable NAME",
		"consumer-delete: delete a durable consumer (its position; the stream keeps its\n"
		"  messages, and a new durable starts from the first)\n"},
	{"dump", NATS_OPTS " stream",
		"eo_nats dump --stream NAME",
		"dump: every message stored, one JSON object per line\n"},
	{NULL, NULL, NULL, NULL}
};

static const Command *
command_named(const char *name)
{
	for (const Command *c = commands; name != NULL && c->name != NULL; c++)
		if (strcmp(c->name, name) == 0)
			return c;
	return NULL;
}

static void
usage(FILE *out)
{
	fprintf(out, "eo_nats: an eo outbox's events to NATS JetStream, and applied from it once.\n\n"
			"Usage:\n");
	for (const Command *c = commands; c->name != NULL; c++)
		fprintf(out, "  %s\n", c->synopsis);
	fprintf(out, "  eo_nats COMMAND --help | eo_nats help COMMAND\n"
			"  eo_nats --version\n\n"
			"Exit status: 0 done or stopped; 1 something failed (with --once, or a stream\n"
			"command); 2 a wrong command line; 3 stopped until its set-up is fixed.\n");
}

static void
command_help(const Command *c)
{
	printf("Usage: %s\n\n%s", c->synopsis, c->help);
	if (strstr(c->options, "pg ") == c->options)
		printf("%s", pg_help);
	printf("%s", nats_help);
}

static const struct option long_options[] = {
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
	{"search-path", required_argument, NULL, 'r'},
	{"batch", required_argument, NULL, 'b'},
	{"subjects", required_argument, NULL, 'j'},
	{"max-msg-size", required_argument, NULL, 'z'},
	{"duplicate-window", required_argument, NULL, 'D'},
	{"yes", no_argument, NULL, 'y'},
	{"terminate-dead", no_argument, NULL, 't'},
	{"once", no_argument, NULL, '1'},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, 'V'},
	{NULL, 0, NULL, 0}
};

/* A number in [min, 1e9], or exit 2 naming the option. */
static int
number(const char *arg, const char *name, long min)
{
	char	   *end;
	long		v = strtol(arg, &end, 10);

	if (*arg == '\0' || *end != '\0' || v < min || v > 1000000000)
	{
		fprintf(stderr, "eo_nats: --%s must be an integer from %ld, not \"%s\"\n", name, min, arg);
		exit(EO_EXIT_USAGE);
	}
	return (int) v;
}

/* --linger-ms: milliseconds, or auto (-1: linger.c chooses). */
static int
linger_arg(const char *arg)
{
	if (strcmp(arg, "auto") == 0)
		return -1;
	if (strspn(arg, "0123456789") != strlen(arg) || *arg == '\0')
	{
		fprintf(stderr, "eo_nats: --linger-ms must be auto or an integer from 0, not \"%s\"\n", arg);
		exit(EO_EXIT_USAGE);
	}
	return number(arg, "linger-ms", 0);
}

/* Store option `c` (with `arg`) into cfg. */
static void
store(Config *cfg, int c, const char *arg, const char *name)
{
	switch (c)
	{
		case 'P': cfg->pg = arg; break;
		case 'N': cfg->nats_url = arg; break;
		case 'C': cfg->creds_file = arg; break;
		case 'K': cfg->nkey_seed_file = arg; break;
		case 'p': cfg->nkey_public = arg; break;
		case 'u': cfg->user = arg; break;
		case 'T': cfg->tls = true; break;
		case 'a': cfg->ca_file = arg; break;
		case 'c': cfg->cert_file = arg; break;
		case 'k': cfg->key_file = arg; break;
		case 'o': cfg->outbox = arg; break;
		case 'g': cfg->group = arg; break;
		case 's': cfg->subject = arg; break;
		case 'S': cfg->stream = arg; break;
		case 'm': cfg->max_events = number(arg, name, 1); break;
		case 'n': cfg->slots = number(arg, name, 1); break;
		case 'L': cfg->linger_ms = linger_arg(arg); break;
		case 'l': cfg->lease_secs = number(arg, name, 1); break;
		case 'w': cfg->ack_wait_ms = number(arg, name, 1); break;
		case 'd': cfg->durable = arg; break;
		case 'f': cfg->filter = arg; break;
		case 'q': cfg->sql = arg; break;
		case 'x': cfg->scope = arg; break;
		case 'r': cfg->search_path = arg; break;
		case 'b': cfg->batch = number(arg, name, 1); break;
		case 'j': cfg->subjects = arg; break;
		case 'z': cfg->max_msg_size = number(arg, name, 1); break;
		case 'D': cfg->duplicate_window_secs = number(arg, name, 1); break;
		case 'y': cfg->yes = true; break;
		case 't': cfg->terminate_dead = true; break;
		case '1': cfg->once = true; break;
		case 'v': cfg->verbose = true; break;
	}
}

static void
defaults(Config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->pg = "";
	cfg->nats_url = "nats://127.0.0.1:4222";
	cfg->subject = "{outbox}.{aggregatetype}";
	cfg->max_events = 500;
	cfg->linger_ms = -1;		/* auto */
	cfg->slots = 1024;
	cfg->lease_secs = 30;
	cfg->ack_wait_ms = 10000;
	cfg->batch = 100;
}

/* Is the long option `name` one that command `c` takes? */
static bool
takes(const Command *c, const char *name)
{
	size_t		n = strlen(name);

	for (const char *p = strstr(c->options, name); p != NULL; p = strstr(p + 1, name))
		if ((p == c->options || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
			return true;
	return false;
}

/* What a command needs, or NULL. */
static const char *
missing(const Config *cfg)
{
	const char *c = cfg->command;

	if (strcmp(c, "forward") == 0)
		return !cfg->outbox ? "--outbox" : !cfg->group ? "--group" : NULL;
	if (strcmp(c, "apply") == 0)
		return !cfg->stream ? "--stream" : !cfg->durable ? "--durable" : !cfg->sql ? "--sql" :
			!cfg->scope || !cfg->scope[0] ? "--scope (event ids are claimed in a scope of their own)" : NULL;
	if (strcmp(c, "stream-add") == 0)
		return !cfg->stream ? "--stream" : !cfg->subjects ? "--subjects" : NULL;
	if (strncmp(c, "consumer-", 9) == 0)
		return !cfg->stream ? "--stream" : !cfg->durable ? "--durable" : NULL;
	return !cfg->stream ? "--stream" : NULL;
}

/* After the options: the command, and `help COMMAND`.  Exit code or -1. */
static int
command_of(Config *cfg, int nargs, char **args, bool help, bool bad_option)
{
	const Command *c;

	if (nargs == 0)
	{
		usage(help ? stdout : stderr);
		return help ? EO_EXIT_OK : EO_EXIT_USAGE;
	}
	if (strcmp(args[0], "help") == 0 && nargs <= 2)
	{
		if (nargs == 1)
		{
			usage(stdout);
			return EO_EXIT_OK;
		}
		help = true;
		args++;
		nargs--;
	}
	if ((c = command_named(args[0])) == NULL)
	{
		fprintf(stderr, "eo_nats: unknown command \"%s\" (eo_nats --help lists them)\n", args[0]);
		return EO_EXIT_USAGE;
	}
	if (nargs > 1)
	{
		fprintf(stderr, "eo_nats %s: unexpected argument \"%s\"\n", c->name, args[1]);
		return EO_EXIT_USAGE;
	}
	if (bad_option)
	{
		fprintf(stderr, "Try \"eo_nats %s --help\".\n", c->name);
		return EO_EXIT_USAGE;
	}
	if (help)
	{
		command_help(c);
		return EO_EXIT_OK;
	}
	cfg->command = c->name;
	return -1;
}

/*
 * Read the command line into cfg.  Returns -1 to go on, or the exit code
 * (0 after --help or --version, 2 after an error said on stderr).
 */
int
cli_parse(int argc, char **argv, Config *cfg)
{
	bool		help = false;
	bool		bad_option = false;
	const char *given[64];
	int			ngiven = 0;
	int			c;
	int			index;
	int			rc;

	defaults(cfg);
	opterr = 1;
	while ((c = getopt_long(argc, argv, "hV", long_options, &index)) != -1)
	{
		if (c == '?')
			bad_option = true;
		else if (c == 'h')
			help = true;
		else if (c == 'V')
		{
			printf("eo_nats (eo) %s, NATS C client %s\n", EO_VERSION, nats_GetVersion());
			return EO_EXIT_OK;
		}
		else
		{
			const char *name = long_options[index].name;

			store(cfg, c, optarg, name);
			if (ngiven < 64)
				given[ngiven++] = name;
		}
	}
	rc = command_of(cfg, argc - optind, argv + optind, help, bad_option);
	if (rc >= 0)
		return rc;
	for (int i = 0; i < ngiven; i++)
		if (!takes(command_named(cfg->command), given[i]))
		{
			fprintf(stderr, "eo_nats %s: --%s is not an option of %s (eo_nats %s --help)\n",
					cfg->command, given[i], cfg->command, cfg->command);
			return EO_EXIT_USAGE;
		}
	if (missing(cfg) != NULL)
	{
		fprintf(stderr, "eo_nats %s: %s is required (eo_nats %s --help)\n",
				cfg->command, missing(cfg), cfg->command);
		return EO_EXIT_USAGE;
	}
	return -1;
}
