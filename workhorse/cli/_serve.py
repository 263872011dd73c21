"""The verbs that serve something to watch: the web `dashboard`, and the `demo` fleet."""

from __future__ import annotations

import sys

import click

from .. import database
from ..errors import first_line
from ._base import console, error_console, fail, handle_errors, main, resolved_url


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
@click.pass_context
@handle_errors
def dashboard(ctx: click.Context, host: str, port: int, read_only: bool, redact: bool,
              tls_cert: str | None, tls_key: str | None) -> None:
    """Serve the web dashboard: queues against their limits, jobs, workers, throughput."""
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
    url = resolved_url(ctx)
    database.ensure_schema(url)
    mode = " (read-only)" if read_only else ""
    guard = " (token required)" if token else ""
    hidden = " (payloads redacted)" if redact else ""
    scheme = "https" if tls_cert else "http"
    shown = f"[{host}]" if ":" in host else host
    console.print(f"workhorse dashboard{mode}{guard}{hidden} on {scheme}://{shown}:{port} for "
                  f"{database.mask(url)}", highlight=False, soft_wrap=True)
    if tls_cert is None and not web.is_loopback(host):
        error_console.print(
            "warning: plain http on a non-loopback address: the token and the session cookie "
            "cross the network in clear unless a TLS proxy is in front (or use --tls-cert and "
            "--tls-key)", highlight=False, soft_wrap=True, markup=False)
    web.serve(database.with_application_name(url, "dashboard"), host=host, port=port,
              read_only=read_only, token=token, redact=redact, tls_cert=tls_cert,
              tls_key=tls_key)


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
