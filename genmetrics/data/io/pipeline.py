"""The input pipeline shared by every path that reads image files (``score``, ``leaderboard``, ``compare``, the
Python API on folders): each file is opened and decoded once, in DataLoader worker processes, with a bounded
prefetch that overlaps decoding with the model.

* :func:`decoded` streams ``(path, outputs)`` in input order, ``outputs`` one value per *transform* (or the
  exception that named the file: a bad file is reported by the caller, per ``--on-error``);
* a *transform* is the per-image CPU work a worker does on the decoded, EXIF-rotated first frame
  (``transform(image, name) -> value``, a picklable callable). The default, :func:`rgb_uint8`, converts the
  mode by the image contract (:func:`genmetrics.data.io.images.to_rgb`) and returns a ``uint8 [3,H,W]`` tensor,
  which every metric reads exactly as it reads the file. A metric asks for another one with an
  ``input_transform`` attribute (:func:`transform_of`); several metrics sharing a run share the decoding and
  get one output each per distinct transform. ``input_transform = "paths"`` (:data:`PATHS`): the metric is
  given the file paths and reads the files itself;
* memory: at most ``workers * prefetch`` batches are decoded ahead of the consumer (``prefetch`` batches
  with ``workers=0``, where decoding runs in the calling process, one batch at a time);
* on CUDA, batches come in pinned memory and tensors are copied with ``non_blocking=True``.

Worker processes end with the iteration, with an error in a worker and with Ctrl-C (the DataLoader's own
shutdown, run from ``finally``).
"""

from __future__ import annotations

import array
import contextlib
import signal
import threading
import warnings
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image

from genmetrics.data.io._torch_loader import shutdown_loader_workers
from genmetrics.data.io.images import load_image, to_rgb
from genmetrics.data.io.workers import check_workers
from genmetrics.errors import WorkerDiedError

ImageTransform = Callable[[Image.Image, str], Any]
#: the ``input_transform`` of a metric that is given file paths, not decoded images
PATHS = "paths"
#: batches decoded ahead per worker (DataLoader ``prefetch_factor``)
DEFAULT_PREFETCH = 2


def rgb_uint8(im: Image.Image, name: str) -> torch.Tensor:
    """The default per-image transform: RGB by the image contract, as a ``uint8 [3,H,W]`` tensor (a metric
    reads it exactly as it reads the file: ``x / 255``).

    >>> t = rgb_uint8(Image.new("LA", (3, 2), (10, 0)), "x")  # transparent: composited on white
    >>> t.dtype, tuple(t.shape), t[:, 0, 0].tolist()
    (torch.uint8, (3, 2, 3), [255, 255, 255])
    """
    arr = np.asarray(to_rgb(im, name=name), dtype=np.uint8)
    return torch.from_numpy(arr.copy()).permute(2, 0, 1)


def transform_of(metric: Any) -> Any:
    """The per-image transform ``metric`` asks for (its ``input_transform`` attribute: a callable, or
    :data:`PATHS` for file paths), else :func:`rgb_uint8`.

    >>> transform_of(object()) is rgb_uint8
    True
    """
    t = getattr(metric, "input_transform", None)
    return t if callable(t) or t == PATHS else rgb_uint8


@dataclass(frozen=True)
class _Decode:
    """What a worker does for one file: open, decode the first frame once, apply each transform."""

    transforms: tuple[ImageTransform, ...]

    def __call__(self, path: Any) -> tuple[Any, ...]:
        name = str(path)
        if not self.transforms:  # every metric reads the file itself
            return ()
        return load_image(path, convert=lambda im: tuple(t(im, name) for t in self.transforms))  # type: ignore[arg-type,return-value]


class _Files(torch.utils.data.Dataset):
    def __init__(self, paths: Sequence[Any], decode: _Decode):
        self.paths, self.decode = list(paths), decode

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[Any, Any, list[tuple[type[Warning], str]]]:
        # warnings (frames dropped, a lossy mode conversion) are recorded here and raised again in the
        # calling process, so its filters and handlers see them as if it had decoded the file itself
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                out: Any = self.decode(self.paths[i])
            except Exception as err:  # noqa: BLE001 - reported to the caller, which skips or stops per --on-error
                out = err
        return self.paths[i], out, [(w.category, str(w.message)) for w in caught]


def _reraise_warnings(
    batch: list[tuple[Any, Any, list[tuple[type[Warning], str]]]],
) -> list[tuple[Any, Any]]:
    for _, _, caught in batch:
        for category, message in caught:
            warnings.warn(message, category, stacklevel=3)
    return [(p, o) for p, o, _ in batch]


def _to_device(x: Any, device: torch.device) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(device, non_blocking=True)
    if isinstance(x, tuple):
        return tuple(_to_device(v, device) for v in x)
    return x


def decoded(
    paths: Sequence[Any],
    transforms: Sequence[ImageTransform] = (rgb_uint8,),
    *,
    batch_size: int = 32,
    batches: Sequence[Sequence[int]] | None = None,
    workers: int | None = None,
    prefetch: int = DEFAULT_PREFETCH,
    device: Any = None,
) -> Generator[list[tuple[Any, tuple[Any, ...] | Exception]], None, None]:
    """Decode ``paths`` once each and yield batches of ``(path, outputs)`` in input order; ``outputs`` holds one
    value per transform, or is the exception that names the file (unreadable, missing, too large).

    ``batches``: the batches as lists of indices into ``paths`` (default: consecutive runs of ``batch_size``).
    ``workers``: decoding processes (``None``: :func:`~genmetrics.data.io.workers.default_workers`; a single
    batch is always decoded in the calling process, which would only wait for it); ``prefetch``: batches decoded ahead
    per worker; ``device``: a CUDA device puts tensors there (pinned memory, ``non_blocking`` copies).

    >>> import tempfile
    >>> from pathlib import Path
    >>> from genmetrics.testing import random_images, write_images
    >>> with tempfile.TemporaryDirectory() as d:
    ...     files = write_images(d, random_images(3, 8)) + [Path(d) / "missing.png"]
    ...     out = [(p.name, o) for batch in decoded(files, batch_size=2, workers=0) for p, o in batch]
    >>> [n for n, _ in out], tuple(out[0][1][0].shape), type(out[3][1]).__name__
    (['000.png', '001.png', '002.png', 'missing.png'], (3, 8, 8), 'InputError')
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if batches is None:
        batches = [range(i, min(len(paths), i + batch_size)) for i in range(0, len(paths), batch_size)]
    batches = [b if isinstance(b, range) else list(b) for b in batches if len(b)]  # a range stays compact
    n_workers = check_workers(workers)
    if prefetch < 1:
        raise ValueError(f"prefetch must be >= 1, got {prefetch}")
    dev = torch.device(device) if device is not None else None
    cuda = dev is not None and dev.type == "cuda"
    ds = _Files(paths, _Decode(tuple(transforms)))
    if not batches:
        return
    if (
        n_workers == 0 or len(batches) == 1
    ):  # one batch: no model step to overlap, a worker only adds its start-up
        for idx in batches:
            batch = _reraise_warnings([ds[j] for j in idx])
            yield [(p, _to_device(o, dev)) for p, o in batch] if cuda else batch  # type: ignore[arg-type]
        return
    loader = torch.utils.data.DataLoader(
        ds,
        batch_sampler=batches,  # type: ignore[arg-type]
        num_workers=min(n_workers, len(batches)),
        collate_fn=list,
        pin_memory=cuda,
        pin_memory_device=str(dev) if cuda else "",
        prefetch_factor=prefetch,
        persistent_workers=False,
        worker_init_fn=ignore_interrupts,
    )
    with _interrupts_held():  # the workers start here: a Ctrl-C waits until they ignore it
        it = iter(loader)
    try:
        for raw in _handed_over(it):
            batch = _reraise_warnings(raw)
            yield [(p, _to_device(o, dev)) for p, o in batch] if dev is not None and cuda else batch
    finally:  # a generator closed early, an error or Ctrl-C: no worker is left behind
        shutdown_loader_workers(it)


def _handed_over(batches: Iterator[Any]) -> Iterator[Any]:
    """The loader's batches; a worker that dies while handing a batch over (its shared-memory file
    descriptors are fetched from the worker, so the transfer ends in ``EOFError`` or a refused connection)
    is reported as the dead worker it is, never as an end of input or a Ctrl-C (click maps ``EOFError`` to
    an abort); so is torch's own report of a worker that died while decoding (``RuntimeError``)."""
    while True:
        try:
            raw = next(batches)
        except StopIteration:
            return
        except (EOFError, ConnectionError, RuntimeError) as e:
            died = WorkerDiedError.of(e, handing_over=True)
            if died is None:
                raise
            raise died from e
        yield raw


#: whether signal masks exist here (POSIX): Ctrl-C is held while workers start, and released in each
_CAN_HOLD = hasattr(signal, "pthread_sigmask")


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Block SIGINT in the calling thread while the body runs (the workers are forked there and inherit the
    mask): a Ctrl-C in that window stays pending, reaches the main process when the body ends, and never
    kills a worker that has not yet set :func:`ignore_interrupts` (which reported a dead worker, or raised
    its error inside the handling of the Ctrl-C, instead of "interrupted")."""
    if not _CAN_HOLD or threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def ignore_interrupts(worker_id: int) -> None:
    """A decoding worker ignores Ctrl-C (SIGINT goes to the whole process group): the main process alone
    stops the run, says "interrupted" and shuts the workers down, instead of reporting a worker that died.
    A worker starts with SIGINT blocked (:func:`_interrupts_held`); it is unblocked once ignored.

    >>> import signal
    >>> before = signal.getsignal(signal.SIGINT)
    >>> ignore_interrupts(0); signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    True
    >>> _ = signal.signal(signal.SIGINT, before)
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _CAN_HOLD:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class DecodedCache:
    """Decoded outputs of the files of one chunk, looked up by path (what a runner feeds its metrics from).

    >>> cache = DecodedCache({"a.png": ("A", "a"), "b.png": OSError("b.png: truncated")})
    >>> cache.get("a.png", 1), cache.error("a.png"), str(cache.error("b.png"))
    ('a', None, 'b.png: truncated')
    >>> cache.get("b.png")
    Traceback (most recent call last):
        ...
    OSError: b.png: truncated
    """

    def __init__(self, items: Any):
        self.items = {str(p): o for p, o in (items.items() if isinstance(items, dict) else items)}

    def get(self, path: Any, k: int = 0) -> Any:
        """Output ``k`` of ``path``; raises the file's own error when it could not be decoded."""
        o = self.items[str(path)]
        if isinstance(o, Exception):
            raise o
        return o[k]

    def error(self, path: Any) -> Exception | None:
        """The error that kept ``path`` from being decoded (``None`` when it was)."""
        o = self.items.get(str(path))
        return o if isinstance(o, Exception) else None


def decoded_chunks(
    chunks: Sequence[Sequence[Any]],
    transforms: Sequence[ImageTransform] = (rgb_uint8,),
    *,
    batch_size: int = 32,
    workers: int | None = None,
    prefetch: int = DEFAULT_PREFETCH,
    device: Any = None,
) -> Generator[DecodedCache, None, None]:
    """One :class:`DecodedCache` per chunk of files (a chunk: every file one step of a run needs: candidates,
    their references, several generators'), each file decoded once for the whole stream: a file a later chunk
    needs again (a reference shared by many candidates) is held until its last chunk, not decoded again.
    A chunk's new files go to the workers in batches of at most ``batch_size``.

    >>> import tempfile
    >>> from pathlib import Path
    >>> from genmetrics.testing import random_images, write_images
    >>> with tempfile.TemporaryDirectory() as d:
    ...     a, b, c = write_images(d, random_images(3, 8))
    ...     caches = list(decoded_chunks([[a, b], [a, c]], workers=0))
    >>> sorted(Path(p).name for p in caches[1].items), torch.equal(caches[0].get(a), caches[1].get(a))
    (['000.png', '002.png'], True)
    """
    # memory per file of the run: its number (one dict entry), the last chunk that needs it (4 bytes) and its
    # place in `files`; batches are ranges of file numbers
    number: dict[str, int] = {}
    last = array.array("i")
    files: list[Any] = []
    batches: list[range] = []
    n_batches = array.array("i")
    for i, chunk in enumerate(chunks):
        start = len(files)
        for f in chunk:
            k = number.setdefault(str(f), len(files))
            if k == len(files):
                files.append(f)
                last.append(i)
            else:
                last[k] = i
        pieces = range(start, len(files), batch_size)
        batches.extend(range(b, min(b + batch_size, len(files))) for b in pieces)
        n_batches.append(len(pieces))
    stream = decoded(files, transforms, batches=batches, workers=workers, prefetch=prefetch, device=device)
    held: dict[str, Any] = {}
    with contextlib.closing(stream):
        for i, chunk in enumerate(chunks):
            for _ in range(n_batches[i]):
                held.update((str(p), o) for p, o in next(stream))
            yield DecodedCache({str(f): held[str(f)] for f in chunk})
            for f in chunk:
                if last[number[str(f)]] == i:
                    held.pop(str(f), None)
