"""The dashboard's security: login sessions, CSRF tokens, the limit on wrong tokens, and the
guard (middleware) every request passes first.

Each dashboard process draws a random secret when it starts.
- A login (the token, on the form) sets a session cookie `<id>.<expiry>.<signature>`, signed with
  that secret; it expires after SESSION_SECONDS, logout revokes its id, and a restart of the
  process ends every session.
- Every form carries a CSRF token that is the secret's signature of the session's id (before a
  login, or without a token, of a random browser id kept in a cookie): a cookie that another page
  planted cannot be turned into a token without the secret, and one session's token is no good in
  another.
- Every state-changing request whose `Sec-Fetch-Site` is not same-origin (or none), or whose
  `Origin` names another host than the one it was sent to, is refused with 403 before it is read.
- Wrong tokens (on the login form, the reveal form, or in a bearer header) are counted per client
  address: after LOGIN_ATTEMPTS of them within LOGIN_WINDOW seconds, that address is answered 429
  until the window has passed.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from typing import Any
from urllib.parse import urlencode, urlsplit

import psycopg
from starlette.datastructures import FormData
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from ..errors import WorkhorseError, first_line
from ..types import shown
from ._access import check_token, is_loopback

SESSION_COOKIE = "workhorse_session"
CSRF_COOKIE = "workhorse_csrf"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
# A login lasts this long (then the login form again); logout ends it at once.
SESSION_SECONDS = 8 * 3600
# Wrong tokens from one client address: at most this many within this many seconds.
LOGIN_ATTEMPTS = 5
LOGIN_WINDOW = 60.0
# Client addresses whose wrong tokens are remembered at most (the oldest are forgotten first).
LOGIN_CLIENTS = 10_000
BROWSER_ID = re.compile(r"^[A-Za-z0-9_-]{43}$")  # secrets.token_urlsafe(32)
# Pages anyone may fetch: the login form and its assets.
PUBLIC_PREFIXES = ("/login", "/static/")
# Actions refused by --read-only (every POST but logging in and out, and revealing a payload).
SESSION_PATHS = ("/login", "/logout")
_REVEAL_PATH = re.compile(r"^/jobs/[0-9]+/reveal$")
# What a state-changing request may say in Sec-Fetch-Site: sent by this site's own pages, or typed
# by the user ("none"); "same-site" is another origin (a sibling host or port) and is refused.
ALLOWED_FETCH_SITES = ("same-origin", "none")
# Scripts from our own static files only: no inline script, nothing from elsewhere.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
)


def clock() -> float:
    """The clock sessions, notices and the login limit read (a function, so that tests can
    move it)."""
    return time.time()


def same(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and hmac.compare_digest(
        a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass"))


def local_path(target: str | None, default: str = "/") -> str:
    """A redirect target on this site only (no scheme, no host, no `//`)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return default
    return target


class Security:
    """The login, session, CSRF and wrong-token state of one dashboard process, and the checks
    the guard and the routes ask of it."""

    def __init__(self, *, read_only: bool, token: str | None, local_only: bool = False) -> None:
        self.local_only = local_only
        self.read_only = read_only
        self.token = check_token(token) if token is not None else None
        self.secret = secrets.token_bytes(32)
        self.lock = threading.Lock()
        self.revoked: dict[str, float] = {}       # session id -> its expiry
        self.failures: dict[str, list[float]] = {}  # client address -> its wrong tokens' times

    # ---- signatures, sessions, CSRF ------------------------------------------------------

    def sign(self, kind: str, value: str) -> str:
        return hmac.new(self.secret, f"{kind}|{value}".encode(), hashlib.sha256).hexdigest()

    def new_session(self) -> str:
        """A session cookie's value: a random id and its expiry, signed."""
        value = f"{secrets.token_urlsafe(18)}.{int(clock()) + SESSION_SECONDS}"
        return f"{value}.{self.sign('session', value)}"

    def session(self, request: Request) -> tuple[str, float] | None:
        """The (id, expiry) of the request's session cookie when it is ours, unexpired and not
        revoked; None otherwise."""
        cookie = request.cookies.get(SESSION_COOKIE)
        if not cookie or cookie.count(".") != 2:
            return None
        sid, expires, signature = cookie.split(".")
        if not same(signature, self.sign("session", f"{sid}.{expires}")):
            return None
        try:
            until = float(int(expires))
        except ValueError:
            return None
        if until <= clock() or sid in self.revoked:
            return None
        return sid, until

    def revoke(self, request: Request) -> None:
        found = self.session(request)
        with self.lock:
            now = clock()
            for sid, until in list(self.revoked.items()):
                if until <= now:
                    del self.revoked[sid]
            if found is not None:
                self.revoked[found[0]] = found[1]

    def csrf_token(self, request: Request, browser: str | None = None) -> str | None:
        """The CSRF token of this request's session (or, before a login and without a token,
        of its browser id): the secret's signature of it. None without either."""
        found = self.session(request) if self.token is not None else None
        if found is not None:
            return self.sign("csrf", f"session:{found[0]}")
        browser = browser if browser is not None else request.cookies.get(CSRF_COOKIE)
        if browser is None or not BROWSER_ID.match(browser):
            return None
        return self.sign("csrf", f"browser:{browser}")

    # ---- wrong tokens ----------------------------------------------------------------------

    def blocked_for(self, client: str) -> float:
        """Seconds until `client` may present a token again (0: it may now)."""
        with self.lock:
            now = clock()
            recent = [t for t in self.failures.get(client, ()) if t > now - LOGIN_WINDOW]
            if recent:
                self.failures[client] = recent
            else:
                self.failures.pop(client, None)
            if len(recent) < LOGIN_ATTEMPTS:
                return 0.0
            return max(recent[-LOGIN_ATTEMPTS] + LOGIN_WINDOW - now, 1.0)

    def failed(self, client: str) -> None:
        with self.lock:
            self.failures.setdefault(client, []).append(clock())
            self.failures[client] = self.failures[client][-LOGIN_ATTEMPTS:]
            while len(self.failures) > LOGIN_CLIENTS:
                del self.failures[next(iter(self.failures))]

    def right_token(self, request: Request, sent: str | None) -> bool:
        """Whether `sent` is the token; a wrong one counts against the client's address."""
        if self.token is not None and same(sent, self.token):
            return True
        self.failed(client_address(request))
        return False

    # ---- checks --------------------------------------------------------------------------

    def bearer(self, request: Request) -> str | None:
        header = request.headers.get("authorization", "")
        return header[7:].strip() if header.lower().startswith("bearer ") else None

    def bearer_ok(self, request: Request) -> bool:
        return self.token is not None and same(self.bearer(request), self.token)

    def authenticated(self, request: Request) -> bool:
        if self.token is None:
            return True
        if self.bearer(request) is not None:
            return self.bearer_ok(request)
        return self.session(request) is not None

    async def checked_form(self, request: Request) -> FormData:
        """The POSTed form, once its CSRF token is this session's (a client that sends the
        token itself as a bearer header sends nothing a browser would add on its own, so it
        needs none)."""
        form = await request.form()
        if self.bearer_ok(request):
            return form
        sent = form.get(CSRF_FIELD)
        sent = sent if isinstance(sent, str) else request.headers.get(CSRF_HEADER)
        if not same(sent, self.csrf_token(request)):
            raise Refused(403, "the form's CSRF token is not this session's: reload the page "
                                "and try again")
        return form


def is_https(request: Request) -> bool:
    return request.url.scheme == "https"


def client_address(request: Request) -> str:
    return request.client.host if request.client is not None else "-"


def _port(scheme: str, port: int | None) -> int | None:
    return port if port is not None else {"http": 80, "https": 443}.get(scheme)


def foreign(request: Request) -> str | None:
    """Why a state-changing request comes from another site (None: it does not): its
    Sec-Fetch-Site is cross-site or same-site, or its Origin is not the host it was sent to.
    A client that sends neither header (curl, a script) is not a browser page of another site."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site.strip().lower() not in ALLOWED_FETCH_SITES:
        return f"a {site} request (Sec-Fetch-Site)"
    origin = request.headers.get("origin")
    if origin is None:
        return None
    try:
        sent = urlsplit(origin.strip())
        host = urlsplit(f"//{request.headers.get('host', '')}")
        sent_port, host_port = sent.port, host.port
    except ValueError:
        return f"from origin {shown(origin)}"
    scheme = sent.scheme.lower()
    if (scheme not in ("http", "https") or not sent.hostname or sent.hostname != host.hostname
            or _port(scheme, sent_port) != _port(request.url.scheme, host_port)):
        return f"from origin {shown(origin)}"
    return None


class Refused(Exception):
    """A request refused with an HTTP status and a message for the operator."""

    def __init__(self, status: int, message: str,
                 links: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.links = links or []   # (local path, text): where the operator may go instead


class Guard(BaseHTTPMiddleware):
    """Login (when a token is set) before anything but the login page; read-only refuses every
    action; security headers on every response."""

    def __init__(self, app: Any, dashboard: Security) -> None:
        super().__init__(app)
        self.dashboard = dashboard

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        path = request.url.path
        response: Response
        if self.dashboard.local_only and not is_loopback(_host_name(request)):
            # Served on loopback without a token: a page from another site whose name was
            # pointed at 127.0.0.1 (DNS rebinding) must not read or act on it.
            response = PlainTextResponse("this dashboard answers to a loopback host name only",
                                         421)
        elif request.method not in ("GET", "HEAD") and (why := foreign(request)) is not None:
            response = PlainTextResponse(f"refused: {why}; actions are taken from the "
                                         "dashboard's own pages", 403)
        elif (self.dashboard.token is not None and self.dashboard.bearer(request) is not None
              and (wait := self.dashboard.blocked_for(client_address(request)))):
            response = too_many(wait)
        elif not path.startswith(PUBLIC_PREFIXES) and not self.dashboard.authenticated(request):
            if self.dashboard.bearer(request) is not None:
                self.dashboard.failed(client_address(request))
            if request.method == "GET" and "authorization" not in request.headers and (
                    "hx-request" not in request.headers):
                target = path + (f"?{request.url.query}" if request.url.query else "")
                response = RedirectResponse(f"/login?{urlencode({'next': target})}", 303)
            else:
                response = PlainTextResponse("a token is needed: log in, or send "
                                             "Authorization: Bearer <token>", 401)
        elif (self.dashboard.read_only and request.method not in ("GET", "HEAD")
              and path not in SESSION_PATHS and not _REVEAL_PATH.match(path)):
            response = PlainTextResponse("this dashboard is read-only", 403)
        else:
            try:
                response = await call_next(request)
            except WorkhorseError as exc:  # a bad value that no route caught: still no 500
                response = PlainTextResponse(first_line(exc), 400)
            except psycopg.Error as exc:
                response = PlainTextResponse(f"database error: {first_line(exc)}", 503)
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        if request.url.path.startswith("/static/"):
            response.headers.setdefault("Cache-Control", "public, max-age=3600")
        else:
            response.headers["Cache-Control"] = "no-store"
        return response


def too_many(wait: float) -> Response:
    return PlainTextResponse(f"too many wrong tokens from this address: try again in "
                             f"{wait:.0f} s", 429, headers={"Retry-After": f"{wait:.0f}"})


def _host_name(request: Request) -> str:
    """The Host header's name, without its port (`[::1]:8642` -> `::1`)."""
    host = request.headers.get("host", "")
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host

