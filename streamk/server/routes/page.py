"""The web page at ``/`` and its two static files (not in the API's schema)."""

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

from ..http_errors import ApiError

router = APIRouter(include_in_schema=False)
MEDIA = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}


def _static(name, media):
    text = resources.files("streamk.server").joinpath("static", name).read_bytes()
    return Response(text, media_type=media, headers={"Cache-Control": "no-cache"})


@router.get("/")
async def page():
    return _static("index.html", "text/html; charset=utf-8")


@router.get("/static/{name}")
async def static(name: str):
    media = MEDIA.get(name)
    if media is None:
        raise ApiError(404, "not_found", f"no static file {name!r}")
    return _static(name, media)


__all__ = ["router"]
