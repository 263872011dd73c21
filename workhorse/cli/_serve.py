"""The verbs that serve something to watch: the web `dashboard`, and the `demo` fleet."""

from __future__ import annotations

import sys

import click
import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .. import database
from ..errors import WorkhorseError, first_line
from ._base import console, databases, error_console, fail, handle_errors, main

# How long (seconds) the start waits for each of several databases before it says that one
# cannot be reached and serves the others (unless its URL names its own connect_timeout).
START_CONNECT_TIMEOUT = 5


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; a non-loopback one needs WORKHORSE_DASHBOARD_TOKEN.")
@click.option("--port", type=click.IntRange(0, 65535), default=8642, show_default=True)
@click.option("--read-only", is_flag=True, help="Hide and refuse every action.")
@click.option("--redact", is_flag=True,
              help="Hide payloads and results; shown only on request, with the token.")
@click.option("--tls-cert", default=None, metavar="FILE",
              help="Serve https with this PEM certificate (with --tls-key).")
@click.option("--tls-key", default=None, metavar="FILE", help="The certificate's PEM key.")
@click.option("--database", "only", default=None, metavar="NAME",
              help="Show only this database (one of those WORKHORSE_DATABASES names). "
                   "Default: every one.")
@click.pass_context
@handle_errors
def dashboard(ctx: click.Context, host: str, port: int, read_only: bool, redact: bool,
              tls_cert: str | None, tls_key: str | None, only: str | None) -> None:
    """Serve the web dashboard: queues against their limits, jobs, workers, throughput.

    With several databases (WORKHORSE_DATABASES) it shows them all in one dashboard, with a
    database column and filter; one that cannot be reached is shown so while the others are
    served."""
    from .. import dashboard as web  # light: the extra's modules load only when serving

    missing = web.missing_extra()
    if missing:
        fail(f"the dashboard needs its extra ({', '.join(missing)} missing): "
              f"{web.INSTALL_HINT}")
    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("give --tls-cert and --tls-key together")
    token = web.configured_token()
    if token is None and not web.is_loopback(host):
        fail(f"refusing to bind {host} (not a loopback address) without a token: set "
              f"{web.TOKEN_ENV}, which the dashboard then requires")
    if token is not None:
        web.check_token(token)
    if tls_cert is not None and tls_key is not None:
        import ssl

        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(tls_cert, tls_key)
        except (OSError, ssl.SSLError) as exc:
            fail(f"cannot use --tls-cert {tls_cert} with --tls-key {tls_key}: "
                  f"{first_line(exc)}")
    found = databases(ctx, only)
    if len(found) == 1:
        [(name, url)] = found.items()
        database.ensure_schema(url)
        where = database.mask(url) if name == database.DEFAULT_DATABASE else (
            f"database {name}: {database.mask(url)}")
    else:
        answered = []
        for name, url in found.items():
            try:
                database.ensure_schema(_with_timeout(url))
                answered.append(name)
            except (WorkhorseError, psycopg.Error) as exc:
                error_console.print(
                    f"warning: database {name} ({database.mask(url)}) cannot be reached: "
                    f"{first_line(exc)}; the dashboard says so and tries it again while it "
                    "serves the others", highlight=False, soft_wrap=True, markup=False)
        if not answered:
            fail(f"none of the databases can be reached ({', '.join(found)})")
        where = "databases " + ", ".join(f"{name} ({database.mask(url)})"
                                         for name, url in found.items())
    mode = " (read-only)" if read_only else ""
    guard = " (token required)" if token else ""
    hidden = " (payloads redacted)" if redact else ""
    scheme = "https" if tls_cert else "http"
    shown = f"[{host}]" if ":" in host else host
    console.print(f"workhorse dashboard{mode}{guard}{hidden} on {scheme}://{shown}:{port} for "
                  f"{where}", highlight=False, soft_wrap=True)
    if tls_cert is None and not web.is_loopback(host):
        error_console.print(
            "warning: plain http on a non-loopback address: the token and the session cookie "
            "cross the network in clear unless a TLS proxy is in front (or use --tls-cert and "
            "--tls-key)", highlight=False, soft_wrap=True, markup=False)
    web.serve({name: database.with_application_name(url, "dashboard")
               for name, url in found.items()}, host=host, port=port,
              read_only=read_only, token=token, redact=redact, tls_cert=tls_cert,
              tls_key=tls_key)


def _with_timeout(url: str) -> str:
    """`url` with a connect_timeout, unless it names one (or cannot be parsed: then as is)."""
    try:
        if "connect_timeout" in conninfo_to_dict(url):
            return url
        return make_conninfo(url, connect_timeout=START_CONNECT_TIMEOUT)
    except psycopg.ProgrammingError:
        return url


@main.command()
@click.option("--jobs", "job_count", type=click.IntRange(1, 100_000), default=300,
              show_default=True, help="How many jobs to enqueue.")
@click.option("--slots", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True)
@click.pass_context
@handle_errors
def demo(ctx: click.Context, job_count: int, slots: int, concurrency: int) -> None:
    """Run a real worker fleet on a multi-tenant app and watch the budget hold."""
    from .._demo import run_demo

    sys.exit(run_demo(ctx.obj.get("database_url"), job_count=job_count, slots=slots,
                      concurrency=concurrency, console=console))
