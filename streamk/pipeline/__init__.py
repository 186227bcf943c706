"""Work on many images at once: the per-image tasks run on the executors, folder ingestion
into an index, an encoder trained on a sample of images, features of many images, re-aggregation.
"""

from .encoder_training import DEFAULT_DESCRIPTORS_PER_IMAGE, DEFAULT_MAX_IMAGES, TrainingInfo, train_encoder
from .extraction import ExtractionResult, extract_many, iter_extract
from .index_setup import create_index
from .local_features import add_local_features
from .ingest import (IMAGE_EXTENSIONS, Ingester, IngestStats, collect_images, id_for, is_image_name, iter_scan,
                     retrain_if_stale, run_ingest, scan)
from .reaggregation import Reaggregator, Settings

__all__ = ["add_local_features", "DEFAULT_DESCRIPTORS_PER_IMAGE", "DEFAULT_MAX_IMAGES", "IMAGE_EXTENSIONS", "ExtractionResult",
           "IngestStats", "Ingester", "Reaggregator", "Settings", "TrainingInfo", "collect_images", "create_index", "extract_many", "id_for", "is_image_name",
           "iter_extract", "iter_scan", "retrain_if_stale", "run_ingest", "scan", "train_encoder"]
