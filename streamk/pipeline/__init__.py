"""Work on many images at once: the per-image tasks run on the executors, folder ingestion
into an index, an encoder trained on a sample of images, features of many images, re-aggregation;
the second stage's kernels compiled beside other work.
"""

from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (streamk.exports)
    from .encoder_training import (
        DEFAULT_DESCRIPTORS_PER_IMAGE as DEFAULT_DESCRIPTORS_PER_IMAGE, DEFAULT_MAX_IMAGES as DEFAULT_MAX_IMAGES,
        TrainingInfo as TrainingInfo, train_encoder as train_encoder,
        vocabulary_descriptors_per_image as vocabulary_descriptors_per_image,
    )
    from .bundled_encoder import default_encoder as default_encoder
    from .extraction import (
        ExtractionResult as ExtractionResult, extract_many as extract_many, iter_extract as iter_extract,
    )
    from .index_setup import create_index as create_index
    from .local_features import add_local_features as add_local_features
    from .ingest import (
        IMAGE_EXTENSIONS as IMAGE_EXTENSIONS, Ingester as Ingester, as_roots as as_roots, IngestStats as IngestStats,
        collect_images as collect_images, id_for as id_for, is_image_name as is_image_name,
        iter_scan as iter_scan, retrain_if_stale as retrain_if_stale, run_ingest as run_ingest, scan as scan,
    )
    from .reaggregation import Reaggregator as Reaggregator, Settings as Settings
    from .warm_up import KernelWarmUp as KernelWarmUp

__all__, __getattr__, __dir__ = lazy_exports(__name__)
