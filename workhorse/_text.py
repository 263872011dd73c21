"""Stored values on a terminal: names, keys and messages are data, never Rich markup or
terminal commands."""

from __future__ import annotations

import re

from rich.markup import escape
from rich.text import Text

# Stored names and messages are data, never markup or terminal commands: C0/C1 controls (ESC
# above all), bidirectional overrides, line and paragraph separators and lone surrogates are
# shown escaped.
_INVISIBLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)
_NAMED_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def visible(value: object, *, newlines: bool = False) -> str:
    """`value` as text with every control character escaped (`\\x1b`, `\\n`, `\\u202e`);
    `newlines=True` keeps line breaks (tracebacks)."""

    def escape(match: re.Match[str]) -> str:
        char = match.group()
        if newlines and char == "\n":
            return char
        if char in _NAMED_ESCAPES:
            return _NAMED_ESCAPES[char]
        code = ord(char)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return _INVISIBLE.sub(escape, str(value))


def literal(value: object, style: str = "", *, newlines: bool = False) -> Text:
    """A stored value as a rich Text: printed literally (never parsed as markup), whole, with
    control characters visible."""
    return Text(visible(value, newlines=newlines), style=style)


def markup_safe(value: object) -> str:
    """`value` made visible and escaped, for interpolation into a Rich markup string."""
    return escape(visible(value))


__all__ = ["literal", "markup_safe", "visible"]
