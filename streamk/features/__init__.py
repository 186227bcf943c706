"""The first stage: image files -> keypoints (with their affine frames) + raw SIFT descriptors.

Hessian-affine (pyhesaff, the paper's features) or OpenCV SIFT; image decoding with
named errors; a feature cache shared by processes; descriptor file formats.
"""

from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (streamk.exports)
    from .cache import (
        FeatureCache as FeatureCache, extract as extract, features_of_bytes as features_of_bytes,
        image_features as image_features,
    )
    from .descriptor_files import (
        atomic_write as atomic_write, fvecs_bytes as fvecs_bytes, read_bvecs as read_bvecs,
        read_descriptors as read_descriptors,
        read_fvecs as read_fvecs, read_ivecs as read_ivecs, read_npy as read_npy, read_siftgeo as read_siftgeo,
        write_bvecs as write_bvecs, write_descriptors as write_descriptors, write_fvecs as write_fvecs,
        write_ivecs as write_ivecs, write_npy as write_npy, write_siftgeo as write_siftgeo,
    )
    from .extractors import (
        DEFAULT_EXTRACTOR as DEFAULT_EXTRACTOR, DEFAULT_MAX_FEATURES as DEFAULT_MAX_FEATURES,
        DEFAULT_MAX_SIDE as DEFAULT_MAX_SIDE, EXTRACTORS as EXTRACTORS, FEATURES_VERSION as FEATURES_VERSION,
        Extractor as Extractor, HessianAffineSift as HessianAffineSift, OpenCVSift as OpenCVSift,
        available_extractors as available_extractors, check_positive_int as check_positive_int,
        default_extractor as default_extractor, extractor_from_params as extractor_from_params,
        make_extractor as make_extractor, stored_pixels as stored_pixels,
        STORED_PIXELS_VERSION as STORED_PIXELS_VERSION,
    )
    from .images import (
        MAX_DECODED_BYTES as MAX_DECODED_BYTES, MAX_FILE_SIZE as MAX_FILE_SIZE, MAX_PIXELS as MAX_PIXELS,
        THUMBNAIL_SIDE as THUMBNAIL_SIDE, advice_for_clients as advice_for_clients, decode_gray as decode_gray,
        decode_gray_scaled as decode_gray_scaled,
        decoded_bytes as decoded_bytes, eight_bit as eight_bit, exif_date as exif_date,
        exif_orientation as exif_orientation, in_memory_image_bytes as in_memory_image_bytes,
        is_image_in_memory as is_image_in_memory, memory_image_metadata as memory_image_metadata,
        file_metadata as file_metadata, is_heif as is_heif, orient_array as orient_array,
        orient_image as orient_image, oriented_size as oriented_size,
        load_gray as load_gray, pil_image as pil_image, read_image_bytes as read_image_bytes,
        thumbnail_jpeg as thumbnail_jpeg,
    )
    from .local_features import (
        DESCRIPTOR_DIM as DESCRIPTOR_DIM, KEYPOINT_COLUMNS as KEYPOINT_COLUMNS, Features as Features,
        crop_to_box as crop_to_box, features_from_npz as features_from_npz,
        features_to_npz_bytes as features_to_npz_bytes, load_features as load_features,
        save_features as save_features,
    )

__all__, __getattr__, __dir__ = lazy_exports(__name__)
