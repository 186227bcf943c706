"""Real-browser test of notebooks/search.ipynb: JupyterLab on 127.0.0.1, driven
by headless Debian Chromium through Playwright.

It builds a small example collection, starts a private JupyterLab on a copy of
the notebook, runs all cells from the Run menu once the kernel is idle, waits
for the search app's result grid, clicks another aggregation method, waits for
the grid to be redrawn with it, and saves a screenshot (``search-app.png``,
also copied to $STREAMK_ARTIFACTS when set).

Skipped when /usr/bin/chromium or playwright is missing, unless
STREAMK_REQUIRE_BROWSER=1 (as in .ci/run): then it fails.
"""
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from helpers.browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    JupyterLab,
    browser_missing_reason,
    run_all_cells,
    save_artifact,
    wait_for_selector_or_error,
    wait_images_loaded,
    wait_kernel_idle,
)

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "search.ipynb"

# seconds; generous: a loaded two-core machine, and a fresh clone compiles the
# Numba kernels once
SERVER_START = 180
PAGE_LOAD = 180
KERNEL_IDLE = 180
NOTEBOOK_RUN = 300
REDRAW = 120

APP = ".streamk-search-app"
GRID = f"{APP} .streamk-results .streamk-grid"
METHOD = f"{APP} .streamk-method"


@pytest.fixture(scope="module")
def browser_available():
    reason = browser_missing_reason()
    if reason:
        if os.environ.get("STREAMK_REQUIRE_BROWSER", "") not in ("", "0"):
            pytest.fail(f"STREAMK_REQUIRE_BROWSER is set but the browser test cannot run: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def example_dir(browser_available, tmp_path_factory):
    """A small example collection, built here before the server starts; the
    kernel finds it through STREAMK_EXAMPLE_DIR."""
    from streamk.demo.examples import build_example

    prebuilt = os.environ.get("STREAMK_BROWSER_EXAMPLE_DIR")
    if prebuilt:  # e.g. the README's screenshot, made on paris6k-subset
        return Path(prebuilt)
    folder = tmp_path_factory.mktemp("example")
    build_example("demo", folder, photos=3, max_queries=2, progress=False)
    return folder


@pytest.fixture
def jupyterlab(example_dir, tmp_path):
    assert NOTEBOOK.is_file(), f"{NOTEBOOK} is missing"
    lab = JupyterLab(tmp_path / "lab", env_extra={"STREAMK_EXAMPLE_DIR": str(example_dir)})
    lab.root.mkdir(parents=True)
    shutil.copyfile(NOTEBOOK, lab.root / NOTEBOOK.name)
    try:
        lab.start(timeout=SERVER_START)
        yield lab
    finally:
        leftover = lab.stop()
        save_artifact(lab.log_path, "browser-jupyterlab.log")
    assert not leftover, f"processes left running after teardown: {leftover}"


def _grid(page):
    """data-method, data-state and hit ids of the result grid."""
    return page.evaluate("""sel => {
      const g = document.querySelector(sel);
      if (!g) return null;
      return {method: g.dataset.method, state: Number(g.dataset.state), k: g.dataset.k,
              query: g.dataset.query,
              hits: Array.from(g.querySelectorAll('.streamk-hit')).map(h => h.dataset.id)};
    }""", GRID)


def _visible_errors(page):
    return page.evaluate("""sel => Array.from(document.querySelectorAll(sel))
        .filter(e => e.offsetParent !== null || e.getClientRects().length)
        .map(e => (e.innerText || '').trim()).filter(t => t)""", f"{APP} .streamk-error")


def test_search_notebook_in_chromium(jupyterlab, tmp_path):
    from playwright.sync_api import sync_playwright

    shots = tmp_path / "screenshots"
    shots.mkdir()
    console = []
    t0 = time.monotonic()
    timings = {}

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
                                     timeout=120_000)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1800})
            page.set_default_timeout(120_000)
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type in ("error",) else None)
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            try:
                page.goto(f"{jupyterlab.url}/lab/tree/{NOTEBOOK.name}?token={jupyterlab.token}",
                          timeout=PAGE_LOAD * 1000, wait_until="domcontentloaded")
                wait_kernel_idle(page, KERNEL_IDLE)
                jupyterlab.remember_children()  # the kernel, for teardown even if the server dies
                timings["kernel idle"] = time.monotonic() - t0

                run_all_cells(page, 60)
                wait_for_selector_or_error(page, GRID, NOTEBOOK_RUN)
                timings["first grid"] = time.monotonic() - t0
                before = _grid(page)
                assert before["hits"], f"the first result grid has no hits: {before}"

                target = "sum" if before["method"] == "democratic" else "democratic"
                button = page.locator(METHOD).get_by_role("button", name=target, exact=True)
                button.click(timeout=60_000)
                page.wait_for_function(
                    """([sel, method, state]) => {
                        const g = document.querySelector(sel + `[data-method="${method}"]`);
                        return g !== null && Number(g.dataset.state) > state;
                    }""",
                    arg=[GRID, target, before["state"]], timeout=REDRAW * 1000, polling=500)
                timings["redrawn"] = time.monotonic() - t0
                after = _grid(page)
                assert after["method"] == target and after["state"] > before["state"], (before, after)
                assert len(after["hits"]) >= 1, f"no hit after switching to {target}: {after}"
                assert page.locator(f"{GRID} .streamk-hit").count() >= 1
                errors = _visible_errors(page)
                assert not errors, f"the app shows errors: {errors}"

                wait_images_loaded(page, GRID, 60)
                page.locator(APP).first.scroll_into_view_if_needed()
                shot = shots / "search-app.png"
                page.screenshot(path=str(shot), full_page=True)
                page.locator(APP).first.screenshot(path=str(shots / "search-app-widget.png"))
                for f in shots.iterdir():
                    save_artifact(f)
                (tmp_path / "result.json").write_text(json.dumps(
                    {"before": before, "after": after, "timings": timings}, indent=1))
                save_artifact(tmp_path / "result.json", "browser-result.json")
                print(f"browser test: {timings}; {before['method']} -> {after['method']}, "
                      f"state {before['state']} -> {after['state']}, hits {after['hits']}")
            except BaseException:
                fail = shots / "search-app-failure.png"
                try:
                    page.screenshot(path=str(fail), full_page=True, timeout=30_000)
                    save_artifact(fail)
                except Exception as exc:  # noqa: BLE001 (the original failure matters more)
                    print(f"no failure screenshot: {exc}")
                print("browser console errors:\n" + "\n".join(console[-50:]))
                print("JupyterLab log tail:\n" + jupyterlab.log_tail())
                raise
        finally:
            browser.close()
