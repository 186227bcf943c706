"""The first stage: image files -> keypoints (with their affine frames) + raw SIFT descriptors.

Hessian-affine (pyhesaff, the paper's features) or OpenCV SIFT; image decoding with
named errors; a feature cache shared by processes; descriptor file formats.
"""

from .cache import FeatureCache, extract, features_of_bytes, image_features
from .descriptor_files import (atomic_write, read_bvecs, read_descriptors, read_fvecs, read_ivecs, read_npy,
                               read_siftgeo, write_bvecs, write_descriptors, write_fvecs, write_ivecs, write_npy,
                               write_siftgeo)
from .extractors import (DEFAULT_EXTRACTOR, DEFAULT_MAX_FEATURES, DEFAULT_MAX_SIDE, EXTRACTORS, FEATURES_VERSION, Extractor, HessianAffineSift, OpenCVSift,
                         available_extractors, check_positive_int, default_extractor, extractor_from_params,
                         make_extractor)
from .images import (MAX_FILE_SIZE, MAX_PIXELS, decode_gray, decode_gray_scaled, exif_date, file_metadata, load_gray,
                     pil_image, read_image_bytes)
from .local_features import (DESCRIPTOR_DIM, KEYPOINT_COLUMNS, Features, crop_to_box, features_from_npz,
                             features_to_npz_bytes, load_features, save_features)

__all__ = [
    "DEFAULT_EXTRACTOR", "DEFAULT_MAX_FEATURES", "DEFAULT_MAX_SIDE", "DESCRIPTOR_DIM", "EXTRACTORS",
    "FEATURES_VERSION", "KEYPOINT_COLUMNS", "MAX_FILE_SIZE", "MAX_PIXELS",
    "Extractor", "FeatureCache", "Features", "HessianAffineSift", "OpenCVSift",
    "atomic_write", "available_extractors", "check_positive_int", "crop_to_box", "decode_gray", "decode_gray_scaled", "exif_date",
    "default_extractor", "extract", "extractor_from_params", "features_from_npz", "features_of_bytes",
    "features_to_npz_bytes", "file_metadata", "image_features", "load_features", "load_gray", "make_extractor", "pil_image",
    "read_bvecs", "read_descriptors", "read_fvecs", "read_image_bytes", "read_ivecs", "read_npy",
    "read_siftgeo", "save_features", "write_bvecs", "write_descriptors", "write_fvecs", "write_ivecs",
    "write_npy", "write_siftgeo",
]
