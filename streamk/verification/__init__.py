"""Second stage: verify the first stage's top R by tentative matches (visual words + Hamming embedding)
and RANSAC (affine from one match); re-rank verified images first and expand the query with them."""

from .expansion import alpha_query_expansion, average_query_expansion, expand_query, expansion_rows
from .matching import tentative_matches
from .ransac import RansacResult, apply_affine, ransac_affine
from .records import (DEFAULT_MAX_RECORD_FEATURES, GeometryRecord, make_query_record, make_record, pack, record_size,
                      stored_record, unpack)
from .spatial import Reranked, Verification, VerificationParams, rerank, verify_geometry
from .vocabulary import Vocabulary

__all__ = [
    "DEFAULT_MAX_RECORD_FEATURES", "GeometryRecord", "RansacResult", "Reranked", "Verification", "VerificationParams",
    "Vocabulary", "alpha_query_expansion", "apply_affine", "average_query_expansion", "expand_query",
    "expansion_rows", "make_query_record", "make_record", "pack", "ransac_affine", "record_size", "rerank",
    "stored_record", "tentative_matches", "unpack", "verify_geometry",
]

from ..deprecation import renamed  # noqa: E402

__getattr__ = renamed(__name__, {"verify": "verify_geometry", "DEFAULT_MAX_FEATURES": "DEFAULT_MAX_RECORD_FEATURES"})
