"""The version of streamk's JSON outputs (the CLI's ``--json`` / ``--jsonl`` and the
server's answers). It goes up by one when a key is renamed or removed, or its meaning
changes (each such change is a CHANGELOG.md entry); added keys do not change it."""

JSON_SCHEMA_VERSION = 1

__all__ = ["JSON_SCHEMA_VERSION"]
