"""An index in S shards: ids routed by a stable hash, each shard one StreamingIndex
(one LMDB environment) opened by exactly one owner, searched by scatter / gather.

    idx = ShardedIndex.create("big-index", encoder, shards=4)             # in this process
    idx = ShardedIndex.open("big-index", dask="tcp://scheduler:8786")     # owners on a cluster
    idx.add_many(...); idx.train(nlist=4096, M=64); idx.search(Q, k=10)

Layout: ``DIR/shards.json`` (the manifest: S, the routing rule, each shard's
folder and the host whose disk holds it), ``DIR/encoder.npz`` (the encoder, for
the queries), and the shards ``shard-000`` ... (StreamingIndex folders).

Routing: image id -> shard ``int(sha256(id)[:8]) mod S``; it never changes, so
add / update / remove / lookups go to one shard.

Owners. Without Dask, this process opens every shard. With Dask, each shard is
opened by a Dask actor (:class:`ShardActor`) on a worker of the host that holds
its folder (its local disk: LMDB is never used over a network file system, and
an open LMDB environment never leaves its process); the actor's calls run one
at a time, so searches and writes from several clients interleave safely. A
worker process opens each shard once, whatever the number of actors.

Search: the query vectors go to every shard; each returns its k best (scores
and ids); they are merged by score (ties by shard, then by the shard's order).
In exact mode the result is that of one index holding the same images (up to
the order of exactly equal scores). With a codec, the shards share one: trained
once on a sample gathered from every shard (``train``), then installed in each.
"""

from __future__ import annotations  # annotations are never evaluated at run time

import hashlib
import json
import os
import socket
import threading
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..encoding import Encoder
from ..errors import (ConfigError, DuplicateError, IndexClosedError, IndexExistsError, IndexFormatError,
                     NotAnIndexError, UnknownIdError)
from ..features import default_extractor, extractor_from_params, is_image_in_memory
from ..quantization import IVFPQ, default_train_size
from .describe import encode_item
from .items import add_items, not_there_to_update
from ..verification import Vocabulary
from .queries import QueryEncoder
from .search_params import SearchParams
from .base import Index
from .second_stage import (Candidate, Hit, collection_mean, damaged_ids, expanded_results, stacked_vectors,
                           vectors_on_shard, verified_first, verify_on_shard, warn_damaged)
from .metadata import check_field, encode_value, values_limit
from .integrity import corrupt
from .store import ImageRecord, file_identity, id_key, lookup_keys, normal_id, validate_id
from .streaming_index import StreamingIndex
from .retraining import check_trainable, staleness_of

MANIFEST = "shards.json"
FORMAT = "streamk-shards"
FORMAT_VERSION = 1
ROUTE = "sha256-u64-mod"


def shard_of(image_id, shards):
    """The shard of an image id: the first 8 bytes of sha256(id), modulo the shard count
    (the id in its NFC form, as stored: :func:`~streamk.index.keys.normal_id`)."""
    return _shard_of_key(id_key(image_id), shards)


def _shard_of_key(key, shards):
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % int(shards)


def is_sharded(path):
    return (Path(path) / MANIFEST).is_file()


def read_manifest(path):
    path = Path(path)
    try:
        m = json.loads((path / MANIFEST).read_text())
    except FileNotFoundError:
        raise NotAnIndexError(f"{path} is not a sharded streamk index (no {MANIFEST})") from None
    except ValueError as exc:  # damaged: the shards are there, but not the list that names them
        raise corrupt(path, f"its list of shards {MANIFEST} is unreadable ({exc})", repairable=False) from exc
    if m.get("format") != FORMAT or m.get("version") != FORMAT_VERSION or m.get("route") != ROUTE:
        raise IndexFormatError(f"{path / MANIFEST}: not a sharded index of version {FORMAT_VERSION} ({m!r})")
    return m


def missing_shard(path, n, d):
    """What is damaged when shard ``n`` (folder ``d``) of the sharded index at ``path`` is gone."""
    return f"shard {n} is missing (no folder {path / d})"


# ---------------------------------------------------------------- one shard, in the process that owns it
# (path, readonly) -> [StreamingIndex, users]: one handle per shard and mode in a process (the store shares
# the LMDB environment between modes), so that a read-only open never lends out a writable handle
_open_shards: dict[tuple[str, bool], list[Any]] = {}
_open_lock = threading.Lock()


def _acquire(path, readonly):
    key = (path, bool(readonly))
    with _open_lock:
        entry = _open_shards.get(key)
        if entry is None:
            entry = _open_shards[key] = [StreamingIndex.open(path, readonly=readonly), 0]
        entry[1] += 1
        return entry[0]


def _release(path, readonly):
    key = (path, bool(readonly))
    with _open_lock:
        entry = _open_shards.get(key)
        if entry is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                del _open_shards[key]
                entry[0].close()


MAX_SHARDS = 1024  # shards of one index, at most (each is an LMDB folder with its owner)


def check_shards(shards):
    """``shards`` as an int, once it is within 1..MAX_SHARDS; else ConfigError."""
    shards = int(shards)
    if not 1 <= shards <= MAX_SHARDS:
        raise ConfigError(f"shards must be in 1..{MAX_SHARDS:,} (streamk's limit: one LMDB folder and one owner "
                          f"each), got {shards:,}")
    return shards


class ShardActor:
    """One shard's owner: a StreamingIndex opened in this process (a Dask worker's,
    as an actor; or this one, in local mode). Its methods take and return plain
    data (arrays, lists, bytes): what travels between processes."""

    def __init__(self, path, readonly=False):
        self.path = str(path)
        self.readonly = bool(readonly)
        self.index = _acquire(self.path, self.readonly)
        self._lock = threading.Lock()  # a StreamingIndex is not thread-safe

    def host(self):
        return socket.gethostname()

    def opened_files(self):
        return self.index.opened_files()

    def write_encoded(self, encoded, replace=False):
        with self._lock:
            return self.index.write_encoded(encoded, replace)

    def remove(self, image_ids):
        with self._lock:
            return self.index.remove(list(image_ids))

    def claim(self, pairs, take_over=False):
        """Claim content keys for ids (one transaction): per (content, id), None when
        claimed (or already this id's), else the id that holds the claim. take_over:
        claim anyway (the holder was checked not to hold that content)."""
        with self._lock:
            store = self.index.store

            def run(txn):
                out = []
                db = store.claims_db
                for content, image_id in pairs:
                    owner = txn.get(content, db=db)
                    key = image_id.encode("utf-8")
                    if owner is not None and not take_over and normal_id(bytes(owner).decode()) == normal_id(image_id):
                        out.append(None)  # this id's already (maybe in the other normal form: an older index)
                    elif owner is None or take_over:
                        txn.put(content, key, db=db)
                        out.append(None)
                    else:
                        out.append(bytes(owner).decode("utf-8"))
                return out
            return store.write(run)

    def release(self, pairs):
        """Drop the claims of (content, id) pairs still held by those ids."""
        with self._lock:
            store = self.index.store

            def run(txn):
                db = store.claims_db
                for content, image_id in pairs:
                    if txn.get(content, db=db) == image_id.encode("utf-8"):
                        txn.delete(content, db=db)
            store.write(run)

    def records(self, image_ids):
        with self._lock:
            return self.index.records(image_ids)

    def stored_id(self, image_id):
        with self._lock:
            return self.index.stored_id(image_id)

    def content_holders(self, content_keys):
        with self._lock:
            return self.index.content_holders(content_keys)

    def search(self, Q, k, params):
        with self._lock:
            return self.index.first_stage(Q, k, params=params)

    def verify_ids(self, image_ids, scores, qrec, params):
        """This shard's ``image_ids`` among a query's merged top R, or an expanded search's
        new results, verified (second_stage.verify_on_shard)."""
        with self._lock:
            return verify_on_shard(self.index, image_ids, scores, qrec, params)

    def vectors_of(self, image_ids):
        """The stored vectors of this shard's ``image_ids`` (second_stage.vectors_on_shard)."""
        with self._lock:
            return vectors_on_shard(self.index, image_ids)

    def mean_vector(self):
        with self._lock:
            return self.index.mean_vector()

    def sample_vectors(self, n, seed):
        with self._lock:
            return self.index.sample_vectors(n, seed)

    def train(self, codec_bytes):
        with self._lock:
            self.index.train(codec=IVFPQ.from_bytes(codec_bytes), progress=False)
            return len(self.index)

    def count(self):
        with self._lock:
            return len(self.index)

    def ids(self):
        with self._lock:
            return self.index.ids()

    def stats(self):
        with self._lock:
            return self.index.stats()

    def codec_params(self):
        with self._lock:
            return self.index.codec_params()

    def codec_bytes(self):
        with self._lock:
            codec = self.index.codec()
            return None if codec is None else codec.to_bytes()

    def vector(self, image_id):
        with self._lock:
            return self.index.vector(image_id)

    def info(self, image_id):
        with self._lock:
            return self.index.info(image_id)

    def geometry(self, image_id):
        with self._lock:
            return self.index.geometry(image_id)

    def geometries(self, image_ids):
        with self._lock:
            return self.index.geometries(image_ids)

    def vectors_page(self, after_row, n):
        with self._lock:
            return self.index.vectors_page(after_row, n)

    def change_count(self):
        with self._lock:
            return self.index.change_count()

    def thumbnail(self, image_id):
        with self._lock:
            return self.index.thumbnail(image_id)

    def metadata(self, image_id):
        with self._lock:
            return self.index.metadata(image_id)

    def metadata_many(self, image_ids):
        with self._lock:
            return self.index.metadata_many(image_ids)

    def set_metadata(self, image_id, metadata, merge):
        with self._lock:
            return self.index.set_metadata(image_id, metadata, merge)

    def index_field(self, name):
        with self._lock:
            return self.index.index_field(name)

    def indexed_fields(self):
        with self._lock:
            return self.index.indexed_fields()

    def field_values(self, name, limit):
        with self._lock:
            return self.index.field_values(name, limit)

    def set_extractor(self, params_json):
        with self._lock:
            store = self.index.store

            def put(txn):
                txn.put(b"extractor", params_json.encode(), db=store.meta_db)
            store.write(put)

    def close(self):
        if self.index is not None:
            self.index = None
            _release(self.path, self.readonly)


class _Local:
    """Typed calls on a ShardActor in this process: ``call(ShardActor.method, *args)``
    returns the result, ``start(...)`` a callable that gives it (as :class:`_Remote`)."""

    def __init__(self, path, readonly):
        self.actor = ShardActor(path, readonly)

    def call(self, method, *args):
        return method(self.actor, *args)

    def start(self, method, *args):
        value = self.call(method, *args)
        return lambda: value

    def close(self):
        self.actor.close()


class _Remote:
    """Typed calls on a ShardActor held by a Dask worker (a method of ShardActor, run by
    the actor under its name): as :class:`_Local`."""

    def __init__(self, client, path, readonly, worker):
        self.future = client.submit(ShardActor, path, readonly, actor=True, workers=[worker],
                                    allow_other_workers=False, pure=False)
        self.actor = self.future.result()

    def call(self, method, *args):
        return self.start(method, *args)()

    def start(self, method, *args):
        return getattr(self.actor, method.__name__)(*args).result  # the actor's ActorFuture

    def close(self):
        try:
            self.actor.close().result()
        except Exception:  # the worker is gone: nothing is left open there
            pass
        self.future.release()


# ---------------------------------------------------------------- the sharded index
class ShardedIndex(Index):
    """S StreamingIndex shards behind the one :class:`~streamk.index.Index` interface; see
    the module doc."""

    def __init__(self, path: str | os.PathLike[str], manifest: dict[str, Any], owners: list[Any], encoder: Encoder,
                 client: Any = None, own_client: bool = False, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = bool(readonly)
        self.manifest = manifest
        self.shards = int(manifest["shards"])
        self.dim = int(manifest["dim"])
        self.fingerprint = manifest["fingerprint"]
        self._shard_owners: list[Any] | None = owners  # None once closed
        self._encoder = encoder
        self._client, self._own_client = client, own_client
        self._extractor = None
        self.queries = QueryEncoder(lambda: self._encoder, self.extractor, self.dim, lambda: self.vocabulary)
        self._opened = {str(self.path): file_identity(self.path),  # what opened_files gives
                        str(self.path / MANIFEST): file_identity(self.path / MANIFEST)}
        for o in owners:  # the shards opened in this process (a Dask worker's files lie on its host)
            if isinstance(o, _Local):
                self._opened.update(o.call(ShardActor.opened_files))

    # ------------------------------------------------------------ create / open
    @classmethod
    def create(cls, path: str | os.PathLike[str], encoder: Encoder, shards: int, vector_dtype: str = "float16",
               extractor: Any = None, dask: Any = None, hosts: Any = None, store_extras: bool = True,
               vocabulary: Vocabulary | None = None, indexed_fields: Iterable[str] = ()) -> ShardedIndex:
        """A new sharded index at ``path`` (new or empty). With ``dask`` (an address,
        "local:N" or a Client), the shards are created by the cluster's workers, spread
        over its hosts (round robin; ``hosts`` to choose), each on the worker's disk
        at the same path (``path`` must be a local folder of every such host).
        indexed_fields: metadata fields search filters may use (every shard indexes them)."""
        if isinstance(indexed_fields, str):
            indexed_fields = [indexed_fields]
        indexed_fields = [check_field(f) for f in indexed_fields]
        shards = check_shards(shards)
        path = Path(path)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise IndexExistsError(f"{path} exists and is not an empty directory: refusing to create an index there")
        extractor = extractor or default_extractor()
        params = json.loads(json.dumps(extractor.params()))
        client, own = _client(dask)
        try:
            shard_hosts = _plan_hosts(client, shards, hosts)
            path.mkdir(parents=True, exist_ok=True)
            dirs = [f"shard-{s:03d}" for s in range(shards)]
            for s, d in enumerate(dirs):
                if client is None:
                    StreamingIndex.create(path / d, encoder, vector_dtype=vector_dtype, extractor=extractor,
                                          store_extras=store_extras, vocabulary=vocabulary).close()
                else:
                    worker = _worker_on(client, shard_hosts[s])
                    client.submit(_create_shard, str(path / d), encoder.to_bytes(), vector_dtype, params,
                                  store_extras, None if vocabulary is None else vocabulary.to_bytes(),
                                  workers=[worker], allow_other_workers=False, pure=False).result()
            encoder.save(path / "encoder.npz")
            if vocabulary is not None:  # the queries' visual words (each shard stores them too)
                vocabulary.save(path / "vocabulary.npz")
            manifest = {"format": FORMAT, "version": FORMAT_VERSION, "route": ROUTE, "shards": shards,
                        "dirs": dirs, "hosts": shard_hosts, "dim": encoder.dim,
                        "fingerprint": encoder.fingerprint, "extractor": params}
            (path / MANIFEST).write_text(json.dumps(manifest, indent=1))
        finally:
            if own and client is not None:
                client.close()
        idx = cls.open(path, dask=dask)
        for name in indexed_fields:
            idx.index_field(name)
        return idx

    @classmethod
    def open(cls, path: str | os.PathLike[str], readonly: bool = False, dask: Any = None) -> ShardedIndex:
        """Open a sharded index: every shard in this process, or (``dask``) each by an
        actor on a worker of the host that holds it."""
        path = Path(path)
        manifest = read_manifest(path)
        encoder = Encoder.load(path / "encoder.npz")
        client, own = _client(dask)
        owners: list[_Local | _Remote] = []
        try:
            for s, d in enumerate(manifest["dirs"]):
                shard_path = str((path / d).resolve()) if client is None else str(path / d)
                if client is None:
                    if manifest["hosts"][s] not in (None, socket.gethostname()):
                        raise ConfigError(f"shard {s} lives on host {manifest['hosts'][s]}: open the index "
                                          f"with dask= (a cluster with a worker there)")
                    if not (path / d).is_dir():
                        raise corrupt(path, missing_shard(path, s, d), repairable=False)
                    owners.append(_Local(shard_path, readonly))
                else:
                    owners.append(_Remote(client, shard_path, readonly, _worker_on(client, manifest["hosts"][s])))
            return cls(path, manifest, owners, encoder, client, own, readonly)
        except BaseException:
            for o in owners:
                o.close()
            if own and client is not None:
                client.close()
            raise

    def opened_files(self) -> dict[str, tuple[int, int]]:
        return dict(self._opened)

    @property
    def _owners(self):
        """The shards' owners; IndexClosedError once the index is closed."""
        if self._shard_owners is None:
            raise IndexClosedError(f"{self.path} was closed: open it again (ShardedIndex.open) to use it")
        return self._shard_owners

    def close(self) -> None:
        for o in self._shard_owners or ():
            o.close()
        self._shard_owners = None
        if self._own_client and self._client is not None:
            self._client.close()
            self._client = None

    # ------------------------------------------------------------ what ingestion and search need
    @property
    def encoder(self) -> Encoder:
        return self._encoder

    @property
    def vocabulary(self) -> Vocabulary | None:
        """The visual words of the shards' local geometry (``vocabulary.npz``), or None."""
        if getattr(self, "_vocabulary", None) is None:  # looked for again while there is none
            f = self.path / "vocabulary.npz"
            self._vocabulary = Vocabulary.load(f) if f.is_file() else None
        return self._vocabulary

    def extractor(self) -> Any:
        if self._extractor is None:
            self._extractor = extractor_from_params(self.manifest["extractor"])
        return self._extractor

    def _by_shard(self, image_ids):
        groups = {}
        for pos, i in enumerate(image_ids):
            groups.setdefault(self._shard_holding(i), []).append(pos)
        return groups

    def _shard_holding(self, image_id):
        """The shard of ``image_id``: that of its NFC form (:func:`shard_of`, where every new
        id goes), unless the id is held in another Unicode normal form on that form's shard
        (an index written before ids were normalised). An id whose forms are one (any ASCII
        id) costs nothing; another asks the shards of its other forms only when absent."""
        first = shard_of(image_id, self.shards)
        others = [s for s in dict.fromkeys(_shard_of_key(k, self.shards) for k in lookup_keys(image_id)) if s != first]
        if others and self._owners[first].call(ShardActor.records, [image_id])[0] is None:
            for s in others:
                if self._owners[s].call(ShardActor.records, [image_id])[0] is not None:
                    return s
        return first

    def _scatter(self, method, per_shard):
        """Run ``method`` (of ShardActor) on the shards given {shard: args} at once; {shard: result}."""
        pending = {s: self._owners[s].start(method, *args) for s, args in per_shard.items()}
        return {s: get() for s, get in pending.items()}

    def __len__(self) -> int:
        return sum(self._scatter(ShardActor.count, {s: () for s in range(self.shards)}).values())

    def __contains__(self, image_id: object) -> bool:
        try:
            return self.records([image_id])[0] is not None  # type: ignore[list-item]
        except Exception:
            return False

    def records(self, image_ids: Iterable[str]) -> list[Any]:
        return self._by_id(ShardActor.records, image_ids)

    def stored_id(self, image_id: str) -> str:
        return self._owner_of(image_id).call(ShardActor.stored_id, image_id)

    def content_holders(self, content_keys: Sequence[bytes]) -> list[str | None]:
        """As :meth:`StreamingIndex.content_holders`: each shard asked for all the keys at once
        (an image's content lives on the shard of its id)."""
        content_keys = [bytes(k) for k in content_keys]
        if not content_keys:
            return []
        per = self._scatter(ShardActor.content_holders, {s: (content_keys,) for s in range(self.shards)})
        return [next((per[s][i] for s in range(self.shards) if per[s][i] is not None), None)
                for i in range(len(content_keys))]

    def info(self, image_id: str) -> dict[str, Any]:
        return self._owner_of(image_id).call(ShardActor.info, image_id)

    def vector(self, image_id: str) -> NDArray[np.float32]:
        return self._owner_of(image_id).call(ShardActor.vector, image_id)

    def change_count(self) -> int:
        """The sum of the shards' change counters: it grows when any shard takes a change."""
        return sum(self._scatter(ShardActor.change_count, {s: () for s in range(self.shards)}).values())

    def vectors_page(self, after: Any = None, n: int = 256, *old: Any) -> tuple[list[str], NDArray[np.float32], Any]:
        """As :meth:`StreamingIndex.vectors_page` over every shard in turn, each page read
        where its shard lives: the cursor is (shard, its last row). ``vectors_page(shard,
        after_row, n)`` (0.2's form) still works, with a DeprecationWarning."""
        if isinstance(after, (int, np.integer)) and not isinstance(after, bool) and after != -1:
            warnings.warn("ShardedIndex.vectors_page(shard, after_row, n) is deprecated and will be removed after "
                          "streamk 0.3: use vectors_page(after=(shard, after_row), n=n)", DeprecationWarning,
                          stacklevel=2)
            shard = self._shard_number(after)
            row, n = (n, old[0]) if old else (-1 if n == 256 else n, 256)
            return self._owners[shard].call(ShardActor.vectors_page, row, n)  # that shard's page, as in 0.2
        shard, row = (0, -1) if after is None or after == -1 else (self._shard_number(after[0], self.shards), after[1])
        while shard < self.shards:
            ids, V, last = self._owners[shard].call(ShardActor.vectors_page, row, n)
            if ids:
                return ids, V, (shard, last)
            shard, row = shard + 1, -1
        return [], np.zeros((0, self.dim), np.float32), (self.shards, -1)

    def _shard_number(self, shard, last=None):
        last = self.shards - 1 if last is None else last
        if isinstance(shard, bool) or not isinstance(shard, (int, np.integer)) or not 0 <= shard <= last:
            raise ConfigError(f"shard must be in 0..{last}, got {shard!r}")
        return int(shard)

    def geometry(self, image_id: str) -> bytes | None:
        """The stored local-geometry record of an image (bytes), or None (see StreamingIndex.geometry)."""
        return self._owner_of(image_id).call(ShardActor.geometry, image_id)

    def geometries(self, image_ids: Sequence[str]) -> list[bytes | None]:
        """The stored local-geometry records of ``image_ids`` (bytes, or None), in their order:
        one call on each shard that holds some, all shards at once (one read transaction each)."""
        return self._by_id(ShardActor.geometries, image_ids)

    def thumbnail(self, image_id: str) -> bytes | None:
        """The small JPEG stored with an image, or None (see StreamingIndex.thumbnail)."""
        return self._owner_of(image_id).call(ShardActor.thumbnail, image_id)

    def ids(self) -> list[str]:
        every = self._scatter(ShardActor.ids, {s: () for s in range(self.shards)})
        return sorted(i for ids in every.values() for i in ids)

    # ------------------------------------------------------------ writing
    def _content_shard(self, content):
        return int.from_bytes(content[:8], "big") % self.shards

    def _claims(self, method, pairs, *extra):
        """Run claim / release on the shards of the content keys of (content, id) pairs;
        the per-pair results, in order."""
        groups = {}
        for pos, (content, _) in enumerate(pairs):
            groups.setdefault(self._content_shard(content), []).append(pos)
        got = self._scatter(method, {s: ([pairs[p] for p in pos], *extra) for s, pos in groups.items()})
        out = [None] * len(pairs)
        for s, pos in groups.items():
            for p, r in zip(pos, got[s] or [None] * len(pos)):
                out[p] = r
        return out

    def _routed(self, method, items, key_of, *extra):
        """Run ``method`` on the shard of each item (by its id), one call per shard; the
        per-item results, in order."""
        groups = self._by_shard([key_of(i) for i in items])
        got = self._scatter(method, {s: ([items[p] for p in pos], *extra) for s, pos in groups.items()})
        out = [None] * len(items)
        for s, pos in groups.items():
            for p, r in zip(pos, got[s]):
                out[p] = r
        return out

    def write_encoded(self, encoded: Iterable[Any], replace: bool = False) -> Any:
        """Write EncodedImage items, each to its shard (one transaction per shard);
        per item "added", "exists" or the named error, in order.

        Content is de-duplicated across shards: each content key is claimed first on
        the shard its key routes to (whichever shard will hold the image); content
        claimed by another id that still holds it is a DuplicateError. A claim left
        by a write that never happened (a crash in between) is taken over."""
        encoded = list(encoded)
        ids = [e.key.decode() for e in encoded]
        first: dict[bytes, str] = {}  # content -> the first id of this batch that holds it
        repeats = [p for p, e in enumerate(encoded) if first.setdefault(e.content, ids[p]) != ids[p]]
        if repeats:  # content given twice under two ids: the later ones once the first is written (or not)
            skip = set(repeats)
            done = iter(self.write_encoded([e for p, e in enumerate(encoded) if p not in skip], replace))
            again = iter(self.write_encoded([encoded[p] for p in repeats], replace))
            return [next(again) if p in skip else next(done) for p in range(len(encoded))]
        pairs = [(e.content, i) for e, i in zip(encoded, ids)]
        holders = self._claims(ShardActor.claim, pairs)
        out: list[Any] = [None] * len(encoded)
        stale = [p for p, h in enumerate(holders) if h is not None]
        if stale:  # does the holder still hold that content?
            recs = self.records([holders[p] for p in stale])
            for p, raw in zip(stale, recs):
                held = None if raw is None else ImageRecord.from_json(raw, self.path, holders[p]).content_key
                if held == encoded[p].content:
                    out[p] = DuplicateError(ids[p], holders[p], "update" if replace else "add")
            self._claims(ShardActor.claim, [pairs[p] for p in stale if out[p] is None], True)
        todo = [p for p in range(len(encoded)) if out[p] is None]
        before = self.records([ids[p] for p in todo]) if replace else [None] * len(todo)
        written = self._routed(ShardActor.write_encoded, [encoded[p] for p in todo], lambda e: e.key.decode(), replace)
        release = []
        for p, old, res in zip(todo, before, written):
            out[p] = res
            if isinstance(res, Exception):
                release.append(pairs[p])  # not written: free its claim
            elif old is not None and res == "added":  # replaced: the old content is free
                ck = ImageRecord.from_json(old, self.path, ids[p]).content_key
                if ck and ck != encoded[p].content:
                    release.append((ck, ids[p]))
        if release:
            self._claims(ShardActor.release, release)
        return out

    def encode_item(self, image_id: str, image_path: Any = None, descriptors: NDArray[Any] | None = None,
                    vector: NDArray[Any] | None = None, box: Sequence[float] | None = None,
                    metadata: Mapping[str, Any] | None = None) -> Any:
        """The EncodedImage of one image from exactly one source, described in this process
        with the index's encoder, extractor and visual words (as :meth:`StreamingIndex.add`;
        many image files are faster through ingestion, :class:`streamk.pipeline.Ingester`,
        which describes them in its workers)."""
        return encode_item(image_id, image_path, descriptors, vector, box, metadata, encoder=self._encoder,
                           extractor=self.extractor, vocabulary=self.vocabulary, dim=self.dim)

    def add(self, image_id: str, image_path: str | os.PathLike[str] | None = None,
            descriptors: NDArray[Any] | None = None, vector: NDArray[Any] | None = None,
            box: Sequence[float] | None = None, metadata: Mapping[str, Any] | None = None) -> str:
        """As :meth:`StreamingIndex.add`: one image from exactly one source (an image file or
        one held in memory, a descriptor set, a vector), written to its shard.
        ``add(id, vector)`` (0.2's form, the vector second) still works, with a
        DeprecationWarning."""
        image_path, vector = _old_vector_form("add", image_path, descriptors, vector)
        enc = self.encode_item(image_id, image_path, descriptors, vector, box, metadata)
        out = self.write_encoded([enc])[0]
        if isinstance(out, Exception):
            raise out
        return enc.key.decode()  # the id as stored: NFC (keys.normal_id)

    def update(self, image_id: str, image_path: str | os.PathLike[str] | None = None,
               descriptors: NDArray[Any] | None = None, vector: NDArray[Any] | None = None,
               box: Sequence[float] | None = None, metadata: Mapping[str, Any] | None = None) -> str:
        """As :meth:`StreamingIndex.update`: its content replaced (UnknownIdError if absent),
        its metadata kept, updated with ``metadata`` (and an image file's own fields)."""
        image_path, vector = _old_vector_form("update", image_path, descriptors, vector)
        if image_id not in self:  # before the image is described
            raise not_there_to_update(image_id)
        enc = self.encode_item(image_id, image_path, descriptors, vector, box, metadata)
        out = self.write_encoded([enc], replace=True)[0]  # the shard keeps the stored metadata, updated with enc's
        if isinstance(out, Exception):
            raise out
        return enc.key.decode()

    def add_many(self, items: Iterable[Mapping[str, Any]], batch_size: int | None = None) -> list[Any]:
        """As :meth:`StreamingIndex.add_many`, ``batch_size`` per round of shard
        transactions (None: 1024); one AddResult per item."""
        return add_items(items, self.encode_item, self.write_encoded, 1024 if batch_size is None else batch_size)

    def remove(self, image_ids: str | Iterable[str]) -> int:
        """Remove ids (each from its shard); UnknownIdError if any is absent, and then
        nothing is removed."""
        if isinstance(image_ids, (str, bytes)):
            image_ids = [image_ids]
        image_ids = list(dict.fromkeys(image_ids))
        records = self.records(image_ids)
        missing = [i for i, raw in zip(image_ids, records) if raw is None]
        if missing:
            raise UnknownIdError(f"no image {missing[0]!r} in the index ({len(missing)} unknown id(s); "
                                 "nothing removed)")
        groups = self._by_shard(image_ids)
        n = sum(self._scatter(ShardActor.remove,
                              {s: ([image_ids[p] for p in pos],) for s, pos in groups.items()}).values())
        decoded = [ImageRecord.from_json(r, self.path, i) for i, r in zip(image_ids, records)]
        freed = [(r.content_key, r.image_id) for r in decoded if r.content_key]
        if freed:
            self._claims(ShardActor.release, freed)
        return n

    # ------------------------------------------------------------ metadata
    def _owner_of(self, image_id):
        return self._owners[self._shard_holding(validate_id(image_id))]

    def metadata(self, image_id: str) -> dict[str, Any]:
        """As :meth:`StreamingIndex.metadata`, from the image's shard."""
        return self._owner_of(image_id).call(ShardActor.metadata, image_id)

    def metadata_many(self, image_ids: Iterable[str]) -> list[dict[str, Any] | None]:
        """The metadata of each id (None for an absent id): one call per shard that holds some
        (a search's results, a watch's group of stored files), not one per id."""
        return self._by_id(ShardActor.metadata_many, [validate_id(i) for i in image_ids])

    def set_metadata(self, image_id: str, metadata: Mapping[str, Any], merge: bool = False) -> dict[str, Any]:
        """As :meth:`StreamingIndex.set_metadata`, on the image's shard."""
        return self._owner_of(image_id).call(ShardActor.set_metadata, image_id, metadata, merge)

    def index_field(self, name: str) -> bool:
        """As :meth:`StreamingIndex.index_field`, on every shard."""
        check_field(name)
        done = self._scatter(ShardActor.index_field, {s: (name,) for s in range(self.shards)})
        return any(done.values())

    def _indexed_fields(self):
        return self._owners[0].call(ShardActor.indexed_fields)

    def field_values(self, name: str, limit: int = 10) -> tuple[list[Any], bool]:
        """As :meth:`StreamingIndex.field_values`: each shard's first ``limit``, merged in
        value order."""
        name, limit = check_field(name), values_limit(limit)
        got = self._scatter(ShardActor.field_values, {s: (name, limit) for s in range(self.shards)}).values()
        merged = sorted({encode_value(v): v for values, _ in got for v in values}.items())
        return [v for _, v in merged[:limit]], len(merged) > limit or any(more for _, more in got)

    # ------------------------------------------------------------ codec
    def train(self, nlist: int = 1, M: int = 16, seed: int = 0, train_size: int | None = None, codec: Any = None,
              nprobe: int | None = None, progress: Any = None) -> Any:
        """One codec for every shard: fitted here on a sample gathered from the shards
        (each gives its share of ``train_size``, in proportion to its size), or the
        given trained ``codec``; then installed in each shard (its codes computed
        there, while it goes on serving). ``progress``: unused (each shard trains where
        it lives). 0.2's positional order (..., train_size, nprobe, codec) still works,
        with a DeprecationWarning."""
        if isinstance(nprobe, IVFPQ) or (codec is not None and not isinstance(codec, IVFPQ)):
            warnings.warn("ShardedIndex.train(nlist, M, seed, train_size, nprobe, codec) is deprecated and will be "
                          "removed after streamk 0.3: give codec= and nprobe= by name (StreamingIndex's order)",
                          DeprecationWarning, stacklevel=2)
            codec, nprobe = nprobe, codec
        if codec is None:
            n_total = train_size or default_train_size(nlist)
            counts = self._scatter(ShardActor.count, {s: () for s in range(self.shards)})
            total = sum(counts.values())
            codec = check_trainable(IVFPQ(nlist=nlist, M=M, seed=seed, nprobe=nprobe), total, self.dim)
            share = {s: int(np.ceil(n_total * c / max(total, 1))) for s, c in counts.items()}
            parts = self._scatter(ShardActor.sample_vectors, {s: (share[s], seed + s) for s in range(self.shards)})
            codec.fit(np.concatenate([parts[s] for s in range(self.shards)]))
        elif nprobe is not None:
            codec.nprobe = int(nprobe)
        blob = codec.to_bytes()
        self._scatter(ShardActor.train, {s: (blob,) for s in range(self.shards)})
        return codec

    # ------------------------------------------------------------ search (Index.search: scattered here)
    def first_stage(self, Q: NDArray[Any], k: int, mode: str | None = None, nprobe: int | None = None,
                    rerank: int | None = None, where: Any = None,
                    params: SearchParams | None = None) -> tuple[NDArray[np.float32], Any]:
        """As :meth:`StreamingIndex.first_stage`: scattered to every shard (``params`` sent
        whole), each shard's top k merged by score."""
        if params is None:
            params = SearchParams(mode=mode, nprobe=nprobe, rerank=rerank, where=where)
        parts = self._scatter(ShardActor.search, {s: (Q, k, params) for s in range(self.shards)})
        scores = np.concatenate([parts[s][0] for s in range(self.shards)], axis=1)
        ids = np.concatenate([parts[s][1] for s in range(self.shards)], axis=1)
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # ties: by shard, then the shard's order
        return np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)

    def _second_stage(self, q, qrec, params):
        """The second stage as one index runs it, whatever the expansion: the merged first
        stage's top R verified by id on the shards that hold them (:meth:`_verified_by_id`),
        then the second stage written once (:func:`~streamk.index.second_stage.expanded_results`;
        the recursive expansion verifies each expanded search's new results on their
        shards too). R verifications in all (each shard verifying its own top R would make
        up to S R, and mark or count images one index never verifies). Round trips: the
        first stage (every shard), the verification (the shards that hold some of the top
        R; they send the verified images' vectors), each expanded search (every shard) and,
        for the recursion, its verifications and the vectors it still lacks."""
        def search_again(q2, n):
            scores, ids = self.first_stage(q2, n, params=params)
            return [(i, sc) for i, sc in zip(ids[0], scores[0].tolist()) if i is not None]

        damaged: list[str] = []

        def verify(ids, scores):
            checked = self._by_id(ShardActor.verify_ids, ids, lambda pos: ([scores[p] for p in pos], qrec, params))
            damaged.extend(damaged_ids(checked))
            return checked

        def vectors(candidates):
            return stacked_vectors(candidates, lambda ids: np.stack(self._by_id(ShardActor.vectors_of, ids)))
        head, rest = self._verified_by_id(q, params, search_again, verify)
        hits = [Hit(i, sc, **expl) for i, sc, expl in
                expanded_results(q, head, rest, params, search_again, again=(verify, vectors),
                                 centre=lambda: collection_mean(list(self._scatter(
                                     ShardActor.mean_vector, {s: () for s in range(self.shards)}).values())))]
        warn_damaged(self.path, damaged)
        return hits

    @staticmethod
    def _verified_by_id(q, params, search_again, verify):
        """(head, rest) of :func:`~streamk.index.second_stage.verified_first` over the merged
        first stage's top max(k, R), its first R verified by id on their shards: what one
        index verifies, so that every expansion gives one index's results (each shard
        verifying its own top R would verify up to S R images, and the marks, inliers and
        expanded queries would depend on S)."""
        found = search_again(q[None, :], max(params.k, params.verify_count()))
        R = params.verify_count()
        checked = verify([i for i, _ in found[:R]], [sc for _, sc in found[:R]]) if found[:R] else []
        return verified_first(checked + [Candidate(i, float(np.float32(sc)), None, {}) for i, sc in found[R:]])

    def _by_id(self, method, image_ids, extra=lambda pos: ()):
        """[one answer per id] of ``method`` (of ShardActor) called once on each shard that
        holds some of ``image_ids`` with (its ids, *extra(their positions)), all at once; each
        call answers a list, one item per id it was given."""
        image_ids = list(image_ids)
        groups = self._by_shard(image_ids)
        got = self._scatter(method, {s: ([image_ids[p] for p in pos], *extra(pos)) for s, pos in groups.items()})
        out: list[Any] = [None] * len(image_ids)
        for s, pos in groups.items():
            for p, answer in zip(pos, got[s]):
                out[p] = answer
        return out

    def stats(self) -> dict[str, Any]:
        per = self._scatter(ShardActor.stats, {s: () for s in range(self.shards)})
        out = {"images": sum(p["images"] for p in per.values()), "shards": self.shards,
               "codec": per[0]["codec"], "vector_dtype": per[0].get("vector_dtype"),
               "reader_memory": sum(p["reader_memory"] for p in per.values())}
        for key in ("codec_trained_on", "added_since_training"):  # every shard's codec is trained at once
            values = [per[s].get(key) for s in range(self.shards)]
            if any(key in per[s] for s in range(self.shards)):
                out[key] = None if any(v is None for v in values) else sum(values)
        out["per_shard"] = [per[s] for s in range(self.shards)]
        return out

    def codec(self) -> Any:
        """As :meth:`StreamingIndex.codec`: the codec every shard uses (read from the first:
        its bytes, the centroids and codebooks, travel once per call)."""
        data = self._owners[0].call(ShardActor.codec_bytes)
        return None if data is None else IVFPQ.from_bytes(data)

    def codec_params(self) -> dict[str, Any] | None:
        """As :meth:`StreamingIndex.codec_params` (every shard has the same codec)."""
        return self._owners[0].call(ShardActor.codec_params)

    def codec_staleness(self) -> dict[str, Any] | None:
        """As :meth:`StreamingIndex.codec_staleness`, over every shard (one call to each)."""
        st = self.stats()
        if st.get("codec") is None or "codec_trained_on" not in st:
            return None
        return staleness_of(st["codec_trained_on"], st["added_since_training"])


# ---------------------------------------------------------------- Dask helpers
def _client(dask):
    """(Client or None, whether it is ours to close) for dask = None, an address, local:N or a Client."""
    if dask is None:
        return None, False
    from distributed import Client

    if isinstance(dask, Client):
        return dask, False
    from ..parallel import DaskExecutor

    ex = DaskExecutor(dask)
    client = ex.client
    client._streamk_executor = ex  # keeps a LocalCluster it started alive with the client
    return client, True


def _worker_hosts(client):
    """{worker address: its machine's host name}, as the workers themselves say."""
    return client.run(socket.gethostname)


def _plan_hosts(client, shards, hosts):
    if client is None:
        return [socket.gethostname()] * shards
    if hosts is None:
        hosts = sorted(set(_worker_hosts(client).values()))
    if not hosts:
        raise ConfigError("the Dask cluster has no workers")
    return [hosts[s % len(hosts)] for s in range(shards)]


def _worker_on(client, host):
    """A worker on ``host`` (whose disk holds the shard): the first by address, so that
    every client of the cluster picks the same one."""
    workers = sorted(w for w, h in _worker_hosts(client).items() if h == host)
    if not workers:
        raise ConfigError(f"no Dask worker on host {host!r}, which holds a shard of this index")
    return workers[0]


def _create_shard(path, encoder_bytes, vector_dtype, extractor_params, store_extras, vocabulary_bytes=None):
    vocabulary = None if vocabulary_bytes is None else Vocabulary.from_bytes(vocabulary_bytes)
    StreamingIndex.create(path, Encoder.from_bytes(encoder_bytes), vector_dtype=vector_dtype,
                          extractor=extractor_from_params(extractor_params), store_extras=store_extras,
                          vocabulary=vocabulary).close()
    return socket.gethostname()


def _old_vector_form(what, image_path, descriptors, vector):
    """(image_path, vector) of a sharded index's add / update: ``add(id, vector)`` (0.2's
    form, the vector second, when the index took vectors only) is taken with a
    DeprecationWarning; an image held in memory in that place is an image."""
    if (image_path is not None and not isinstance(image_path, (str, os.PathLike))
            and not is_image_in_memory(image_path) and vector is None and descriptors is None):
        warnings.warn(f"ShardedIndex.{what}(image_id, vector) is deprecated and will be removed after streamk 0.3: "
                      f"give vector= by name (the same signature as StreamingIndex.{what})", DeprecationWarning,
                      stacklevel=3)
        return None, image_path
    return image_path, vector


def open_index(path: str | os.PathLike[str], readonly: bool = False,
               dask: str | None = None) -> "StreamingIndex | ShardedIndex":
    """A StreamingIndex, or a ShardedIndex when ``path`` holds a sharded one."""
    if is_sharded(path):
        return ShardedIndex.open(path, readonly=readonly, dask=dask)
    if dask is not None:
        raise ConfigError("--dask: this index is not sharded (create it with --shards S to spread it)")
    return StreamingIndex.open(path, readonly=readonly)
