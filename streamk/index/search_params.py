"""What one search asks for, as one frozen object checked once: :class:`SearchParams`,
and the limits it is checked against: :class:`SearchLimits`.

    params = SearchParams(k=20, mode="pq", verify=100, expand=50, box=(10, 20, 300, 240),
                          where={"year": {"gte": 2020}})
    idx.search("query.jpg", params=params)      # the same as idx.search("query.jpg", k=20, ...)
    SearchParams(k=5_000, limits=SERVER_LIMITS)  # ConfigError: over the HTTP server's limit of 1,000

A front end (the CLI, the HTTP server, a widget, a Python caller) builds one; the index
takes it whole down to the first and second stages, and to every shard of a sharded
index, with no further checks (as faiss's ``SearchParameters`` and streamk's own
:class:`~streamk.verification.VerificationParams`). ``replace(**changes)`` gives a new,
checked one.

Limits. Every search allocates in proportion to its numbers (k results, R re-ranked
candidates whose vectors are read, R verified records, one batch's queries), so each is
checked before anything is allocated. Above the number of images in the index, k and the
candidate counts are simply capped; above a limit, the request is refused (ConfigError)
whatever the index holds. :data:`INDEX_LIMITS` are streamk's (a Python caller's);
:data:`SERVER_LIMITS` are the HTTP server's, derived from them here and never looser
(``SearchLimits`` refuses a limit above the index's).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from ..checks import check_box
from ..errors import ConfigError
from ..verification import DEFAULT_TOP
from ..verification import DEFAULT_R, VerificationParams
from .metadata import parse_filter

MODES = ("exact", "pq")  # every stored vector; the PQ / IVF-PQ codes, then re-ranking
# average query expansion; alpha-QE; recursive AQE; recursive AQE less the collection's mean (Rocchio)
EXPANSIONS = ("aqe", "alpha", "recursive", "recursive-centred")
# keeps its quality when few are expanded, and the common component out (streamk.verification.expansion)
DEFAULT_EXPANSION = "recursive-centred"
DEFAULT_VERIFY = DEFAULT_R  # first-stage results verified (Philbin et al. 2007 verify the top 100-1000)
DEFAULT_EXPAND = DEFAULT_TOP  # verified results averaged into the expanded query, at most


def check_count(name, value, minimum, maximum=None, hint="", whose="streamk's"):
    """``value`` as an int in ``minimum..maximum`` (None: no maximum), or ConfigError that
    names the limit (``whose`` limit, ``hint`` saying of what): streamk's one check of a
    count given by a user."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} = {int(value):,} is over {whose} limit of {maximum:,}{hint}")
    return int(value)


@dataclass(frozen=True)
class SearchLimits:
    """The most one search may ask for; see the module doc. The defaults are streamk's
    maxima (:data:`INDEX_LIMITS`); another set (:meth:`tighter`) may only lower them."""

    k: int = 10_000  # results per query (a ranked list longer than this is read by nobody)
    rerank: int = 10_000  # PQ candidates re-scored with their stored vectors, per query (>= k)
    verify: int = 1_000  # first-stage results spatially verified (Philbin et al. verify 100 to 1,000)
    expand: int = 1_000  # verified results averaged into an expanded query (<= verify)
    batch: int = 1_000  # query vectors in one batch (batch x k results: at most 10^7)
    whose: str = "streamk's"  # whose limits, in an error message

    def __post_init__(self):
        for f in fields(self):
            if f.name != "whose":
                check_count(f"the limit {f.name}", getattr(self, f.name), 1, f.default, whose="streamk's")
        if self.expand > self.verify:
            raise ConfigError(f"the limit expand ({self.expand:,}) is over the limit verify ({self.verify:,}): "
                              "only verified results are averaged")

    def tighter(self, whose, **limits):
        """These limits with some lowered (never raised: ConfigError), said to be ``whose``."""
        for name, value in limits.items():
            if name not in {f.name for f in fields(self)} - {"whose"}:
                raise ConfigError(f"no search limit named {name!r}")
            check_count(f"the limit {name}", value, 1, getattr(self, name), whose=self.whose)
        return replace(self, whose=whose, **limits)


INDEX_LIMITS = SearchLimits()
SERVER_LIMITS = INDEX_LIMITS.tighter("the HTTP server's", k=1_000, expand=200)  # an answer is JSON sent over HTTP

@dataclass(frozen=True)
class SearchParams:
    """The parameters of one search, checked once against ``limits`` (ConfigError,
    FilterError); see :meth:`streamk.index.StreamingIndex.search` for what each does.

    k: results (1..limits.k). mode: "exact", "pq" or None (pq once a codec is trained).
    nprobe: IVF lists visited (>= 1; None: the codec's). rerank: PQ candidates re-scored
    (0..limits.rerank; None: max(4k, 100)). verify: R first-stage results spatially
    verified (0..limits.verify; None: 100; 0: off). expand: verified results averaged
    into the expanded query (0..limits.expand; None: 50; 0: off; recursive: added per
    round). expansion: "aqe", "alpha", "recursive" or "recursive-centred" (the default).
    box: (x1, y1, x2, y2) in the query image's pixels, finite, x1 < x2 and y1 < y2
    (:func:`streamk.checks.check_box`). where: a metadata filter
    (:mod:`streamk.index.metadata`), kept as a copy. pairs: return the inlier pairs.
    false_alarms_per_pair: the verification's bar, in (0, 1) (None: 1e-4, the default of
    :class:`~streamk.verification.VerificationParams`); lower marks fewer results verified and
    fewer wrongly (bench/README.md section 8: 1e-7 left no false verification held-out).
    """

    k: int = 10
    mode: str | None = None
    nprobe: int | None = None
    rerank: int | None = None
    verify: int | None = None
    expand: int | None = None
    expansion: str = DEFAULT_EXPANSION
    box: tuple | None = None
    where: dict | None = None
    pairs: bool = False
    false_alarms_per_pair: float | None = None
    limits: SearchLimits = field(default=INDEX_LIMITS, repr=False, compare=False)

    def __post_init__(self) -> None:
        lim = self.limits
        if not isinstance(lim, SearchLimits):
            raise ConfigError(f"limits must be a streamk.index.SearchLimits, got {type(lim).__name__}")
        w = lim.whose
        put = object.__setattr__  # frozen: the checked values are set once, here
        put(self, "k", check_count("k", self.k, 1, lim.k, " results per query (a search caps k at the number "
                                                          "of images)", w))
        for name, hint in (("rerank", " candidates per query"), ("verify", " verified results per query"),
                           ("expand", " results in an expanded query")):
            value = getattr(self, name)
            if value is not None:
                put(self, name, check_count(name, value, 0, getattr(lim, name), hint, w))
        if self.nprobe is not None:
            put(self, "nprobe", check_count("nprobe", self.nprobe, 1))
        if self.mode is not None and self.mode not in MODES:
            raise ConfigError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.expansion not in EXPANSIONS:
            raise ConfigError(f"expansion must be one of {EXPANSIONS}, got {self.expansion!r}")
        if self.box is not None:
            put(self, "box", check_box(self.box))
        if not isinstance(self.pairs, (bool, np.bool_)):
            raise ConfigError(f"pairs must be True or False, got {self.pairs!r}")
        put(self, "pairs", bool(self.pairs))
        if self.false_alarms_per_pair is not None:
            self.verification_params().checked()  # the verification's own check (ConfigError)
            put(self, "false_alarms_per_pair", float(self.false_alarms_per_pair))
        if parse_filter(self.where) is None:  # a FilterError here, before any scan or shard is asked
            put(self, "where", None)
        elif not isinstance(self.where, str | bytes):
            put(self, "where", copy.deepcopy(self.where))  # the caller's dict may change after the check

    def replace(self, **changes: Any) -> SearchParams:
        """A new SearchParams with ``changes``, checked again."""
        return replace(self, **changes)

    @classmethod
    def of(cls, params: SearchParams | None = None, **kwargs: Any) -> SearchParams:
        """``params`` as given, or one built from the keyword arguments of a search (only
        one of the two: ConfigError when both are given, unless the keywords are the
        defaults)."""
        if params is None:
            return cls._built(kwargs)
        if not isinstance(params, cls):
            raise ConfigError(f"params must be a streamk.index.SearchParams, got {type(params).__name__}")
        given = sorted(n for n, v in kwargs.items() if not _is_default(n, v))
        if given:
            raise ConfigError(f"give the search's parameters as params= or as keyword arguments, not both "
                              f"(got params and {', '.join(given)})")
        return params

    @classmethod
    def _built(cls, kwargs):
        """cls(**kwargs), the last one kept and given again for the same keywords (values
        and types: 1 and True differ) without its checks (it is frozen; a search in a loop
        builds the same one each time); ``where`` and ``box`` given: built anew."""
        if kwargs.get("where") is not None or kwargs.get("box") is not None:
            return cls(**kwargs)
        key = tuple((name, type(value), value) for name, value in kwargs.items())
        last = cls.__dict__.get("_last")
        if last is not None and last[0] == key:
            return last[1]
        params = cls(**kwargs)
        try:
            hash(key)
        except TypeError:
            return params
        cls._last = (key, params)
        return params

    def verification_params(self) -> VerificationParams:
        """The second stage's :class:`~streamk.verification.VerificationParams`: the defaults, with
        this search's bar when it sets one."""
        if self.false_alarms_per_pair is None:
            return VerificationParams()
        return VerificationParams(false_alarms_per_pair=self.false_alarms_per_pair)

    def verify_count(self) -> int:
        """R: first-stage results verified when a second stage runs (the default where None)."""
        return DEFAULT_VERIFY if self.verify is None else self.verify

    def expand_count(self) -> int:
        """N: verified results averaged into the expanded query (the default where None)."""
        return DEFAULT_EXPAND if self.expand is None else self.expand


_DEFAULTS = {f.name: f.default for f in fields(SearchParams) if f.name != "limits"}


def _is_default(name, value):
    default = _DEFAULTS[name]  # a search's keyword arguments are SearchParams' fields
    return value is default or (default is not None and type(value) is type(default) and value == default)


__all__ = ["DEFAULT_EXPAND", "DEFAULT_EXPANSION", "DEFAULT_VERIFY", "EXPANSIONS", "INDEX_LIMITS", "MODES",
           "SERVER_LIMITS", "SearchLimits", "SearchParams", "check_count"]
