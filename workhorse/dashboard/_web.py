"""The dashboard's routes, its login and CSRF checks, and the rendering of its pages.

Every page is rendered on the server (its first response holds every number) and has one live
region that htmx re-fetches every few seconds (`?live=1` renders that region alone). Actions are
form POSTs answered by a redirect, so they work without JavaScript too; each carries the CSRF
token of a double-submit cookie. Jinja2 escapes every value.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import secrets
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import psycopg
import uvicorn
from jinja2 import Environment, PackageLoader, select_autoescape
from psycopg_pool import ConnectionPool
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import database
from .._durations import parse_duration
from ..errors import WorkhorseError, first_line
from ..queue import Queue
from ..types import JobStatus
from . import _data, is_loopback

SESSION_COOKIE = "workhorse_session"
CSRF_COOKIE = "workhorse_csrf"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
LIVE_SECONDS = 2
# Job ids are bigint; one retry or cancel takes at most this many.
MAX_ID = 2**63 - 1
MAX_IDS = 10_000
# The pages with a live region (`_<page>.html`, re-fetched with `?live=1`).
LIVE_PAGES = {"overview", "queue", "jobs", "job", "workers", "schedules"}
# Pages anyone may fetch: the login form and its assets.
PUBLIC_PREFIXES = ("/login", "/static/")
# Actions refused by --read-only (every POST but logging in and out).
SESSION_PATHS = ("/login", "/logout")
# Scripts from our own static files only: no inline script, nothing from elsewhere.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
)


def session_value(token: str) -> str:
    """What the login cookie holds: derived from the token, so the token itself is not stored
    in the browser, and changing the token logs everyone out."""
    return hmac.new(token.encode(), b"workhorse-dashboard-session", hashlib.sha256).hexdigest()


def _same(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and hmac.compare_digest(a.encode(), b.encode())


def _local_path(target: str | None, default: str = "/") -> str:
    """A redirect target on this site only (no scheme, no host, no `//`)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return default
    return target


class Dashboard:
    def __init__(self, url: str, *, read_only: bool, token: str | None,
                 local_only: bool = False) -> None:
        self.url = url
        self.local_only = local_only
        self.read_only = read_only
        self.token = token
        self.pool = ConnectionPool(url, min_size=1, max_size=4, open=False,
                                   kwargs={"autocommit": True}, name="workhorse-dashboard")
        self.templates = Environment(
            loader=PackageLoader("workhorse.dashboard", "templates"),
            autoescape=select_autoescape(["html"], default=True),
            trim_blocks=True, lstrip_blocks=True,
        )
        self.templates.filters.update(ago=_ago, stamp=_stamp, pretty=_pretty, limit=_limit)
        self.templates.globals.update(statuses=[s.value for s in JobStatus])

    # ---- rendering -----------------------------------------------------------------------

    def render(self, request: Request, page: str, status_code: int = 200,
               **context: Any) -> HTMLResponse:
        csrf = request.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(32)
        live = request.query_params.get("live") == "1" and page in LIVE_PAGES
        template = self.templates.get_template(f"_{page}.html" if live else f"{page}.html")
        values = {
            "request": request, "page": page, "read_only": self.read_only, "csrf": csrf,
            "needs_login": self.token is not None, "live_seconds": LIVE_SECONDS,
            "notice": request.query_params.get("done"),
            "problem": request.query_params.get("error"),
        }
        html = template.render({**values, **context})
        response = HTMLResponse(html, status_code=status_code)
        if request.cookies.get(CSRF_COOKIE) != csrf:
            response.set_cookie(CSRF_COOKIE, csrf, httponly=True, samesite="strict", path="/")
        return response

    # ---- checks --------------------------------------------------------------------------

    def authenticated(self, request: Request) -> bool:
        if self.token is None:
            return True
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            return _same(header[7:].strip(), self.token)
        return _same(request.cookies.get(SESSION_COOKIE), session_value(self.token))

    async def checked_form(self, request: Request) -> FormData:
        """The POSTed form, once its CSRF token matched the cookie's (a bearer-authenticated
        client sends no cookie a browser would add on its own, so it needs none)."""
        form = await request.form()
        if self.token is not None and request.headers.get("authorization", "").lower(
                ).startswith("bearer "):
            return form  # the Guard checked the token already
        sent = form.get(CSRF_FIELD)
        sent = sent if isinstance(sent, str) else request.headers.get(CSRF_HEADER)
        if not _same(sent, request.cookies.get(CSRF_COOKIE)):
            raise _Refused(403, "the form's CSRF token does not match: reload the page and try "
                                "again")
        return form


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Guard(BaseHTTPMiddleware):
    """Login (when a token is set) before anything but the login page; read-only refuses every
    action; security headers on every response."""

    def __init__(self, app: Any, dashboard: Dashboard) -> None:
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
        elif not path.startswith(PUBLIC_PREFIXES) and not self.dashboard.authenticated(request):
            if request.method == "GET" and "authorization" not in request.headers and (
                    "hx-request" not in request.headers):
                target = path + (f"?{request.url.query}" if request.url.query else "")
                response = RedirectResponse(f"/login?{urlencode({'next': target})}", 303)
            else:
                response = PlainTextResponse("a token is needed: log in, or send "
                                             "Authorization: Bearer <token>", 401)
        elif (self.dashboard.read_only and request.method not in ("GET", "HEAD")
              and path not in SESSION_PATHS):
            response = PlainTextResponse("this dashboard is read-only", 403)
        else:
            try:
                response = await call_next(request)
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


def _host_name(request: Request) -> str:
    """The Host header's name, without its port (`[::1]:8642` -> `::1`)."""
    host = request.headers.get("host", "")
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


# ---- template filters ----------------------------------------------------------------------


def _ago(value: datetime | None) -> str:
    if value is None:
        return "never"
    seconds = (datetime.now(UTC) - value).total_seconds()
    future = seconds < 0
    seconds = abs(seconds)
    if seconds < 1:
        text = "now"
        return text
    if seconds < 120:
        text = f"{seconds:.0f}s"
    elif seconds < 7200:
        text = f"{seconds / 60:.0f}m"
    elif seconds < 172800:
        text = f"{seconds / 3600:.0f}h"
    else:
        text = f"{seconds / 86400:.0f}d"
    return f"in {text}" if future else f"{text} ago"


def _stamp(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if value else ""


def _pretty(value: Any) -> str:
    """JSON, indented; a plain string (not Markup), so the template escapes it."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


# ---- routes --------------------------------------------------------------------------------


def _text(form: FormData, name: str) -> str | None:
    value = form.get(name)
    return value.strip() or None if isinstance(value, str) else None


def _int(form: FormData, name: str) -> int | None:
    value = _text(form, name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise WorkhorseError(f"{name} must be a whole number, got {value!r}") from None


_DONE = {"pause": "paused", "resume": "resumed", "override": "override set",
         "clear-override": "override cleared"}


def build(url: str, *, read_only: bool, token: str | None, local_only: bool) -> Starlette:
    dashboard = Dashboard(url, read_only=read_only, token=token, local_only=local_only)

    def page(name: str, reader: Callable[[Request, psycopg.Connection[Any]], dict[str, Any]]
             ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                context = await _in_thread(dashboard, reader, request)
            except _Refused as refused:
                return dashboard.render(request, "problem", refused.status,
                                        message=refused.message)
            return dashboard.render(request, name, **context)
        return endpoint

    def overview(request: Request, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        return {"view": _data.overview(conn)}

    def queue(request: Request, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        # By query parameter, not in the path: a queue name may hold any character.
        name = request.query_params.get("name")
        if not name:
            raise _Refused(400, "which queue? /queue?name=<queue>")
        return {"view": _data.queue_page(conn, name)}

    def jobs(request: Request, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        params = request.query_params
        status = params.get("status") or None
        if status is not None and status not in {s.value for s in JobStatus}:
            raise _Refused(400, f"unknown status {status!r}")
        found = {}
        for name in ("id", "before"):
            raw = (params.get(name) or "").strip()
            if raw and (not raw.isdigit() or int(raw) > MAX_ID):
                raise _Refused(400, f"{name} is a job id, a number, got {raw!r}")
            found[name] = int(raw) if raw else None
        chosen = _data.JobFilter(
            queue=params.get("queue") or None, status=status, task=params.get("task") or None,
            key=params.get("key") or None, id=found["id"], before=found["before"],
        )
        query = urlencode(chosen.query())
        listed = _data.jobs(conn, chosen)
        return {"jobs": listed.jobs, "unsearched_below": listed.unsearched_below,
                "page_size": _data.JOBS_PAGE, "chosen": chosen,
                "here": f"/jobs?{query}" if query else "/jobs"}

    def job(request: Request, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        job_id = int(request.path_params["job_id"])
        found = _data.job(conn, job_id) if job_id <= MAX_ID else None
        if found is None:
            raise _Refused(404, f"no job {request.path_params['job_id']}")
        return {"job": found}

    def workers(request: Request, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        return {"workers": _data.workers(conn)}

    def schedules(request: Request, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        return {"view": _data.schedules(conn)}

    def action(fn: Callable[[Request, FormData, Queue], Response]
               ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                form = await dashboard.checked_form(request)
            except _Refused as refused:
                return PlainTextResponse(refused.message, refused.status)

            def run(conn: psycopg.Connection[Any]) -> Response:
                return fn(request, form, Queue(conn))
            return await _in_thread_plain(dashboard, run)
        return endpoint

    def queue_action(request: Request, form: FormData, q: Queue) -> Response:
        name = _text(form, "queue")
        verb = request.path_params["verb"]
        if name is None:
            return PlainTextResponse("which queue? a form field `queue` is needed", 400)
        back = f"/queue?{urlencode({'name': name})}"
        try:
            if verb == "pause":
                q.pause(name)
            elif verb == "resume":
                q.resume(name)
            elif verb == "clear-override":
                q.clear_override(name)
            elif verb == "override":
                duration = _text(form, "for")
                q.override_policy(
                    name, max_active=_int(form, "max_active"),
                    max_active_per_key=_int(form, "max_active_per_key"),
                    rate_limit=_text(form, "rate_limit"),
                    rate_limit_per_key=_text(form, "rate_limit_per_key"),
                    expires_in=parse_duration(duration) if duration else None,
                )
            else:
                return PlainTextResponse(f"no action {verb!r}", 404)
        except (WorkhorseError, ValueError) as exc:
            return _redirect_with(back, error=str(exc))
        return _redirect_with(back, done=_DONE[verb])

    def jobs_action(request: Request, form: FormData, q: Queue) -> Response:
        verb = request.path_params["verb"]
        back = _local_path(_text(form, "back"), "/jobs")
        try:
            ids = [int(str(v)) for v in form.getlist("id")]
        except ValueError:
            return PlainTextResponse("job ids are numbers", 400)
        if not ids:
            return _redirect_with(back, error="no job chosen")
        if len(ids) > MAX_IDS or any(not 0 < i <= MAX_ID for i in ids):
            return PlainTextResponse(f"at most {MAX_IDS} job ids, each a job's id", 400)
        if verb == "retry":
            done = q.retry_jobs(ids)
            message = f"retried {len(done)} of {len(ids)}"
        elif verb == "cancel":
            done = q.cancel_jobs(ids)
            message = f"canceled (or asked to cancel) {len(done)} of {len(ids)}"
        else:
            return PlainTextResponse(f"no action {verb!r}", 404)
        return _redirect_with(back, done=message)

    async def login_form(request: Request) -> Response:
        if dashboard.token is None:
            return RedirectResponse("/", 303)
        return dashboard.render(request, "login", next=_local_path(request.query_params.get(
            "next")))

    async def login(request: Request) -> Response:
        if dashboard.token is None:
            return RedirectResponse("/", 303)
        try:
            form = await dashboard.checked_form(request)
        except _Refused as refused:
            return PlainTextResponse(refused.message, refused.status)
        target = _local_path(_text(form, "next"))
        if not _same(_text(form, "token"), dashboard.token):
            return dashboard.render(request, "login", 401, next=target,
                                    problem="that is not the dashboard's token")
        response = RedirectResponse(target, 303)
        response.set_cookie(SESSION_COOKIE, session_value(dashboard.token), httponly=True,
                            samesite="strict", path="/")
        return response

    async def logout(request: Request) -> Response:
        try:
            await dashboard.checked_form(request)
        except _Refused as refused:
            return PlainTextResponse(refused.message, refused.status)
        response = RedirectResponse("/login" if dashboard.token else "/", 303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        database.ensure_schema(url)
        dashboard.pool.open(wait=True, timeout=30)
        try:
            yield
        finally:
            dashboard.pool.close()

    routes = [
        Route("/", page("overview", overview)),
        Route("/queue", page("queue", queue)),
        Route("/queue/{verb}", action(queue_action), methods=["POST"]),
        Route("/jobs", page("jobs", jobs)),
        Route("/jobs/{job_id:int}", page("job", job)),
        Route("/jobs/{verb}", action(jobs_action), methods=["POST"]),
        Route("/workers", page("workers", workers)),
        Route("/schedules", page("schedules", schedules)),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Mount("/static", StaticFiles(packages=[("workhorse.dashboard", "static")]), name="static"),
    ]
    return Starlette(routes=routes, lifespan=lifespan,
                     middleware=[Middleware(Guard, dashboard=dashboard)])


class Server(uvicorn.Server):
    """uvicorn's server, but SIGTERM or SIGINT end it with exit code 0 once it has shut down
    (uvicorn re-raises the signal, so the process would die by it)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit)
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _redirect_with(target: str, **params: str) -> RedirectResponse:
    """Back to `target`, its old notice or problem replaced by `params`."""
    kept = "&".join(part for part in target.partition("?")[2].split("&")
                    if part and part.split("=")[0] not in ("done", "error"))
    base = target.partition("?")[0] + (f"?{kept}" if kept else "")
    separator = "&" if kept else "?"
    return RedirectResponse(f"{base}{separator}{urlencode(params)}", 303)


async def _in_thread(dashboard: Dashboard, reader: Callable[..., dict[str, Any]],
                     request: Request) -> dict[str, Any]:
    from starlette.concurrency import run_in_threadpool

    def run() -> dict[str, Any]:
        with dashboard.pool.connection() as conn:
            return reader(request, conn)
    return await run_in_threadpool(run)


async def _in_thread_plain(dashboard: Dashboard,
                           fn: Callable[[psycopg.Connection[Any]], Response]) -> Response:
    from starlette.concurrency import run_in_threadpool

    def run() -> Response:
        with dashboard.pool.connection() as conn:
            return fn(conn)
    return await run_in_threadpool(run)


__all__ = ["build", "session_value"]
