"""The web page at ``/`` in headless Chromium (Playwright): the token, a photo picked,
results with their thumbnails, scores, inliers and matched regions; a box drawn on the
photo searches inside it, "clear box" and a click on a result take it away; a click on a
result searches with it; a photo dropped; the metadata filter offered only on an index with
an indexed field, its placeholder a filter that works as written. Checked by what a person
sees: no broken image, no stale box, the status that says what happens next. Saves
screenshots (``server-page.png``, ``server-page-landing.png``; copied to $STREAMK_ARTIFACTS
when set; the first to docs/ with STREAMK_UPDATE_SCREENSHOTS=1, which is how the README's was
made).

Runs on the small demo example (real photographs); STREAMK_BROWSER_EXAMPLE_DIR names a
prebuilt one instead. Skipped when /usr/bin/chromium or playwright is missing, unless
STREAMK_REQUIRE_BROWSER=1."""

import base64
import contextlib
import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest
from helpers.browser import CHROMIUM, CHROMIUM_ARGS, browser_missing_reason, save_artifact, wait_images_loaded
from helpers.server import make_index

pytestmark = pytest.mark.browser
REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 120_000  # ms: a loaded two-core machine
READY = "drop a photo, or pick one"


@pytest.fixture(scope="module")
def browser_available():
    reason = browser_missing_reason()
    if reason:
        if os.environ.get("STREAMK_REQUIRE_BROWSER", "") not in ("", "0"):
            pytest.fail(f"STREAMK_REQUIRE_BROWSER is set but the browser test cannot run: {reason}")
        pytest.skip(reason)


@pytest.fixture
def example(browser_available, request, tmp_path):
    prebuilt = os.environ.get("STREAMK_BROWSER_EXAMPLE_DIR")
    src = Path(prebuilt) if prebuilt else request.getfixturevalue("small_example_dir")
    folder = tmp_path / "example"  # a copy: the server opens it for writing (it has a token)
    shutil.copytree(src / "index", folder / "index")
    return {"index": folder / "index", "images": (src / "database") if (src / "database").is_dir()
            else Path(json.loads((src / "example.json").read_text())["dataset"]["image_dir"]),
            "queries": sorted((src / "queries").glob("*")) if (src / "queries").is_dir() else
            sorted(Path(json.loads((src / "example.json").read_text())["dataset"]["image_dir"]).glob("*.jpg"))}


@contextlib.contextmanager
def open_page(srv, tmp_path):
    """A Chromium page (1280 x 860) whose console errors are collected in ``page.errors``;
    on a failure: a screenshot, the console and the server's log."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
                                     timeout=TIMEOUT)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            page.set_default_timeout(TIMEOUT)
            errors = []
            page.on("console", lambda m: errors.append(f"{m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
            try:
                yield page, errors
            except BaseException:
                fail = tmp_path / "server-page-failure.png"
                try:
                    page.screenshot(path=str(fail), full_page=True, timeout=30_000)
                    save_artifact(fail)
                except Exception as exc:  # noqa: BLE001 (the original failure matters more)
                    print(f"no failure screenshot: {exc}")
                print("browser console errors:\n" + "\n".join(errors[-50:]))
                print("server log tail:\n" + srv.log()[-4000:])
                raise
        finally:
            browser.close()


# ---------------------------------------------------------------- what a person sees

def broken_images(page):
    """The visible <img> elements that show no picture (a broken-image icon, or alt text)."""
    return page.evaluate("""() => Array.from(document.querySelectorAll('img')).filter(i => {
        const r = i.getBoundingClientRect(), s = getComputedStyle(i);
        const shown = r.width > 0 && r.height > 0 && s.display !== 'none' && s.visibility !== 'hidden';
        return shown && !(i.getAttribute('src') && i.complete && i.naturalWidth > 0);
    }).map(i => i.id || i.alt || i.outerHTML)""")


def box_drawn(page):
    """Whether the box on the query photo is drawn: the rect rendered, with a size."""
    return page.evaluate("""() => {
        const r = document.querySelector('#box-rect');
        if (!r) return false;
        const s = getComputedStyle(r), b = r.getBoundingClientRect();
        return s.display !== 'none' && s.visibility !== 'hidden' && b.width > 0 && b.height > 0;
    }""")


def status(page):
    return page.locator("#status").inner_text().strip()


def status_is_error(page):
    return "error" in (page.locator("#status").get_attribute("class") or "")


def results(page):
    return page.evaluate("""() => Array.from(document.querySelectorAll('#results .result')).map(f => ({
        id: f.dataset.id, verified: f.classList.contains('verified'),
        polygon: f.querySelector('polygon') !== null,
        caption: f.querySelector('figcaption').innerText}))""")


# records the bar each search sends (a multipart body is not readable from the request Playwright sees)
SENT_BARS = """() => {
  window.sentBars = [];
  const original = window.fetch;
  window.fetch = (url, options) => {
    const body = options && options.body;
    if (String(url).endsWith("/search") && body)
      window.sentBars.push(String(body instanceof FormData ? body.get("false_alarms_per_pair")
                                                           : JSON.parse(body).false_alarms_per_pair));
    return original(url, options);
  };
}"""


def wait_searched(page):
    page.wait_for_function("() => document.querySelector('#results').getAttribute('aria-busy') === 'false' "
                           "&& /results/.test(document.querySelector('#status').textContent)")


# ---------------------------------------------------------------- what a person does

def accept_token(page, srv, tmp_path, console):
    """The landing page asks for the token (no broken image beside "pick one"); a wrong
    one is refused in the status; once the right one is given, the status says so and what
    comes next."""
    page.goto(srv.url + "/", wait_until="domcontentloaded")
    page.locator("#token").wait_for(state="visible")
    assert "needs its token" in status(page)
    assert page.locator("#drop-hint").is_visible()
    assert not broken_images(page), broken_images(page)
    landing = tmp_path / "server-page-landing.png"
    page.screenshot(path=str(landing), full_page=True)
    save_artifact(landing)
    page.fill("#token", srv.token[::-1])  # a wrong one: refused, and said so
    page.locator("#token").dispatch_event("change")
    page.wait_for_function("() => document.querySelector('#status').classList.contains('error')")
    assert "refused this token" in status(page)
    console[:] = [e for e in console if "status of 401" not in e]  # the browser logs the refusal
    page.fill("#token", srv.token)
    page.locator("#token").dispatch_event("change")
    page.wait_for_function("() => /images/.test(document.querySelector('#stats').textContent)")
    page.wait_for_function("ready => document.querySelector('#status').textContent.includes(ready)", arg=READY)
    assert "needs its token" not in status(page) and not status_is_error(page)


def pick_photo(page, path, k):
    page.fill("#k", str(k))
    page.locator("#k").blur()  # its change event now (no query yet), not on the next click
    with page.expect_response("**/search") as resp:
        page.set_input_files("#file", str(path))
    assert resp.value.status == 200, resp.value.text()
    page.wait_for_function("() => document.querySelectorAll('#results .result').length > 0")
    wait_searched(page)
    return resp.value.json()


def draw_box(page):
    """A box from 15 % to 85 % of the photo; the search's answer."""
    img = page.locator("#query-img").bounding_box()
    with page.expect_response("**/search") as resp:
        page.mouse.move(img["x"] + 0.15 * img["width"], img["y"] + 0.15 * img["height"])
        page.mouse.down()
        page.mouse.move(img["x"] + 0.5 * img["width"], img["y"] + 0.5 * img["height"], steps=5)
        page.mouse.move(img["x"] + 0.85 * img["width"], img["y"] + 0.85 * img["height"], steps=5)
        page.mouse.up()
    wait_searched(page)
    return resp.value.json()


def click_result(page, target):
    with page.expect_response("**/search") as resp:
        page.locator(f'#results .result[data-id="{target}"]').click()
    page.wait_for_function("id => document.querySelector('#results .result') && "
                           "document.querySelector('#results .result').dataset.id === id && "
                           "document.querySelector('#results').getAttribute('aria-busy') === 'false'",
                           arg=target)
    return resp.value.json()


def drop_photo(page, path):
    with page.expect_response("**/search") as resp:
        page.evaluate("""([b64, name]) => {
            const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
            const dt = new DataTransfer();
            dt.items.add(new File([bytes], name, {type: 'image/jpeg'}));
            document.querySelector('#drop').dispatchEvent(
                new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));
        }""", [base64.b64encode(path.read_bytes()).decode(), path.name])
    assert resp.value.status == 200
    return resp.value.json()


# ---------------------------------------------------------------- the tests

def test_the_page_searches_by_photo_box_and_click(example, make_server, tmp_path):
    srv = make_server(example["index"], args=["--workers", "1", "--images", str(example["images"])])
    query = next((q for want in ("chelsea.persp", "camera.scale") for q in example["queries"] if want in q.name),
                 example["queries"][0])
    shot = tmp_path / "server-page.png"
    with open_page(srv, tmp_path) as (page, console):
        accept_token(page, srv, tmp_path, console)
        assert not page.locator("#where").is_visible()  # the demo index has no indexed field to filter on

        # a photo picked: results with thumbnails, scores, inliers and the matched region
        pick_photo(page, query, k=8)
        first = results(page)
        assert 1 <= len(first) <= 8
        verified = [r for r in first if r["verified"]]
        assert verified and all(r["polygon"] for r in verified), first
        assert "inliers" in verified[0]["caption"]
        # how significant, and why not verified, as the CLI and the notebook show them
        assert all(re.search(r"log10 NFA -\d+\.\d", r["caption"]) for r in verified), verified
        assert any("not verified: " in r["caption"] for r in first if not r["verified"]), first
        wait_images_loaded(page, "#results", 60)
        assert not box_drawn(page) and not page.locator("#clear-box").is_visible()

        # the verified mark's bar: sent with the search, each mark follows it; off with verify
        page.evaluate(SENT_BARS)
        for bar in ("1e-7", "1e-4"):
            with page.expect_response("**/search") as resp:
                page.select_option("#bar", bar)
            assert page.evaluate("() => window.sentBars.at(-1)") == bar
            hits = resp.value.json()["results"]
            assert any(h["verified"] for h in hits)  # the demo's views of a photo: far below any bar
            assert all(h["verified"] == (h["log10_nfa"] is not None and h["log10_nfa"] <= math.log10(float(bar)))
                       for h in hits), hits
            wait_searched(page)
        with page.expect_response("**/search") as resp:
            page.click("#verify")
        assert not any(h.get("verified") for h in resp.value.json()["results"]) and page.locator("#bar").is_disabled()
        wait_searched(page)
        with page.expect_response("**/search"):
            page.click("#verify")
        wait_searched(page)
        wait_images_loaded(page, "#results", 60)

        # a box drawn on the photo: the search runs inside it
        box = draw_box(page)["query"]["box"]
        natural = page.evaluate("() => [document.querySelector('#query-img').naturalWidth, "
                                "document.querySelector('#query-img').naturalHeight]")
        assert box is not None and 0.1 * natural[0] < box[0] < 0.2 * natural[0], (box, natural)
        assert 0.8 * natural[1] < box[3] < 0.9 * natural[1], (box, natural)
        assert box_drawn(page)
        wait_images_loaded(page, "#results", 60)
        assert not broken_images(page), broken_images(page)
        page.screenshot(path=str(shot), full_page=True)

        # "clear box": the whole photo again, and no box left on it
        with page.expect_response("**/search") as resp:
            page.click("#clear-box")
        assert resp.value.json()["query"]["box"] is None
        wait_searched(page)
        assert not box_drawn(page) and not page.locator("#clear-box").is_visible()

        # a click on a result searches with it: that image first, its thumbnail the query's
        # photo, and the box drawn before gone
        draw_box(page)
        assert box_drawn(page)
        target = results(page)[-1]["id"]
        assert click_result(page, target)["query"] == {"kind": "id", "id": target}
        assert page.locator("#query-caption").inner_text().endswith(target)
        assert not box_drawn(page) and not page.locator("#clear-box").is_visible()
        page.wait_for_function("() => document.querySelector('#query-img').naturalWidth > 0")
        wait_images_loaded(page, "#results", 60)
        assert not broken_images(page), broken_images(page)
        clicked = tmp_path / "server-page-clicked.png"
        page.screenshot(path=str(clicked), full_page=True)
        save_artifact(clicked)

        # a photo dropped on the page searches with it too
        assert drop_photo(page, query)["query"]["kind"] == "image"
        assert page.locator("#query-caption").inner_text().startswith(query.name)
        assert not status_is_error(page)
        assert not console, console
    save_artifact(shot)
    if os.environ.get("STREAMK_UPDATE_SCREENSHOTS", "") not in ("", "0"):
        from PIL import Image  # 256 colours: the README's copy stays small

        with Image.open(shot) as im:
            im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(
                REPO / "docs" / "server-page.png", optimize=True)


def test_the_filter_names_an_indexed_field_and_works_as_shown(browser_available, photos, make_server, tmp_path):
    """On an index whose field "album" is indexed: the filter is offered, its placeholder
    names that field, and once results show a value, the placeholder typed as written filters
    on it (every result has that value)."""
    index = make_index(tmp_path / "idx", photos, n=4)
    srv = make_server(index, args=["--workers", "1", "--images", str(photos["root"] / "imgs")])
    with open_page(srv, tmp_path) as (page, console):
        accept_token(page, srv, tmp_path, console)
        assert page.locator("#where").is_visible()
        assert '"album"' in page.locator("#where").get_attribute("placeholder")
        pick_photo(page, photos["paths"][1], k=4)
        example = page.locator("#where").get_attribute("placeholder")
        where = json.loads(example)  # a real filter now: a value seen in the results
        assert list(where) == ["album"] and where["album"] in ("a", "b"), example
        page.fill("#where", example)
        with page.expect_response("**/search") as resp:
            page.locator("#where").dispatch_event("change")
        assert resp.value.status == 200, resp.value.text()
        wait_searched(page)
        hits = resp.value.json()["results"]
        assert hits and all(h["metadata"]["album"] == where["album"] for h in hits), hits
        assert len(results(page)) == len(hits) and not status_is_error(page)

        page.fill("#where", '{"album": a}')  # not JSON: said on the page, nothing sent
        page.locator("#where").dispatch_event("change")
        page.wait_for_function("() => document.querySelector('#status').classList.contains('error')")
        assert "JSON object" in status(page) and '"album"' in status(page)
        assert not console, console
