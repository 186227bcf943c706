"""The demo's report (streamk.demo.page): summary, contents and anchors, the failures view and
its toggle, and no path of this machine anywhere in the page."""

import re
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from streamk.demo.main_job import _missed


class _Tree(HTMLParser):
    """The page's elements (tag, attrs), its ids and links, and the children of <body> in order."""

    def __init__(self):
        super().__init__()
        self.elements, self.stack, self.ids, self.hrefs = [], [], [], []
        self.body_children = []  # (tag, id) of the direct children of <body>, in order

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.append(attrs["id"])
        if tag == "a" and "href" in attrs:
            self.hrefs.append(attrs["href"])
        if self.stack and self.stack[-1][0] == "body":
            self.body_children.append((tag, attrs.get("id")))
        if tag not in ("img", "input", "meta", "br"):
            self.stack.append((tag, attrs))
        self.elements.append((tag, attrs))

    def handle_endtag(self, tag):
        if self.stack and self.stack[-1][0] == tag:
            self.stack.pop()


def _parse(html):
    tree = _Tree()
    tree.feed(html)
    return tree


def _section(html, section_id):
    start = html.index(f'<section id="{section_id}"')
    return html[start:html.index("</section>", start)]


def _rows(table_html):
    return [re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row) for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table_html)]


@pytest.fixture(scope="module")
def page(builtin_run):
    result, _, tmp = builtin_run
    return result, result.html.read_text(encoding="utf-8"), tmp


def test_summary_table_first_with_every_method_category_and_change(page):
    result, html, _ = page
    assert html.index('id="summary"') < html.index('id="failures"') < html.index("<main>")
    rows = _rows(_section(html, "summary"))
    header = [re.sub("<[^>]+>", "", c) for c in rows[0]]
    assert header == ["method", "all", "photos", "bursty scenes", *result.transforms, "ms/query", "missed"]
    assert [r[0] for r in rows[1:]] == ["sum", "democratic", "gmp"]
    for m, row in zip(result.methods, rows[1:]):
        values = [float(re.sub("<[^>]+>", "", c)) for c in row[1:-2]]
        expected = [m.map, m.per_category["photos"], m.per_category["bursty scenes"],
                    *(m.per_transform[t] for t in result.transforms)]
        assert values == pytest.approx(expected, abs=0.051)
        assert int(row[-1]) == int(m.missed.sum())


def test_every_link_has_its_anchor_and_the_contents_reach_each_part(page):
    result, html, _ = page
    tree = _parse(html)
    assert len(tree.ids) == len(set(tree.ids)), "an id is used twice"
    targets = [h[1:] for h in tree.hrefs if h.startswith("#")]
    assert set(targets) <= set(tree.ids)
    contents = re.findall(r'href="#([^"]+)"', html[html.index('<nav id="contents"'):html.index("</nav>")])
    assert contents == ["summary", "failures", "disagree", "all-miss", "queries-photos", "queries-bursty-scenes",
                        "reading"]
    # one block per query, each with its anchor
    blocks = re.findall(r'<div class="q (ok|fail)" id="(q-\d{4})">', html)
    assert [b[1] for b in blocks] == [f"q-{i + 1:04d}" for i in range(result.n_queries)]


def test_failures_list_the_missed_queries_and_split_disagreements(page):
    result, html, _ = page
    missed = np.array([m.missed for m in result.methods])
    assert missed.any(), "the tiny run misses no query: the failures view is not exercised"
    failures = _section(html, "failures")
    disagree_part, all_part = failures.split('id="all-miss"')

    def linked(part):
        return {int(q) - 1 for q in re.findall(r'href="#q-(\d{4})"', part)}

    assert linked(disagree_part) == set(np.flatnonzero(missed.any(axis=0) & ~missed.all(axis=0)).tolist())
    assert linked(all_part) == set(np.flatnonzero(missed.all(axis=0)).tolist())
    # the blocks carry the same verdict, which the toggle uses
    blocks = re.findall(r'<div class="q (ok|fail)" id="q-(\d{4})">', html)
    assert [cls == "fail" for cls, _ in blocks] == missed.any(axis=0).tolist()


def test_failures_only_toggle_is_plain_html_and_css(page):
    _, html, _ = page
    tree = _parse(html)
    assert "<script" not in html
    inputs = [a for tag, a in tree.elements if tag == "input"]
    assert inputs == [{"type": "checkbox", "id": "failures-only"}]
    assert any(tag == "label" and a.get("for") == "failures-only" for tag, a in tree.elements)
    assert "#failures-only:checked ~ main .q.ok{display:none}" in html
    # the rule needs the checkbox and <main> as siblings, the checkbox first
    order = [t for t in tree.body_children if t in (("input", "failures-only"), ("main", None))]
    assert order == [("input", "failures-only"), ("main", None)]


def test_page_names_no_path_of_this_machine(page):
    result, html, tmp = page
    from streamk.demo.main_job import skimage_photo_dir

    for path in (Path.home(), Path(sys.prefix), Path(tempfile.gettempdir()), tmp, result.out_dir,
                 skimage_photo_dir(), Path.cwd()):
        if len(path.parts) > 1:  # not "/"
            assert str(path) not in html, path
    for src in re.findall(r'src="([^"]+)"', html):
        assert not src.startswith("/") and ":" not in src, src


def test_missed_by_hand():
    pos, junk = np.array([1, 2]), np.array([3])
    assert not _missed(np.array([1, 3, 2, 0]), pos, junk, show=5)  # junk skipped
    assert not _missed(np.array([3, 2, 1]), pos, junk, show=5)
    assert _missed(np.array([1, 0, 2]), pos, junk, show=5)  # a negative before the second positive
    assert not _missed(np.array([1, 0, 2]), pos, junk, show=1)  # only the first result is looked at
    assert _missed(np.array([], np.int64), pos, junk, show=5)  # no result
    assert _missed(np.array([1]), pos, junk, show=5)  # a positive never returned


@pytest.mark.browser
def test_failures_only_toggle_in_a_browser(page):
    """Headless Chromium: ticking the box hides exactly the queries no method misses."""
    from helpers.browser import CHROMIUM, CHROMIUM_ARGS, browser_missing_reason

    reason = browser_missing_reason()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    result, _, _ = page
    n_fail = int(np.array([m.missed for m in result.methods]).any(axis=0).sum())
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page()
            tab.goto(result.html.as_uri())
            assert tab.locator(".q:visible").count() == result.n_queries
            tab.click("label[for=failures-only]")
            assert tab.locator(".q:visible").count() == n_fail
            assert tab.locator(".q.ok:visible").count() == 0
        finally:
            browser.close()
