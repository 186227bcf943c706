"""The API's bodies and answers as pydantic models: one model is the parser, the check and
the documentation (``/openapi.json`` is generated from them) of what it describes.

A body comes as JSON (its model strict: a JSON number where a number is due, NaN and
Infinity refused by the parser) or as a multipart form (its model converts the form's
text: ``"10"`` for k; JSON text for a vector, a filter or metadata). A vector's length,
the index's dimension, is checked against ``context={"dim": D}`` given at validation.
A search's options become one :class:`~streamk.index.SearchParams`, checked against the
server's limits (``streamk.index.SERVER_LIMITS``, which the schema shows), passed down
whole. Answers are validated by FastAPI against their model before they are sent.
"""

import json
import math
from typing import Annotated, Any, Literal

import numpy as np
from fastapi import UploadFile
from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, Json, StrictFloat, ValidationInfo, field_validator,
                      model_validator)

from ..checks import check_box
from ..index import MODES, SERVER_LIMITS, SearchParams
from ..verification import NFA_MEANING, WHY_NOT_VERIFIED

LIMITS = SERVER_LIMITS  # the index's limits, tightened for the server in one place (streamk.index)


def id_field(*default):
    """An image id field (required unless a default is given)."""
    return Field(*default, min_length=1, max_length=200, description="an image id")


# ---------------------------------------------------------------- JSON, strictly
MAX_JSON_DEPTH = 8  # arrays and objects nested in a JSON body, the body itself counted
MAX_NUMBER_DIGITS = 300  # digits of a JSON integer: 1e300 and below convert to a float without overflow
# values in a JSON body beside a vector of the index's dimension: metadata (64 KiB of JSON) and a filter
# (16 fields of up to 1,024 values) hold fewer. A parsed value costs ~50 bytes of Python objects, so a
# body of 20 MB of numbers was ~270 MB of memory for one request (a server answers 64 at once).
MAX_JSON_VALUES = 65_536
_STRUCTURE = np.zeros(256, np.int8)  # the bytes that matter: +1 [ {, -1 ] }, 2 a quote, 3 a comma
_STRUCTURE[[ord("["), ord("{")]], _STRUCTURE[[ord("]"), ord("}")]], _STRUCTURE[ord('"')] = 1, -1, 2
_STRUCTURE[ord(",")] = 3


class TooManyValues(ValueError):
    """JSON text holding more values than a body may (:data:`MAX_JSON_VALUES`)."""


def json_shape(raw):
    """(depth, values) of JSON text, scanned over its bytes before any parser recurses or
    allocates, at C speed (under 0.1 s for 20 MB): escaped backslashes and quotes removed,
    then only brackets, quotes and commas kept; those inside strings (after an odd count of
    quotes) ignored. depth: how deep its arrays and objects nest (0 for a scalar), the
    largest running sum of the brackets; values: an upper bound on the values it holds
    (elements and members, containers included), 1 + its commas and opening brackets."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    bare = bytes(raw).replace(b"\\\\", b"").replace(b'\\"', b"")
    kind = _STRUCTURE[np.frombuffer(bare, np.uint8)]
    kind = kind[kind != 0]
    kind = kind[np.bitwise_xor.accumulate((kind == 2).view(np.uint8)) == 0]  # outside strings (a byte each)
    brackets = kind[(kind == 1) | (kind == -1)]
    depth = max(0, int(np.cumsum(brackets, dtype=np.int64).max())) if brackets.size else 0
    return depth, 1 + int(np.count_nonzero((kind == 3) | (kind == 1)))


def json_depth(raw):
    """How deep the arrays and objects of JSON text nest (0 for a scalar): see :func:`json_shape`."""
    return json_shape(raw)[0]


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def _bounded_int(text):
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise ValueError(f"a number of over {MAX_NUMBER_DIGITS} digits")
    return int(text)


def _finite_float(text):
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is too large for a float")
    return value


def loads(text, max_depth=MAX_JSON_DEPTH, max_values=None):
    """JSON, strictly: NaN and Infinity refused, numbers bounded (an integer of at most
    MAX_NUMBER_DIGITS digits, a float that is finite), nested at most ``max_depth``
    deep and, with ``max_values``, holding at most that many values (both checked before
    parsing: TooManyValues); ValueError otherwise."""
    depth, values = json_shape(text)
    if depth > max_depth:
        raise ValueError(f"nested {depth} deep; at most {max_depth} (arrays and objects in one another)")
    if max_values is not None and values > max_values:
        raise TooManyValues(f"the body holds {values:,} JSON values; at most {max_values:,}")
    return json.loads(text, parse_constant=_no_constant, parse_int=_bounded_int, parse_float=_finite_float)


def _json_text(value):
    if not isinstance(value, str):
        return value
    try:
        return loads(value, MAX_JSON_DEPTH - 1)  # as deep as inside a JSON body
    except ValueError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None


def _strict_json_text(value):
    """Form JSON text checked strictly (NaN and Infinity refused), left for pydantic's Json
    to parse and validate as the type it wraps (which the schema documents)."""
    if isinstance(value, str):
        _json_text(value)
    return value


JsonObject = Annotated[Json[dict[str, Any]], BeforeValidator(_strict_json_text)]
JsonVector = Annotated[Json[list[StrictFloat]], BeforeValidator(_strict_json_text)]


def box_of_text(value):
    """A box given as text, "x1,y1,x2,y2" (or a JSON list), checked by streamk's one box
    rule (:func:`streamk.checks.check_box`: a ConfigError, a ValueError, is a validation
    error)."""
    if value is None:
        return None
    text = value.strip()
    return list(check_box(_json_text(text) if text.startswith("[") else text.replace(",", " ").split()))


class JsonBody(BaseModel):
    """A JSON body: strict types, no unknown field."""

    model_config = ConfigDict(extra="forbid", strict=True)


class VectorOfDim(BaseModel):
    """A body with a 'vector': of the index's dimension when the validation's context
    names it (``context={"dim": D}``)."""

    @field_validator("vector", check_fields=False)
    @classmethod
    def _vector_of_dim(cls, vector, info: ValidationInfo):
        dim = (info.context or {}).get("dim")
        if vector is not None and dim is not None and len(vector) != dim:
            raise ValueError(f"vector must be a list of {dim} numbers (the index's dimension)")
        return vector


class FormBody(BaseModel):
    """A multipart form: text converted to the fields' types, no unknown field; an empty
    field is an absent one."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    @model_validator(mode="before")
    @classmethod
    def _empty_is_absent(cls, data):
        return {k: v for k, v in data.items() if v != ""} if isinstance(data, dict) else data


# ---------------------------------------------------------------- bodies
class SearchOptions(BaseModel):
    k: int = Field(10, ge=1, le=LIMITS.k, description="results wanted")
    verify: int | None = Field(None, ge=0, le=LIMITS.verify,
                               description="first-stage results spatially verified (0: none; default: the index's)")
    expand: int | None = Field(None, ge=0, le=LIMITS.expand,
                               description="verified results averaged into an expanded query (0: none)")
    mode: Literal[MODES] | None = Field(  # type: ignore[valid-type]  # one owner: MODES
        None, description="the first stage: exact vectors or PQ codes")
    false_alarms_per_pair: float | None = Field(None, gt=0, lt=1, description="the bar of the verified mark: at "
                                                "most this many false verifications per pair (default 1e-4)")

    def search_params(self):
        """These options (and the box and filter of a body that has them) as one
        SearchParams, checked against the server's limits (FilterError for a bad filter)."""
        return SearchParams(k=self.k, verify=self.verify, expand=self.expand, mode=self.mode,
                            box=getattr(self, "box", None), where=self.where, limits=LIMITS,
                            false_alarms_per_pair=self.false_alarms_per_pair)


class SearchJson(SearchOptions, VectorOfDim, JsonBody):
    """A search by an indexed image ('id') or by a vector ('vector'), one of them."""

    id: str | None = id_field(None)
    vector: list[float] | None = Field(None, description="a vector of the index's dimension (GET /stats: dim)")
    where: dict[str, Any] | None = Field(None, description='a metadata filter: {"field": value | {"in": [...]} | '
                                                           '{"gte": a, "lt": b}, ...} on indexed fields')

    @model_validator(mode="after")
    def _one_query(self):
        if (self.id is None) == (self.vector is None):
            raise ValueError("give one query: 'id' (an indexed image) or 'vector' (or upload a photo as multipart)")
        return self


class SearchForm(SearchOptions, FormBody):
    """A search by photo ('image'), within its region 'box' when given."""

    image: UploadFile = Field(description="the photo")
    box: str | None = Field(None, description="x1,y1,x2,y2 in the photo's pixels (clipped to the photo; "
                                               "outside it: 400 'config', with its size)")
    where: JsonObject | None = Field(None, description="a metadata filter as JSON text")

    @field_validator("box")
    @classmethod
    def _box_of_text(cls, value):
        return box_of_text(value)


class AddJson(VectorOfDim, JsonBody):
    """A new image given as a vector."""

    id: str = id_field()
    vector: list[float] = Field(description="a vector of the index's dimension")
    metadata: dict[str, Any] | None = None


class AddForm(VectorOfDim, FormBody):
    """A new image given as a photo ('image') or a vector (JSON text)."""

    id: str = id_field()
    image: UploadFile | None = None
    vector: JsonVector | None = None
    metadata: JsonObject | None = None


class UpdateJson(VectorOfDim, JsonBody):
    """An image's new vector, or its metadata alone (replaced; merged with 'merge')."""

    vector: list[float] | None = None
    metadata: dict[str, Any] | None = None
    merge: bool = False


class UpdateForm(VectorOfDim, FormBody):
    """An image's new photo or vector, or its metadata alone (replaced; merged with 'merge')."""

    image: UploadFile | None = None
    vector: JsonVector | None = None
    metadata: JsonObject | None = None
    merge: bool = False


# ---------------------------------------------------------------- answers
class Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorDetail(Answer):
    code: str = Field(description="stable: what a client may test")
    message: str = Field(description="what went wrong and what to do, for a person")


class ErrorAnswer(Answer):
    """Every error: a stable code and a message."""

    error: ErrorDetail


class HitAnswer(Answer):
    id: str
    score: float = Field(description="the cosine of the query's vector and the image's, in [-1, 1] (rounding clipped)")
    stage: Literal["first", "verified", "expanded"]
    inliers: int | None = None
    verified: bool
    why: Literal[tuple(WHY_NOT_VERIFIED)] | None = Field(  # type: ignore[valid-type]
        None, description="checked and not verified: the first check it failed (streamk.verification.WHY_NOT_VERIFIED)")
    log10_nfa: float | None = Field(None, description=f"{NFA_MEANING}; null: no model tested")
    region: list[list[float]] | None = Field(None, description="the query (or its box) mapped into the image")
    affine: list[list[float]] | None = None
    image_size: list[int] | None = None
    kind: str | None = None
    metadata: dict[str, Any] | None = None


class QueryAnswer(Answer):
    kind: Literal["image", "id", "vector"]
    id: str | None = None
    box: list[float] | None = None
    image_size: list[int] | None = None
    features: int | None = None


class SearchAnswer(Answer):
    query: QueryAnswer
    results: list[HitAnswer]
    took_ms: float


class ImageAnswer(Answer):
    """What the index holds about an image (never a server path)."""

    id: str
    kind: str | None = None
    sha256: str | None = None
    n_descriptors: int | None = None
    image_size: list[int] | None = None
    box: list[float] | None = None
    added: float | None = None
    filename: str | None = None
    metadata: dict[str, Any]


class WriteAnswer(Answer):
    id: str
    status: Literal["added", "exists", "updated", "unchanged", "removed"]


class DuplicatePairAnswer(Answer):
    """One verified pair of the image asked about with another (streamk.index.DuplicatePair)."""

    a: str
    b: str
    kind: Literal["exact", "copy", "same scene"] = Field(alias="class", description="exact: the same bytes or "
                                                         "pixels; copy: the same capture edited; same scene: another "
                                                         "photo (keep both)")
    score: float = Field(description="vector similarity")
    inliers: int
    covered: float = Field(description="share of the smaller image's feature cells one similarity covers")
    agreement: float | None = Field(description="correlation of the aligned pixels (null: not compared)")
    turns: int
    mirrored: bool = False
    reason: str


class DuplicatesAnswer(Answer):
    id: str
    threshold: float = Field(description="least vector similarity (the vector rule only)")
    verify: bool
    rule: Literal["classes", "vector"] = Field(description="classes: copies told apart from other photos of the "
                                               "scene (the default with local geometry); vector: by vector "
                                               "similarity only")
    note: str | None = Field(None, description="with the vector rule: that these may be other photos of the scene")
    duplicates: list[HitAnswer] = Field(description="classes: its exact and copy pairs' images; vector: its near-"
                                        "duplicates by vector similarity")
    pairs: list[DuplicatePairAnswer] | None = Field(None, description="with the classes: every verified pair "
                                                    "among its nearest, classed, most alike first")


class StatsAnswer(Answer):
    images: int
    codec: str | None = None
    reader_memory: int
    shards: int
    dim: int
    local_features: bool
    workers: int
    workers_busy: int = Field(0, description="uploads (and thumbnails) being described by the workers now")
    worker_queue: int = Field(0, description="uploads (and thumbnails) waiting for a free worker")
    writable: bool
    indexed_fields: list[str]


class HealthAnswer(Answer):
    status: Literal["ok", "index_replaced"] = Field(description="ok: serving (200); index_replaced: the index at "
                                                    "the server's path was replaced while it ran, every request that "
                                                    "touches it is refused until the server is restarted (503)")
    reads_need_token: bool
    writable: bool
    filters: bool
    message: str | None = Field(None, description="when the status is not ok: what happened and what to do")


__all__ = ["AddForm", "AddJson", "DuplicatesAnswer", "ErrorAnswer", "HealthAnswer", "ImageAnswer", "LIMITS",
           "MAX_JSON_DEPTH", "MAX_JSON_VALUES", "SearchAnswer", "SearchForm", "SearchJson", "StatsAnswer",
           "TooManyValues", "UpdateForm", "UpdateJson", "WriteAnswer", "json_depth", "json_shape", "loads"]
