"""Images: what the index holds about one, its thumbnail and near-duplicates (reads);
add, update and delete (writes, durable when the answer comes)."""

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse, Response
from pydantic import TypeAdapter

from ..dependencies import JsonOrForm, Received, may_read, may_write, service_of
from ..http_errors import ApiError, bad_request, error_responses
from ..models import AddForm, AddJson, DuplicatesAnswer, ImageAnswer, UpdateForm, UpdateJson, WriteAnswer

router = APIRouter()
READ, WRITE = [Depends(may_read)], [Depends(may_write)]
ADD_BODY = JsonOrForm(AddJson, AddForm)
UPDATE_BODY = JsonOrForm(UpdateJson, UpdateForm)
JPEG = {"content": {"image/jpeg": {"schema": TypeAdapter(bytes).json_schema()}}, "description": "a JPEG"}


# ---------------------------------------------------------------- reads
@router.get("/images/{image_id}", response_model=ImageAnswer, responses=error_responses(400, 401, 404),
            dependencies=READ)
async def image_info(image_id: str, service=Depends(service_of)):
    """What the index holds about an image (never a server path)."""
    return await service.call(service.info, image_id)


@router.get("/images/{image_id}/thumbnail", response_class=Response,
            responses={200: JPEG, **error_responses(400, 401, 404)}, dependencies=READ)
async def thumbnail(image_id: str, service=Depends(service_of)):
    """A small JPEG of the image: stored with it at upload, or made from its file when
    the server was told its collection folder (--images)."""
    jpeg = await service.thumbnail(image_id)
    if jpeg is None:
        raise ApiError(404, "no_thumbnail", f"image {image_id!r} has no thumbnail: it was not uploaded here and "
                                            "its file is not in the served collection (--images)")
    return Response(jpeg, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=60"})


@router.get("/images/{image_id}/duplicates", response_model=DuplicatesAnswer,
            responses=error_responses(400, 401, 404), dependencies=READ)
async def duplicates(image_id: str, service=Depends(service_of),
                     threshold: float = Query(0.5, gt=0, le=1, description="least vector similarity (vector "
                                              "rule)"),
                     verify: bool = Query(False, description="deprecated: the classes verify every pair (true "
                                          "asks for them)"),
                     max_results: int = Query(20, ge=1, le=100),
                     classes: bool | None = Query(None, description="every verified pair among its 10 nearest, "
                                                  "classed exact / copy / same scene, its copies as duplicates "
                                                  "(default: true where the index keeps local geometry; false: "
                                                  "the vector rule)")):
    """An image's copies (the same capture re-encoded, resized, cropped, ...) told apart from
    other photos of the same scene, with their metadata; without local geometry, or with
    ``classes=false``, its near-duplicates by vector similarity (see the answer's note)."""
    return await service.call(service.duplicates, image_id, threshold, verify, max_results, classes)


# ---------------------------------------------------------------- writes
async def _encoded(service, image_id, got: Received, metadata):
    """The EncodedImage of a photo (described by a worker) or of a vector."""
    vector = got.fields.vector
    if got.data is not None and vector is not None:
        raise bad_request("give the image as a photo ('image') or as a 'vector', not both")
    if got.data is not None:
        described = await service.describe(got.data, None, "add", got.name)
        return service.encoded_upload(image_id, described, got.name, metadata)
    if vector is not None:
        return service.encoded_vector(image_id, vector, metadata)
    raise bad_request("send the image as a photo (multipart 'image') or a 'vector'")


@router.post("/images", status_code=201, response_model=WriteAnswer, dependencies=WRITE,
             responses={200: {"model": WriteAnswer, "description": "the same image was there already"},
                        **error_responses(400, 401, 403, 409, 413, 415, 422)}, openapi_extra=ADD_BODY.openapi)
async def add_image(got: Received = Depends(ADD_BODY), service=Depends(service_of)):
    """Add an image under a new id: a photo (multipart 'image') or a vector. Durable
    when the answer comes."""
    image_id = got.fields.id
    enc = await _encoded(service, image_id, got, got.fields.metadata)
    status = await service.call(service.write, enc)
    return JSONResponse(WriteAnswer(id=enc.key.decode(), status=status).model_dump(),  # as stored (NFC)
                        status_code=201 if status == "added" else 200)


@router.put("/images/{image_id}", response_model=WriteAnswer, dependencies=WRITE,
            responses=error_responses(400, 401, 403, 404, 409, 413, 415, 422), openapi_extra=UPDATE_BODY.openapi)
async def update_image(image_id: str, got: Received = Depends(UPDATE_BODY), service=Depends(service_of)):
    """Replace an image's content (a photo or a vector; its metadata is kept, updated with
    the given fields), or its metadata alone ('metadata', replaced; merged with 'merge')."""
    fields = got.fields
    await service.call(service.require, image_id)
    if got.data is None and fields.vector is None:
        if fields.metadata is None:
            raise bad_request("send a photo ('image'), a 'vector' or 'metadata'")
        await service.call(service.set_metadata, image_id, fields.metadata, fields.merge)
        return {"id": image_id, "status": "updated"}
    enc = await _encoded(service, image_id, got, fields.metadata)
    status = await service.call(service.write, enc, True)
    return {"id": image_id, "status": "updated" if status == "added" else "unchanged"}


@router.delete("/images/{image_id}", response_model=WriteAnswer, responses=error_responses(400, 401, 403, 404),
               dependencies=WRITE)
async def delete_image(image_id: str, service=Depends(service_of)):
    """Remove an image."""
    await service.call(service.remove, image_id)
    return {"id": image_id, "status": "removed"}


__all__ = ["router"]
