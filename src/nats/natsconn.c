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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eo_nats.h"

const char *
nats_error(natsStatus s)
{
	const char *last = nats_GetLastError(NULL);

	return last != NULL && last[0] != '\0' ? last : natsStatus_GetText(s);
}

/* `url` without "user:password@", for the log. */
static void
redact(const char *url, char *out, size_t len)
{
	const char *scheme = strstr(url, "://");
	const char *host = scheme ? scheme + 3 : url;
	const char *at = strchr(host, '@');

	if (at == NULL || (strchr(host, '/') != NULL && strchr(host, '/') < at))
		snprintf(out, len, "%s", url);
	else
		snprintf(out, len, "%.*s%s", (int) (host - url), url, at + 1);
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

	ok = ok && accepted(natsOptions_SetURL(opts, cfg->nats_url), "--nats");
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

natsConnection *
nats_connect(const Config *cfg)
{
	natsOptions *opts = make_options(cfg);
	natsConnection *nc = NULL;
	char		shown[512];

	if (opts == NULL)
		return NULL;
	redact(cfg->nats_url, shown, sizeof(shown));
	for (int attempt = 0; !stop_requested; attempt++)
	{
		natsStatus	s = natsConnection_Connect(&nc, opts);

		if (s == NATS_OK)
		{
			log_msg("info", "connected to NATS at %s", shown);
			break;
		}
		log_msg("warning", "cannot connect to NATS at %s: %s; trying again", shown, nats_error(s));
		nc = NULL;
		sleep_ms(backoff_ms(attempt, 5000));
	}
	natsOptions_Destroy(opts);
	return nc;
}
