"""The main job and the example collections: real photographs indexed under each
aggregation and searched with views changed as photos are in the wild (crop, rotation,
scale, perspective, JPEG, lighting); the notebooks' ready-made examples."""

from ..exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".examples": ("EXAMPLES", "Example", "build_example", "default_directory", "open_example"),
    ".main_job": ("DemoResult", "run_demo"),
    ".transforms": ("TRANSFORMS", "VARIANTS", "check_names", "open_rgb", "view"),
})
