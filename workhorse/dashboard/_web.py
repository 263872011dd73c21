"""The dashboard's routes and the rendering of its pages (its security is in `_security`).

Every page is rendered on the server (its first response holds every number) and has one live
region that htmx re-fetches every few seconds (`?live=1` renders that region alone). Actions are
form POSTs answered by a redirect, so they work without JavaScript too. Jinja2 escapes every
value.

The handlers live at module level and find their process's `Dashboard` (`_render`) on the app's
state; `build()` only wires the routes to them. They read and act through a `Reading`
(`_reading`): one database, or several, each its part of a page (docs/design.md "Several
databases").
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlencode

import psycopg
import uvicorn
from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import _ops
from .._durations import parse_duration
from ..errors import WorkhorseError
from ..queue import Queue
from ..types import BIGINT_MAX, BackoffState, JobStatus, check_name, check_tags, shown
from . import _data, _queries
from ._reading import Reading, parts_context
from ._render import Dashboard, stamp
from ._security import (
    SESSION_COOKIE,
    SESSION_SECONDS,
    Guard,
    Refused,
    client_address,
    is_https,
    local_path,
    too_many,
)

# Job ids are bigint; one retry or cancel takes at most this many.
MAX_ID = BIGINT_MAX
MAX_IDS = 10_000


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


def _job_filter(params: Any, reading: Reading | None = None) -> _data.JobFilter:
    """The Jobs page's filter from query parameters or a form: queue and task trimmed (they
    match a substring), key and tag as sent (they match exactly), status one of the statuses,
    id and before job ids (before not with a tag: a tag's list is one page), database one of
    the dashboard's (before only with one: an id is one database's); Refused 400 otherwise."""
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
    chosen_db = None
    if reading is not None and sent("database").strip():
        chosen_db = reading.name(sent("database"))
    if (reading is not None and reading.multi and chosen_db is None
            and found["before"] is not None):
        raise Refused(400, "before= is a job id of one database: give database= with it")
    return _data.JobFilter(
        queue=_substring(params.get("queue"), "queue"), status=status,
        task=_substring(params.get("task"), "task"), key=_filter(params.get("key"), "key"),
        tag=tag, id=found["id"], before=found["before"], database=chosen_db,
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


Reader = Callable[[Request, Reading], dict[str, Any]]
Action = Callable[[Request, FormData, Reading], Response]


def page(name: str, reader: Reader) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint of page `name`: `reader` (in a thread, with the databases' pools) gives
    the template its values; a refusal renders the problem page."""
    async def endpoint(request: Request) -> Response:
        dashboard = _dashboard(request)
        try:
            context = await _in_thread(dashboard, reader, request)
        except Refused as refused:
            return dashboard.render(request, "problem", refused.status,
                                    message=refused.message, links=refused.links)
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

        def run() -> Response:
            try:
                return fn(request, form, Reading(dashboard))
            except Refused as refused:
                return dashboard.render(request, "problem", refused.status,
                                        message=refused.message, links=refused.links,
                                        back=local_path(_text(form, "back"), "/"))
        from starlette.concurrency import run_in_threadpool

        return await run_in_threadpool(run)
    return endpoint


# ---- pages -----------------------------------------------------------------------------------


def read_overview(request: Request, reading: Reading) -> dict[str, Any]:
    names, chosen_db = reading.listed(request.query_params.get("database"))
    parts = reading.each(names, _data.overview)
    scope = ("fleet-wide" if not reading.multi else f"fleet-wide, database {chosen_db}"
             if chosen_db else "fleet-wide, every database")
    return {"view": _data.fleet(parts, scope), **parts_context(parts, chosen_db)}


def read_queue(request: Request, reading: Reading) -> dict[str, Any]:
    # By query parameter, not in the path: a queue name may hold any character.
    if not request.query_params.get("name"):
        raise Refused(400, "which queue? /queue?name=<queue>")
    name = _name(request.query_params.get("name"), "queue")
    db = _queue_database(reading, request.query_params.get("database"), name)
    if request.query_params.get("live") != "1":  # a live refresh follows a known page
        _known_or_404(reading, db, name)
    view = reading.one(db, lambda conn: _data.queue_page(conn, name))
    return {"view": view, "entered": {}, "db": reading.label(db)}


def _queue_database(reading: Reading, sent: Any, name: str) -> str:
    """The database of queue `name`: the one `sent` names; with several databases and none
    named, the one that knows the queue (a queue lives in one database), else `default`
    (whose 404 then says where else to look). Refused 409 when several know it."""
    if not reading.multi or (isinstance(sent, str) and sent.strip()):
        return reading.name(sent)
    known = [p.database for p in reading.each(reading.names,
                                              lambda conn: _data.queue_known(conn, name))
             if p.value and p.database is not None]
    if len(known) > 1:
        raise Refused(409, f"queue {name!r} is in several databases ({', '.join(known)}): "
                           "which one? add database=NAME", links=[
            (_queue_path(name, db), f"queue {name} in database {db}") for db in known])
    return known[0] if known else reading.name(None)


def _unread(parts: list[_data.Part[Any]]) -> str:
    """A 404's hint that these databases could not be searched (they could not be read);
    empty when every one could."""
    down = [p.database for p in parts if p.down and p.database is not None]
    return f"; database {', '.join(down)} could not be searched" if down else ""


def _queue_path(name: str, db: str | None) -> str:
    return f"/queue?{urlencode({'name': name, 'database': db} if db else {'name': name})}"


def _known_or_404(reading: Reading, db: str, name: str) -> None:
    def near(conn: psycopg.Connection[Any]) -> list[str] | None:
        return None if _data.queue_known(conn, name) else _data.close_names(conn, name)

    found = reading.one(db, near)
    if found is None:
        return
    hint = f"; did you mean {', '.join(repr(n) for n in found)}?" if found else ""
    links = [(_queue_path(n, reading.label(db)), n) for n in found]
    where = ""
    if reading.multi:
        where = f" in database {db}"
        others = reading.each([n for n in reading.names if n != db],
                              lambda conn: _data.queue_known(conn, name))
        elsewhere = [p.database for p in others if p.value and p.database is not None]
        if elsewhere:
            hint += f"; database {', '.join(elsewhere)} has it"
            links = [(_queue_path(name, other), f"queue {name} in database {other}")
                     for other in elsewhere] + links
        hint += _unread(others)
    raise Refused(404, f"no queue {name!r}{where}: it has no policy, no control and no job"
                       f"{hint}", links)


def read_jobs(request: Request, reading: Reading) -> dict[str, Any]:
    chosen = _job_filter(request.query_params, reading)
    query = urlencode(chosen.query())
    live = request.query_params.get("live") == "1"

    def read(conn: psycopg.Connection[Any]) -> tuple[_queries.Found, _queries.Names | None]:
        found = _data.jobs(conn, chosen)
        names = None if live or chosen.id is not None else _data.names(conn, chosen)
        return found, names

    common = {"page_size": _data.JOBS_PAGE, "chosen": chosen, "count_cap": _queries.COUNT_CAP,
              "max_ids": MAX_IDS, "tag_scan": _queries.TAG_SCAN,
              "here": f"/jobs?{query}" if query else "/jobs", "merged": False,
              "older": [], "unsearched": []}
    if not reading.multi or chosen.database is not None:
        db = reading.name(chosen.database)
        found, names = reading.one(db, read)
        label = reading.label(db)
        return {**common, "found": found, "jobs": found.jobs,
                "rows": [(label, job) for job in found.jobs],
                "unsearched_below": found.unsearched_below, "names": names,
                "chosen_db": label}
    # Every database: their newest matches merged, counts summed, an older page each.
    parts = reading.each(reading.names, read)
    merged = _data.merge_jobs(parts)
    return {**common, **parts_context(parts, None), "found": merged.found,
            "jobs": merged.found.jobs, "rows": merged.rows, "unsearched_below": None,
            "names": merged.names, "merged": True, "older": merged.older,
            "unsearched": merged.unsearched, "totals": merged.totals}


def _missing_job(reading: Reading, db: str, job_id: int, raw: object, what: str = "job",
                 path: str = "/jobs/") -> Refused:
    """The 404 of a job (or workflow) that database `db` does not have; with several
    databases, it names the others that have one with that id."""
    if not reading.multi:
        return Refused(404, f"no {what} {raw}")
    others = [n for n in reading.names if n != db]
    if job_id > MAX_ID or not others:
        return Refused(404, f"no {what} {raw} in database {db}")
    read = _data.job if what == "job" else _data.workflow
    parts = reading.each(others, lambda conn: read(conn, job_id))
    elsewhere = [p.database for p in parts if p.value and p.database is not None]
    hint = f"; database {', '.join(elsewhere)} has {what} {job_id}" if elsewhere else ""
    hint += _unread(parts)
    return Refused(404, f"no {what} {raw} in database {db}{hint}", [
        (f"{path}{job_id}?{urlencode({'database': other})}", f"{what} {job_id} in database "
         f"{other}") for other in elsewhere])


def _job_context(dashboard: Dashboard, conn: psycopg.Connection[Any], job_id: int, *,
                 redacted: bool, revealed: bool) -> dict[str, Any] | None:
    found = _data.job(conn, job_id) if job_id <= MAX_ID else None
    if found is None:
        return None
    attempts = _data.attempts(conn, job_id)
    return {"job": found, "redacted": redacted, "revealed": revealed, "attempts": attempts,
            # Its steps, what it waits for while suspended, its children (docs/design.md
            # "Durable execution"); step results are hidden under --redact, as its result is.
            "durable": _data.durable(conn, found),
            # The last failure is the job's own only while the job rests because of it.
            "own_error": _ops.job_own_error(found, attempts)}


def read_job(request: Request, reading: Reading) -> dict[str, Any]:
    dashboard = _dashboard(request)
    job_id = int(request.path_params["job_id"])
    db = reading.name(request.query_params.get("database"))
    # Under --redact, a script that sends the token itself may ask for the payload.
    shown_in_full = not dashboard.redact or (
        request.query_params.get("reveal") == "1" and dashboard.bearer_ok(request))
    context = reading.one(db, lambda conn: _job_context(
        dashboard, conn, job_id, redacted=not shown_in_full,
        revealed=dashboard.redact and shown_in_full))
    if context is None:
        raise _missing_job(reading, db, job_id, request.path_params["job_id"])
    return {**context, "db": reading.label(db)}


def read_workflow(request: Request, reading: Reading) -> dict[str, Any]:
    workflow_id = int(request.path_params["workflow_id"])
    db = reading.name(request.query_params.get("database"))
    members = (reading.one(db, lambda conn: _data.workflow(conn, workflow_id))
               if workflow_id <= MAX_ID else [])
    if not members:
        raise _missing_job(reading, db, workflow_id, request.path_params["workflow_id"],
                           "workflow", "/workflows/")
    counts: dict[str, int] = {}
    for member in members:
        counts[member.status.value] = counts.get(member.status.value, 0) + 1
    return {"workflow_id": workflow_id, "members": members, "counts": counts,
            "db": reading.label(db)}


def read_workers(request: Request, reading: Reading) -> dict[str, Any]:
    names, chosen_db = reading.listed(request.query_params.get("database"))
    return parts_context(reading.each(names, _data.workers), chosen_db)


def read_schedules(request: Request, reading: Reading) -> dict[str, Any]:
    names, chosen_db = reading.listed(request.query_params.get("database"))
    return parts_context(reading.each(names, _data.schedules), chosen_db)


def read_budgets(request: Request, reading: Reading) -> dict[str, Any]:
    names, chosen_db = reading.listed(request.query_params.get("database"))
    return parts_context(reading.each(names, _data.budgets), chosen_db)


# ---- actions ---------------------------------------------------------------------------------


def _in_database(label: str | None) -> str:
    """ " in database eu" after a notice's subject (nothing with one database)."""
    return f" in database {label}" if label else ""


def queue_action(request: Request, form: FormData, reading: Reading) -> Response:
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
    db = _queue_database(reading, form.get("database"), name)
    label = reading.label(db)
    back = _queue_path(name, label)
    _known_or_404(reading, db, name)  # a typo must not create a governed queue
    where = _in_database(label)

    def act(conn: psycopg.Connection[Any]) -> Response:
        q = Queue(conn)
        if verb == "clear-backoff":
            return _clear_queue_backoff(request, form, q, name, back, label)
        was = next((s for s in q.list_queues() if s.queue == name), None)
        unchanged = {"pause": was is not None and was.paused,
                     "resume": was is None or not was.paused,
                     "clear-override": was is None or was.override is None}.get(verb, False)
        if unchanged:
            why = {"pause": "it was already paused", "resume": "it was not paused",
                   "clear-override": "it had no override"}[verb]
            return dashboard.flash(request, RedirectResponse(back, 303), "problem",
                                   f"nothing changed: queue {name!r}{where}: {why}")
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
                                    entered=entered, failure=str(exc), db=label)
        return dashboard.flash(request, RedirectResponse(back, 303), "notice",
                               f"{_DONE[verb]}: queue {name!r}{where}")

    return reading.one(db, act)


def _backoff_text(backoff: BackoffState) -> str:
    """A cleared backoff in a notice: "key 'acme' of queue 'api' (until 2026-12-04 15:02:03
    UTC, by job 4812)"."""
    target = {"budget": f"budget {backoff.name!r}", "queue": f"queue {backoff.name!r}",
              "key": f"key {backoff.key!r} of queue {backoff.name!r}"}[backoff.scope]
    by = f", by job {backoff.by_job}" if backoff.by_job is not None else ""
    return f"{target} (until {stamp(backoff.until)}{by})"


def _cleared_notice(cleared: list[BackoffState]) -> str:
    """What a clear ended, each backoff named (past three keys, the keys counted)."""
    keys = [b for b in cleared if b.scope == "key"]
    named = [b for b in cleared if b.scope != "key"] + (keys if len(keys) <= 3 else [])
    said = [_backoff_text(b) for b in named]
    if len(keys) > 3:
        said.append(f"{len(keys)} keys of queue {keys[0].name!r}")
    return f"{_DONE['clear-backoff']}: " + "; ".join(said)


def _clear_queue_backoff(request: Request, form: FormData, q: Queue, name: str,
                         back: str, label: str | None = None) -> Response:
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
                               f"nothing changed: {what}{_in_database(label)} had no backoff "
                               "in force")
    return dashboard.flash(request, RedirectResponse(back, 303), "notice",
                           _cleared_notice(cleared) + _in_database(label))


def budget_action(request: Request, form: FormData, reading: Reading) -> Response:
    """An action on a named budget: `clear-backoff` ends its backoff (the ready jobs of its
    queues may start at once). A budget lives in one database: the form's `database`."""
    dashboard = _dashboard(request)
    verb = request.path_params["verb"]
    if verb != "clear-backoff":
        return PlainTextResponse(f"no action {verb!r}", 404)
    sent = form.get("budget")
    try:
        name = _name(sent if isinstance(sent, str) else None, "budget")
    except Refused as refused:
        return PlainTextResponse(refused.message, refused.status)
    db = reading.name(form.get("database"))
    label = reading.label(db)
    back = local_path(_text(form, "back"), "/budgets")
    cleared = reading.one(db, lambda conn: Queue(conn).clear_budget_backoff(name))
    if not cleared:
        return dashboard.flash(request, RedirectResponse(back, 303), "problem",
                               f"nothing changed: budget {name!r}{_in_database(label)} had "
                               "no backoff in force")
    return dashboard.flash(request, RedirectResponse(back, 303), "notice",
                           _cleared_notice(cleared) + _in_database(label))


def _chosen_ids(form: FormData, reading: Reading) -> dict[str, list[int]]:
    """The jobs a form chose, by database: each `id` is `ID` (a job of the form's `database`,
    else of `default`) or `DATABASE:ID` (what the Jobs page of several databases sends)."""
    fallback: str | None = None
    chosen: dict[str, list[int]] = {}
    for value in form.getlist("id"):
        text = str(value)
        if ":" in text:
            name, _, text = text.partition(":")
            db = reading.name(name) if name.strip() else reading.name(None)
        else:
            if fallback is None:
                fallback = reading.name(form.get("database"))
            db = fallback
        chosen.setdefault(db, []).append(_id(text, "id"))
    return chosen


def jobs_action(request: Request, form: FormData, reading: Reading) -> Response:
    dashboard = _dashboard(request)
    verb = request.path_params["verb"]
    back = local_path(_text(form, "back"), "/jobs")
    if verb not in ("retry", "cancel"):
        return PlainTextResponse(f"no action {verb!r}", 404)
    applies = _queries.RETRYABLE if verb == "retry" else _queries.CANCELABLE
    targets: dict[str, list[int]]
    if form.get("match") == "all":
        # Everything the filter matches (in the statuses the action applies to), read
        # again now: the page's count was a moment ago.
        try:
            chosen = _job_filter(form, reading)
        except Refused as refused:
            return PlainTextResponse(refused.message, refused.status)
        if reading.multi and chosen.database is None:
            return PlainTextResponse("which database? an action on every match acts in one "
                                     "database: give database=NAME", 400)
        db = reading.name(chosen.database)
        ids = reading.one(db, lambda conn: _ops.execute(
            conn, _queries.matching_ids(chosen.search(), applies, MAX_IDS)))
        if not ids:
            return dashboard.flash(request, RedirectResponse(back, 303), "problem",
                                   f"nothing changed: no job matching {chosen.described} "
                                   f"is {_either(applies)}")
        targets = {db: ids}
    else:
        try:
            targets = _chosen_ids(form, reading)
        except Refused as refused:
            return PlainTextResponse(refused.message, refused.status)
        every = [i for ids in targets.values() for i in ids]
        if not every:
            return dashboard.flash(request, RedirectResponse(back, 303), "problem",
                                   "nothing changed: no job was chosen")
        if len(every) > MAX_IDS or any(not 0 < i <= MAX_ID for i in every):
            return PlainTextResponse(f"at most {MAX_IDS} job ids, each a job's id", 400)
    word = "retried" if verb == "retry" else "canceled (or asked to cancel)"
    said = []
    changed = 0
    for db, ids in targets.items():
        def act(conn: psycopg.Connection[Any], ids: list[int] = ids) -> tuple[int, str]:
            q = Queue(conn)
            done = q.retry_jobs(ids) if verb == "retry" else q.cancel_jobs(ids)
            left = sorted(set(ids) - set(done))
            message = f"{word} {len(done)} of {len(ids)}"
            if left:
                message += "; " + _unchanged(_ops.execute(conn, _queries.job_statuses(left)),
                                             left, verb, applies)
            return len(done), message

        label = reading.label(db)
        try:
            done, message = reading.one(db, act)
        except Refused as refused:  # that database cannot be reached: the others acted
            if len(targets) == 1:
                raise
            done, message = 0, refused.message
        changed += done
        said.append(f"{message}{_in_database(label)}" if label and len(targets) == 1
                    else f"database {label}: {message}" if label else message)
    text = "; ".join(said)
    if not changed:
        text = "nothing changed: " + text
    return dashboard.flash(request, RedirectResponse(back, 303),
                           "notice" if changed else "problem", text)


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
    sent_db = form.get("database") or request.query_params.get("database")
    page_path = f"/jobs/{request.path_params['job_id']}"
    if dashboard.multi and isinstance(sent_db, str) and sent_db.strip():
        page_path += f"?{urlencode({'database': sent_db.strip()})}"
    if not dashboard.redact:
        return RedirectResponse(page_path, 303)
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

    def read(request: Request, reading: Reading) -> dict[str, Any]:
        db = reading.name(sent_db)
        context = reading.one(db, lambda conn: _job_context(
            dashboard, conn, job_id, redacted=False, revealed=True))
        if context is None:
            raise _missing_job(reading, db, job_id, request.path_params["job_id"])
        return {**context, "db": reading.label(db)}
    try:
        context = await _in_thread(dashboard, read, request)
    except Refused as refused:
        return dashboard.render(request, "problem", refused.status, message=refused.message,
                                links=refused.links)
    return dashboard.render(request, "job", **context)


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    dashboard: Dashboard = app.state.dashboard
    # One database: its schema and pool, or no start (as always). Several: each is tried, and
    # one that cannot be reached is shown so until it answers (docs/design.md "Several
    # databases").
    started = []
    try:
        for source in dashboard.sources.values():
            source.start()
            started.append(source)
        yield
    finally:
        for source in started:
            source.close()


def build(databases: str | Mapping[str, str], *, read_only: bool, token: str | None,
          local_only: bool, redact: bool = False) -> Starlette:
    """The dashboard's Starlette app on one database (a URL) or several (name -> URL,
    `default` first): its routes, and the guard every request passes first."""
    dashboard = Dashboard(databases, read_only=read_only, token=token, local_only=local_only,
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


async def _in_thread(dashboard: Dashboard, reader: Reader, request: Request) -> dict[str, Any]:
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(reader, request, Reading(dashboard))


__all__ = ["build"]
