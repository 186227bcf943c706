"""The HTTP server and its web page: ``streamk serve IDX`` keeps an index open and warm,
describes uploaded photos in worker processes, and answers JSON (FastAPI on uvicorn).

    from streamk.server import serve; serve("my-index", port=8000, token_file="token.txt")
"""

from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (streamk.exports)
    from .app import (
        DEFAULT_MAX_UPLOAD as DEFAULT_MAX_UPLOAD, ApiError as ApiError, create_app as create_app,
        error_code as error_code, status_of as status_of,
    )
    from .pool import EncodingPool as EncodingPool
    from .runner import TOKEN_ENV as TOKEN_ENV, read_token as read_token, serve as serve
    from .service import Service as Service, WorkerError as WorkerError
    from .tasks import THUMBNAIL_SIDE as THUMBNAIL_SIDE, thumbnail_jpeg as thumbnail_jpeg

__all__, __getattr__, __dir__ = lazy_exports(__name__)
