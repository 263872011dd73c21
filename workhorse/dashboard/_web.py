"""The dashboard's routes and the rendering of its pages (its security is in `_security`).

Every page is rendered on the server (its first response holds every number) and has one live
region that htmx re-fetches every few seconds (`?live=1` renders that region alone). Actions are
form POSTs answered by a redirect, so they work without JavaScript too. Jinja2 escapes every
value.

The handlers live at module level and find their process's `Dashboard` on the app's state;
`build()` only wires the routes to them.
"""

from __future__ import annotations

import base64
import contextlib
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
from starlette.convertors import Convertor, register_url_convertor
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import _ops, database
from .._durations import parse_duration
from ..errors import WorkhorseError
from ..queue import Queue
from ..types import BIGINT_MAX, BackoffState, JobStatus, check_name, check_tags, shown
from . import _data, _queries, _security
from ._security import (
    BROWSER_ID,
    CSRF_COOKIE,
    SESSION_COOKIE,
    SESSION_SECONDS,
    Guard,
    Refused,
    Security,
    client_address,
    is_https,
    local_path,
    same,
    too_many,
)

NOTICE_COOKIE = "workhorse_notice"
# A notice waits this long for the page it is meant for, and is at most this long.
NOTICE_SECONDS = 60
NOTICE_LIMIT = 1000
LIVE_SECONDS = 2
# Job ids are bigint; one retry or cancel takes at most this many.
MAX_ID = BIGINT_MAX
MAX_IDS = 10_000
# The pages with a live region (`_<page>.html`, re-fetched with `?live=1`).
LIVE_PAGES = {"overview", "queue", "jobs", "job", "workers", "schedules", "budgets"}


class Dashboard(Security):
    """One dashboard process: its security state (sessions, CSRF, wrong tokens), its pool of
    connections and its templates."""

    def __init__(self, url: str, *, read_only: bool, token: str | None,
                 local_only: bool = False, redact: bool = False) -> None:
        super().__init__(read_only=read_only, token=token, local_only=local_only)
        self.url = url
        self.redact = redact
        self.pool = ConnectionPool(url, min_size=1, max_size=4, open=False,
                                   kwargs={"autocommit": True}, name="workhorse-dashboard")
        self.templates = Environment(
            loader=PackageLoader("workhorse.dashboard", "templates"),
            autoescape=select_autoescape(["html"], default=True),
            trim_blocks=True, lstrip_blocks=True,
        )
        self.templates.filters.update(ago=_ago, stamp=_stamp, pretty=_pretty, limit=_limit)
        self.templates.globals.update(statuses=[s.value for s in JobStatus],
                                      retryable=_queries.RETRYABLE,
                                      cancelable=_queries.CANCELABLE)

    # ---- rendering -----------------------------------------------------------------------

    def render(self, request: Request, page: str, status_code: int = 200,
               **context: Any) -> HTMLResponse:
        browser = request.cookies.get(CSRF_COOKIE)
        fresh = browser is None or not BROWSER_ID.match(browser)
        if fresh:
            browser = secrets.token_urlsafe(32)
        csrf = self.csrf_token(request, browser)
        live = request.query_params.get("live") == "1" and page in LIVE_PAGES
        template = self.templates.get_template(f"_{page}.html" if live else f"{page}.html")
        # A notice is the server's own result of an action (a signed cookie the action set for
        # this browser), shown once on the next full page; never text from the URL.
        flashed = None if live or fresh else self.flashed(request, str(browser))
        values = {
            "request": request, "page": page, "read_only": self.read_only, "csrf": csrf,
            "needs_login": self.token is not None, "live_seconds": LIVE_SECONDS,
            "notice": flashed[1] if flashed and flashed[0] == "notice" else None,
            "problem": flashed[1] if flashed and flashed[0] == "problem" else None,
            "redact": self.redact, "can_reveal": self.token is not None,
        }
        html = template.render({**values, **context})
        response = HTMLResponse(html, status_code=status_code)
        if fresh:
            response.set_cookie(CSRF_COOKIE, str(browser), httponly=True, samesite="strict",
                                path="/", secure=is_https(request))
        if flashed is not None:
            response.delete_cookie(NOTICE_COOKIE, path="/", httponly=True, samesite="strict",
                                   secure=is_https(request))
        return response

    # ---- notices -------------------------------------------------------------------------

    def flash(self, request: Request, response: Response, kind: str, text: str) -> Response:
        """Have the next full page this browser opens show `text` (kind "notice" or
        "problem"): a cookie signed with the process secret and bound to the browser id, so
        that no link or other site can make a page say anything."""
        browser = request.cookies.get(CSRF_COOKIE)
        if browser is None or not BROWSER_ID.match(browser):
            return response  # a script with a bearer token: it reads the status code
        body = base64.urlsafe_b64encode(json.dumps(
            [kind, text[:NOTICE_LIMIT], int(_security.clock()) + NOTICE_SECONDS]).encode()
        ).decode()
        value = f"{body}.{self.sign('notice', f'{browser}|{body}')}"
        response.set_cookie(NOTICE_COOKIE, value, max_age=NOTICE_SECONDS, httponly=True,
                            samesite="strict", path="/", secure=is_https(request))
        return response

    def flashed(self, request: Request, browser: str) -> tuple[str, str] | None:
        """The (kind, text) this browser's notice cookie holds when it is ours and fresh."""
        cookie = request.cookies.get(NOTICE_COOKIE)
        if not cookie or cookie.count(".") != 1:
            return None
        body, signature = cookie.split(".")
        if not same(signature, self.sign("notice", f"{browser}|{body}")):
            return None
        try:
            kind, text, until = json.loads(base64.urlsafe_b64decode(body.encode()))
        except (ValueError, TypeError):
            return None
        if (not isinstance(until, int) or until < _security.clock()
                or kind not in ("notice", "problem")):
            return None
        return str(kind), str(text)


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
         "clear-override": "override cleared", "clear-backoff": "backoff cleared"}
OVERRIDE_FIELDS = ("max_active", "max_active_per_key", "rate_limit", "rate_limit_per_key", "for")


def _either(statuses: tuple[str, ...]) -> str:
    return ", ".join(statuses[:-1]) + " or " + statuses[-1]


def _unchanged(found: dict[int, tuple[str, bool]], left: list[int], verb: str,
               applies: tuple[str, ...]) -> str:
    """Why these jobs were left as they were, by status ("2 are succeeded; 1 no longer
    exists"), and what the action applies to."""
    reasons: dict[str, int] = {}
    for job_id in left:
        if job_id not in found:
            reason = "no longer exist(s)"
        else:
            status, requested = found[job_id]
            reason = ("active, already asked to cancel" if requested and status == "active"
                      else status)
        reasons[reason] = reasons.get(reason, 0) + 1
    said = ", ".join(f"{n} {reason}" for reason, n in reasons.items())
    done = "retried" if verb == "retry" else "canceled"
    return f"not {done}: {said} ({verb} applies to {_either(applies)} jobs)"


def _job_filter(params: Any) -> _data.JobFilter:
    """The Jobs page's filter from query parameters or a form: queue and task trimmed (they
    match a substring), key and tag as sent (they match exactly), status one of the statuses,
    id and before job ids (before not with a tag: a tag's list is one page); Refused 400
    otherwise."""
    def sent(name: str) -> str:
        value = params.get(name)
        if value is not None and not isinstance(value, str):
            raise Refused(400, f"{name} must be text")
        return value or ""

    status = sent("status").strip() or None
    if status is not None and status not in {s.value for s in JobStatus}:
        raise Refused(400, f"unknown status {status!r}")
    found = {}
    for name in ("id", "before"):
        raw = sent(name).strip()
        found[name] = _id(raw, name) if raw else None
    for name in ("queue", "task", "key", "tag"):
        sent(name)
    tag = _tag(params.get("tag"))
    if tag is not None and found["before"] is not None:
        raise Refused(400, "a tag's jobs are listed newest first on one page: before= does "
                           "not apply with tag=")
    return _data.JobFilter(
        queue=_substring(params.get("queue"), "queue"), status=status,
        task=_substring(params.get("task"), "task"), key=_filter(params.get("key"), "key"),
        tag=tag, id=found["id"], before=found["before"],
    )


def _tag(value: str | None) -> str | None:
    """The tag filter: as sent (a tag may begin or end with blanks), None when blank; Refused
    400 for one no job can have (over 100 characters, a NUL...)."""
    if value is None or not value.strip():
        return None
    try:
        return check_tags([value])[0]
    except WorkhorseError as exc:
        raise Refused(400, str(exc)) from None


def _substring(value: Any, what: str) -> str | None:
    """A substring filter: trimmed; None when blank."""
    if not isinstance(value, str) or not value.strip():
        return None
    return _name(value.strip(), what)


def _name(value: str | None, what: str) -> str:
    """A name sent by a page (a query parameter or a form field): as it was sent, since a
    queue name may begin or end with blanks, once it is one a queue can have; else Refused
    400, before anything is read or written."""
    if value is None or not value.strip():
        raise Refused(400, f"which {what}? none was given")
    try:
        return check_name(what, value)
    except WorkhorseError as exc:
        raise Refused(400, str(exc)) from None


def _filter(value: str | None, what: str) -> str | None:
    return None if value is None or not value.strip() else _name(value, what)


def _id(raw: str, what: str) -> int:
    raw = raw.strip()
    # The length first: int() refuses more than 4,300 digits with a ValueError.
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 19 or int(raw) > MAX_ID:
        raise Refused(400, f"{what} is a job id, a number, got {shown(raw)}")
    return int(raw)


class _JobIdConvertor(Convertor[int]):
    """Digits in a path, as an int; one too long for a bigint becomes MAX_ID + 1, which no job
    has (404), where starlette's own `int` convertor lets int() fail (a 500 past 4,300 digits)."""

    regex = "[0-9]+"

    def convert(self, value: str) -> int:
        return int(value) if len(value) <= 19 else MAX_ID + 1

    def to_string(self, value: int) -> str:
        return str(value)


register_url_convertor("workhorse_job_id", _JobIdConvertor())


def _dashboard(request: Request) -> Dashboard:
    """The dashboard of the app that serves `request` (build() puts it on the app's state)."""
    found: Dashboard = request.app.state.dashboard
    return found


Reader = Callable[[Request, psycopg.Connection[Any]], dict[str, Any]]
Action = Callable[[Request, FormData, psycopg.Connection[Any]], Response]


def page(name: str, reader: Reader) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint of page `name`: `reader` (on a pooled connection, in a thread) gives the
    template its values; a refusal renders the problem page."""
    async def endpoint(request: Request) -> Response:
        dashboard = _dashboard(request)
        try:
            context = await _in_thread(dashboard, reader, request)
        except Refused as refused:
            return dashboard.render(request, "problem", refused.status,
                                    message=refused.message)
        except WorkhorseError as exc:  # a value the operation refused before reading
            return dashboard.render(request, "problem", 400, message=str(exc))
        return dashboard.render(request, name, **context)
    return endpoint


def action(fn: Action) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint of a form POST: `fn` runs once the form's CSRF token is this session's."""
    async def endpoint(request: Request) -> Response:
        dashboard = _dashboard(request)
        try:
            form = await dashboard.checked_form(request)
        except Refused as refused:
            return PlainTextResponse(refused.message, refused.status)

        def run(conn: psycopg.Connection[Any]) -> Response:
            try:
                return fn(request, form, conn)
            except Refused as refused:
                return dashboard.render(request, "problem", refused.status,
                                        message=refused.message,
                                        back=local_path(_text(form, "back"), "/"))
        return await _in_thread_plain(dashboard, run)
    return endpoint


# ---- pages -----------------------------------------------------------------------------------


def read_overview(request: Request, conn: psycopg.Connection[Any]) -> dict[str, Any]:
    return {"view": _data.overview(conn)}


def read_queue(request: Request, conn: psycopg.Connection[Any]) -> dict[str, Any]:
    # By query parameter, not in the path: a queue name may hold any character.
    if not request.query_params.get("name"):
        raise Refused(400, "which queue? /queue?name=<queue>")
    name = _name(request.query_params.get("name"), "queue")
    if request.query_params.get("live") != "1":  # a live refresh follows a known page
        _known_or_404(conn, name)
    return {"view": _data.queue_page(conn, name), "entered": {}}


def _known_or_404(conn: psycopg.Connection[Any], name: str) -> None:
    if not _data.queue_known(conn, name):
        near = _data.close_names(conn, name)
        hint = f"; did you mean {', '.join(repr(n) for n in near)}?" if near else ""
        raise Refused(404, f"no queue {name!r}: it has no policy, no control and no job"
                           f"{hint}")


def read_jobs(request: Request, conn: psycopg.Connection[Any]) -> dict[str, Any]:
    chosen = _job_filter(request.query_params)
    query = urlencode(chosen.query())
    live = request.query_params.get("live") == "1"
    found = _data.jobs(conn, chosen)
    names = None if live or chosen.id is not None else _data.names(conn, chosen)
    return {"found": found, "jobs": found.jobs, "unsearched_below": found.unsearched_below,
            "page_size": _data.JOBS_PAGE, "chosen": chosen, "names": names,
            "count_cap": _queries.COUNT_CAP, "max_ids": MAX_IDS, "tag_scan": _queries.TAG_SCAN,
            "here": f"/jobs?{query}" if query else "/jobs"}


def read_job(request: Request, conn: psycopg.Connection[Any]) -> dict[str, Any]:
    dashboard = _dashboard(request)
    job_id = int(request.path_params["job_id"])
    found = _data.job(conn, job_id) if job_id <= MAX_ID else None
    if found is None:
        raise Refused(404, f"no job {request.path_params['job_id']}")
    # Under --redact, a script that sends the token itself may ask for the payload.
    shown_in_full = not dashboard.redact or (
        request.query_params.get("reveal") == "1" and dashboard.bearer_ok(request))
    attempts = _data.attempts(conn, job_id)
    return {"job": found, "redacted": not shown_in_full,
            "revealed": dashboard.redact and shown_in_full, "attempts": attempts,
            # Its steps, what it waits for while suspended, its children (docs/design.md
            # "Durable execution"); step results are hidden under --redact, as its result is.
            "durable": _data.durable(conn, found),
            # The last failure is the job's own only while the job rests because of it.
            "own_error": _ops.job_own_error(found, attempts)}


def read_workflow(request: Request, conn: psycopg.Connection[Any]) -> dict[str, Any]:
    workflow_id = int(request.path_params["workflow_id"])
    members = _data.workflow(conn, workflow_id) if workflow_id <= MAX_ID else []
    if not members:
        raise Refused(404, f"no workflow {request.path_params['workflow_id']}")
    counts: dict[str, int] = {}
    for member in members:
        counts[member.status.value] = counts.get(member.status.value, 0) + 1
    return {"workflow_id": workflow_id, "members": members, "counts": counts}


def read_workers(request: Request, conn: psycopg.Connection[Any]) -> dict[str, Any]:
    return {"workers": _data.workers(conn)}


def read_schedules(request: Request, conn: psycopg.Connection[Any]) -> dict[str, Any]:
    return {"view": _data.schedules(conn)}


def read_budgets(request: Request, conn: psycopg.Connection[Any]) -> dict[str, Any]:
    return {"view": _data.budgets(conn)}


# ---- actions ---------------------------------------------------------------------------------


def queue_action(request: Request, form: FormData, conn: psycopg.Connection[Any]) -> Response:
    dashboard = _dashboard(request)
    sent = form.get("queue")
    verb = request.path_params["verb"]
    if verb not in _DONE:
        return PlainTextResponse(f"no action {verb!r}", 404)
    if not isinstance(sent, str) or not sent.strip():
        return PlainTextResponse("which queue? a form field `queue` is needed", 400)
    try:
        name = _name(sent, "queue")
    except Refused as refused:
        return PlainTextResponse(refused.message, refused.status)
    back = f"/queue?{urlencode({'name': name})}"
    _known_or_404(conn, name)  # a typo must not create a governed queue
    q = Queue(conn)
    if verb == "clear-backoff":
        return _clear_queue_backoff(request, form, q, name, back)
    was = next((s for s in q.list_queues() if s.queue == name), None)
    unchanged = {"pause": was is not None and was.paused,
                 "resume": was is None or not was.paused,
                 "clear-override": was is None or was.override is None}.get(verb, False)
    if unchanged:
        why = {"pause": "it was already paused", "resume": "it was not paused",
               "clear-override": "it had no override"}[verb]
        return dashboard.flash(request, RedirectResponse(back, 303), "problem",
                               f"nothing changed: queue {name!r}: {why}")
    try:
        if verb == "pause":
            q.pause(name)
        elif verb == "resume":
            q.resume(name)
        elif verb == "clear-override":
            q.clear_override(name)
        else:
            duration = _text(form, "for")
            q.override_policy(
                name, max_active=_int(form, "max_active"),
                max_active_per_key=_int(form, "max_active_per_key"),
                rate_limit=_text(form, "rate_limit"),
                rate_limit_per_key=_text(form, "rate_limit_per_key"),
                expires_in=parse_duration(duration) if duration else None,
            )
    except (WorkhorseError, ValueError) as exc:  # refused before anything was written
        # The queue page again, the operator's entries kept, the reason above them.
        entered = {k: v for k in OVERRIDE_FIELDS
                   if isinstance(v := form.get(k), str)}
        return dashboard.render(request, "queue", 400, view=_data.queue_page(conn, name),
                                entered=entered, failure=str(exc))
    return dashboard.flash(request, RedirectResponse(back, 303), "notice",
                           f"{_DONE[verb]}: queue {name!r}")


def _backoff_text(backoff: BackoffState) -> str:
    """A cleared backoff in a notice: "key 'acme' of queue 'api' (until 2026-12-04 15:02:03
    UTC, by job 4812)"."""
    target = {"budget": f"budget {backoff.name!r}", "queue": f"queue {backoff.name!r}",
              "key": f"key {backoff.key!r} of queue {backoff.name!r}"}[backoff.scope]
    by = f", by job {backoff.by_job}" if backoff.by_job is not None else ""
    return f"{target} (until {_stamp(backoff.until)}{by})"


def _cleared_notice(cleared: list[BackoffState]) -> str:
    """What a clear ended, each backoff named (past three keys, the keys counted)."""
    keys = [b for b in cleared if b.scope == "key"]
    named = [b for b in cleared if b.scope != "key"] + (keys if len(keys) <= 3 else [])
    said = [_backoff_text(b) for b in named]
    if len(keys) > 3:
        said.append(f"{len(keys)} keys of queue {keys[0].name!r}")
    return f"{_DONE['clear-backoff']}: " + "; ".join(said)


def _clear_queue_backoff(request: Request, form: FormData, q: Queue, name: str,
                         back: str) -> Response:
    """End queue `name`'s backoff and its keys' (only the form's `key`'s, when it sends one:
    a blank key is refused, as the CLI refuses `--key ''`); the notice says what ended."""
    dashboard = _dashboard(request)
    sent = form.get("key")
    try:
        key = None if sent is None else _name(sent if isinstance(sent, str) else None, "key")
    except Refused as refused:
        return PlainTextResponse(refused.message, refused.status)
    back = local_path(_text(form, "back"), back)
    cleared = q.clear_backoff(name, key=key)
    if not cleared:
        what = f"queue {name!r}" if key is None else f"key {key!r} of queue {name!r}"
        return dashboard.flash(request, RedirectResponse(back, 303), "problem",
                               f"nothing changed: {what} had no backoff in force")
    return dashboard.flash(request, RedirectResponse(back, 303), "notice",
                           _cleared_notice(cleared))


def budget_action(request: Request, form: FormData, conn: psycopg.Connection[Any]) -> Response:
    """An action on a named budget: `clear-backoff` ends its backoff (the ready jobs of its
    queues may start at once)."""
    dashboard = _dashboard(request)
    verb = request.path_params["verb"]
    if verb != "clear-backoff":
        return PlainTextResponse(f"no action {verb!r}", 404)
    sent = form.get("budget")
    try:
        name = _name(sent if isinstance(sent, str) else None, "budget")
    except Refused as refused:
        return PlainTextResponse(refused.message, refused.status)
    back = local_path(_text(form, "back"), "/budgets")
    cleared = Queue(conn).clear_budget_backoff(name)
    if not cleared:
        return dashboard.flash(request, RedirectResponse(back, 303), "problem",
                               f"nothing changed: budget {name!r} had no backoff in force")
    return dashboard.flash(request, RedirectResponse(back, 303), "notice",
                           _cleared_notice(cleared))


def jobs_action(request: Request, form: FormData, conn: psycopg.Connection[Any]) -> Response:
    dashboard = _dashboard(request)
    verb = request.path_params["verb"]
    back = local_path(_text(form, "back"), "/jobs")
    if verb not in ("retry", "cancel"):
        return PlainTextResponse(f"no action {verb!r}", 404)
    applies = _queries.RETRYABLE if verb == "retry" else _queries.CANCELABLE
    if form.get("match") == "all":
        # Everything the filter matches (in the statuses the action applies to), read
        # again now: the page's count was a moment ago.
        try:
            chosen = _job_filter(form)
        except Refused as refused:
            return PlainTextResponse(refused.message, refused.status)
        ids = _ops.execute(conn, _queries.matching_ids(chosen.search(), applies, MAX_IDS))
        if not ids:
            return dashboard.flash(request, RedirectResponse(back, 303), "problem",
                                   f"nothing changed: no job matching {chosen.described} "
                                   f"is {_either(applies)}")
    else:
        try:
            ids = [_id(str(v), "id") for v in form.getlist("id")]
        except Refused as refused:
            return PlainTextResponse(refused.message, refused.status)
        if not ids:
            return dashboard.flash(request, RedirectResponse(back, 303), "problem",
                                   "nothing changed: no job was chosen")
        if len(ids) > MAX_IDS or any(not 0 < i <= MAX_ID for i in ids):
            return PlainTextResponse(f"at most {MAX_IDS} job ids, each a job's id", 400)
    q = Queue(conn)
    done = q.retry_jobs(ids) if verb == "retry" else q.cancel_jobs(ids)
    left = sorted(set(ids) - set(done))
    word = "retried" if verb == "retry" else "canceled (or asked to cancel)"
    message = f"{word} {len(done)} of {len(ids)}"
    if left:
        message += "; " + _unchanged(_ops.execute(conn, _queries.job_statuses(left)), left,
                                     verb, applies)
    kind = "notice" if done else "problem"
    if not done:
        message = "nothing changed: " + message
    return dashboard.flash(request, RedirectResponse(back, 303), kind, message)


# ---- login, logout, reveal -------------------------------------------------------------------


async def login_form(request: Request) -> Response:
    dashboard = _dashboard(request)
    if dashboard.token is None:
        return RedirectResponse("/", 303)
    return dashboard.render(request, "login", next=local_path(request.query_params.get(
        "next")))


async def login(request: Request) -> Response:
    dashboard = _dashboard(request)
    if dashboard.token is None:
        return RedirectResponse("/", 303)
    try:
        form = await dashboard.checked_form(request)
    except Refused as refused:
        return PlainTextResponse(refused.message, refused.status)
    target = local_path(_text(form, "next"))
    wait = dashboard.blocked_for(client_address(request))
    if wait:
        return too_many(wait)
    if not dashboard.right_token(request, _text(form, "token")):
        return dashboard.render(request, "login", 401, next=target,
                                problem="that is not the dashboard's token")
    response = RedirectResponse(target, 303)
    response.set_cookie(SESSION_COOKIE, dashboard.new_session(), max_age=SESSION_SECONDS,
                        httponly=True, samesite="strict", path="/", secure=is_https(request))
    return response


async def logout(request: Request) -> Response:
    dashboard = _dashboard(request)
    try:
        await dashboard.checked_form(request)
    except Refused as refused:
        return PlainTextResponse(refused.message, refused.status)
    dashboard.revoke(request)  # the cookie is dead even if someone kept a copy
    response = RedirectResponse("/login" if dashboard.token else "/", 303)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict",
                           secure=is_https(request))
    return response


async def reveal(request: Request) -> Response:
    """The job page with its payload and result, under --redact: the form must carry the
    token itself (a login alone does not show them), and it is not refreshed live."""
    dashboard = _dashboard(request)
    try:
        form = await dashboard.checked_form(request)
    except Refused as refused:
        return PlainTextResponse(refused.message, refused.status)
    if not dashboard.redact:
        return RedirectResponse(f"/jobs/{request.path_params['job_id']}", 303)
    if dashboard.token is None:
        return PlainTextResponse("payloads are hidden (--redact) and this dashboard has no "
                                 "token to reveal them with: set WORKHORSE_DASHBOARD_TOKEN",
                                 403)
    wait = dashboard.blocked_for(client_address(request))
    if wait:
        return too_many(wait)
    if not dashboard.bearer_ok(request) and not dashboard.right_token(
            request, _text(form, "token")):
        return PlainTextResponse("that is not the dashboard's token: the payload stays "
                                 "hidden", 403)
    job_id = int(request.path_params["job_id"])

    def read(request: Request, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        found = _data.job(conn, job_id) if job_id <= MAX_ID else None
        if found is None:
            raise Refused(404, f"no job {job_id}")
        attempts = _data.attempts(conn, job_id)
        return {"job": found, "redacted": False, "revealed": True, "attempts": attempts,
                "durable": _data.durable(conn, found),
                "own_error": _ops.job_own_error(found, attempts)}
    try:
        context = await _in_thread(dashboard, read, request)
    except Refused as refused:
        return dashboard.render(request, "problem", refused.status, message=refused.message)
    return dashboard.render(request, "job", **context)


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    dashboard: Dashboard = app.state.dashboard
    database.ensure_schema(dashboard.url)
    dashboard.pool.open(wait=True, timeout=30)
    try:
        yield
    finally:
        dashboard.pool.close()


def build(url: str, *, read_only: bool, token: str | None, local_only: bool,
          redact: bool = False) -> Starlette:
    """The dashboard's Starlette app: its routes, and the guard every request passes first."""
    dashboard = Dashboard(url, read_only=read_only, token=token, local_only=local_only,
                          redact=redact)
    routes = [
        Route("/", page("overview", read_overview)),
        Route("/queue", page("queue", read_queue)),
        Route("/queue/{verb}", action(queue_action), methods=["POST"]),
        Route("/jobs", page("jobs", read_jobs)),
        Route("/jobs/{job_id:workhorse_job_id}", page("job", read_job)),
        Route("/jobs/{job_id:workhorse_job_id}/reveal", reveal, methods=["POST"]),
        Route("/jobs/{verb}", action(jobs_action), methods=["POST"]),
        Route("/workflows/{workflow_id:workhorse_job_id}", page("workflow", read_workflow)),
        Route("/workers", page("workers", read_workers)),
        Route("/schedules", page("schedules", read_schedules)),
        Route("/budgets", page("budgets", read_budgets)),
        Route("/budgets/{verb}", action(budget_action), methods=["POST"]),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Mount("/static", StaticFiles(packages=[("workhorse.dashboard", "static")]), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    middleware=[Middleware(Guard, dashboard=dashboard)])
    app.state.dashboard = dashboard
    return app

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


__all__ = ["build"]
