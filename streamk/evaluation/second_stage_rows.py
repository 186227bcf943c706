"""The second stage in ``streamk eval``: rows beside each method's own, on the same
descriptors and the same first-stage vectors, each with its cost per query.

- ``+QE``: average query expansion over the first stage's top 3, unverified (Chum et
  al. 2007's baseline AQE), then one more exact search;
- ``+SP``: the first stage's top R spatially verified (:mod:`streamk.verification`),
  verified images first by inliers, the others in the first stage's order;
- ``+SP+QE(<expansion>)``: ``+SP``, then the query expansion a search makes by default
  (``SearchParams().expansion``: recursive AQE less the collection's mean vector, ``expand``
  verified images a round, at most R / 10 new verifications), by the index's own second stage
  (:func:`streamk.index.expanded_results`, here over the database's vectors in memory,
  exact searches): the verified images first, then the last search's order. The label
  names the expansion (``expansion=`` of :class:`SecondStageRows`: "aqe", "alpha",
  "recursive" or "recursive-centred").

The visual words are learned on the learning set, seeded like every other learned part,
so that ``--seeds`` re-learns them too. Costs are wall time per query of what the
second stage adds once the query's features and vector exist: its geometry record,
verification of R records (already decoded in memory here; the index reads them from
LMDB), the expanded vector and its search.
"""

import time

import numpy as np

from ..index import (INDEX_LIMITS, Candidate, SearchParams, expanded_results, explanation_of, stacked_vectors,
                     verified_first)
from ..verification import Vocabulary, expand_query, make_query_record, rerank, stored_record, verify_geometry
from ..verification import DEFAULT_TOP
from ..verification import DEFAULT_R

DEFAULT_VERIFY = DEFAULT_R
DEFAULT_EXPAND = DEFAULT_TOP
DEFAULT_EXPANSION = SearchParams().expansion  # a search's own (recursive AQE)
UNVERIFIED_QE_TOP = 3  # the +QE rows: Chum et al.'s AQE over the top 3 without verification


def collection_centre(D):
    """(the mean vector, the number of images) of a database ``D`` (N, D) in memory: what the
    centred expansion subtracts (an index samples its stored vectors for it)."""
    return D.mean(axis=0, dtype=np.float64), len(D)


class SecondStageRows:
    """Records of the database and the queries under one vocabulary; the rows it adds."""

    def __init__(self, vocabulary, db_features, q_features, boxes, verify_r=DEFAULT_VERIFY, expand=DEFAULT_EXPAND,
                 expansion=DEFAULT_EXPANSION):
        self.vocabulary = vocabulary
        self.verify_r = int(verify_r)
        self.expand = int(expand)
        SearchParams(verify=self.verify_r, expand=self.expand, expansion=expansion)  # checked as a search's
        self.expansion = expansion
        self.boxes = list(boxes)
        self.records = [stored_record(vocabulary, f.keypoints, f.descriptors, f.image_size) for f in db_features]
        self.q_features = q_features

    @classmethod
    def learn(cls, learn_sets, db_features, q_features, dataset, verify_r, expand, seed, verbose,
              expansion=DEFAULT_EXPANSION):
        t0 = time.perf_counter()
        vocabulary = Vocabulary(seed=seed).fit(learn_sets)
        if verbose:
            print(f"second stage: {vocabulary.n_words} visual words learned in {time.perf_counter() - t0:.0f} s")
        boxes = [q.box if dataset.crop_query else None for q in dataset.queries]
        return cls(vocabulary, db_features, q_features, boxes, verify_r, expand, expansion)

    def query_record(self, i):
        f = self.q_features[i]
        return make_query_record(self.vocabulary, f.keypoints, f.descriptors, f.image_size)

    def checks(self, i, ids, qrec):
        """[Verification] of database indices ``ids`` against query i's record ``qrec``."""
        return verify_geometry(qrec, [self.records[j] for j in ids], query_box=self.boxes[i])

    def verified(self, i, ranking, qrec=None, checks=None):
        """(verified database indices by inliers, the rest of ``ranking`` in order) of query i
        (``checks``: those of its first R, when already made)."""
        head = np.asarray(ranking[:self.verify_r])
        qrec = self.query_record(i) if qrec is None else qrec
        checks = self.checks(i, head, qrec) if checks is None else checks
        ranked, n_verified = rerank(head, checks)  # verified first (verification's decision), by inliers
        return ranked[:n_verified], np.concatenate([ranked[n_verified:], np.asarray(ranking)[len(head):]])

    def expanded(self, i, q, D, ranking, checks, qrec, centre=None):
        """The +SP+QE ranking of query i (vector ``q``, database ``D``, first-stage ``ranking``,
        ``checks`` of its first R) as a search's second stage makes it
        (:func:`streamk.index.expanded_results` with this row's R, expand and expansion;
        its searches exact over ``D``, the recursion's new verifications against ``qrec``),
        the database indices it leaves out after it in first-stage order; ``centre``:
        :func:`collection_centre` of ``D`` when the caller has it (else computed here)."""
        ranking = np.asarray(ranking, np.int64)
        scores = D @ q
        params = SearchParams(k=min(len(ranking), INDEX_LIMITS.k), verify=self.verify_r, expand=self.expand,
                              expansion=self.expansion)

        def candidates(ids, verifications):
            return [Candidate(j, float(scores[j]), D[j], explanation_of(v)) for j, v in zip(ids, verifications)]

        def search_again(q2, n):
            s2 = D @ q2[0]
            top = np.argsort(-s2, kind="stable")[:n]
            return list(zip(top.tolist(), s2[top].tolist()))

        def verify(ids, _scores):
            return candidates(ids, self.checks(i, ids, qrec))

        def vectors(found):
            return stacked_vectors(found, lambda ids: D[ids])
        R = len(checks)
        head, rest = verified_first(candidates(ranking[:R].tolist(), checks)
                                    + candidates(ranking[R:].tolist(), [None] * (len(ranking) - R)))
        mean = (lambda: centre) if centre is not None else (lambda: collection_centre(D))
        found = np.array([j for j, _, _ in expanded_results(q, head, rest, params, search_again,
                                                           again=(verify, vectors), centre=mean)], np.int64)
        return np.concatenate([found, ranking[~np.isin(ranking, found)]])

    def rankings(self, mv):
        """{suffix: ((Q, N) ranking, [ms per query])} of the second-stage rows of one method."""
        ranks = mv.ranks()
        D, Q = mv.database, mv.queries
        centre = collection_centre(D)  # once for all queries: the centred expansion's mean
        sp_qe = self.sp_qe_suffix()
        out = {" +QE": [], " +SP": [], sp_qe: []}
        ms = {name: [] for name in out}
        for i in range(len(Q)):
            t0 = time.perf_counter()
            q2 = expand_query(Q[i], D[ranks[i, :UNVERIFIED_QE_TOP]])
            out[" +QE"].append(np.argsort(-(D @ q2), kind="stable"))
            ms[" +QE"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            qrec = self.query_record(i)
            checks = self.checks(i, ranks[i, :self.verify_r], qrec)
            head, rest = self.verified(i, ranks[i], qrec, checks)
            out[" +SP"].append(np.concatenate([head, rest]))
            t_sp = time.perf_counter() - t0
            ms[" +SP"].append(t_sp)
            t0 = time.perf_counter()
            out[sp_qe].append(self.expanded(i, Q[i], D, ranks[i], checks, qrec, centre))
            ms[sp_qe].append(t_sp + time.perf_counter() - t0)
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

    def sp_qe_suffix(self):
        """The +SP+QE row's suffix, naming its expansion: " +SP+QE(recursive-centred)"."""
        return f" +SP+QE({self.expansion})"

    def verified_ranking(self, i, ranking):
        """+SP of any first-stage ranking of query i (e.g. ASMK's)."""
        head, rest = self.verified(i, ranking)
        return np.concatenate([head, rest])


__all__ = ["DEFAULT_EXPAND", "DEFAULT_EXPANSION", "DEFAULT_VERIFY", "SecondStageRows", "UNVERIFIED_QE_TOP"]
