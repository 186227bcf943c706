"""The first stage: image files -> keypoints (with their affine frames) + raw SIFT descriptors.

Hessian-affine (pyhesaff, the paper's features) or OpenCV SIFT; image decoding with
named errors; a feature cache shared by processes; descriptor file formats.
"""

from ..exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".cache": ("FeatureCache", "extract", "features_of_bytes", "image_features"),
    ".descriptor_files": ("atomic_write", "read_bvecs", "read_descriptors", "read_fvecs", "read_ivecs",
        "read_npy", "read_siftgeo", "write_bvecs", "write_descriptors", "write_fvecs", "write_ivecs",
        "write_npy", "write_siftgeo"),
    ".extractors": ("DEFAULT_EXTRACTOR", "DEFAULT_MAX_FEATURES", "DEFAULT_MAX_SIDE", "EXTRACTORS",
        "FEATURES_VERSION", "Extractor", "HessianAffineSift", "OpenCVSift", "available_extractors",
        "check_positive_int", "default_extractor", "extractor_from_params", "make_extractor"),
    ".images": ("MAX_DECODED_BYTES", "MAX_FILE_SIZE", "MAX_PIXELS", "THUMBNAIL_SIDE", "decode_gray", "decode_gray_scaled",
        "decoded_bytes", "exif_date",
        "file_metadata", "load_gray", "pil_image", "read_image_bytes", "thumbnail_jpeg"),
    ".local_features": ("DESCRIPTOR_DIM", "KEYPOINT_COLUMNS", "Features", "crop_to_box", "features_from_npz",
        "features_to_npz_bytes", "load_features", "save_features"),
})
