"""Result files: everything genmetrics writes, one concern per module (see :mod:`genmetrics.data`)."""
