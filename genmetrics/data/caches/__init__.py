"""What genmetrics keeps between runs: the feature cache and the records in ``GENMETRICS_HOME``."""
