"""The HTTP server and its web page: ``streamk serve IDX`` keeps an index open and warm,
describes uploaded photos in worker processes, and answers JSON (FastAPI on uvicorn).

    from streamk.server import serve; serve("my-index", port=8000, token_file="token.txt")
"""

from .app import DEFAULT_MAX_UPLOAD, ApiError, create_app, error_code, status_of
from .pool import EncodingPool
from .runner import TOKEN_ENV, read_token, serve
from .service import Service, WorkerError
from .tasks import THUMBNAIL_SIDE, thumbnail_jpeg

__all__ = ["DEFAULT_MAX_UPLOAD", "THUMBNAIL_SIDE", "TOKEN_ENV", "ApiError", "EncodingPool", "Service", "WorkerError",
           "create_app", "error_code", "read_token", "serve", "status_of", "thumbnail_jpeg"]
