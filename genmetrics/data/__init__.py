"""Data shared by all families, one concern per subpackage or module:

* :mod:`genmetrics.data.io` -- image input: the image contract (``io/images.py``: loading, validation, file
  matching), the decoding pipeline (``io/pipeline.py``), batching with OOM back-off and token budgets
  (``io/batching.py``) and the number of decoding workers (``io/workers.py``);
* :mod:`genmetrics.data.output` -- result files, every file genmetrics writes: the write rule and link refusal
  (``write_rule.py``), full disks (``disk.py``), atomic writes (``atomic.py``), JSONL result rows and their
  writer (``rows.py``), input-file hashes (``hashes.py``), the output-folder lock (``lock.py``), the run
  manifest (``manifest.py``) and merging results files (``merge.py``);
* :mod:`genmetrics.data.caches` -- what is kept between runs: the on-disk feature cache (``features.py``) and the
  records in ``GENMETRICS_HOME`` (``homefile.py``);
* :mod:`genmetrics.data.text` -- text: the text input contract (``inputs.py``), escaping for each report format
  (``escape.py``), JSON values from Python ones (``jsonable.py``);
* :mod:`genmetrics.data.device` -- devices and precision; :mod:`genmetrics.data.jsonl` -- the JSONL datasets;
  :mod:`genmetrics.data.progress` -- progress of long work; ``attributes/`` -- the attribute lists shipped as
  data.

The documented paths ``genmetrics.data.images``, ``.pipeline``, ``.batching``, ``.escape`` and ``.results``
re-export the names of their new homes.
"""
