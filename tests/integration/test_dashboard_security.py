"""Issue #24, items 4, 5, 8 and 9, against the real dashboard over HTTP on a real database (the
ASGI app through starlette's TestClient, or `workhorse dashboard` as its own process):

- CSRF tokens are signed by the server and tied to the session; a request from another origin
  is refused with 403 and changes nothing (4);
- https with --tls-cert/--tls-key, Secure cookies under https, tokens of at least 32
  characters, sessions that expire and that logout revokes, a limit on wrong tokens (5);
- bad names and ids give typed errors and 400s, not psycopg errors, 500s and 503s (8);
- --redact hides payloads and results until the token is given, and a token on loopback
  requires a login (9).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from starlette.testclient import TestClient

from workhorse import EnqueueOptions, InvalidOptionsError, Queue
from workhorse.dashboard import _security, create_app

TOKEN = "correct-horse-battery-staple-0123456789"
PAYLOAD_SECRET = "4111-1111-PAYLOAD-SECRET"
RESULT_SECRET = "RESULT-SECRET-PIN-0000"


def _csrf(client: TestClient, path: str = "/") -> str:
    html = client.get(path).text
    found = re.search(r'<body data-csrf="([^"]+)"', html)
    assert found, html[:300]
    return found.group(1)


def _paused(conn: Any, queue: str) -> bool | None:
    row = conn.execute("SELECT paused FROM workhorse.queue_controls WHERE queue = %s",
                       (queue,)).fetchone()
    return None if row is None else bool(row[0])


def _login(client: TestClient, token: str = TOKEN) -> Any:
    csrf = _csrf(client, "/login")
    return client.post("/login", data={"csrf": csrf, "token": token, "next": "/"},
                       follow_redirects=False)


@pytest.fixture
def job(queue: Queue) -> int:
    """A finished job whose payload and result hold secrets, in a queue that exists."""
    job_id = queue.enqueue("shop.charge", {"args": [PAYLOAD_SECRET], "kwargs": {}},
                           EnqueueOptions(queue="api"))
    (claimed,) = queue.claim("api", 1, 60)
    queue.complete(claimed.id, claimed.fence, {"pin": RESULT_SECRET})
    queue.enqueue("shop.charge", {"args": [], "kwargs": {}}, EnqueueOptions(queue="api"))
    return job_id


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(database_url)) as test_client:
        yield test_client


# ---- 4: CSRF ------------------------------------------------------------------------------


def test_a_planted_double_submit_cookie_from_another_origin_changes_nothing(client, job, conn):
    """The issue's reproduction: cookie workhorse_csrf=x, field csrf=x, Origin
    http://localhost:3000 paused the queue. Now neither a planted pair nor a foreign origin
    passes, and the page's own token works only from its own origin and for its own browser."""
    client.cookies.set("workhorse_csrf", "x")
    response = client.post("/queue/pause", data={"queue": "api", "csrf": "x"},
                           headers={"Origin": "http://localhost:3000"}, follow_redirects=False)
    assert response.status_code == 403, response.text
    # The same planted pair without an Origin header: the token is not the server's signature.
    response = client.post("/queue/pause", data={"queue": "api", "csrf": "x"},
                           follow_redirects=False)
    assert response.status_code == 403
    client.cookies.clear()
    csrf = _csrf(client)
    assert csrf != client.cookies.get("workhorse_csrf")  # signed, not the cookie's value
    # The right token, sent from elsewhere.
    for headers in ({"Origin": "http://localhost:3000"}, {"Origin": "null"},
                    {"Origin": "http://testserver.evil.example"},
                    {"Origin": "http://testserver:8080"},
                    {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
                    {"Origin": "http://testserver", "Sec-Fetch-Site": "cross-site"}):
        response = client.post("/queue/pause", data={"queue": "api", "csrf": csrf},
                               headers=headers, follow_redirects=False)
        assert response.status_code == 403, headers
        assert client.post("/jobs/cancel", data={"id": str(job + 1), "csrf": csrf},
                           headers=headers, follow_redirects=False).status_code == 403
    assert _paused(conn, "api") is None
    assert conn.execute("SELECT status FROM workhorse.jobs WHERE id = %s",
                        (job + 1,)).fetchone()[0] == "ready"
    # One browser's token is no good in another browser (another browser id).
    client.cookies.clear()
    other = _csrf(client)
    assert other != csrf
    assert client.post("/queue/pause", data={"queue": "api", "csrf": csrf},
                       follow_redirects=False).status_code == 403
    assert _paused(conn, "api") is None
    # The page's own form, as a browser sends it: accepted.
    response = client.post("/queue/pause", data={"queue": "api", "csrf": other},
                           headers={"Origin": "http://testserver", "Sec-Fetch-Site":
                                    "same-origin"}, follow_redirects=False)
    assert response.status_code == 303 and _paused(conn, "api") is True


def test_the_csrf_token_is_tied_to_the_login_session(database_url, job, conn):
    with TestClient(create_app(database_url, token=TOKEN)) as client:
        before = _csrf(client, "/login")
        assert _login(client).status_code == 303
        during = _csrf(client)
        assert during != before
        # The token of the page before the login, or of a session that ended, acts on nothing.
        assert client.post("/queue/pause", data={"queue": "api", "csrf": before},
                           follow_redirects=False).status_code == 403
        assert client.post("/logout", data={"csrf": during},
                           follow_redirects=False).status_code == 303
        assert _login(client).status_code == 303
        assert client.post("/queue/pause", data={"queue": "api", "csrf": during},
                           follow_redirects=False).status_code == 403
        assert _paused(conn, "api") is None
        response = client.post("/queue/pause", data={"queue": "api", "csrf": _csrf(client)},
                               follow_redirects=False)
        assert response.status_code == 303 and _paused(conn, "api") is True


# ---- 5: tokens, sessions, the login limit, https -------------------------------------------


@pytest.mark.parametrize("token", ["", " ", "short", " " + TOKEN, "x" * 31, TOKEN + "\n"])
def test_a_token_shorter_than_32_characters_is_refused(database_url, token):
    if token == "":
        # An empty variable means no token: on loopback the dashboard then needs none.
        assert create_app(database_url) is not None
        return
    with pytest.raises(InvalidOptionsError, match="WORKHORSE_DASHBOARD_TOKEN"):
        create_app(database_url, token=token)


@pytest.mark.slow  # its own processes
@pytest.mark.parametrize("token", [" ", "s3cret", "x" * 31])
def test_cli_refuses_a_short_token_in_one_line(database_url, token):
    env = {**os.environ, "WORKHORSE_DASHBOARD_TOKEN": token}
    # A timeout: without the refusal it would serve (and never return).
    done = subprocess.run(
        [sys.executable, "-m", "workhorse", "--database-url", database_url, "dashboard",
         "--port", "0"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "WORKHORSE_DASHBOARD_TOKEN" in lines[0] and "32" in lines[0]
    assert done.stdout == ""


def test_sessions_are_signed_expire_and_logout_revokes_them(database_url, job, monkeypatch):
    with TestClient(create_app(database_url, token=TOKEN)) as client:
        response = _login(client)
        assert response.status_code == 303
        cookie = response.headers["set-cookie"]
        assert "workhorse_session=" in cookie and "HttpOnly" in cookie
        assert "SameSite=strict" in cookie and f"Max-Age={_security.SESSION_SECONDS}" in cookie
        assert "Secure" not in cookie  # plain http here; see the https test
        session = client.cookies["workhorse_session"]
        assert TOKEN not in session
        client.cookies.delete("workhorse_session")  # from here on, set by hand
        client.cookies.set("workhorse_session", session)
        assert client.get("/", follow_redirects=False).status_code == 200
        # A cookie the server did not sign is no session.
        sid, expires, signature = session.split(".")
        for forged in (f"{sid}.{int(expires) + 10**6}.{signature}",
                       f"{sid}.{expires}.{'0' * 64}", "x", ""):
            client.cookies.set("workhorse_session", forged)
            assert client.get("/", follow_redirects=False).status_code == 303, forged
        # Logout revokes: a copy of the cookie kept from before is refused after it.
        client.cookies.set("workhorse_session", session)
        client.post("/logout", data={"csrf": _csrf(client)})
        client.cookies.set("workhorse_session", session)
        response = client.get("/jobs", follow_redirects=False)
        assert response.status_code == 303 and response.headers["location"].startswith("/login")
        # A new login works, and expires after SESSION_SECONDS.
        client.cookies.delete("workhorse_session")
        assert _login(client).status_code == 303
        assert client.get("/", follow_redirects=False).status_code == 200
        start = time.time()
        monkeypatch.setattr(_security, "clock", lambda: start + _security.SESSION_SECONDS + 1)
        response = client.get("/", follow_redirects=False)
        assert response.status_code == 303 and response.headers["location"].startswith("/login")


def test_wrong_tokens_are_rate_limited_per_client(database_url, job, monkeypatch):
    with TestClient(create_app(database_url, token=TOKEN)) as client:
        for _ in range(_security.LOGIN_ATTEMPTS):
            assert _login(client, "guess" * 8).status_code == 401
        # The limit is reached: even the right token is answered 429 until the window passes.
        refused = _login(client)
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert "workhorse_session" not in client.cookies
        bearer = client.get("/", headers={"Authorization": f"Bearer {TOKEN}"})
        assert bearer.status_code == 429
        start = time.time()
        monkeypatch.setattr(_security, "clock", lambda: start + _security.LOGIN_WINDOW + 1)
        assert _login(client).status_code == 303
        assert client.get("/", follow_redirects=False).status_code == 200
        # Wrong bearer tokens count too.
        for _ in range(_security.LOGIN_ATTEMPTS):
            assert client.get("/", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 429


def test_cookies_are_secure_under_https(database_url, job):
    with TestClient(create_app(database_url, token=TOKEN),
                    base_url="https://testserver") as client:
        page = client.get("/login")
        assert "Secure" in page.headers["set-cookie"]
        response = _login(client)
        assert response.status_code == 303
        assert "workhorse_session=" in response.headers["set-cookie"]
        assert "Secure" in response.headers["set-cookie"]


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a self-signed certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
                   timeout=60)
    return cert, key


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _serving(database_url: str, *args: str, token: str | None = TOKEN,
             https: Path | None = None) -> Iterator[str]:
    """`workhorse dashboard ARGS` as its own process on a free loopback port, until the block
    ends; yields its base URL once it answers (`https`: the certificate to trust)."""
    import httpx

    port = _free_port()
    env = {**os.environ, "WORKHORSE_DATABASE_URL": database_url}
    env.pop("WORKHORSE_DASHBOARD_TOKEN", None)
    if token is not None:
        env["WORKHORSE_DASHBOARD_TOKEN"] = token
    proc = subprocess.Popen([sys.executable, "-m", "workhorse", "dashboard", "--port", str(port),
                             *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    base = f"{'https' if https else 'http'}://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{base}/login", timeout=5, verify=_trust(https) if https else True)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.communicate()[0]
                assert time.monotonic() < deadline
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output


def _trust(cert: Path) -> Any:
    import ssl

    return ssl.create_default_context(cafile=str(cert))


def _form_token(html: str) -> str:
    found = re.search(r'<body data-csrf="([^"]+)"', html)
    assert found, html[:300]
    return found.group(1)


@pytest.mark.slow  # its own processes
def test_cli_serves_https_with_tls_cert_and_key_and_secure_cookies(database_url, job, tmp_path):
    import httpx

    cert, key = _certificate(tmp_path)
    with _serving(database_url, "--tls-cert", str(cert), "--tls-key", str(key),
                  https=cert) as base:
        with httpx.Client(base_url=base, verify=_trust(cert), timeout=10) as http:
            login = http.get("/login")
            assert login.status_code == 200 and "Secure" in login.headers["set-cookie"]
            response = http.post("/login", data={"csrf": _form_token(login.text),
                                                 "token": TOKEN, "next": "/"},
                                 headers={"Origin": base})
            assert response.status_code == 303, response.text
            cookie = response.headers["set-cookie"]
            assert "workhorse_session=" in cookie and "Secure" in cookie and "HttpOnly" in cookie
            assert http.get("/").status_code == 200
        # The port speaks TLS only.
        with pytest.raises(httpx.TransportError):
            httpx.get(base.replace("https:", "http:") + "/login", timeout=5)


@pytest.mark.slow  # its own processes
def test_cli_needs_both_tls_files_and_says_which_one_is_bad(database_url, tmp_path):
    cert, key = _certificate(tmp_path)
    run = [sys.executable, "-m", "workhorse", "--database-url", database_url, "dashboard",
           "--port", "0"]
    env = {k: v for k, v in os.environ.items() if k != "WORKHORSE_DASHBOARD_TOKEN"}
    done = subprocess.run([*run, "--tls-cert", str(cert)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "--tls-key" in done.stderr
    done = subprocess.run([*run, "--tls-cert", str(tmp_path / "missing.pem"), "--tls-key",
                           str(key)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--tls-cert" in lines[0], done.stderr


# ---- 8: typed errors and 400s ------------------------------------------------------------


def test_bad_ids_and_names_raise_typed_errors_before_any_statement(queue, job):
    """The issue's reproductions: psycopg's NumericValueOutOfRange and DataError escaped."""
    for call in (lambda: queue.cancel_jobs([2**70]), lambda: queue.retry_jobs([2**63]),
                 lambda: queue.get_job(-(2**63) - 1), lambda: queue.list_jobs(queue="a\x00"),
                 lambda: queue.list_jobs(key="a\x00b"), lambda: queue.list_jobs(task="x" * 300),
                 lambda: queue.pause("a\ud800"), lambda: queue.cancel_jobs([True]),
                 lambda: queue.list_concurrency_policies("ns\x00")):
        with pytest.raises(InvalidOptionsError):
            call()
    assert queue.get_job(job) is not None  # the connection is still usable: nothing was sent


def test_the_dashboard_answers_400_with_a_message_to_bad_names_and_ids(client, job, conn):
    """/queue?name=a%00b and a 300-character name gave 500, /jobs?key=a%00b gave 503."""
    for path, says in [("/queue?name=a%00b", "NUL"), ("/queue?name=" + "q" * 300, "1-255"),
                       ("/jobs?key=a%00b", "NUL"), ("/jobs?queue=" + "q" * 300, "1-255"),
                       ("/jobs?task=a%00", "NUL"), ("/jobs?id=%C2%B2", "job id"),
                       (f"/jobs?id={2**70}", "job id"), ("/jobs?before=-1", "job id")]:
        response = client.get(path)
        assert response.status_code == 400, (path, response.status_code)
        assert says in response.text and 'class="problem"' in response.text, path
    csrf = _csrf(client)
    for form in ({"queue": "a\x00b"}, {"queue": "q" * 300}):
        response = client.post("/queue/pause", data={**form, "csrf": csrf})
        assert response.status_code == 400 and "queue" in response.text
    response = client.post("/jobs/cancel", data={"id": str(2**70), "csrf": csrf})
    assert response.status_code == 400
    assert conn.execute("SELECT count(*) FROM workhorse.queue_controls").fetchone()[0] == 0


# ---- 9: --redact, and a token on loopback --------------------------------------------------


def test_redact_hides_payload_and_result_until_the_token_is_given(database_url, job):
    with TestClient(create_app(database_url, token=TOKEN, redact=True)) as client:
        assert _login(client).status_code == 303
        for path in (f"/jobs/{job}", f"/jobs/{job}?live=1", f"/jobs/{job}?reveal=1", "/jobs",
                     "/queue?name=api", "/"):
            html = client.get(path).text
            assert PAYLOAD_SECRET not in html and RESULT_SECRET not in html, path
        page = client.get(f"/jobs/{job}").text
        assert 'id="payload-hidden"' in page and 'id="result-hidden"' in page
        assert f'action="/jobs/{job}/reveal"' in page
        csrf = _form_token(page)
        wrong = client.post(f"/jobs/{job}/reveal", data={"csrf": csrf, "token": "guess"})
        assert wrong.status_code == 403 and PAYLOAD_SECRET not in wrong.text
        no_csrf = client.post(f"/jobs/{job}/reveal", data={"token": TOKEN})
        assert no_csrf.status_code == 403 and PAYLOAD_SECRET not in no_csrf.text
        shown = client.post(f"/jobs/{job}/reveal", data={"csrf": csrf, "token": TOKEN})
        assert shown.status_code == 200
        assert PAYLOAD_SECRET in shown.text and RESULT_SECRET in shown.text
        assert "hx-get" not in shown.text  # no live refresh hides it again, nor keeps polling
        assert shown.headers["cache-control"] == "no-store"
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert PAYLOAD_SECRET not in client.get(f"/jobs/{job}", headers=bearer).text
        assert PAYLOAD_SECRET in client.get(f"/jobs/{job}?reveal=1", headers=bearer).text
    # Read-only and redacted: revealing is a read, still possible with the token.
    with TestClient(create_app(database_url, token=TOKEN, redact=True,
                               read_only=True)) as client:
        _login(client)
        csrf = _csrf(client, f"/jobs/{job}")
        shown = client.post(f"/jobs/{job}/reveal", data={"csrf": csrf, "token": TOKEN})
        assert shown.status_code == 200 and PAYLOAD_SECRET in shown.text
    # Without a token nothing can reveal them.
    with TestClient(create_app(database_url, redact=True)) as client:
        page = client.get(f"/jobs/{job}").text
        assert PAYLOAD_SECRET not in page and "/reveal" not in page
        response = client.post(f"/jobs/{job}/reveal", data={"csrf": _form_token(page),
                                                             "token": TOKEN})
        assert response.status_code == 403 and PAYLOAD_SECRET not in response.text
    # And without --redact the job page shows them, as before.
    with TestClient(create_app(database_url)) as client:
        assert PAYLOAD_SECRET in client.get(f"/jobs/{job}").text


@pytest.mark.slow  # its own processes
def test_cli_redacts_and_a_token_on_loopback_requires_a_login(database_url, job):
    import httpx

    with _serving(database_url, "--redact") as base:
        response = httpx.get(f"{base}/jobs/{job}", timeout=10)
        assert response.status_code == 303
        assert response.headers["location"].startswith("/login")
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        hidden = httpx.get(f"{base}/jobs/{job}", headers=bearer, timeout=10)
        assert hidden.status_code == 200 and PAYLOAD_SECRET not in hidden.text
        shown = httpx.get(f"{base}/jobs/{job}?reveal=1", headers=bearer, timeout=10)
        assert PAYLOAD_SECRET in shown.text and RESULT_SECRET in shown.text
    # --redact without a token: hidden, and no way to reveal.
    with _serving(database_url, "--redact", token=None) as base:
        page = httpx.get(f"{base}/jobs/{job}", timeout=10).text
        assert PAYLOAD_SECRET not in page and "/reveal" not in page
