"""The streaming index: image vectors, their PQ / IVF-PQ codes and records in one LMDB
environment (or S shards), written while it is searched, retrained without downtime.

    idx = StreamingIndex.create("my-index", encoder); idx.add("a", image_path="a.jpg")
    idx.search("query.jpg", k=10); open_index(path) opens a sharded one too.
"""

from .second_stage import Hit
from .items import (AddResult, EncodedImage, checked_vector, encoded_image_file, encoded_vector,
                    image_content_key, normalise_box, npz_bytes, unit_vector)
from .describe import (ImageDescription, ImageFailure, describe_context, describe_image, describe_task_context,
                       geometry_record)
from .duplicates import DEFAULT_DUPLICATE_THRESHOLD, DUPLICATE_POLICIES, nearest_of_vectors
from .metadata import GRAMMAR as FILTER_GRAMMAR, MAX_METADATA_BYTES, RowFilter, encode_metadata, parse_filter
from .retraining import STALE_CODEC_RATIO, stale_codec_note
from .queries import MAX_BATCH, MAX_EXPAND, MAX_K, MAX_RERANK, MAX_VERIFY, QueryEncoder, check_k, check_request
from .search_params import EXPANSIONS, INDEX_LIMITS, MODES, SERVER_LIMITS, SearchLimits, SearchParams, check_count
from .sharded import ShardedIndex, is_sharded, open_index, shard_of
from .store import BLOCK_ROWS, DEFAULT_MAP_SIZE, FORMAT_VERSION, VECTOR_DTYPES, ImageRecord, Store, id_key, validate_id
from .streaming_index import StreamingIndex
from .base import Index
from .queries import PreparedQuery
from .upgrade import upgrade
from .integrity_check import IntegrityReport, check_index
from .backup import BackupReport, backup

__all__ = ["BLOCK_ROWS", "DEFAULT_DUPLICATE_THRESHOLD", "DEFAULT_MAP_SIZE", "DUPLICATE_POLICIES", "FILTER_GRAMMAR", "MAX_BATCH", "MAX_EXPAND", "MAX_K", "MAX_METADATA_BYTES", "MAX_RERANK", "MAX_VERIFY", "MODES", "RowFilter", "STALE_CODEC_RATIO", "VECTOR_DTYPES", "AddResult", "EncodedImage", "Hit", "ImageRecord",
           "QueryEncoder", "ShardedIndex", "Store", "StreamingIndex", "check_k", "check_request", "checked_vector",
           "encode_metadata", "encoded_image_file", "encoded_vector", "id_key", "image_content_key", "is_sharded", "nearest_of_vectors", "normalise_box",
           "npz_bytes", "open_index", "parse_filter", "shard_of", "stale_codec_note", "unit_vector", "upgrade", "validate_id",
           "check_index", "IntegrityReport", "EXPANSIONS", "INDEX_LIMITS", "SERVER_LIMITS", "SearchLimits", "SearchParams",
           "check_count", "BackupReport", "backup"]
__all__ += ["Index", "PreparedQuery"]
__all__ += ["ImageDescription", "ImageFailure", "describe_context", "describe_image", "describe_task_context",
            "geometry_record"]

from ..deprecation import renamed  # noqa: E402

__getattr__ = renamed(__name__, {"verify_index": "check_index", "VerifyReport": "IntegrityReport"})
