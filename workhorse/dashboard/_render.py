"""One dashboard process (`Dashboard`): its security state, its databases (one pool each, by name)
and its templates, the rendering of a page, and the notices an action leaves for the next page.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from psycopg_pool import ConnectionPool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from .. import database
from ..errors import WorkhorseError
from ..types import JobStatus
from . import _queries, _security
from ._security import BROWSER_ID, CSRF_COOKIE, Security, is_https, same
from ._sources import Source

NOTICE_COOKIE = "workhorse_notice"
# A notice waits this long for the page it is meant for, and is at most this long.
NOTICE_SECONDS = 60
NOTICE_LIMIT = 1000
LIVE_SECONDS = 2
# The pages with a live region (`_<page>.html`, re-fetched with `?live=1`).
LIVE_PAGES = {"overview", "queue", "jobs", "job", "workers", "schedules", "budgets"}


class Dashboard(Security):
    """One dashboard process: its security state (sessions, CSRF, wrong tokens), its databases
    (a pool of connections each, by name) and its templates."""

    def __init__(self, databases: str | Mapping[str, str], *, read_only: bool,
                 token: str | None, local_only: bool = False, redact: bool = False) -> None:
        super().__init__(read_only=read_only, token=token, local_only=local_only)
        named = ({database.DEFAULT_DATABASE: databases} if isinstance(databases, str)
                 else dict(databases))
        if not named:
            raise WorkhorseError("the dashboard needs a database")
        several = len(named) > 1
        self.sources = {name: Source(name, url, several=several) for name, url in named.items()}
        self.names = list(self.sources)
        # Several databases (docs/design.md "Several databases"): a database column, a filter,
        # and a `database` parameter on every page and action that addresses one.
        self.multi = several
        self.redact = redact
        self.templates = Environment(
            loader=PackageLoader("workhorse.dashboard", "templates"),
            autoescape=select_autoescape(["html"], default=True),
            trim_blocks=True, lstrip_blocks=True,
        )
        self.templates.filters.update(ago=_ago, stamp=stamp, pretty=_pretty, limit=_limit)
        self.templates.globals.update(statuses=[s.value for s in JobStatus],
                                      retryable=_queries.RETRYABLE,
                                      cancelable=_queries.CANCELABLE,
                                      dbq=_dbq, dbq1=_dbq1)

    @property
    def url(self) -> str:
        """The URL of its first database (its only one, or `default`)."""
        return next(iter(self.sources.values())).url

    @property
    def pool(self) -> ConnectionPool:
        """The pool of its first database (its only one, or `default`)."""
        return next(iter(self.sources.values())).pool

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
            "multi": self.multi, "databases": self.names, "down": [], "db": None,
            "chosen_db": None,
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


def stamp(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if value else ""


def _pretty(value: Any) -> str:
    """JSON, indented; a plain string (not Markup), so the template escapes it."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


def _dbq(name: str | None) -> Markup:
    """A link's `&database=NAME` (nothing with one database, whose parts have no name)."""
    return Markup("&amp;database=" + quote(name, safe="")) if name else Markup("")


def _dbq1(name: str | None) -> Markup:
    """A link's `?database=NAME`, for a path without a query (nothing with one database)."""
    return Markup("?database=" + quote(name, safe="")) if name else Markup("")
