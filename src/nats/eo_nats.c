/*-------------------------------------------------------------------------
 * eo_nats.c
 *	  main: the command line read (cli.c), the signals set, and the
 *	  command run.  Nothing here is called back by the commands: the
 *	  pieces they share (log.c, process.c, json.c, errors.c, pgconn.c,
 *	  natsconn.c) are below them.
 *
 *	  eo_nats forward  --outbox O --group G [--subject T] [--stream S] ...
 *	  eo_nats apply    --stream S --durable D --scope SC --sql SQL ...
 *	  eo_nats stream-add | stream-update | stream-info | stream-delete
 *	  eo_nats consumer-info | consumer-delete | dump
 *
 * Exit status (eo_nats.h): 0 done, or stopped on request; 1 something
 * failed (with --once, or a stream command NATS refused); 2 a wrong
 * command line; 3 stopped because the set-up must be fixed first, with
 * every message given back.
 *-------------------------------------------------------------------------
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "eo_nats.h"

static const struct
{
	const char *name;
	int			(*run) (const Config *cfg);
}			runs[] = {
	{"forward", forward_main},
	{"apply", apply_main},
	{"stream-add", stream_add_main},
	{"stream-update", stream_update_main},
	{"stream-info", stream_info_main},
	{"stream-delete", stream_delete_main},
	{"consumer-info", consumer_info_main},
	{"consumer-delete", consumer_delete_main},
	{"dump", dump_main},
};

int
main(int argc, char **argv)
{
	Config		cfg;
	int			rc = cli_parse(argc, argv, &cfg);

	if (rc >= 0)
		return rc;
	log_verbose = cfg.verbose;
	srandom((unsigned) (time(NULL) ^ getpid()));
	signals_install();
	rc = EO_EXIT_USAGE;
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++)
		if (strcmp(runs[i].name, cfg.command) == 0)
			rc = runs[i].run(&cfg);
	log_limited_flush();
	nats_Close();
	return rc;
}
