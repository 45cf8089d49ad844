#!/bin/bash
# base set-up: roles owner (database owner, untrusted) and consumer (apply's role),
# database inbox owned by owner with eo in schema eo; stream ATT on att.>
. /tmp/attack2-tests/env.sh
$PSQL -d postgres <<'SQL'
DROP DATABASE IF EXISTS inbox;
DROP DATABASE IF EXISTS shop;
DROP ROLE IF EXISTS owner; DROP ROLE IF EXISTS consumer;
CREATE ROLE owner LOGIN;
CREATE ROLE consumer LOGIN;
CREATE DATABASE inbox OWNER owner;
CREATE DATABASE shop;
SQL
$PSQL -d inbox <<'SQL'
CREATE SCHEMA eo;
CREATE EXTENSION eo SCHEMA eo;
GRANT USAGE ON SCHEMA eo TO consumer;
GRANT EXECUTE ON FUNCTION eo.eo_claim(text, text, interval, text),
      eo.eo_fail(text, text, bigint, interval, text, text, boolean) TO consumer;
SELECT eo.eo_scope_create('att', owner => 'consumer');
CREATE SCHEMA app AUTHORIZATION consumer;
CREATE TABLE app.mine (id text PRIMARY KEY, n int, applied int DEFAULT 1);
ALTER TABLE app.mine OWNER TO consumer;
SET ROLE owner;
CREATE TABLE public.ledger (id text PRIMARY KEY, n int, applied int DEFAULT 1);
GRANT INSERT, UPDATE, SELECT ON public.ledger TO consumer;
CREATE TABLE public.seen (what text, at timestamptz DEFAULT now());
GRANT INSERT, SELECT ON public.seen TO PUBLIC;
SQL
$EO $NATS stream-delete --stream ATT --yes >/dev/null 2>&1
$EO $NATS stream-add --stream ATT --subjects 'att.>' 2>&1 | tail -1
