"""Text: the text input contract, escaping for each report format, JSON values from Python ones."""
