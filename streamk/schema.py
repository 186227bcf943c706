"""The version of streamk's JSON outputs (the CLI's ``--json`` / ``--jsonl`` and the
server's answers). It goes up by one when a key is renamed or removed, or its meaning
changes (each such change is a CHANGELOG.md entry); added keys do not change it.

Where a reader finds it, so that no reader of an earlier output breaks:

- a JSON object printed by the CLI (``index info --json``, ``index verify --json``,
  ``eval --json``, each line of ``search --jsonl``): its top-level key ``schema_version``;
- ``search --json`` of one query, a JSON array of results: each result object's
  ``schema_version`` (the array stays an array);
- the server's answers: the HTTP header ``Streamk-Schema-Version`` (the bodies are
  unchanged; ``/openapi.json`` describes them).
"""

JSON_SCHEMA_VERSION = 1
SCHEMA_VERSION_KEY = "schema_version"
SCHEMA_VERSION_HEADER = "Streamk-Schema-Version"


def with_schema_version(obj):
    """``obj`` (a dict) with ``schema_version`` as its first key."""
    return {SCHEMA_VERSION_KEY: JSON_SCHEMA_VERSION, **obj}


__all__ = ["JSON_SCHEMA_VERSION", "SCHEMA_VERSION_HEADER", "SCHEMA_VERSION_KEY", "with_schema_version"]
