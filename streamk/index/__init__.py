"""The streaming index: image vectors, their PQ / IVF-PQ codes and records in one LMDB
environment (or S shards), written while it is searched, retrained without downtime.

    idx = StreamingIndex.create("my-index", encoder); idx.add("a", image_path="a.jpg")
    idx.search("query.jpg", k=10); open_index(path) opens a sharded one too.
"""

from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (streamk.exports)
    from .second_stage import (
        Candidate as Candidate, Hit as Hit, expanded_results as expanded_results, explanation_of as explanation_of,
        stacked_vectors as stacked_vectors, verified_first as verified_first,
    )
    from .items import (
        AddResult as AddResult, EncodedImage as EncodedImage, checked_vector as checked_vector,
        encoded_image_file as encoded_image_file, encoded_vector as encoded_vector,
        image_content_key as image_content_key, normalise_box as normalise_box, npz_bytes as npz_bytes,
        unit_vector as unit_vector,
    )
    from .describe import (
        ImageDescription as ImageDescription, ImageFailure as ImageFailure, describe_context as describe_context,
        describe_image as describe_image, describe_task_context as describe_task_context,
        geometry_record as geometry_record,
    )
    from .duplicates import (
        DEFAULT_DUPLICATE_THRESHOLD as DEFAULT_DUPLICATE_THRESHOLD, DUPLICATE_POLICIES as DUPLICATE_POLICIES,
        nearest_of_vectors as nearest_of_vectors, DuplicatePair as DuplicatePair, copies_of as copies_of,
        copies_of_new as copies_of_new, copy_report as copy_report, vector_only_note as vector_only_note,
    )
    from .metadata import (
        GRAMMAR as FILTER_GRAMMAR, MAX_METADATA_BYTES as MAX_METADATA_BYTES, RowFilter as RowFilter,  # noqa: F401
        encode_metadata as encode_metadata, parse_filter as parse_filter,
    )
    from .retraining import (
        STALE_CODEC_RATIO as STALE_CODEC_RATIO, check_trainable as check_trainable,
        stale_codec_note as stale_codec_note,
    )
    from .queries import (
        MAX_BATCH as MAX_BATCH, MAX_EXPAND as MAX_EXPAND, MAX_K as MAX_K, MAX_RERANK as MAX_RERANK,
        MAX_VERIFY as MAX_VERIFY, QueryEncoder as QueryEncoder, check_k as check_k,
        check_request as check_request, PreparedQuery as PreparedQuery,
    )
    from .search_params import (
        EXPANSIONS as EXPANSIONS, INDEX_LIMITS as INDEX_LIMITS, MODES as MODES, SERVER_LIMITS as SERVER_LIMITS,
        SearchLimits as SearchLimits, SearchParams as SearchParams, check_count as check_count,
    )
    from .sharded import (
        ShardedIndex as ShardedIndex, check_shards as check_shards, is_sharded as is_sharded, open_index as open_index,
        shard_of as shard_of,
    )
    from .store import (
        BLOCK_ROWS as BLOCK_ROWS, DEFAULT_MAP_SIZE as DEFAULT_MAP_SIZE, FORMAT_VERSION as FORMAT_VERSION,
        MAX_ID_CHARS as MAX_ID_CHARS, MAX_KEY_BYTES as MAX_KEY_BYTES, VECTOR_DTYPES as VECTOR_DTYPES,
        ImageRecord as ImageRecord, Store as Store, id_key as id_key, normal_form as normal_form,
        normal_id as normal_id, replaced_files as replaced_files, validate_id as validate_id,
    )
    from .streaming_index import StreamingIndex as StreamingIndex
    from .base import Index as Index
    from .upgrade import upgrade as upgrade
    from .integrity_check import IntegrityReport as IntegrityReport, check_index as check_index
    from .backup import BackupReport as BackupReport, backup as backup

__all__, __getattr__, __dir__ = lazy_exports(__name__, renamed={'verify_index': 'check_index',
                                                                'VerifyReport': 'IntegrityReport'})
