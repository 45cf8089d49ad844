"""The order handler each framework's test app wraps: the same logic, the framework's plumbing."""
import time


class Invalid(Exception):
    """The order is refused after the insert: each app's error handler answers it with 400."""


def order(conn_exec, data, echo):
    """Insert the order with ``conn_exec(sql, params) -> first row``; returns (status, body dict, headers)."""
    oid = conn_exec("INSERT INTO orders (item, qty) VALUES (%s, %s) RETURNING id", (data["item"], data["qty"]))[0]
    if data.get("sleep"):
        time.sleep(data["sleep"])
    if data.get("boom"):
        raise RuntimeError("boom")
    if data.get("invalid"):
        raise Invalid("invalid order")
    if data.get("five"):
        return 503, {"error": "unavailable"}, {}
    if data.get("throttle"):
        return 429, {"error": "slow down"}, {}
    out = {"id": oid}
    if data.get("huge"):
        out["pad"] = "x" * (600 << 10)
    headers = {"Location": f"/orders/{oid}", "Set-Cookie": f"session=secret-{oid}; HttpOnly"}
    if echo:
        headers["X-Echo"] = echo
    return 201, out, headers


def psycopg_exec(conn):
    def run(sql, params):
        cur = conn.cursor()
        cur.execute(sql, params)
        row = cur.fetchone()
        cur.close()
        return row
    return run


def sqlalchemy_exec(conn):
    return lambda sql, params: conn.exec_driver_sql(sql, params).fetchone()
