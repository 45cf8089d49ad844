"""Idempotency-Key middleware for Django.

    MIDDLEWARE = [..., "django.contrib.auth.middleware.AuthenticationMiddleware",
                  "eo_client.django.IdempotencyKeyMiddleware", ...]
    EO_IDEMPOTENCY = {"using": "default"}     # and any field of eo_client.http.Options

The claim, the view's database work and the stored response are one
transaction (transaction.atomic around the view, as ATOMIC_REQUESTS); the
view finds the claim as ``request.eo_claim``. An exception the view raised
rolls it back, also when Django answers it with a 4xx (Http404, BadRequest).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from django.conf import settings
from django.db import connections, transaction
from django.http import HttpResponse

from . import http
from .claims import claim, status
from .errors import EoError


def default_caller(request: Any) -> Optional[str]:
    """The authenticated user, else a hash of the Authorization header."""
    user = getattr(request, "user", None)
    if user is not None and getattr(user, "is_authenticated", False):
        return f"user:{user.pk}"
    return http.caller_from_authorization(request.headers.get("Authorization"))


def _response(a: http.Answer) -> HttpResponse:
    r = HttpResponse(a.body, status=a.status)
    for n, v in a.headers:
        r[n] = v
    return r


class _Rollback(Exception):
    def __init__(self, response: HttpResponse) -> None:
        self.response = response


class IdempotencyKeyMiddleware:
    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response
        conf = dict(getattr(settings, "EO_IDEMPOTENCY", {}))
        self.using = conf.pop("using", "default")
        self.options = http.Options(**conf)
        self.caller = self.options.caller or default_caller

    def __call__(self, request: Any) -> Any:
        o = self.options
        if request.method.upper() not in o.methods:
            return self.get_response(request)
        key = request.headers.get(o.header)
        length = request.META.get("CONTENT_LENGTH") or None
        if key is not None and length is not None and length.isdigit() and int(length) > o.max_body:
            return _response(http.error(413, f"a request with an {o.header} may have a body of"
                                             f" {o.max_body} bytes at most"))
        body = request.body if key is not None else b""
        prep = http.prepare(o, request.method, request.get_full_path(), key,
                            self.caller(request) if key is not None else None, length, body)
        if prep is None:
            return self.get_response(request)
        if isinstance(prep, http.Answer):
            return _response(prep)
        try:
            # a retry from one eo_status in autocommit; inside a transaction an
            # earlier middleware opened, a failed read would abort it unseen
            if not connections[self.using].in_atomic_block:
                done = http.replay_done(o, prep, status(connections[self.using], prep.key, scope=o.eo_scope,
                                                        wait=o.wait))
                if done is not None:
                    return _response(done)
            with transaction.atomic(using=self.using):
                c = claim(connections[self.using], prep.key, fingerprint=prep.fingerprint, scope=o.eo_scope,
                          wait=o.wait)
                early = http.answer_for(o, c)
                if early is not None:
                    raise _Rollback(_response(early))
                request.eo_claim = c
                response = self.get_response(request)
                if getattr(request, "_eo_raised", False) or http.releases(o, response.status_code):
                    raise _Rollback(response)       # nothing stored: the key is released
                if getattr(response, "streaming", False):
                    content = b"".join(response.streaming_content)
                    plain = HttpResponse(content, status=response.status_code)
                    for n, v in response.items():
                        plain[n] = v
                    response = plain
                result = http.stored(o, response.status_code, response.items(), response.content,
                                     prep.fingerprint)
                if isinstance(result, http.Answer):
                    raise _Rollback(_response(result))
                c.complete(result)
            return response
        except _Rollback as r:
            return r.response
        except EoError as e:
            a = http.answer_for_error(o, e)
            if a is None:
                raise
            return _response(a)

    def process_exception(self, request: Any, exception: Exception) -> None:
        """The view raised: whatever Django answers (404, 400, 403...), roll its work back."""
        if getattr(request, "eo_claim", None) is not None:
            request._eo_raised = True
