import json
import os
import wsgiref.simple_server

import django
import pytest
from django.conf import settings

import scenarios
from apps import Invalid, order

DB = os.environ.get("EO_PY_TEST_DB", "eo_py_test")


def view(request):
    from django.db import connection
    from django.http import JsonResponse

    def run(sql, params):
        with connection.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchone()
    from django.core.exceptions import BadRequest
    try:
        status, out, headers = order(run, json.loads(request.body), request.headers.get("X-Echo"))
    except Invalid as e:
        raise BadRequest(str(e))       # Django's handler answers it with 400
    resp = JsonResponse(out, status=status)
    for n, v in headers.items():
        resp[n] = v
    return resp


def view_boom(request):
    raise RuntimeError("boom")


urlpatterns = []


@pytest.fixture(scope="module")
def django_app(admin_dsn):
    from django.urls import path
    if not settings.configured:
        settings.configure(
            DEBUG=False, SECRET_KEY="test", ALLOWED_HOSTS=["*"], ROOT_URLCONF=__name__,
            MIDDLEWARE=["eo_client.django.IdempotencyKeyMiddleware"],
            DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": DB, "USER": "eo_py_app",
                                   "HOST": os.environ.get("PGHOST", ""), "PORT": os.environ.get("PGPORT", "")}},
            EO_IDEMPOTENCY={"caller": lambda r: r.headers.get("X-Caller"), "wait": 0.5},
            INSTALLED_APPS=[], USE_TZ=True, LOGGING_CONFIG=None)
        django.setup()
    urlpatterns[:] = [path("orders", view)]
    from django.core.handlers.wsgi import WSGIHandler
    return WSGIHandler()


def poster():
    from django.test import Client
    client = Client(raise_request_exception=False)

    def post(body, headers):
        extra = {"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items() if k != "Content-Type"}
        r = client.post("/orders", data=body, content_type="application/json", **extra)
        return r.status_code, {k.lower(): v for k, v in r.items()}, r.content
    return post


@pytest.mark.parametrize("scenario", scenarios.ALL, ids=lambda s: s.__name__)
def test_django(django_app, admin, scenario):
    scenario(poster(), admin)


class _Quiet(wsgiref.simple_server.WSGIRequestHandler):
    def log_message(self, *a):
        pass


@pytest.fixture
def server(django_app):
    yield from scenarios.serve_wsgi(wsgiref.simple_server.make_server("127.0.0.1", 0, django_app,
                                                                      handler_class=_Quiet))


def test_django_client_gone_mid_body(server, admin):
    scenarios.client_gone_mid_body(server, admin)
