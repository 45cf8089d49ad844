
import psycopg
import psycopg2
import pytest
import sqlalchemy
from flask import Flask, g, jsonify, request
from werkzeug.serving import make_server

import scenarios
from apps import Invalid, order, psycopg_exec, sqlalchemy_exec
from eo_client.flask import IdempotencyKey


def make_app(connect):
    app = Flask(__name__)
    IdempotencyKey(app, connect=connect, caller=lambda r: r.headers.get("X-Caller"), wait=0.5)

    @app.errorhandler(Invalid)
    def invalid(e):
        return jsonify(error=str(e)), 400

    @app.post("/orders")
    def create():
        conn = g.eo_conn
        run = sqlalchemy_exec(conn) if hasattr(conn, "exec_driver_sql") else psycopg_exec(conn)
        status, out, headers = order(run, request.get_json(), request.headers.get("X-Echo"))
        resp = jsonify(out)
        resp.status_code = status
        resp.headers.update(headers)
        return resp
    return app


def connectors(dsn):
    engine = sqlalchemy.create_engine("postgresql+psycopg2://", creator=lambda: psycopg2.connect(dsn),
                                    poolclass=sqlalchemy.pool.NullPool)
    return {"psycopg": lambda: psycopg.connect(dsn), "psycopg2": lambda: psycopg2.connect(dsn),
            "sqlalchemy": engine.connect}


@pytest.fixture(params=["psycopg", "psycopg2", "sqlalchemy"])
def app(request, dsn):
    return make_app(connectors(dsn)[request.param])


def poster(app):
    client = app.test_client()

    def post(body, headers):
        r = client.post("/orders", data=body, headers=headers)
        return r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.data
    return post


@pytest.mark.parametrize("scenario", scenarios.ALL, ids=lambda s: s.__name__)
def test_flask(app, admin, scenario):
    scenario(poster(app), admin)


@pytest.fixture
def server(dsn):
    yield from scenarios.serve_wsgi(make_server("127.0.0.1", 0, make_app(lambda: psycopg.connect(dsn)),
                                                threaded=True))


def test_flask_client_gone_mid_body(server, admin):
    scenarios.client_gone_mid_body(server, admin)



def test_flask_chunked_huge(server, admin):
    scenarios.chunked_huge(server, admin)
