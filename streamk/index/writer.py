"""The writing side of a streaming index: images in, records, vectors and codes out.

Everything about an image is computed before its write transaction (features,
encoder, content key, PQ/IVF code); the transaction only checks and stores, so
an image is either fully there or not at all, and every bad input raises a
named error with the store unchanged.

What one added image costs the store, whatever N: a new row (the ``next_row``
counter), its JSON record under its id, its vector and id under its row
(appended at the end of key order), its content key, one log entry, and with a
trained codec its list and code under (epoch, row). Every B rows (the store's
``block_rows``, 4096) the codes of the full block are sealed into one value (B
rows in, one value out), and every RUN_BLOCKS blocks (65,536 rows) their codes are
written once more in list order (a run, :mod:`streamk.index.blocks`: ~4 MB in that
one transaction, 64 more bytes per image): a reader reads of them only the lists it
probes. A removal
deletes what the image had, marks its row in the block's bitmap of removed
rows and logs it; an update is a removal and an addition (a new row).

De-duplication. Each image has a content key: sha256 of the image file's bytes
(plus the box, if one is given), of the descriptor set (float32, with its
shape), or of the L2-normalised float32 vector, each tagged with its kind.
Adding content already present under the *same* id returns that id and writes
nothing; under *another* id raises :class:`~streamk.errors.DuplicateError`
(``existing_id`` says which) -- the index never holds the same content twice.
Adding an id that already holds other content raises
:class:`~streamk.errors.IdExistsError`; use ``update``.
"""

import json
import time

import numpy as np

from ..errors import IndexCorruptError, DuplicateError, IdExistsError, StreamkError, UnknownIdError
from ..quantization import IVFPQ
from .describe import encode_item
from .blocks import RUN_BLOCKS, pack_codes, seal_block, seal_row_codes, write_run
from .items import PIXEL_KINDS, add_items, not_there_to_update
from .metadata import delete_metadata, encode_metadata, metadata_of_rows, prepare_metadata, put_metadata
from .store import epoch_key, row_key, validate_id


class IndexWriter:
    """Encodes images and writes them, their removals and their codes to a Store.

    encoder: a callable returning the index's Encoder (loaded on first use);
    extractors: the index's StoredExtractor; dim: the vector dimension. Not
    thread-safe (one per thread or process).
    """

    def __init__(self, store, vector_dtype, dim, encoder, extractors, vocabulary=lambda: None):
        self.store = store
        self.vector_dtype = np.dtype(vector_dtype)
        self.dim = int(dim)
        self._encoder = encoder
        self._vocabulary = vocabulary  # callable: the Vocabulary of local geometry, or None
        self.extractors = extractors
        self._codec = None
        self._codec_epoch = -1
        self.vectors = store.vector_store()

    @property
    def encoder(self):
        return self._encoder()

    # ------------------------------------------------------------ codec in use
    def codec(self, txn):
        """(epoch, IVFPQ or None) in use in the store as ``txn`` sees it (re-read when
        another process swapped in a new one)."""
        epoch = self.store.get_int(b"codec_epoch", txn)
        if epoch != self._codec_epoch:
            blob = self.store.get_meta(b"codec", txn) if epoch else None
            self._codec = IVFPQ.from_bytes(blob) if blob is not None else None
            self._codec_epoch = epoch
        return self._codec_epoch, self._codec

    def _encode_codes(self, encoded):
        """(epoch, stored codes (n, 4 + M) uint8) of the vectors of ``encoded`` with the
        codec last seen in use (outside any write transaction; the write checks the
        epoch again)."""
        with self.store.read() as txn:
            epoch, codec = self.codec(txn)
        if codec is None or not encoded:
            return epoch, None
        return epoch, seal_row_codes(pack_codes(*codec.encode(np.stack([e.vector for e in encoded]))))

    # ------------------------------------------------------------ encoding (no transaction)
    def encode_item(self, image_id, image_path=None, descriptors=None, vector=None, box=None, metadata=None):
        """The EncodedImage of one item from exactly one source, or a named error
        (:func:`~streamk.index.describe.encode_item`, with this index's encoder, extractor
        and visual words)."""
        return encode_item(image_id, image_path, descriptors, vector, box, metadata, encoder=self.encoder,
                           extractor=self.extractors.get, vocabulary=self._vocabulary(), dim=self.dim)

    # ------------------------------------------------------------ one transaction
    def _put(self, txn, enc, code, replace=False):
        """Write one encoded image with its stored code (bytes of ``pack_codes``, computed
        with the codec in use) or None; returns "added" or "exists". Every check runs
        before anything is written."""
        s = self.store
        stored = s.image_key(txn, enc.key.decode())  # its id as stored (an older index: maybe not NFC)
        if stored is not None and stored != enc.key:
            enc = enc._replace(key=stored)
        old = s.image(txn, enc.key)
        owner = txn.get(enc.content, db=s.hashes_db)
        image_id = enc.key.decode()
        if replace and old is None:  # an update names an image first: is it there?
            raise not_there_to_update(image_id)
        if owner is not None and bytes(owner) != enc.key:
            raise DuplicateError(image_id, bytes(owner).decode(), "update" if replace else "add")
        if old is not None and not replace:
            if owner is not None:  # same id, same content
                return "exists"
            raise IdExistsError(f"id {image_id!r} already holds other content; use update() to replace it")
        metadata = enc.metadata
        if old is not None:  # replace: the new content keeps the old metadata, updated with its own
            old_meta = metadata_of_rows(txn, s, [old.row])[0]
            metadata = dict(old_meta, **(metadata or {}))
        prepared = prepare_metadata(txn, s, metadata)  # checked before anything is written
        if old is not None:  # replace: the old content goes, the new one gets a new row
            s.delete_image(txn, old)
        if enc.record["kind"] in PIXEL_KINDS:
            raw = s.get_meta(b"extractor", txn)
            if raw is None or json.loads(raw) is None:  # first image: pin the default extractor
                txn.put(b"extractor", json.dumps(self.extractors.to_pin).encode(), db=s.meta_db)
        row = s.get_int(b"next_row", txn)
        s.put_int(txn, b"next_row", row + 1)
        seq = s.bump(txn, b"+", row)
        s.put_image(txn, enc.key, dict(enc.record, added=time.time(), seq=seq, row=row,
                                       content_key=enc.content.hex()))
        rk = row_key(row)
        self.vectors.put(txn, row, enc.vector)
        txn.put(rk, enc.key, db=s.row_ids_db, append=True)
        txn.put(enc.content, enc.key, db=s.hashes_db)
        if enc.extras is not None and self.store.get_int(b"store_extras", txn, default=1):
            s.put_blob(txn, "extras", enc.key, enc.extras)
        if enc.geometry is not None and s.geometry_db is not None and s.get_int(b"local_features", txn):
            txn.put(rk, enc.geometry, db=s.geometry_db, append=True)
        if enc.thumbnail is not None and s.thumbnails_db is not None:
            s.put_blob(txn, "thumbnails", enc.key, enc.thumbnail)
        put_metadata(txn, s, row, prepared)
        epoch, codec = self.codec(txn)
        if codec is not None:
            if code is None:  # the codec changed since the batch was encoded
                code = seal_row_codes(pack_codes(*codec.encode(enc.vector[None, :])))[0]
            txn.put(epoch_key(epoch, row), code, db=s.codes_db)
            if (row + 1) % s.block_rows == 0:
                block = row // s.block_rows
                seal_block(txn, s, epoch, block, codec.M)
                if (block + 1) % RUN_BLOCKS == 0:  # the group's codes again in list order, for the readers
                    write_run(txn, s, epoch, block + 1 - RUN_BLOCKS, codec.M, codec.nlist)
        return "added"

    def write_encoded(self, encoded, replace=False):
        """Write already-encoded images (``EncodedImage``) in ONE transaction.

        Returns, per image, "added", "exists" or the named error that kept it
        out (each image is checked before anything of it is written).
        """
        encoded = list(encoded)
        epoch, packed = self._encode_codes(encoded)

        def run(txn):
            current, _ = self.codec(txn)
            fresh = packed is not None and current == epoch
            out = []
            for i, enc in enumerate(encoded):
                try:
                    out.append(self._put(txn, enc, packed[i] if fresh else None, replace))
                except IndexCorruptError:  # found while writing: the whole transaction goes
                    raise
                except StreamkError as exc:
                    out.append(exc)
            return out
        return self.store.write(run)

    def update(self, enc):
        """Replace the content of an existing image (UnknownIdError if absent)."""
        epoch, packed = self._encode_codes([enc])

        def run(txn):
            owner = txn.get(enc.content, db=self.store.hashes_db)
            if owner is not None and bytes(owner) == enc.key:
                return "exists"  # same content: nothing to change
            current, _ = self.codec(txn)
            code = packed[0] if packed is not None and current == epoch else None
            return self._put(txn, enc, code, replace=True)
        return self.store.write(run)

    def remove(self, image_ids):
        """Remove images, all or none: UnknownIdError (naming them) if any is absent.
        Returns the number removed."""
        image_ids = list(dict.fromkeys(validate_id(i) for i in image_ids))

        def run(txn):
            records = list({r.row: r for r in self.store.images(txn, image_ids) if r is not None}.values())
            missing = [i for i in image_ids if not self.store.has_image(txn, i)]
            if missing:
                shown = ", ".join(repr(m) for m in missing[:5]) + (" ..." if len(missing) > 5 else "")
                raise UnknownIdError(f"no image {shown} in the index ({len(missing)} unknown id(s); "
                                     "nothing removed)")
            for record in records:
                self.store.delete_image(txn, record)
            return len(records)
        return self.store.write(run)

    def set_metadata(self, image_id, metadata, merge=False):
        """Replace (or, ``merge``, update) the metadata of a stored image, with its
        postings, in one transaction; returns the metadata now stored."""
        validate_id(image_id)
        if not isinstance(metadata, dict):
            encode_metadata(metadata)  # raises MetadataError

        def run(txn):
            row = self.store.require_image(txn, image_id).row  # (in either Unicode normal form)
            new = dict(metadata_of_rows(txn, self.store, [row])[0], **metadata) if merge else dict(metadata)
            prepared = prepare_metadata(txn, self.store, new)
            delete_metadata(txn, self.store, row)
            put_metadata(txn, self.store, row, prepared)
            return new
        return self.store.write(run)

    def put_geometry(self, items):
        """Store the local-geometry records of images already in the index, in one
        transaction: ``items`` = (id, sha256 of the content the record was made from,
        record bytes). An image removed or replaced since (another sha256) is skipped.
        Returns the number stored."""
        items = list(items)

        def run(txn):
            n = 0
            for image_id, sha, geometry in items:
                record = self.store.image(txn, image_id)
                if record is None or record.sha256 != sha:
                    continue
                txn.put(row_key(record.row), geometry, db=self.store.geometry_db)
                n += 1
            return n
        return self.store.write(run)

    def add_many(self, items, batch_size=64):
        """Add many images, ``batch_size`` per transaction (:func:`~streamk.index.items.add_items`)."""
        return add_items(items, self.encode_item, self.write_encoded, batch_size)
