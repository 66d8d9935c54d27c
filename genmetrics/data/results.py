"""The public path of what genmetrics writes, now in :mod:`genmetrics.data.output` (one concern per module):
the documented names, re-exported."""

from genmetrics.data.output.atomic import (
    atomic_output,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    open_append,
)
from genmetrics.data.output.disk import (
    DiskFullError,
    describe_disk,
    disk_full_message,
    disk_full_named,
    is_disk_full,
)
from genmetrics.data.output.hashes import HashCache
from genmetrics.data.output.lock import LOCK, OutputLock, lock_output_folder
from genmetrics.data.output.manifest import manifest, package_versions
from genmetrics.data.output.merge import merge_results
from genmetrics.data.output.rows import ResultsWriter, RowCheck, check_result_row, dumps_line, read_results
from genmetrics.data.output.write_rule import destination, make_folder
from genmetrics.data.text.jsonable import jsonable

__all__ = [
    "DiskFullError",
    "HashCache",
    "LOCK",
    "OutputLock",
    "ResultsWriter",
    "RowCheck",
    "atomic_output",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "check_result_row",
    "describe_disk",
    "destination",
    "disk_full_message",
    "disk_full_named",
    "dumps_line",
    "is_disk_full",
    "jsonable",
    "lock_output_folder",
    "make_folder",
    "manifest",
    "merge_results",
    "open_append",
    "package_versions",
    "read_results",
]
