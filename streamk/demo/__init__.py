"""The main job and the example collections: real photographs indexed under each
aggregation and searched with views changed as photos are in the wild (crop, rotation,
scale, perspective, JPEG, lighting); the notebooks' ready-made examples."""

from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (streamk.exports)
    from .examples import (
        EXAMPLES as EXAMPLES, Example as Example, build_example as build_example,
        default_directory as default_directory, open_example as open_example,
    )
    from .main_job import DemoResult as DemoResult, run_demo as run_demo
    from .transforms import (
        TRANSFORMS as TRANSFORMS, VARIANTS as VARIANTS, check_names as check_names, open_rgb as open_rgb,
        view as view,
    )

__all__, __getattr__, __dir__ = lazy_exports(__name__)
