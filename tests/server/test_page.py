"""The web page at ``/`` in headless Chromium (Playwright): the token, a photo picked,
results with their thumbnails, scores, inliers and matched regions; a box drawn on the
photo searches inside it; a click on a result searches with it; a photo dropped. Saves a screenshot
(``server-page.png``, copied to $STREAMK_ARTIFACTS when set; to docs/ with
STREAMK_UPDATE_SCREENSHOTS=1, which is how the README's was made).

Runs on the small demo example (real photographs); STREAMK_BROWSER_EXAMPLE_DIR names a
prebuilt one instead. Skipped when /usr/bin/chromium or playwright is missing, unless
STREAMK_REQUIRE_BROWSER=1."""

import base64
import json
import os
import shutil
from pathlib import Path

import pytest
from helpers.browser import CHROMIUM, CHROMIUM_ARGS, browser_missing_reason, save_artifact, wait_images_loaded

pytestmark = pytest.mark.browser
REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 120_000  # ms: a loaded two-core machine


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


def _results(page):
    return page.evaluate("""() => Array.from(document.querySelectorAll('#results .result')).map(f => ({
        id: f.dataset.id, verified: f.classList.contains('verified'),
        polygon: f.querySelector('polygon') !== null,
        caption: f.querySelector('figcaption').innerText}))""")


def test_the_page_searches_by_photo_box_and_click(example, make_server, tmp_path):
    from playwright.sync_api import sync_playwright

    srv = make_server(example["index"], args=["--workers", "1", "--images", str(example["images"])])
    query = next((q for want in ("chelsea.persp", "camera.scale") for q in example["queries"] if want in q.name),
                 example["queries"][0])
    shot = tmp_path / "server-page.png"
    console = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
                                     timeout=TIMEOUT)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            page.set_default_timeout(TIMEOUT)
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            try:
                page.goto(srv.url + "/", wait_until="domcontentloaded")
                # reads need the token: the page asks for it
                page.locator("#token").wait_for(state="visible")
                page.fill("#token", srv.token)
                page.locator("#token").dispatch_event("change")
                page.wait_for_function("() => /images/.test(document.querySelector('#stats').textContent)")

                assert page.locator("#where").is_visible()  # the metadata filter field

                # a photo picked: results with thumbnails, scores, inliers and the matched region
                page.fill("#k", "8")
                with page.expect_response("**/search") as resp:
                    page.set_input_files("#file", str(query))
                assert resp.value.status == 200, resp.value.text()
                page.wait_for_function("() => document.querySelectorAll('#results .result').length > 0")
                first = _results(page)
                assert 1 <= len(first) <= 8
                verified = [r for r in first if r["verified"]]
                assert verified and all(r["polygon"] for r in verified), first
                assert "inliers" in verified[0]["caption"]
                wait_images_loaded(page, "#results", 60)

                # a box drawn on the photo: the search runs inside it
                img = page.locator("#query-img").bounding_box()
                with page.expect_response("**/search") as resp:
                    page.mouse.move(img["x"] + 0.15 * img["width"], img["y"] + 0.15 * img["height"])
                    page.mouse.down()
                    page.mouse.move(img["x"] + 0.5 * img["width"], img["y"] + 0.5 * img["height"], steps=5)
                    page.mouse.move(img["x"] + 0.85 * img["width"], img["y"] + 0.85 * img["height"], steps=5)
                    page.mouse.up()
                box = resp.value.json()["query"]["box"]
                natural = page.evaluate("() => [document.querySelector('#query-img').naturalWidth, "
                                        "document.querySelector('#query-img').naturalHeight]")
                assert box is not None and 0.1 * natural[0] < box[0] < 0.2 * natural[0], (box, natural)
                assert 0.8 * natural[1] < box[3] < 0.9 * natural[1], (box, natural)
                page.wait_for_function("() => document.querySelector('#results').getAttribute('aria-busy') === "
                                       "'false' && /results/.test(document.querySelector('#status').textContent)")
                assert page.locator("#box-rect").is_visible()
                wait_images_loaded(page, "#results", 60)
                page.screenshot(path=str(shot), full_page=True)

                # a click on a result searches with it: that image first, with its own score
                target = _results(page)[-1]["id"]
                with page.expect_response("**/search") as resp:
                    page.locator(f'#results .result[data-id="{target}"]').click()
                assert resp.value.json()["query"] == {"kind": "id", "id": target}
                page.wait_for_function("id => document.querySelector('#results .result') && "
                                       "document.querySelector('#results .result').dataset.id === id && "
                                       "document.querySelector('#results').getAttribute('aria-busy') === 'false'",
                                       arg=target)
                assert page.locator("#query-caption").inner_text().endswith(target)

                # a photo dropped on the page searches with it too
                with page.expect_response("**/search") as resp:
                    page.evaluate("""([b64, name]) => {
                        const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
                        const dt = new DataTransfer();
                        dt.items.add(new File([bytes], name, {type: 'image/jpeg'}));
                        document.querySelector('#drop').dispatchEvent(
                            new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));
                    }""", [base64.b64encode(query.read_bytes()).decode(), query.name])
                assert resp.value.status == 200 and resp.value.json()["query"]["kind"] == "image"
                assert page.locator("#query-caption").inner_text().startswith(query.name)
                assert "error" not in (page.locator("#status").get_attribute("class") or "")
                assert not console, console
            except BaseException:
                fail = tmp_path / "server-page-failure.png"
                try:
                    page.screenshot(path=str(fail), full_page=True, timeout=30_000)
                    save_artifact(fail)
                except Exception as exc:  # noqa: BLE001 (the original failure matters more)
                    print(f"no failure screenshot: {exc}")
                print("browser console errors:\n" + "\n".join(console[-50:]))
                print("server log tail:\n" + srv.log()[-4000:])
                raise
        finally:
            browser.close()
    save_artifact(shot)
    if os.environ.get("STREAMK_UPDATE_SCREENSHOTS", "") not in ("", "0"):
        from PIL import Image  # 256 colours: the README's copy stays small

        with Image.open(shot) as im:
            im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(
                REPO / "docs" / "server-page.png", optimize=True)
