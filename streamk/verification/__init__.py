"""Second stage: verify the first stage's top R by tentative matches (visual words + Hamming embedding)
and RANSAC (affine from one match); re-rank verified images first and expand the query with them."""

from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (streamk.exports)
    from .copies import (
        NO_PIXELS as NO_PIXELS, CopyParams as CopyParams, PairClass as PairClass, classify_pair as classify_pair,
        decode_for_copies as decode_for_copies, same_pixels as same_pixels,
    )
    from .expansion import (
        DEFAULT_TOP as DEFAULT_TOP, RECURSIVE_ROUNDS as RECURSIVE_ROUNDS, RecursiveExpansion as RecursiveExpansion,
        alpha_query_expansion as alpha_query_expansion, average_query_expansion as average_query_expansion,
        expand_query as expand_query, expansion_rows as expansion_rows, recursive_expansion as recursive_expansion,
    )
    from .matching import tentative_matches as tentative_matches
    from .ransac import RansacResult as RansacResult, apply_affine as apply_affine, ransac_affine as ransac_affine
    from .records import (
        DEFAULT_MAX_RECORD_FEATURES as DEFAULT_MAX_RECORD_FEATURES, GeometryRecord as GeometryRecord,
        make_query_record as make_query_record, make_record as make_record, pack as pack,
        record_size as record_size, parse_header as parse_header, stored_record as stored_record,
        unpack as unpack,
    )
    from .spatial import (
        DEFAULT_FALSE_ALARMS_PER_PAIR as DEFAULT_FALSE_ALARMS_PER_PAIR, DEFAULT_MIN_INLIERS as DEFAULT_MIN_INLIERS,
        DEFAULT_R as DEFAULT_R, NFA_MEANING as NFA_MEANING,
        Reranked as Reranked, Verification as Verification, VerificationParams as VerificationParams,
        WHY_NOT_VERIFIED as WHY_NOT_VERIFIED, log10_nfa_text as log10_nfa_text, rerank as rerank,
        verify_geometry as verify_geometry,
    )
    from .vocabulary import Vocabulary as Vocabulary
    from .warm import warm_kernels as warm_kernels

__all__, __getattr__, __dir__ = lazy_exports(__name__, renamed={'verify': 'verify_geometry',
                                                                'DEFAULT_MAX_FEATURES': 'DEFAULT_MAX_RECORD_FEATURES'})
