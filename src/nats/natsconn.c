/*-------------------------------------------------------------------------
 * natsconn.c
 *	  Connecting to NATS with the authentication and TLS options given.
 *
 * The first connection is retried here, with backoff, until it succeeds
 * or a stop is requested; after that the library reconnects by itself,
 * forever (publishes meanwhile fail and are retried by the caller).  The
 * library's callbacks run on its own threads: they only log.  Secrets are
 * read from the environment or files and never logged; URLs are logged
 * without their user information.
 *-------------------------------------------------------------------------
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eo_nats.h"


/* The library's last error, without the "(file.c:123): " it starts with. */
const char *
nats_error(natsStatus s)
{
	const char *last = nats_GetLastError(NULL);
	const char *cut;

	if (last == NULL || last[0] == '\0')
		return natsStatus_GetText(s);
	if (last[0] == '(' && (cut = strstr(last, "): ")) != NULL)
		return cut + 3;
	return last;
}

/*
 * `urls` (comma-separated) without any "user:password@", for the log:
 * the user information of each is all up to the last '@' before its
 * path (a password may hold '@' or '/').
 */
static void
redact(const char *urls, char *out, size_t len)
{
	size_t		used = 0;

	out[0] = '\0';
	for (const char *u = urls; *u && used + 1 < len;)
	{
		size_t		n = strcspn(u, ",");
		const char *scheme = memchr(u, ':', n);
		const char *host = (scheme && scheme + 2 < u + n && scheme[1] == '/' && scheme[2] == '/')
			? scheme + 3 : u;
		const char *at = NULL;

		for (const char *c = host; c < u + n; c++)
			if (*c == '@')
				at = c;
		used += snprintf(out + used, len - used, "%s%.*s%.*s", u == urls ? "" : ",",
						 (int) (host - u), u, (int) (u + n - (at ? at + 1 : host)),
						 at ? at + 1 : host);
		if (used >= len)
			break;
		u += n + (u[n] == ',');
	}
}

static void
on_disconnected(natsConnection *nc, void *closure)
{
	if (!natsConnection_IsClosed(nc) && !stop_requested)
		log_msg("warning", "lost the connection to NATS; reconnecting");
}

static void
on_reconnected(natsConnection *nc, void *closure)
{
	char		url[256] = "";
	char		shown[256];

	natsConnection_GetConnectedUrl(nc, url, sizeof(url));
	redact(url, shown, sizeof(shown));
	log_msg("info", "reconnected to NATS at %s", shown);
}

static void
on_async_error(natsConnection *nc, natsSubscription *sub, natsStatus err, void *closure)
{
	log_msg("warning", "NATS: %s", natsStatus_GetText(err));
}

/*
 * The servers of --nats, one URL each: a comma-separated list given as one
 * URL would lose the user information of each.
 */
static natsStatus
set_servers(natsOptions *opts, const char *urls)
{
	char	   *copy = strdup(urls);
	const char *list[32];
	int			n = 0;
	char	   *save = NULL;
	natsStatus	s;

	for (char *u = strtok_r(copy, ",", &save); u && n < 32; u = strtok_r(NULL, ",", &save))
		list[n++] = u;
	s = n == 0 ? NATS_INVALID_ARG : natsOptions_SetServers(opts, list, n);
	free(copy);
	return s;
}

/* False (after a message naming the option) if the library refused it. */
static bool
accepted(natsStatus s, const char *what)
{
	if (s != NATS_OK)
		log_msg("error", "NATS option %s refused: %s", what, nats_error(s));
	return s == NATS_OK;
}

/* The options of cfg, or NULL (after a message) if one is refused. */
static natsOptions *
make_options(const Config *cfg)
{
	natsOptions *opts = NULL;
	const char *password = getenv("NATS_PASSWORD");
	const char *token = getenv("NATS_TOKEN");
	bool		ok = accepted(natsOptions_Create(&opts), "(all)");

	ok = ok && accepted(set_servers(opts, cfg->nats_url), "--nats");
	ok = ok && accepted(natsOptions_SetName(opts, "eo_nats"), "name");
	ok = ok && accepted(natsOptions_SetMaxReconnect(opts, -1), "reconnect");
	ok = ok && accepted(natsOptions_SetReconnectWait(opts, 500), "reconnect wait");
	ok = ok && accepted(natsOptions_SetReconnectJitter(opts, 500, 1000), "reconnect jitter");
	ok = ok && accepted(natsOptions_SetDisconnectedCB(opts, on_disconnected, NULL), "callback");
	ok = ok && accepted(natsOptions_SetReconnectedCB(opts, on_reconnected, NULL), "callback");
	ok = ok && accepted(natsOptions_SetErrorHandler(opts, on_async_error, NULL), "callback");
	if (cfg->creds_file)
		ok = ok && accepted(natsOptions_SetUserCredentialsFromFiles(opts, cfg->creds_file, NULL),
							"--creds");
	if (cfg->nkey_seed_file)
		ok = ok && accepted(natsOptions_SetNKeyFromSeed(opts, cfg->nkey_public, cfg->nkey_seed_file),
							"--nkey");
	if (cfg->user)
		ok = ok && accepted(natsOptions_SetUserInfo(opts, cfg->user, password ? password : ""),
							"--user");
	if (token != NULL && token[0] != '\0')
		ok = ok && accepted(natsOptions_SetToken(opts, token), "$NATS_TOKEN");
	if (cfg->tls || cfg->ca_file || cfg->cert_file)
		ok = ok && accepted(natsOptions_SetSecure(opts, true), "--tls");
	if (cfg->ca_file)
		ok = ok && accepted(natsOptions_LoadCATrustedCertificates(opts, cfg->ca_file), "--ca");
	if (cfg->cert_file)
		ok = ok && accepted(natsOptions_LoadCertificatesChain(opts, cfg->cert_file, cfg->key_file),
							"--cert/--key");
	if (!ok)
	{
		natsOptions_Destroy(opts);
		return NULL;
	}
	return opts;
}

/*
 * What to tell an operator whose credentials NATS refused: the options
 * and variables they came from.
 */
static void
log_refused(const Config *cfg, const char *shown, natsStatus s)
{
	log_msg("error", "NATS at %s refused the credentials (%s): check %s; stopping",
			shown, nats_error(s),
			cfg->creds_file ? "--creds" : cfg->nkey_seed_file ? "--nkey and --nkey-public" :
			cfg->user ? "--user and $NATS_PASSWORD" :
			getenv("NATS_TOKEN") ? "$NATS_TOKEN" :
			"the server's authorization (no --user, --creds, --nkey or $NATS_TOKEN was given)");
}

/*
 * The library's threads are started with SIGINT and SIGTERM blocked (they
 * inherit the mask of the thread that starts them), so that a stop is
 * always handled by the main thread: process.c's handler uses PQcancel's
 * object, which only the main thread changes.
 */
static void
stops_blocked(bool block, sigset_t *before)
{
	sigset_t	stops;

	sigemptyset(&stops);
	sigaddset(&stops, SIGINT);
	sigaddset(&stops, SIGTERM);
	if (block)
		pthread_sigmask(SIG_BLOCK, &stops, before);
	else
		pthread_sigmask(SIG_SETMASK, before, NULL);
}

natsConnection *
nats_connect(const Config *cfg, int *exit_code)
{
	sigset_t	before;
	natsOptions *opts;
	natsConnection *nc = NULL;
	char		shown[512];
	bool		patient;

	stops_blocked(true, &before);
	opts = make_options(cfg);
	stops_blocked(false, &before);
	*exit_code = EO_EXIT_CONFIG;
	if (opts == NULL)
		return NULL;
	if (cfg->user && getenv("NATS_PASSWORD") == NULL)
		log_msg("warning", "--user \"%s\" is given but $NATS_PASSWORD is not set:"
				" connecting with an empty password", cfg->user);
	/* forward and apply wait for NATS as long as it takes; the others do not */
	patient = (strcmp(cfg->command, "forward") == 0 || strcmp(cfg->command, "apply") == 0) &&
		!cfg->once;
	redact(cfg->nats_url, shown, sizeof(shown));
	*exit_code = EO_EXIT_OK;
	for (int attempt = 0; !stop_requested; attempt++)
	{
		natsStatus	s;

		stops_blocked(true, &before);
		s = natsConnection_Connect(&nc, opts);
		stops_blocked(false, &before);

		if (s == NATS_OK)
		{
			log_msg("info", "connected to NATS at %s", shown);
			break;
		}
		nc = NULL;
		if (nats_error_kind(s) == ERR_CONFIG)
		{
			log_refused(cfg, shown, s);
			*exit_code = EO_EXIT_CONFIG;
			break;
		}
		log_limited("nats connect", "warning", "cannot connect to NATS at %s: %s%s", shown,
					nats_error(s), patient || attempt < 4 ? "; trying again" : "");
		if (!patient && attempt >= 4)
		{
			*exit_code = EO_EXIT_FAILED;
			break;
		}
		sleep_ms(backoff_ms(attempt, 5000));
	}
	natsOptions_Destroy(opts);
	return nc;
}

/* A JetStream context on a new connection, or NULL with *exit_code set. */
jsCtx *
nats_jetstream(const Config *cfg, natsConnection **nc, int *exit_code)
{
	jsCtx	   *js = NULL;
	natsStatus	s;

	*nc = nats_connect(cfg, exit_code);
	if (*nc == NULL)
		return NULL;
	s = natsConnection_JetStream(&js, *nc, NULL);
	if (s != NATS_OK)
	{
		log_msg("error", "JetStream is not available: %s", nats_error(s));
		*exit_code = EO_EXIT_FAILED;
		natsConnection_Destroy(*nc);
		*nc = NULL;
		return NULL;
	}
	return js;
}
