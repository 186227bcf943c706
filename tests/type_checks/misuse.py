"""Calls that a type checker must refuse (tests/test_packaging.py expects each line marked
``# error`` to be reported): the public names are typed, not Any."""

import streamk

streamk.Encoder.load(3.5)  # error
name: str = streamk.make_extractor("sift")  # error
vector = streamk.Encoder().encode([[0.0]], return_weights=True)
vector.shape  # error
streamk.load_dataset("paris6k", image_ids=7)  # error
streamk.open_index("my-index", readonly="yes")  # error
streamk.create_index("my-index", k="16")  # error
index = streamk.StreamingIndex.open("my-index")
index.search("query.jpg", k="10")  # error
index.remove(3)  # error
streamk.ShardedIndex.open("my-index").search("query.jpg", box="60 40 300 220")  # error
