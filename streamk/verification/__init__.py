"""Second stage: verify the first stage's top R by tentative matches (visual words + Hamming embedding)
and RANSAC (affine from one match); re-rank verified images first and expand the query with them."""

from .expansion import alpha_query_expansion, average_query_expansion, expand_query, expansion_rows
from .matching import tentative_matches
from .ransac import RansacResult, apply_affine, ransac_affine
from .records import (DEFAULT_MAX_FEATURES, GeometryRecord, make_query_record, make_record, pack, record_size,
                      stored_record, unpack)
from .verify import Reranked, Verification, VerificationParams, rerank, verify
from .vocabulary import Vocabulary

__all__ = [
    "DEFAULT_MAX_FEATURES", "GeometryRecord", "RansacResult", "Reranked", "Verification", "VerificationParams",
    "Vocabulary", "alpha_query_expansion", "apply_affine", "average_query_expansion", "expand_query",
    "expansion_rows", "make_query_record", "make_record", "pack", "ransac_affine", "record_size", "rerank",
    "stored_record", "tentative_matches", "unpack", "verify",
]
