"""The Idempotency-Key checks, the same for each framework.

Each framework's test module gives ``post(body: dict | bytes, headers: dict) -> (status, headers, body)``
for an app whose POST /orders inserts into orders (and sleeps ``sleep`` seconds,
raises for ``boom``, answers 503 for ``five``), answers 201 {"id": ...} with a
Location, a Set-Cookie and an X-Echo of the request's X-Echo header, and
whose caller is the X-Caller header."""
import json
import threading
import time

from eo_client import http

KEY = "Idempotency-Key"
RUN = ["0"]    # each test's callers are its own (conftest sets it): eo keeps keys across tests


def who(caller):
    return f"{caller}-{RUN[0]}"


def orders(admin):
    return admin.execute("SELECT count(*) FROM orders").fetchone()[0]


def keys(admin, caller, key, prefix="http"):
    """Whether eo holds the key of (caller, key): its state, or None."""
    row = admin.execute("SELECT state FROM eo_keys() WHERE key = %s", (http.eo_key(prefix, who(caller), key),)).fetchone()
    return row and row[0]


def h(key=None, caller="alice", **more):
    d = {"X-Caller": who(caller), "Content-Type": "application/json"}
    if key is not None:
        d[KEY] = key
    d.update(more)
    return d


def body(**kw):
    return json.dumps({"item": "tea", "qty": 2, **kw}).encode()


def retry_replays(post, admin):
    s1, h1, b1 = post(body(), h("k-retry"))
    assert s1 == 201, (s1, b1)
    s2, h2, b2 = post(body(), h("k-retry"))
    assert (s2, b2) == (201, b1)
    assert h2.get("idempotent-replayed") == "true"
    assert h2.get("location") == h1.get("location")
    assert "set-cookie" not in h2 and "x-echo" not in h2       # never stored
    assert "idempotent-replayed" not in h1
    assert orders(admin) == 1


def older_result_replays(post, admin):
    """A response stored without its request's fingerprint (as earlier builds of the client stored them) is
    replayed through the claim, which checks the fingerprint: another body is 422."""
    key = http.eo_key("http", who("alice"), "k-old")
    stored = json.dumps({"http_status": 201, "headers": [["Content-Type", "application/json"]], "body": '{"id":99}'})
    admin.execute("SET ROLE eo_py_app")
    try:
        with admin.transaction():
            admin.execute("SELECT eo_claim(%s, %s)", (key, http.default_fingerprint("POST", "/orders", body())))
            admin.execute("SELECT eo_complete(%s, %s::jsonb)", (key, stored))
    finally:
        admin.execute("RESET ROLE")
    s, hs, b = post(body(), h("k-old"))
    assert (s, b, hs.get("idempotent-replayed")) == (201, b'{"id":99}', "true")
    assert post(body(qty=5), h("k-old"))[0] == 422
    assert orders(admin) == 0


def changed_body_422(post, admin):
    assert post(body(), h("k-422"))[0] == 201
    s, _, b = post(body(qty=3), h("k-422"))
    assert s == 422, b
    assert orders(admin) == 1


def missing_key_400(post, admin):
    assert post(body(), h())[0] == 400
    assert orders(admin) == 0


def handler_raises(post, admin):
    s, _, _ = post(body(boom=True), h("k-boom"))
    assert s == 500
    assert orders(admin) == 0 and keys(admin, "alice", "k-boom") is None
    s, _, _ = post(body(five=True), h("k-five"))
    assert s == 503
    assert orders(admin) == 0 and keys(admin, "alice", "k-five") is None
    s, _, _ = post(body(throttle=True), h("k-429"))           # 429 (and 401, 403, 408, 425): not stored
    assert s == 429 and keys(admin, "alice", "k-429") is None
    assert post(body(), h("k-boom"))[0] == 201               # the retry does the work
    assert orders(admin) == 1


def handled_error(post, admin):
    """The handler writes, then raises an error that the app's error handler answers with 400:
    its work is rolled back and nothing is stored, as for any exception."""
    s, hd, b = post(body(invalid=True), h("k-invalid"))
    assert s == 400, b
    assert orders(admin) == 0, "the handler's partial work was committed"
    assert keys(admin, "alice", "k-invalid") is None, "the 400 was stored for the key"
    assert post(body(), h("k-invalid"))[0] == 201
    assert orders(admin) == 1


def concurrent(post, admin):
    """Two requests with one key: one effect; the other 409 (Retry-After) or, after, the replay."""
    out = []

    def one(delay):
        time.sleep(delay)
        out.append(post(body(sleep=1.5), h("k-conc")))
    ts = [threading.Thread(target=one, args=(d,)) for d in (0, 0.3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    codes = sorted(s for s, _, _ in out)
    assert codes == [201, 409], out
    busy = [hd for s, hd, _ in out if s == 409][0]
    assert int(busy["retry-after"]) >= 1
    assert orders(admin) == 1
    s, hd, _ = post(body(sleep=1.5), h("k-conc"))
    assert s == 201 and hd.get("idempotent-replayed") == "true"
    assert orders(admin) == 1


def callers_apart(post, admin):
    """A hostile caller sending another's key (and body) gets its own, never the other's response."""
    s1, _, b1 = post(body(), h("k-shared", caller="alice"))
    s2, h2, b2 = post(body(), h("k-shared", caller="mallory"))
    assert (s1, s2) == (201, 201) and b1 != b2 and "idempotent-replayed" not in h2
    # a changed body under the other's key is its own new request, not a 422 about alice's
    assert post(body(qty=9), h("k-shared2", caller="alice"))[0] == 201
    assert post(body(qty=1), h("k-shared2", caller="mallory"))[0] == 201
    # callers whose id and key concatenate alike stay apart
    assert post(body(), h("b:c", caller="a"))[0] == 201
    s, hd, _ = post(body(), h("c", caller="a:b"))
    assert s == 201 and "idempotent-replayed" not in hd
    # no caller: refused
    assert post(body(), {KEY: "k-anon", "Content-Type": "application/json"})[0] == 401
    assert orders(admin) == 6


def hostile_input(post, admin):
    assert post(body(), h("x" * 256))[0] == 400                       # over 255 characters
    assert post(body(), h("x" * 255))[0] == 201                       # hashed: eo's 512 bytes never reached
    assert post(body(), h("k\x7f"))[0] == 400                          # not printable ASCII
    assert post(body(), h("   "))[0] == 400
    big = json.dumps({"item": "x" * (1 << 20), "qty": 1}).encode()
    assert post(big, h("k-big"))[0] == 413
    assert keys(admin, "alice", "k-big") is None
    # a response too big to store: rolled back, nothing done
    s, _, b = post(body(huge=True), h("k-huge"))
    assert s == 500, b
    assert keys(admin, "alice", "k-huge") is None
    # a header the handler echoes from the request is never stored, so never replayed to anyone
    s, hd, _ = post(body(), h("k-echo", **{"X-Echo": "evil"}))
    assert s == 201 and hd.get("x-echo") == "evil"
    s, hd, _ = post(body(), h("k-echo", **{"X-Echo": "other"}))
    assert s == 201 and "x-echo" not in hd and "set-cookie" not in hd
    assert orders(admin) == 2


def client_gone_mid_body(port, admin, path="/orders"):
    """A client that sends half its body and disconnects leaves nothing claimed."""
    import socket
    payload = body()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"X-Caller: {who('alice')}\r\n{KEY}: k-gone-body\r\nContent-Length: {len(payload)}\r\n\r\n").encode()
              + payload[:5])
    time.sleep(0.3)
    s.close()
    time.sleep(1.0)
    assert keys(admin, "alice", "k-gone-body") is None
    assert orders(admin) == 0


def client_gone_mid_handler(port, admin, path="/orders"):
    """A client that disconnects while the handler runs: the transaction rolls back, nothing claimed."""
    import socket
    payload = body(sleep=1.5)
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"X-Caller: {who('alice')}\r\n{KEY}: k-gone\r\nContent-Length: {len(payload)}\r\n\r\n").encode() + payload)
    time.sleep(0.5)
    s.close()
    time.sleep(2.0)
    assert keys(admin, "alice", "k-gone") is None
    assert orders(admin) == 0


def chunked_huge(port, admin, path="/orders", drains=False):
    """A body sent chunked (no Content-Length) far over the limit: 413, nothing claimed."""
    import socket
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"X-Caller: {who('alice')}\r\n{KEY}: k-chunked\r\nTransfer-Encoding: chunked\r\n\r\n").encode())
    chunk = b"%x\r\n" % (64 << 10) + b"x" * (64 << 10) + b"\r\n"
    s.settimeout(5)
    sent = 0
    try:
        for _ in range(256):              # 16 MiB; the limit is 1 MiB
            s.sendall(chunk)
            sent += 1
        s.sendall(b"0\r\n\r\n")
    except OSError:
        pass                              # the server answered and closed: it read no further
    assert drains or sent < 256, "the server read the whole body"
    status = s.recv(4096).split(b" ")[1]
    s.close()
    assert status == b"413", status
    assert keys(admin, "alice", "k-chunked") is None
    assert orders(admin) == 0


ALL = [retry_replays, older_result_replays, changed_body_422, missing_key_400, handler_raises, handled_error, concurrent,
       callers_apart, hostile_input]


def serve_wsgi(server):
    """Serve a WSGI server (wsgiref's or werkzeug's) in a thread: yields its port."""
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
