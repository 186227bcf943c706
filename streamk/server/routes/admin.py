"""Health (no token needed), the index's counts, and the API's schema (under the token
when reads need it)."""

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from ..dependencies import may_read, service_of
from ..http_errors import error_responses
from ..models import HealthAnswer, StatsAnswer

router = APIRouter()


@router.get("/health", response_model=HealthAnswer, responses=error_responses())
async def health(request: Request):
    """Liveness, and what a client needs to know first (no token needed)."""
    token = request.app.state.token
    return {"status": "ok", "reads_need_token": token is not None, "writable": token is not None, "filters": True}


@router.get("/stats", response_model=StatsAnswer, responses=error_responses(401), dependencies=[Depends(may_read)])
async def stats(service=Depends(service_of)):
    """Counts and sizes of the index."""
    return await service.call(service.stats)



@router.get("/openapi.json", include_in_schema=False, dependencies=[Depends(may_read)])
async def openapi(request: Request):
    """The OpenAPI schema, generated from the routes and models (a read like any other)."""
    return JSONResponse(request.app.openapi())


__all__ = ["router"]
