"""The inbox of a consumer, under redelivery."""
import psycopg
import pytest

import eo_client as eo


def pay(claim, payload=None):
    conn = claim.conn
    conn.execute("INSERT INTO payments VALUES (%s, %s)", (claim.key.split(":")[-1], (payload or {}).get("amount")))
    return "paid"


def payments(admin):
    return admin.execute("SELECT count(*) FROM payments").fetchone()[0]


def test_apply_redelivered(conn, admin):
    with conn.transaction():
        a = eo.apply(conn, "payments:evt-1", lambda c: pay(c, {"amount": 100}))
    assert (a.status, a.value, a.ack) == ("claimed", "paid", True)
    with conn.transaction():                                  # the broker delivers it again
        b = eo.apply(conn, "payments:evt-1", lambda c: pay(c, {"amount": 100}))
    assert (b.status, b.value, b.ack) == ("duplicate", None, True)
    # the consumer dies before COMMIT: nothing remains, the redelivery does the work
    with pytest.raises(RuntimeError):
        with conn.transaction():
            eo.apply(conn, "payments:evt-2", lambda c: pay(c, {"amount": 5}))
            raise RuntimeError("crash")
    with conn.transaction():
        assert eo.apply(conn, "payments:evt-2", lambda c: pay(c, {"amount": 5})).status == "claimed"
    assert payments(admin) == 2


def test_apply_batch_redelivered(conn, admin):
    batch = [("payments:b3", {"amount": 3}), ("payments:b1", {"amount": 1}), ("payments:b3", {"amount": 3}),
             ("payments:b2", {"amount": 2})]
    with conn.transaction():
        out = eo.apply_batch(conn, batch, pay)
    assert [(a.event_id, a.status) for a in out] == [
        ("payments:b3", "claimed"), ("payments:b1", "claimed"), ("payments:b3", "duplicate"),
        ("payments:b2", "claimed")]
    with conn.transaction():                                  # the whole batch again
        again = eo.apply_batch(conn, batch, pay)
    assert {a.status for a in again} == {"duplicate"} and all(a.ack for a in again)
    assert payments(admin) == 3


def test_apply_in_scope(dsn, admin):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT eo_scope_create('billing')")
        with conn.transaction():
            assert eo.apply(conn, "evt-9", lambda c: pay(c, {"amount": 9}), scope="billing").status == "claimed"
        with conn.transaction():                              # the same event id without the scope: another key
            assert eo.apply(conn, "evt-9", lambda c: "other").status == "claimed"
        with conn.transaction():
            assert eo.apply(conn, "evt-9", lambda c: pay(c), scope="billing").status == "duplicate"
    assert payments(admin) == 1


def test_final_failure_rejected(conn, admin):
    conn.autocommit = True
    with pytest.raises(psycopg.errors.NotNullViolation) as e:
        with conn.transaction():
            eo.apply(conn, "payments:evt-bad", lambda c: pay(c, {}))       # amount NULL: 23502
    assert eo.record_failure(conn, "payments:evt-bad", e.value) == "rejected"
    with pytest.raises(eo.Rejected) as r:
        with conn.transaction():
            eo.apply(conn, "payments:evt-bad", lambda c: pay(c, {}))
    assert r.value.sqlstate == "23502"
    # a failure that is not final: retried
    with pytest.raises(RuntimeError) as e2:
        with conn.transaction():
            eo.apply(conn, "payments:evt-flaky", lambda c: (_ for _ in ()).throw(RuntimeError("timeout")))
    assert eo.record_failure(conn, "payments:evt-flaky", e2.value) == "retry"
    with conn.transaction():
        assert eo.apply(conn, "payments:evt-flaky", lambda c: pay(c, {"amount": 1})).status == "claimed"
    assert payments(admin) == 1
