"""Search: by photo (multipart, optionally inside a box), by an indexed image's id, or by
a vector (JSON); the k best images with their scores, inliers and matched regions."""

import time

from fastapi import APIRouter, Depends

from ...checks import clip_box
from ..dependencies import JsonOrForm, Received, may_read, service_of
from ..http_errors import error_responses
from ..models import SearchAnswer, SearchForm, SearchJson

router = APIRouter(dependencies=[Depends(may_read)])
SEARCH_BODY = JsonOrForm(SearchJson, SearchForm)


@router.post("/search", response_model=SearchAnswer, response_model_exclude_unset=True,
             responses=error_responses(400, 401, 404, 413, 415, 422), openapi_extra=SEARCH_BODY.openapi)
async def search(got: Received = Depends(SEARCH_BODY), service=Depends(service_of)):
    """The k best images for a photo (multipart: 'image', optional 'box'), an indexed
    image ('id') or a vector ('vector'), JSON: ids, scores, inliers, matched regions."""
    q = got.fields
    params = q.search_params()
    if got.kind == "multipart":
        described = await service.describe(got.data, params.box, "query", got.name)
        box = None if params.box is None else list(clip_box(params.box, described["image_size"]))  # as searched
        query = {"kind": "image", "box": box, "image_size": described["image_size"],
                 "features": described["n"]}
        out = await service.call(service.search, described["vector"], params, described["features"], query)
    elif q.id is not None:
        out = await service.call(service.search_id, q.id, params)
    else:
        out = await service.call(service.search, q.vector, params, None, {"kind": "vector"})
    out["took_ms"] = round(1000 * (time.perf_counter() - got.started), 2)
    return out


__all__ = ["router"]
