"""``streamk search --server URL``: the query sent to a running ``streamk serve`` (its HTTP
API, ``POST /search``) instead of opening the index here.

Standard library only (urllib): importing this module loads none of the packages the
commands drive, so a search through a server starts in the time of Python itself. A photo
goes as ``multipart/form-data`` (field ``image``, with ``k``, ``verify``, ``expand``,
``mode``, ``box``, ``where``), an indexed image as JSON (``{"id": ...}``); the token, when
the server has one, as ``Authorization: Bearer``. Every request has a timeout. An error
the server answers (``{"error": {"code", "message"}}``) becomes a :class:`ServerAnswerError`
whose exit status is the one the same error has here (its code names a class of
:mod:`streamk.errors`), else one fitting its HTTP status.
"""

import json
import os
import secrets
import urllib.error
import urllib.parse
import urllib.request

from .. import errors
from ..errors import error_code

TOKEN_ENV = "STREAMK_TOKEN"  # as streamk.server.TOKEN_ENV (not imported: it loads FastAPI)
EXIT_NETWORK = 7  # as ClusterError: the other side cannot be reached or does not answer
# the exit status of an answer whose code names no streamk error, by HTTP status
EXIT_OF_STATUS = {400: 2, 401: 2, 403: 4, 404: 4, 409: 4, 413: 3, 415: 2, 422: 3, 500: 1, 502: 7, 503: 7,
                  504: 7, 507: 6}
# errors that concern one query (its file, its id): a batch reports them and goes on
QUERY_ERRORS = (errors.ImageReadError, errors.UnknownIdError, errors.InvalidIdError, errors.EmptyDescriptorSetError)


class ServerAnswerError(errors.StreamkError, RuntimeError):
    """An error answered by the server (``code``, ``status``), or the server unreachable
    (``status`` None); ``exit_code``: as the same error here (see the module's docstring)."""

    def __init__(self, message, code=None, status=None, exit_code=EXIT_NETWORK, per_query=False):
        super().__init__(message)
        self.code, self.status, self.exit_code, self.per_query = code, status, exit_code, per_query


def error_class(code):
    """The class of :mod:`streamk.errors` the server names ``code``, or None."""
    for name in dir(errors):
        cls = getattr(errors, name)
        if isinstance(cls, type) and issubclass(cls, errors.StreamkError) and error_code(name) == code:
            return cls
    return None


def read_token(token_file=None):
    """The first line of ``token_file``, else $STREAMK_TOKEN, else None (as ``streamk serve``)."""
    if token_file is None:
        return os.environ.get(TOKEN_ENV, "").strip() or None
    try:
        with open(token_file, encoding="utf-8") as fh:
            token = fh.readline().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise errors.ConfigError(f"--token-file {errors.printable(token_file)}: cannot read it ({exc})") from None
    if not token or not token.isprintable():
        raise errors.ConfigError(f"--token-file {errors.printable(token_file)}: its first line is not a token")
    return token


def server_url(text):
    """``text`` as the base URL of a server (http or https, a host), without a trailing /."""
    parts = urllib.parse.urlsplit(str(text).strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise errors.ConfigError(f"--server {errors.printable(text)}: give the server's URL, "
                                 f"e.g. http://127.0.0.1:8000")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


class RemoteSearch:
    """Searches sent to the server at ``url`` (see the module's docstring); ``options``:
    the search options the API takes (k, verify, expand, mode, box, where, false_alarms_per_pair), None
    left out."""

    def __init__(self, url, token=None, timeout=60.0, max_file_size=None):
        self.url = server_url(url)
        self.token = token
        self.timeout = float(timeout)
        self.max_file_size = max_file_size
        # no redirects: urllib would resend the token to wherever a redirect points
        self._opener = urllib.request.build_opener(_NoRedirect)

    def search_image(self, path, options):
        """The answer (``{"query", "results"}``) for the photo at ``path`` (a file over
        ``max_file_size`` bytes is refused before it is read, as a search here does)."""
        from .defaults import MAX_FILE_SIZE
        from .search import STDIN, read_stdin_image

        if path == STDIN:
            data = read_stdin_image(self.max_file_size if self.max_file_size is not None else MAX_FILE_SIZE)
        else:
            try:
                with open(path, "rb") as fh:
                    size = os.fstat(fh.fileno()).st_size
                    if self.max_file_size is not None and size > self.max_file_size:
                        raise errors.ImageTooLargeError(
                            path, f"{size:,} bytes, over the limit of {self.max_file_size:,} (--max-file-size)",
                            limit="max_file_size")
                    data = fh.read()
            except OSError as exc:
                raise errors.ImageReadError(path, exc.strerror or str(exc)) from None
        fields = {k: _form_value(v) for k, v in options.items() if v is not None}
        body, ctype = _multipart(fields, ("image", os.path.basename(os.fsdecode(path)) or "upload", data))
        answer = self._post("/search", body, ctype)
        answer["query"] = dict(answer.get("query") or {}, path=str(path))
        return answer

    def search_id(self, image_id, options):
        """The answer for the indexed image ``image_id`` (verified with its stored geometry)."""
        fields = {k: v for k, v in options.items() if v is not None and k != "box"}
        body = json.dumps(dict(fields, id=image_id)).encode()
        return self._post("/search", body, "application/json")

    def _post(self, route, body, ctype):
        headers = {"Content-Type": ctype, "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.url + route, data=body, headers=headers, method="POST")
        try:
            with self._opener.open(request, timeout=self.timeout) as response:  # (http and https only)
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise _answered(exc, self.url) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:  # refused, no route, timeout, not JSON
            reason = getattr(exc, "reason", exc)
            raise ServerAnswerError(f"no answer from the server at {self.url} ({reason}); is 'streamk serve' "
                                    f"running there? (--timeout {self.timeout:g} s)") from None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is not followed (it stays an HTTPError, reported by :func:`_answered`)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def _answered(exc, url):
    """The ServerAnswerError of an HTTP error answer: the server's code and message."""
    if 300 <= exc.code < 400:
        where = errors.printable(exc.headers.get("Location", "?"))
        return ServerAnswerError(f"the server at {url} answered {exc.code}, a redirect to {where}: not followed "
                                 f"(the token would go along); give the URL of 'streamk serve' itself as --server",
                                 f"http_{exc.code}", exc.code, errors.ConfigError.exit_code)
    try:
        detail = json.loads(exc.read())["error"]
        code, message = str(detail["code"]), str(detail["message"])
    except (ValueError, KeyError, TypeError, OSError):
        code, message = f"http_{exc.code}", f"HTTP {exc.code} {exc.reason}"
    cls = error_class(code)
    exit_code = cls.exit_code if cls is not None else EXIT_OF_STATUS.get(exc.code, 1 if exc.code >= 500 else 2)
    if exc.code == 401:
        message += f" (the token: --token-file FILE or ${TOKEN_ENV})"
    per_query = cls is not None and issubclass(cls, QUERY_ERRORS)
    return ServerAnswerError(f"the server at {url} answered {exc.code} {code}: {message}", code, exc.code, exit_code,
                             per_query)


def _form_value(value):
    if isinstance(value, (list, tuple)):
        return ",".join(f"{v:g}" for v in value)
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def _multipart(fields, file):
    """(body, content type) of a multipart/form-data request: text ``fields`` and one
    ``file`` (field name, file name, bytes)."""
    boundary = secrets.token_hex(16)
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    field, filename, data = file
    quoted = filename.replace("\\", "_").replace('"', "_").replace("\r", "_").replace("\n", "_")
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="{quoted}"\r\n'
                 f"Content-Type: application/octet-stream\r\n\r\n".encode("utf-8", "surrogateescape") + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"
