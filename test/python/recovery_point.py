#!/usr/bin/env python3
# Copyright: eo authors.  See README.
#
# The handler of docs/guides.md's "Several outside steps: recovery points",
# as a program: test/t/041_python_examples.pl checks that the page's
# ```python block is in this file word for word, and runs it.
#
# Below the page's code, stand-ins for the card and mail services, each
# keeping a record of the idempotency keys it was called with (in tables
# card_charges and receipts, on a connection of its own, as an outside
# service would), and a main that books one ride and prints what book_ride
# returned, as JSON.  It needs python3 and psycopg 3 (Debian:
# python3-psycopg), and the tables rides, card_charges and receipts (see
# test/t/041_python_examples.pl).
#
#   EO_DSN='dbname=app' python3 test/python/recovery_point.py ride:42 ['1 second'] [--die-after-charge]
#
# --die-after-charge: the process dies (exit 3) right after the card service
# has charged, before the step's recovery point is recorded.

import os

import psycopg
from psycopg.types.json import Jsonb

# autocommit=True: the lease claim, each step's transaction and each recovery
# point commit on their own, before the next outside call. With psycopg's
# default (autocommit off) they would all stay in one open transaction.
conn = psycopg.connect(os.environ["EO_DSN"], autocommit=True)


def book_ride(key, lease="2 minutes"):
    status, result, token, point, state = conn.execute(
        "SELECT status, result, lease_token, recovery_point, recovery_state"
        "  FROM eo_claim(%s, lease => %s)", (key, lease)).fetchone()
    if status != "claimed":
        return status, result             # duplicate: answer result; busy, dead: not now
    state = state or {}

    if point is None:                     # step 1: database work and its point, one transaction
        with conn.transaction():
            ride_id = conn.execute("INSERT INTO rides (request) VALUES (%s) RETURNING id",
                                   (key,)).fetchone()[0]
            state = {"ride_id": ride_id}
            conn.execute("SELECT eo_recovery_point(%s, %s, 'ride_created', %s)",
                         (key, token, Jsonb(state)))
        point = "ride_created"

    if point == "ride_created":           # step 2: the outside call, then its point
        charge = cards.charge(100, idempotency_key=key + ":charge")
        state = {**state, "charge": charge}
        conn.execute("SELECT eo_recovery_point(%s, %s, 'charged', %s)",
                     (key, token, Jsonb(state)))
        point = "charged"

    if point == "charged":                # step 3: the last call, then done
        mail.send_receipt(state["ride_id"], idempotency_key=key + ":receipt")
        conn.execute("SELECT eo_complete(%s, %s, lease_token => %s)",
                     (key, Jsonb(state), token))
    return "done", state


# ---- not in the page: the outside services, and a main --------------------

import json  # noqa: E402
import sys  # noqa: E402


class CardService:
    """Charges once per idempotency key; a repeat answers the first charge's id."""

    def __init__(self, die_after_charge):
        self.db = psycopg.connect(os.environ["EO_DSN"], autocommit=True)
        self.die_after_charge = die_after_charge

    def charge(self, amount, idempotency_key):
        self.db.execute("INSERT INTO card_charges (idempotency_key, amount) VALUES (%s, %s)"
                        " ON CONFLICT (idempotency_key) DO NOTHING", (idempotency_key, amount))
        charge_id = self.db.execute("SELECT 'ch_' || id FROM card_charges WHERE idempotency_key = %s",
                                    (idempotency_key,)).fetchone()[0]
        if self.die_after_charge:
            os._exit(3)                   # the worker dies: the charge is made, its point is not
        return charge_id


class MailService:
    """Sends once per idempotency key."""

    def __init__(self):
        self.db = psycopg.connect(os.environ["EO_DSN"], autocommit=True)

    def send_receipt(self, ride_id, idempotency_key):
        self.db.execute("INSERT INTO receipts (idempotency_key, ride_id) VALUES (%s, %s)"
                        " ON CONFLICT (idempotency_key) DO NOTHING", (idempotency_key, ride_id))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--die-after-charge"]
    cards = CardService(die_after_charge="--die-after-charge" in sys.argv[1:])
    mail = MailService()
    print(json.dumps(book_ride(*args)), flush=True)
