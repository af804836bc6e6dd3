"""The sinks: one entry per ``--sink`` (``base.py`` says what an entry owns, ``registry.py`` lists them)."""
