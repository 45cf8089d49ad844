#!/usr/bin/python3
# A physical standby far away, for the tests: it streams WAL through a
# replication slot and reports each position flushed DELAY seconds after it
# arrived (another region's standby, whose flush lag is steady).  It keeps
# nothing.  Usage: far_standby.py DSN SLOT DELAY
import collections
import select
import sys
import time

import psycopg2
import psycopg2.extras

dsn, slot, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])

with psycopg2.connect(dsn) as conn:
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_lsn()")
        start = cur.fetchone()[0]

repl = psycopg2.connect(dsn, connection_factory=psycopg2.extras.PhysicalReplicationConnection)
cur = repl.cursor()
cur.start_replication(slot_name=slot, slot_type=psycopg2.extras.REPLICATION_PHYSICAL,
                      start_lsn=start)
arrived = collections.deque()   # (when, end of the WAL received)
received = flushed = 0
while True:
    msg = cur.read_message()
    now = time.time()
    if msg is not None:
        received = max(received, msg.data_start + len(msg.payload))
        arrived.append((now, received))
        continue
    while arrived and arrived[0][0] <= now - delay:
        flushed = arrived.popleft()[1]
    if flushed:
        cur.send_feedback(write_lsn=received, flush_lsn=flushed, apply_lsn=flushed,
                          reply=False, force=True)
    select.select([cur], [], [], 0.002)
