"""The main job and the example collections: real photographs indexed under each
aggregation and searched with views changed as photos are in the wild (crop, rotation,
scale, perspective, JPEG, lighting); the notebooks' ready-made examples."""

from .examples import EXAMPLES, Example, build_example, default_directory, open_example
from .main_job import DemoResult, run_demo
from .transforms import TRANSFORMS, VARIANTS, check_names, open_rgb, view

__all__ = ["EXAMPLES", "TRANSFORMS", "VARIANTS", "DemoResult", "Example", "build_example", "check_names",
           "default_directory", "open_example", "open_rgb", "run_demo", "view"]
