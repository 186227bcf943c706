"""Schemathesis hooks (loaded by SCHEMATHESIS_HOOKS in test_schema.py): hostile values
mixed into the bodies it generates, as a bad client would send them: JSON nested past
MAX_JSON_DEPTH, integers too large for a float, floats at the edges of float64, and
vectors of huge or tiny values (the index's dimension, 512, and other lengths)."""

import schemathesis
from hypothesis import strategies as st

DIM = 512


def nested(depth, leaf):
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


HUGE_INTEGERS = st.one_of(st.sampled_from([10**400, -(10**301), 2**64, 2**1024, 10**300]),
                          st.integers(min_value=10**300, max_value=10**420))
EDGE_FLOATS = st.sampled_from([1e300, -1.7976931348623157e308, 5e-324, 1e-310, 65504.0, 65520.0, -0.0])
NUMBERS = st.one_of(HUGE_INTEGERS, EDGE_FLOATS)
DEEP = st.builds(nested, st.integers(min_value=7, max_value=400), st.one_of(NUMBERS, st.just("x")))
VECTORS = st.one_of(st.lists(NUMBERS, min_size=DIM, max_size=DIM).map(list),
                    NUMBERS.map(lambda x: [x] * DIM), st.lists(NUMBERS, min_size=1, max_size=8))
HOSTILE = st.one_of(NUMBERS, DEEP, VECTORS, st.dictionaries(st.sampled_from(["a", "n", "gte"]), NUMBERS | DEEP,
                                                             max_size=3))
FIELDS = ["vector", "metadata", "where", "k", "verify", "expand", "id", "box", "merge"]


def hostile(body):
    """The generated body, or one of its fields (or a new one) replaced by a hostile value."""
    if not isinstance(body, dict):
        return st.just(body)
    names = sorted(set(body) | set(FIELDS))
    changed = st.builds(lambda name, value: {**body, name: value}, st.sampled_from(names), HOSTILE)
    return st.one_of(st.just(body), changed, changed)


@schemathesis.hook
def flatmap_body(context, body):
    return hostile(body)
