"""The input pipeline's one use of a private torch name, isolated here.

A DataLoader iterator with worker processes stops them when it is exhausted or garbage-collected (its
``__del__``); torch offers no public call to stop them earlier. A pipeline closed early (a consumer that stops
reading, an error, Ctrl-C) may still be referenced after it ends: an exception's traceback holds torch's own
frames, and their ``self`` is the iterator, so waiting for garbage collection would leave the workers running
as long as the exception is kept (in a notebook, ``sys.last_traceback``: for good). The iterator's own method
``_shutdown_workers``, which its end of data and its ``__del__`` call, stops them now.
``tests/data/io/test_torch_loader.py`` fails naming the member and the installed torch when a release renames
or drops it; until then a pipeline closed early leaves its workers to garbage collection.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRIVATE_APIS", "loader_private_apis_missing", "shutdown_loader_workers"]

#: the private names used here (the scan in tests/test_private_access.py allows them in this file only)
PRIVATE_APIS = (
    "torch.utils.data.dataloader._MultiProcessingDataLoaderIter",
    "torch.utils.data.dataloader._MultiProcessingDataLoaderIter._shutdown_workers",
)


def shutdown_loader_workers(iterator: Any) -> None:
    """Stop the worker processes of the DataLoader iterator ``iterator`` now; nothing for an iterator without
    workers (or a torch without the method). Calling it twice is harmless, as torch's own end of data is.

    >>> from torch.utils.data import DataLoader
    >>> shutdown_loader_workers(iter(DataLoader([1, 2], num_workers=0)))  # no workers: nothing to stop
    """
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def loader_private_apis_missing() -> list[str]:
    """The names of :data:`PRIVATE_APIS` that the installed torch lacks (empty when all are there).

    >>> loader_private_apis_missing()
    []
    """
    from torch.utils.data import dataloader

    cls = getattr(dataloader, "_MultiProcessingDataLoaderIter", None)
    if cls is None:
        return list(PRIVATE_APIS)
    return [] if callable(getattr(cls, "_shutdown_workers", None)) else [PRIVATE_APIS[1]]
