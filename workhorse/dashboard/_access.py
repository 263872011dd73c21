"""Who may use the dashboard: the token's rules and the loopback test (no token needed on a
loopback bind). Apart from the package's `__init__` so that the security module can use them
without importing the package that imports it."""

from __future__ import annotations

import ipaddress
import os

from ..errors import InvalidOptionsError

TOKEN_ENV = "WORKHORSE_DASHBOARD_TOKEN"
MIN_TOKEN_LENGTH = 32

def is_loopback(host: str) -> bool:
    """Whether binding `host` only listens on this machine (so that no token is needed)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def check_token(token: str) -> str:
    """`token` if the dashboard can use it: at least MIN_TOKEN_LENGTH characters of printable
    text, with no blank at either end (the login form trims what is typed); else
    InvalidOptionsError, in one line that names the variable."""
    problem = None
    if not isinstance(token, str):
        problem = "must be a string"
    elif len(token) < MIN_TOKEN_LENGTH:
        problem = f"is {len(token)} characters long; it needs at least {MIN_TOKEN_LENGTH}"
    elif token != token.strip():
        problem = "begins or ends with a blank"
    elif not token.isprintable():
        problem = "contains a control character"
    else:
        try:
            token.encode("utf-8")
        except UnicodeEncodeError:
            problem = "is not valid UTF-8 text"
    if problem is not None:
        raise InvalidOptionsError(
            f"{TOKEN_ENV} {problem} (make one with: python3 -c 'import secrets; "
            f"print(secrets.token_urlsafe(32))')")
    return token


def configured_token() -> str | None:
    """WORKHORSE_DASHBOARD_TOKEN, or None when it is unset or empty."""
    return os.environ.get(TOKEN_ENV) or None
