"""Escaping of user-controlled text (generator names, metric labels, sample ids, captions, paths, titles) for
each format a report writes, in one place:

* :func:`md_text`: Markdown (CommonMark and GitHub tables): shown as text, never as a link, an image, raw
  HTML, emphasis or a table break;
* :func:`csv_cell`: CSV cells that spreadsheet tools never run as a formula;
* :func:`html_text`: HTML text and attribute values;
* :func:`mpl_text`: matplotlib text, shown literally (no mathtext between ``$`` signs);
* :func:`visible_bidi` (inside each of the above): bidirectional control characters shown as ``\\u202e``, so
  no name displays reordered;
* :func:`file_stem`: a part of a file name: portable characters only, bounded length, deterministic and
  distinct for distinct long names (a short hash of the whole name).

Light: standard library only.
"""

from __future__ import annotations

import hashlib
import html
import re
from typing import Any

__all__ = [
    "MAX_STEM",
    "WINDOWS_DEVICES",
    "csv_cell",
    "file_stem",
    "html_text",
    "md_text",
    "mpl_text",
    "visible_bidi",
]

#: the longest file-name part :func:`file_stem` returns (well under the 255 bytes most file systems allow,
#: leaving room for a prefix, a suffix and an extension)
MAX_STEM = 80
_HASH = 10  # hex digits of sha256 kept in a shortened stem

# Markdown punctuation that can start markup inline: emphasis, code, links and images (``!`` is harmless once
# ``[`` is escaped), tables, escapes, strikethrough; ``_`` only where it can emphasise (not inside a word).
# Every ASCII punctuation character may be backslash-escaped in CommonMark.
_MD_PUNCT = re.compile(r"([\\`*\[\]|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
# ``<`` only where it can open a tag or an autolink (``<a``, ``</``, ``<!``, ``<?``): ``<0.001`` stays as is
_MD_TAG = re.compile(r"<(?=[A-Za-z/!?])")
# ``&`` only where it can start an entity (``&lt;``, ``&#60;``)
_MD_ENTITY = re.compile(r"&(?=#|[A-Za-z][A-Za-z0-9]*;)")
# what begins a block at the start of a line: a quote, a heading, a list item, a thematic break, a setext
# underline, an ordered-list number (escaped before its ``.`` / ``)``); "+2.0" or "1.5" stay as they are
_MD_BLOCK = re.compile(r"^(\s*)(>|#(?=[#\s]|$)|[+\-](?=\s|$)|-(?=-)|=(?=[=\s]*$))")
_MD_ORDERED = re.compile(r"^(\s*\d+)([.)])(?=\s|$)")
# bidirectional controls (embeddings, overrides, isolates, their terminators): in user text they make a name
# display reversed or reordered ("abc\u202egnp.exe" shows as "abcexe.png"); reports show them as ``\u202e``
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")


def visible_bidi(text: str) -> str:
    """``text`` with each bidirectional control character (U+202A-U+202E, U+2066-U+2069) written as its
    visible escape ``\\uXXXX``, so a report shows the name in its stored order.

    >>> visible_bidi("abc\\u202egnp.exe")
    'abc\\\\u202egnp.exe'
    """
    return _BIDI.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def md_text(text: Any) -> str:
    """Text for Markdown (a table cell, a heading, a paragraph, link text): rendered as the same text by a
    CommonMark or GitHub viewer. Markup characters are backslash-escaped, ``<`` only where it would open a
    tag, ``&`` only where it would start an entity, line breaks become ``<br>`` (one table row).

    >>> md_text("![t](http://host/t.png)"), md_text("a|b"), md_text("<0.001"), md_text("<b>&amp;")
    ('!\\\\[t\\\\](http://host/t.png)', 'a\\\\|b', '<0.001', '\\\\<b>\\\\&amp;')
    >>> md_text("# x\\r\\ny")
    '\\\\# x<br>y'
    """
    s = _MD_ENTITY.sub(r"\\&", _MD_TAG.sub(r"\\<", _MD_PUNCT.sub(r"\\\1", str(text))))
    s = visible_bidi(s)  # after the escapes: its backslash stays single (before a letter it is literal text)
    lines = (_MD_ORDERED.sub(r"\1\\\2", _MD_BLOCK.sub(r"\1\\\2", line)) for line in s.splitlines())
    return "<br>".join(lines) if s else s


def csv_cell(value: Any) -> Any:
    """A CSV cell that spreadsheet tools will not run as a formula: text starting with ``=``, ``+``, ``-``,
    ``@``, a tab or a carriage return gets a leading ``'`` (numbers are left alone).

    >>> csv_cell("=HYPERLINK(1)"), csv_cell("-model"), csv_cell("model-a"), csv_cell(-0.5)
    ("'=HYPERLINK(1)", "'-model", 'model-a', -0.5)
    """
    if isinstance(value, str):
        value = visible_bidi(value)
        if value[:1] in ("=", "+", "-", "@", "\t", "\r"):
            return "'" + value
    return value


def html_text(text: Any) -> str:
    """Text for HTML, in element content or a quoted attribute value.

    >>> html_text('<a href="x">')
    '&lt;a href=&quot;x&quot;&gt;'
    """
    return visible_bidi(html.escape(str(text), quote=True))


def mpl_text(text: Any) -> str:
    """Text for a matplotlib label, title or tick, drawn literally: every ``$`` escaped, so nothing is
    parsed as mathtext (``$\\frac{$`` would otherwise fail to draw).

    >>> mpl_text("a $x$ b")
    'a \\\\$x\\\\$ b'
    """
    return visible_bidi(str(text).replace("$", r"\$"))


#: names Windows keeps for devices, whatever the extension (``CON.html`` opens the console, not a file)
WINDOWS_DEVICES = frozenset(
    ["CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))]
)


def file_stem(name: Any, default: str = "plot") -> str:
    """``name`` as a portable file-name part: letters, digits, ``._-`` (any other run becomes ``_``), no
    leading dot, never a Windows device name before its first dot (``CON`` becomes ``CON_``); a result
    longer than :data:`MAX_STEM` is cut and ends with a hash of the whole name, so it is the same on every
    run and distinct long names stay distinct.

    >>> file_stem("ssim / b=2"), file_stem("***"), file_stem(".."), file_stem("con"), file_stem("Nul.x")
    ('ssim_b_2', 'plot', 'plot', 'con_', 'Nul_.x')
    >>> s = file_stem("g" * 240); len(s), s == file_stem("g" * 240), s != file_stem("g" * 239)
    (80, True, True)
    """
    raw = str(name)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", raw).rstrip("_").lstrip(".") or default
    first, dot, rest = stem.partition(".")
    if first.upper() in WINDOWS_DEVICES:
        stem = f"{first}_{dot}{rest}"
    if len(stem) > MAX_STEM:
        digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH]
        stem = f"{stem[: MAX_STEM - _HASH - 1]}-{digest}"
    return stem
