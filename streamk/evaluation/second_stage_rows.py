"""The second stage in ``streamk eval``: rows beside each method's own, on the same
descriptors and the same first-stage vectors, each with its cost per query.

- ``+QE``: average query expansion over the first stage's top 3, unverified (Chum et
  al. 2007's baseline AQE), then one more exact search;
- ``+SP``: the first stage's top R spatially verified (:mod:`streamk.verification`),
  verified images first by inliers, the others in the first stage's order;
- ``+SP+QE``: ``+SP``, then AQE over the verified images (at most ``expand``), one more
  exact search; the verified images first, then the new search's order.

The visual words are learned on the learning set, seeded like every other learned part,
so that ``--seeds`` re-learns them too. Costs are wall time per query of what the
second stage adds once the query's features and vector exist: its geometry record,
verification of R records (already decoded in memory here; the index reads them from
LMDB), the expanded vector and its search.
"""

import time

import numpy as np

from ..verification import Vocabulary, expand_query, make_query_record, rerank, stored_record, verify_geometry
from ..verification import DEFAULT_TOP
from ..verification import DEFAULT_R

DEFAULT_VERIFY = DEFAULT_R
DEFAULT_EXPAND = DEFAULT_TOP
UNVERIFIED_QE_TOP = 3  # the +QE rows: Chum et al.'s AQE over the top 3 without verification


class SecondStageRows:
    """Records of the database and the queries under one vocabulary; the rows it adds."""

    def __init__(self, vocabulary, db_features, q_features, boxes, verify_r=DEFAULT_VERIFY, expand=DEFAULT_EXPAND):
        self.vocabulary = vocabulary
        self.verify_r = int(verify_r)
        self.expand = int(expand)
        self.boxes = list(boxes)
        self.records = [stored_record(vocabulary, f.keypoints, f.descriptors, f.image_size) for f in db_features]
        self.q_features = q_features

    @classmethod
    def learn(cls, learn_sets, db_features, q_features, dataset, verify_r, expand, seed, verbose):
        t0 = time.perf_counter()
        vocabulary = Vocabulary(seed=seed).fit(learn_sets)
        if verbose:
            print(f"second stage: {vocabulary.n_words} visual words learned in {time.perf_counter() - t0:.0f} s")
        boxes = [q.box if dataset.crop_query else None for q in dataset.queries]
        return cls(vocabulary, db_features, q_features, boxes, verify_r, expand)

    def query_record(self, i):
        f = self.q_features[i]
        return make_query_record(self.vocabulary, f.keypoints, f.descriptors, f.image_size)

    def verified(self, i, ranking, qrec=None):
        """(verified database indices by inliers, the rest of ``ranking`` in order) of query i."""
        head = np.asarray(ranking[:self.verify_r])
        qrec = self.query_record(i) if qrec is None else qrec
        checks = verify_geometry(qrec, [self.records[j] for j in head], query_box=self.boxes[i])
        ranked, n_verified = rerank(head, checks)  # verified first (verification's decision), by inliers
        return ranked[:n_verified], np.concatenate([ranked[n_verified:], np.asarray(ranking)[len(head):]])

    def rankings(self, mv):
        """{suffix: ((Q, N) ranking, [ms per query])} of the second-stage rows of one method."""
        ranks = mv.ranks()
        D, Q = mv.database, mv.queries
        out = {" +QE": [], " +SP": [], " +SP+QE": []}
        ms = {name: [] for name in out}
        for i in range(len(Q)):
            t0 = time.perf_counter()
            q2 = expand_query(Q[i], D[ranks[i, :UNVERIFIED_QE_TOP]])
            out[" +QE"].append(np.argsort(-(D @ q2), kind="stable"))
            ms[" +QE"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            head, rest = self.verified(i, ranks[i])
            out[" +SP"].append(np.concatenate([head, rest]))
            t_sp = time.perf_counter() - t0
            ms[" +SP"].append(t_sp)
            t0 = time.perf_counter()
            if len(head) and self.expand:
                q2 = expand_query(Q[i], D[head[:self.expand]])
                new = np.argsort(-(D @ q2), kind="stable")
                out[" +SP+QE"].append(np.concatenate([head, new[~np.isin(new, head)]]))
            else:
                out[" +SP+QE"].append(out[" +SP"][-1])
            ms[" +SP+QE"].append(t_sp + time.perf_counter() - t0)
        return {name: (np.stack(r), 1000 * np.asarray(ms[name])) for name, r in out.items()}

    def beside(self, rows, results, dataset, query_ms):
        """``rows`` [(label, EvaluationResult)] with the second-stage rows of each exact
        method inserted after its own; their costs accumulated in ``query_ms``."""
        from .metrics import evaluate

        by_label = {r.label: r for r in results}
        out = []
        for label, res in rows:
            out.append((label, res))
            mv = by_label.get(label)
            if mv is None or mv.ranking is not None:  # PQ rows: first stage only
                continue
            for suffix, (ranking, ms) in self.rankings(mv).items():
                out.append((label + suffix, evaluate(ranking, dataset)))
                query_ms.setdefault(label + suffix, []).extend(ms.tolist())
        return out

    def verified_ranking(self, i, ranking):
        """+SP of any first-stage ranking of query i (e.g. ASMK's)."""
        head, rest = self.verified(i, ranking)
        return np.concatenate([head, rest])


__all__ = ["DEFAULT_EXPAND", "DEFAULT_VERIFY", "SecondStageRows", "UNVERIFIED_QE_TOP"]
