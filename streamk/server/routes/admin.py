"""Health (no token needed), the index's counts, and the API's schema (under the token
when reads need it)."""

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from ..dependencies import may_read, service_of
from ..http_errors import INDEX_REPLACED, error_responses
from ..models import HealthAnswer, StatsAnswer

router = APIRouter()


@router.get("/health", response_model=HealthAnswer, response_model_exclude_none=True,
            responses={**error_responses(), 503: {"model": HealthAnswer, "description": "the index was replaced "
                                                  "while the server ran: restart it"}})
async def health(request: Request):
    """Liveness, and what a client needs to know first (no token needed); 503 with status
    ``index_replaced`` once the index at the server's path is another one (restart it)."""
    token = request.app.state.token
    answer = {"status": "ok", "reads_need_token": token is not None, "writable": token is not None, "filters": True}
    if request.app.state.service.replaced() is None:  # a few stat calls, at most once a second
        return answer
    answer.update(status="index_replaced", message=INDEX_REPLACED)
    return JSONResponse(HealthAnswer(**answer).model_dump(exclude_none=True), status_code=503)


@router.get("/stats", response_model=StatsAnswer, responses=error_responses(401), dependencies=[Depends(may_read)])
async def stats(service=Depends(service_of)):
    """Counts and sizes of the index; the encoding workers' load now."""
    return {**await service.call(service.stats), **service.pool.load()}



@router.get("/openapi.json", include_in_schema=False, dependencies=[Depends(may_read)])
async def openapi(request: Request):
    """The OpenAPI schema, generated from the routes and models (a read like any other)."""
    return JSONResponse(request.app.openapi())


__all__ = ["router"]
