"""The public path of :mod:`genmetrics.data.text.escape` (kept: the documented names, re-exported)."""

from genmetrics.data.text.escape import (
    MAX_STEM,
    csv_cell,
    file_stem,
    html_text,
    md_text,
    mpl_text,
    visible_bidi,
)

__all__ = ["MAX_STEM", "csv_cell", "file_stem", "html_text", "md_text", "mpl_text", "visible_bidi"]
