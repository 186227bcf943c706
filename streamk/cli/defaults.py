"""The defaults the command line shows in its --help, as plain constants.

Each mirrors a value defined by the package a command drives (named beside it).
They are written here, not imported, because building the argument parser must not
import those packages: importing ``streamk.features`` or ``streamk.demo`` loads
numpy and Numba (~0.4-1 s), which ``streamk --help`` or ``streamk index info``
should not pay. ``tests/test_cli.py`` checks that every value equals its source.
"""

#: streamk.features.MAX_FILE_SIZE: largest image file read, in bytes
MAX_FILE_SIZE = 50 * 2**20
#: streamk.features.MAX_PIXELS: most pixels (width x height) of an image read
MAX_PIXELS = 128_000_000
#: streamk.features.DEFAULT_MAX_SIDE: long side images are reduced to before detection
DEFAULT_MAX_SIDE = 1024
#: streamk.features.DEFAULT_MAX_FEATURES: features kept per image (strongest first)
DEFAULT_MAX_FEATURES = 8192
#: streamk.index.DEFAULT_DUPLICATE_THRESHOLD: vector similarity of a near-duplicate
DEFAULT_DUPLICATE_THRESHOLD = 0.5
#: streamk.index.DUPLICATE_POLICIES: what ingestion does with a near-duplicate
DUPLICATE_POLICIES = ("keep", "skip", "report")
#: streamk.index.MODES: how a search's first stage scans (every vector; the PQ codes)
SEARCH_MODES = ("exact", "pq")
#: streamk.index.EXPANSIONS: the query expansions (average; alpha-QE; recursive average; the same
#: less the collection's mean)
SEARCH_EXPANSIONS = ("aqe", "alpha", "recursive", "recursive-centred")
#: streamk.index.SearchParams().expansion: the query expansion a search uses unless told
SEARCH_EXPANSION = "recursive-centred"
#: streamk.pipeline.DEFAULT_MAX_IMAGES: images an encoder or the visual words learn from
DEFAULT_MAX_IMAGES = 1000
#: streamk.pipeline.DEFAULT_DESCRIPTORS_PER_IMAGE: descriptors sampled from each of them
DEFAULT_DESCRIPTORS_PER_IMAGE = 500
#: the keys of streamk.demo.transforms.TRANSFORMS: the demo's photo changes, in order
DEMO_TRANSFORMS = ("crop", "rotate", "scale", "persp", "jpeg", "light")
#: streamk.encoding.METHODS: the aggregation methods, in the paper's order
AGGREGATIONS = ("sum", "democratic", "gmp")
#: streamk.encoding.EMBEDDINGS' names, and fv-hard (streamk.encoding.embedding_spec): streamk eval's embeddings
EVAL_EMBEDDINGS = ("temb", "fv", "fv-hard", "vlad", "bow")
#: the keys of streamk.datasets.download.REMOTES, sorted: the benchmarks `streamk datasets download` fetches
DOWNLOADABLE_DATASETS = ("holidays", "oxford105k", "oxford5k", "paris106k", "paris6k", "roxford5k", "rparis6k",
                         "ukbench")
