"""streamk's default encoder: what ``streamk index create my-index`` uses when given
neither ``--encoder`` nor ``--train``, so that a folder of 10 photos can be indexed and
searched at once, before there are enough photos to learn an encoder from.

**Where it comes from.** ``data/default_learning_sample.npz`` (shipped in the package,
1.6 MB): every Hessian-affine SIFT descriptor (the default extractor, default limits)
of the 13 photographs bundled with scikit-image whose documentation states public-domain,
CC0 or "no known copyright restrictions" terms -- astronaut, brick, camera, chelsea,
coffee, coins, grass, gravel, hubble_deep_field, ihc, retina, rocket, text; 15,566
descriptors stored as uint8, with each photo's file name, terms and SHA-256 in the
file's JSON header. ``data/make_default_learning_sample.py`` (in the source tree)
rebuilds it.

**What it is.** T-emb k = 16, GMP, no RN (D = 1,920), and the visual words of local
geometry (second stage), both learned on that sample: fitted on first use (a few
seconds) and cached under ``<cache_home>/default-encoder/<key>/`` (the key: the
sample's SHA-256 and the configuration), read from there afterwards.

**How good it is.** Learned on photos unlike the user's (textures, a cat, a rocket), it
still does about as well as the same encoder learned on the collection itself, on the
one collection measured: paris6k-subset, 12 box queries, first stage, mAP 74.03 against
74.19 (``bench/training.py --parts default``; 2026-11-26, 2-core Xeon). T-emb's anchors
and whitening describe local patches, not places, and RootSIFT patches are alike
across photos. One collection is not every collection: ``streamk index create
my-index --train photos/`` learns one from the user's photos.
"""

import hashlib
import json
from importlib import resources
from pathlib import Path

import numpy as np

from ..config import cache_home
from ..encoding import Encoder
from ..errors import EncoderFileError, VocabularyFileError
from ..features import atomic_write
from ..verification import Vocabulary

SAMPLE_FILE = "default_learning_sample.npz"
DEFAULT_CONFIG = {"embedding": "temb", "k": 16, "aggregation": "gmp"}
VOCABULARY_OPTIONS = {"seed": 0}  # Vocabulary's defaults: as many words as the sample allows
_CACHE_VERSION = 1  # bump when what is cached changes meaning
QUALITY_NOTE = ("On paris6k-subset it scores 74.0 mAP against 74.2 for the same encoder learned on those photos "
                "(bench/training.py); --train photos/ learns one from yours.")


def sample_bytes() -> bytes:
    """The shipped learning sample's .npz bytes."""
    return resources.files(__package__).joinpath("data", SAMPLE_FILE).read_bytes()


def learning_sample(data: bytes | None = None) -> tuple[list[np.ndarray], dict]:
    """(one float32 (n_i, 128) SIFT array per photo, the file's JSON header: photos, terms);
    ``data``: the sample's bytes when already read."""
    import io

    with np.load(io.BytesIO(sample_bytes() if data is None else data), allow_pickle=False) as npz:
        meta = json.loads(str(npz["__meta__"]))
        sets = [npz[name].astype(np.float32) for name in sorted(n for n in npz.files if n != "__meta__")]
    return sets, meta


def _cache_key(data):
    h = hashlib.sha256(data)
    h.update(json.dumps({"config": DEFAULT_CONFIG, "vocabulary": VOCABULARY_OPTIONS, "version": _CACHE_VERSION},
                        sort_keys=True).encode())
    return h.hexdigest()[:16]


def fit_default(data: bytes | None = None) -> tuple[Encoder, Vocabulary]:
    """The default encoder and vocabulary fitted now on the shipped sample (no cache;
    ``data``: its bytes when already read)."""
    sets, _ = learning_sample(data)
    encoder = Encoder(**DEFAULT_CONFIG).fit(sets)
    return encoder, Vocabulary(**VOCABULARY_OPTIONS).fit(sets)


def default_encoder(log=None) -> tuple[Encoder, Vocabulary]:
    """(the default :class:`Encoder`, its :class:`Vocabulary`), from the cache
    (``<cache_home>/default-encoder``) or fitted on the shipped sample and cached (see the
    module doc); a cache that cannot be written is skipped. ``log``: called with one line
    when the encoder is fitted."""
    data = sample_bytes()
    folder = Path(cache_home()) / "default-encoder" / _cache_key(data)
    enc_path, voc_path = folder / "encoder.npz", folder / "vocabulary.npz"
    if enc_path.exists() and voc_path.exists():
        try:
            return Encoder.load(enc_path), Vocabulary.load(voc_path)
        except (EncoderFileError, VocabularyFileError):
            pass  # a damaged cache entry: fitted again and rewritten below
    if log is not None:
        log("fitting streamk's default encoder on its shipped learning sample (once; cached in "
            f"{folder})")
    encoder, vocabulary = fit_default(data)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(enc_path, lambda fh: fh.write(encoder.to_bytes()))
        atomic_write(voc_path, lambda fh: fh.write(vocabulary.to_bytes()))
    except OSError:
        pass  # read-only home: fitted again next time
    return encoder, vocabulary


__all__ = ["DEFAULT_CONFIG", "QUALITY_NOTE", "default_encoder", "fit_default", "learning_sample"]
