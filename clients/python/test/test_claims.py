"""The helpers: every status, every error class, leases, recovery points, each driver."""
import asyncio
import time

import psycopg
import psycopg2
import pytest
import sqlalchemy

import eo_client as eo


def test_statuses(conn):
    c = eo.claim(conn, "s:1", fingerprint="fp")
    assert (c.status, c.claimed, c.attempts, c.token, c.result) == ("claimed", True, 1, None, None)
    c.complete({"n": 1})
    conn.commit()
    d = eo.claim(conn, "s:1", fingerprint="fp")
    assert d.duplicate and d.result == {"n": 1} and d.raise_for_status() is d
    conn.rollback()
    # busy: a live lease
    conn.autocommit = True
    lease = eo.claim(conn, "s:2", lease=60)
    assert lease.claimed and lease.token and lease.lease_expires_at is not None
    b = eo.claim(conn, "s:2", lease=60)
    assert b.busy and 55 <= b.retry_after <= 60
    with pytest.raises(eo.Busy) as e:
        b.raise_for_status()
    assert e.value.retry_after == b.retry_after
    # dead: eo.max_attempts (5) failures
    for _ in range(5):
        with conn.transaction():                              # eo_fail in the claiming transaction
            eo.claim(conn, "s:3").fail("down")
    x = eo.claim(conn, "s:3")
    assert x.dead and x.attempts == 5
    with pytest.raises(eo.Dead):
        x.raise_for_status()
    # status
    st = eo.status(conn, "s:3")
    assert st.state == "dead" and st.last_error == "down"
    assert eo.status(conn, "s:unknown") is None


def test_errors(conn, other_dsn):
    conn.autocommit = True
    eo.claim(conn, "e:1", fingerprint="a")
    with pytest.raises(eo.FingerprintMismatch) as e:
        eo.claim(conn, "e:1", fingerprint="b")
    assert e.value.sqlstate == "22000"
    for bad in (None, "", "x" * 513):
        with pytest.raises(eo.BadKey):
            eo.claim(conn, bad)
    with pytest.raises(eo.InvalidArgument) as e:
        eo.claim(conn, "e:2", lease="400 days")            # over eo.max_lease (server side)
    assert e.value.sqlstate == "22023" and not isinstance(e.value, eo.BadKey)
    with pytest.raises(eo.InvalidArgument):
        eo.claim(conn, "e:2", fingerprint="f" * 600)
    with pytest.raises(eo.NotHeld):
        eo.Claim(key="e:never", scope=None, status="claimed", conn=conn).complete()
    with psycopg.connect(other_dsn, autocommit=True) as other:
        with pytest.raises(eo.PermissionDenied):
            eo.claim(other, "e:1", fingerprint="a")
    with pytest.raises(eo.UndefinedObject):
        eo.claim(conn, "e:3", scope="no-such-scope")
    # rejected: a final failure, replayed as its own SQLSTATE
    with conn.transaction():
        assert eo.claim(conn, "e:4").fail("qty must be positive", sqlstate="23514") == "rejected"
    with pytest.raises(eo.Rejected) as e:
        eo.claim(conn, "e:4")
    assert e.value.sqlstate == "23514" and e.value.message == "qty must be positive"
    # read-only
    with pytest.raises(eo.ReadOnly):
        with conn.transaction():
            conn.execute("SET TRANSACTION READ ONLY")
            eo.claim(conn, "e:5")


def test_wait_bounded(dsn, conn):
    """A claim of a key another open transaction holds waits at most `wait`: Transient (55P03)."""
    holder = psycopg.connect(dsn)
    eo.claim(holder, "w:1")
    t0 = time.monotonic()
    with pytest.raises(eo.Transient) as e:
        eo.claim(conn, "w:1", wait=0.3)
    assert e.value.sqlstate == "55P03" and time.monotonic() - t0 < 2
    conn.rollback()
    holder.rollback()                                         # the holder rolls back: claimable again
    assert eo.claim(conn, "w:1", wait=0.3).claimed
    # lock_timeout is back to what it was
    assert conn.execute("SHOW lock_timeout").fetchone()[0] == "0"
    holder.close()


def test_status_wait_bounded(dsn, conn):
    """eo_status waits for a claim in flight; `wait` bounds it (55P03), and lock_timeout is put
    back after it in the caller's transaction, also when the key has no row."""
    conn.execute("SET lock_timeout = '7s'")
    conn.commit()
    holder = psycopg.connect(dsn)
    eo.claim(holder, "sw:1")
    t0 = time.monotonic()
    with pytest.raises(eo.Transient) as e:
        eo.status(conn, "sw:1", wait=0.3)
    assert e.value.sqlstate == "55P03" and time.monotonic() - t0 < 2
    conn.rollback()
    assert eo.status(conn, "sw:none", wait=0.3) is None
    assert conn.execute("SHOW lock_timeout").fetchone()[0] == "7s"
    holder.commit()                                           # done: the wait ends with its state
    assert eo.status(conn, "sw:1", wait=0.3).state == "done"
    assert eo.claim(conn, "sw:2", wait=0.3).claimed
    assert conn.execute("SHOW lock_timeout").fetchone()[0] == "7s"
    holder.close()


def test_lease_takeover_stale_refused(conn):
    conn.autocommit = True
    first = eo.claim(conn, "l:1", lease=1)
    time.sleep(1.3)
    second = eo.claim(conn, "l:1", lease=60)
    assert second.claimed and second.attempts == 2 and second.token > first.token
    for call in (lambda: first.complete({"x": 1}), lambda: first.extend(30),
                 lambda: first.recovery_point("p"), lambda: first.fail("late")):
        with pytest.raises(eo.StaleToken):
            call()
    second.complete({"x": 2})
    assert eo.status(conn, "l:1").result == {"x": 2}


def test_lease_heartbeat(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn, autocommit=True) as hb:
        with eo.Lease(conn, "l:2", lease=1, heartbeat=0.3, heartbeat_conn=hb) as l:
            assert l.claimed
            time.sleep(1.6)                                   # longer than the lease: renewed meanwhile
            assert eo.claim(conn, "l:2", lease=1).busy
            with conn.transaction():
                l.complete({"ok": True})
        assert eo.claim(conn, "l:2").duplicate


def test_lease_heartbeat_stale_stops_store(dsn):
    """The heartbeat learns of a takeover; the work's result is then not stored."""
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn, autocommit=True) as hb:
        with pytest.raises(eo.StaleToken):
            # a heartbeat too slow for its lease: the holder stalls past the lease's end
            with eo.Lease(conn, "l:3", lease=1, heartbeat=2.5, heartbeat_conn=hb) as l:
                time.sleep(1.3)
                other = eo.claim(conn, "l:3", lease=60)       # the next delivery takes the key over
                assert other.claimed and other.attempts == 2
                time.sleep(1.6)                               # the heartbeat's eo_extend is refused: stale
                assert l.stale
                l.complete({"late": True})                    # refused without being sent
        other.complete({"winner": True})
        assert eo.status(conn, "l:3").result == {"winner": True}


def test_lease_block_raises_records_failure(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(ValueError):
            with eo.Lease(conn, "l:4", lease=30, retry_after=60):
                raise ValueError("card declined")
        st = eo.status(conn, "l:4")
        assert st.state == "failed" and "card declined" in st.last_error
        assert eo.claim(conn, "l:4", lease=30).busy       # not due for 60 s


def test_recovery_point(conn):
    conn.autocommit = True
    c = eo.claim(conn, "r:1", lease=1)
    c.recovery_point("charged", {"charge": "ch_1"})
    time.sleep(1.3)
    again = eo.claim(conn, "r:1", lease=60)
    assert again.claimed and again.recovered == eo.RecoveryPoint("charged", {"charge": "ch_1"})


def test_psycopg2_and_sqlalchemy(dsn):
    pg2 = psycopg2.connect(dsn)
    c = eo.claim(pg2, "d:1")
    assert c.claimed
    c.complete([1])
    pg2.commit()
    assert eo.claim(pg2, "d:1").result == [1]
    pg2.rollback()
    with pytest.raises(eo.FingerprintMismatch):
        eo.claim(pg2, "d:2", fingerprint="a") and pg2.commit() or eo.claim(pg2, "d:2", fingerprint="b")
    pg2.close()
    engine = sqlalchemy.create_engine("postgresql+psycopg2://", creator=lambda: psycopg2.connect(dsn))
    from sqlalchemy.orm import Session
    with Session(engine) as session:
        with session.begin():
            session.execute(sqlalchemy.text("INSERT INTO orders (item, qty) VALUES ('tea', 1)"))
            assert eo.claim(session, "d:3").claimed
        with session.begin():
            assert eo.claim(session, "d:3").duplicate
        try:
            with session.begin():
                assert eo.claim(session, "d:4").claimed
                raise RuntimeError("rollback")
        except RuntimeError:
            pass
    with engine.connect() as c2:
        with c2.begin():
            assert eo.claim(c2, "d:4").claimed                # rolled back with the session's transaction
            assert eo.status(c2, "d:3").state == "done"
    engine.dispose()


def test_async(dsn):
    async def main():
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        async with conn.transaction():
            c = await eo.aclaim(conn, "a:1", fingerprint="f")
            assert c.claimed
            await c.complete({"a": 1})
        d = await eo.aclaim(conn, "a:1", fingerprint="f")
        assert d.duplicate and d.result == {"a": 1}
        with pytest.raises(eo.FingerprintMismatch):
            await eo.aclaim(conn, "a:1", fingerprint="g")
        async with eo.AsyncLease(conn, "a:2", lease=1, heartbeat=0.3) as l:
            assert l.claimed
            await asyncio.sleep(1.5)
            assert (await eo.aclaim(conn, "a:2", lease=1)).busy
            await l.recovery_point("half", {"h": 1})
            await l.complete({"done": True})
        assert (await eo.astatus(conn, "a:2")).result == {"done": True}
        await conn.close()
    asyncio.run(main())
