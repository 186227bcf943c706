"""Pairs of photos with a known answer, from a landmark dataset's official ground truth:
what a verification decision is measured on (``bench/false_verification.py``, the
false-verification floor in ``tests/verification``).

The ground truth of Oxford5k / Paris6k lists, per query, its positives (the official
"good" and "ok" images) and its junk (the landmark barely visible: never counted either
way). A landmark is the query label without its number (``defense_4`` -> ``defense``);
its positives and junk are those of all its queries. Ordered pairs (a, b), a != b:

- *same place*: a and b are positives of one landmark;
- *different places*: a and b are positives of landmarks, none of a's landmarks is one
  of b's, and neither is junk of the other's landmarks.

The rest has no answer and is left out: junk, and images that are no landmark's
positive. The official protocol counts the latter as negatives of every query, but they
are not all other places: in paris6k-subset, ``paris_louvre_000004`` shows the Louvre
pyramid and ``paris_moulinrouge_000021`` the Moulin Rouge's entrance, and neither is
listed for its landmark (a pair with them, verified, is a true match).
"""

from __future__ import annotations

import numpy as np

from ..errors import GroundTruthError

__all__ = ["landmark_labels", "place_pairs"]


def landmark_labels(ground_truth, image_ids):
    """(landmarks, positive, junk): the landmark names, and two (n_images, n_landmarks)
    bool arrays over ``image_ids`` (images of the ground truth; others get no label)."""
    landmarks = sorted({q.name.rsplit("_", 1)[0] for q in ground_truth.queries})
    column = {name: j for j, name in enumerate(landmarks)}
    where = {iid: i for i, iid in enumerate(ground_truth.image_ids)}
    rows = np.array([where.get(str(iid), -1) for iid in image_ids], np.int64)
    if (rows < 0).all() and len(rows):
        raise GroundTruthError("none of the images is in the ground truth")
    pos_gt = np.zeros((ground_truth.n_images, len(landmarks)), bool)
    junk_gt = np.zeros_like(pos_gt)
    for q in ground_truth.queries:
        j = column[q.name.rsplit("_", 1)[0]]
        pos_gt[q.positives, j] = True
        junk_gt[q.junk, j] = True
    junk_gt &= ~pos_gt  # an image good for one query of a landmark and junk for another: a positive
    positive = np.where(rows[:, None] >= 0, pos_gt[rows], False)
    junk = np.where(rows[:, None] >= 0, junk_gt[rows], False)
    return landmarks, positive, junk


def place_pairs(ground_truth, image_ids):
    """(same, different): (P, 2) and (Q, 2) int64 arrays of ordered pairs (a, b) of
    positions in ``image_ids``, as the module docstring defines them."""
    _, positive, junk = landmark_labels(ground_truth, image_ids)
    pos = positive.astype(np.int64)
    seen = (positive | junk).astype(np.int64)
    same = (pos @ pos.T) > 0
    a_sees_b = (pos @ seen.T) > 0  # b is a positive or junk of one of a's landmarks
    labelled = positive.any(axis=1)
    different = labelled[:, None] & labelled[None, :] & ~a_sees_b & ~a_sees_b.T
    np.fill_diagonal(same, False)
    np.fill_diagonal(different, False)
    return np.argwhere(same), np.argwhere(different)
