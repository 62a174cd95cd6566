"""End to end in headless Chromium: paste, triage, copy, permalink, confirm, narrow screen, keyboard.

Each test drives the real page served by the real app (see ``conftest.py``)
and saves screenshots as artifacts. Triage runs the real engine over the
suite's KB, so waits are generous (two shared cores).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import REPO, SEED_LOG, WebServer

Page = Any
NewPage = Callable[..., Page]
RESULT_TIMEOUT_MS = 180_000


def _wait_ready(page: Page) -> None:
    page.wait_for_selector("html[data-ready='true']")


def _wait_result(page: Page) -> None:
    page.wait_for_selector("#summary-text", timeout=RESULT_TIMEOUT_MS)


def _paste(page: Page, text: str) -> None:
    """A real paste: the text goes to the clipboard and Ctrl+V lands it in the log box."""
    page.evaluate("(t) => navigator.clipboard.writeText(t)", text)
    page.focus("#log")
    page.keyboard.press("Control+V")
    page.wait_for_function(
        "(n) => document.getElementById('log').value.length >= n", arg=len(text.strip())
    )


def _page_width(page: Page) -> tuple[int, list[str]]:
    """The document's scroll width, and the elements that stick out of the viewport unclipped."""
    return page.evaluate("""() => {
        const clipped = (e) => {
            for (let a = e.parentElement; a; a = a.parentElement) {
                if (getComputedStyle(a).overflowX !== "visible") return true;
            }
            return false;
        };
        const out = [...document.querySelectorAll("body *")]
            .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1 && !clipped(e))
            .slice(0, 5).map((e) => `${e.tagName}.${e.className}: ${(e.textContent || "").slice(0, 60)}`);
        return [document.documentElement.scrollWidth, out];
    }""")


def _clipboard(page: Page) -> str:
    return page.evaluate("() => navigator.clipboard.readText()")


@pytest.fixture(scope="module")
def seed_id(web_server: WebServer) -> str:
    """The seed crash triaged once over HTTP (for the tests that only display it)."""
    with httpx.Client(base_url=web_server.url, timeout=300) as client:
        r = client.post("/triage", json={"log": SEED_LOG, "release": "0.5.11"})
    assert r.status_code == 200, r.text
    return r.json()["id"]


def test_paste_submit_copy_permalink_and_confirm(
    new_page: NewPage, web_server: WebServer, shots: Path
) -> None:
    page = new_page()
    page.goto("/")
    _wait_ready(page)
    page.wait_for_selector("#release option[value='0.5.11']", state="attached")
    page.select_option("#hardware", "rtx-pro-6000-x8")
    _paste(page, SEED_LOG)
    assert page.input_value("#log").strip() == SEED_LOG.strip()
    page.screenshot(path=str(shots / "01-input.png"), full_page=True)
    page.click("#submit")
    _wait_result(page)

    # the summary, the failing code with the check's lines highlighted, the atoms
    summary = page.inner_text("#summary-text")
    assert "_handle_speculative_decoding" in summary and "0.5.11" in summary
    assert page.inner_text("#summary").count("rtx-pro-6000-x8") == 1
    highlighted = page.locator("#code tr.hl")
    assert highlighted.count() == 4
    assert highlighted.first.get_attribute("data-line") == "3519"
    assert "assert (" in highlighted.first.inner_text()
    atoms = page.inner_text("#evaluation")
    assert "self.speculative_eagle_topk is None" in atoms and "--speculative-eagle-topk 4" in atoms

    # the stored triage is what the page shows; the address is its permalink
    tid = page.url.rstrip("/").rsplit("/t/", 1)[1]
    with httpx.Client(base_url=web_server.url, timeout=60) as client:
        stored = client.get(f"/triage/{tid}").json()
    fix1 = stored["result"]["fixes"][0]
    assert fix1["recommended"] is True
    assert page.inner_text("#fix-1 pre.cmd") == fix1["command"]
    assert "recommended" in page.inner_text("#fix-1 h3")
    assert "Rule verdicts" in page.inner_text("#fix-1 details.rules summary")
    assert page.locator("#references").count() == 1

    # copy the recommended command, then the permalink
    page.click("#fix-1 button.copy")
    page.wait_for_selector("#fix-1 button.copy[data-state='copied']")
    assert _clipboard(page) == fix1["command"]
    permalink = page.get_attribute("#permalink", "href")
    assert permalink == f"{web_server.url}/t/{tid}" == page.url
    page.click("#summary button.copy")
    page.wait_for_function(
        "(u) => document.documentElement.dataset.lastCopied === u", arg=permalink
    )
    assert _clipboard(page) == permalink
    page.screenshot(path=str(shots / "02-result-desktop.png"), full_page=True)

    # the permalink in a new page renders the same triage
    other = page.context.new_page()
    new_page.watch(other)  # type: ignore[attr-defined]
    other.goto(permalink)
    _wait_result(other)
    assert other.inner_text("#summary-text") == summary
    assert other.inner_text("#fix-1 pre.cmd") == fix1["command"]
    assert other.locator("#code tr.hl").count() == 4
    assert other.input_value("#log") == page.input_value("#log")  # the stored log, ready to edit
    other.screenshot(path=str(shots / "03-permalink.png"), full_page=True)

    # "this fixed it" records the fix; a reload of the permalink shows it
    page.fill("#confirm-note", "relaunched fine")
    page.click("#fix-1 button.confirm")
    page.wait_for_selector("#confirmed")
    assert "relaunched fine" in page.inner_text("#confirmed")
    assert "confirmed" in page.inner_text("#fix-1 h3")
    with httpx.Client(base_url=web_server.url, timeout=60) as client:
        rec = client.get(f"/triage/{tid}").json()
    assert rec["confirmation"]["fix"] == {"set": fix1["set"], "remove": fix1["remove"]}
    assert rec["confirmation"]["note"] == "relaunched fine"
    assert rec["confirmation"]["source"] == "web"
    other.reload()
    other.wait_for_selector("#confirmed")
    assert other.locator("button.confirm:not([disabled])").count() == 0
    other.screenshot(path=str(shots / "04-confirmed.png"), full_page=True)


def test_narrow_viewport_has_no_horizontal_scroll(
    new_page: NewPage, seed_id: str, shots: Path
) -> None:
    page = new_page(width=375, height=812)
    page.goto("/")
    _wait_ready(page)
    width, wide = _page_width(page)
    assert width <= 375, wide
    page.screenshot(path=str(shots / "05-input-375px.png"), full_page=True)
    page.goto(f"/t/{seed_id}")
    _wait_result(page)
    # open everything that can grow: the explanation, more source, a reference's source (GET /source)
    page.click("#summary details.explanation summary")
    page.click("#code button:has-text('Show more context')")
    page.wait_for_function("() => document.querySelectorAll('#code .code tr').length > 30")
    assert page.locator("#code tr.hl").count() == 4
    page.click("#references summary")
    page.locator("#references li button.btn-link").first.click()
    page.wait_for_selector("#ref-src-0 tr.hl")
    assert page.get_attribute("#references li button.btn-link >> nth=0", "aria-expanded") == "true"
    width, wide = _page_width(page)
    assert width <= 375, wide
    # the copy button stays usable on a narrow screen
    box = page.locator("#fix-1 button.copy").bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 375
    page.screenshot(path=str(shots / "06-result-375px.png"), full_page=True)


def test_keyboard_only_submit(new_page: NewPage, shots: Path) -> None:
    page = new_page()
    page.goto("/")
    _wait_ready(page)
    page.wait_for_selector("#release option[value='0.5.11']", state="attached")

    def tab_to(element_id: str, limit: int = 25) -> list[str]:
        path = []
        for _ in range(limit):
            page.keyboard.press("Tab")
            active = page.evaluate("document.activeElement && document.activeElement.id")
            path.append(active)
            if active == element_id:
                return path
        raise AssertionError(f"Tab never reached #{element_id}: {path}")

    tab_to("log")
    page.keyboard.insert_text(SEED_LOG)
    tab_to("release")
    page.keyboard.press("ArrowDown")  # the first listed release after "Detect from the log"
    assert page.input_value("#release") != ""
    page.keyboard.press("Home")  # back to "Detect from the log"
    assert page.input_value("#release") == ""
    tab_to("submit")
    page.screenshot(path=str(shots / "07-keyboard-focus.png"))
    page.keyboard.press("Enter")
    _wait_result(page)
    # focus moves to the result, and the status region announces it
    assert page.evaluate("document.activeElement.id") == "summary-h"
    page.wait_for_function(
        "() => document.getElementById('status').textContent.startsWith('Done:')"
    )
    assert page.get_attribute("#status", "aria-live") == "polite"
    # the recommended fix can be copied from the keyboard as well
    tab_to("permalink", limit=10)
    page.keyboard.press("Tab")  # the "Copy link" button
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.documentElement.dataset.lastCopied === location.href")


def test_a_4xx_shows_what_was_understood(new_page: NewPage, shots: Path) -> None:
    page = new_page()
    page.goto("/")
    _wait_ready(page)
    page.fill(
        "#log",
        "$ python3 -m sglang.launch_server --model-path /models/x --tp 8\n"
        "server started fine\nall good\n",
    )
    page.click("#submit")
    page.wait_for_selector("#error:not([hidden])")
    title = page.inner_text("#error h2")
    assert "422" in title and "NoCrashFound" in title
    assert "no traceback" in page.inner_text("#error .error-detail")
    understood = page.inner_text("#error dl.understood")
    assert "--tp" in understood and "/models/x" in understood
    assert page.is_hidden("#result")
    assert page.evaluate("document.activeElement.id") == "error-h"
    page.screenshot(path=str(shots / "08-error-422.png"), full_page=True)
    # empty input never reaches the server
    page.fill("#log", "   ")
    page.click("#submit")
    page.wait_for_function(
        "() => document.getElementById('status').textContent.includes('Paste a crash log')"
    )


def test_file_picker_and_drop_fill_the_log(new_page: NewPage) -> None:
    page = new_page()
    page.goto("/")
    _wait_ready(page)
    seed = REPO / "examples" / "seed_attempt1.log"
    page.set_input_files("#file", str(seed))
    page.wait_for_function("() => document.getElementById('log').value.length > 100")
    assert page.input_value("#log") == seed.read_text()
    assert "seed_attempt1.log" in page.inner_text("#file-name")
    page.fill("#log", "")
    other = (REPO / "examples" / "seed_attempt2.log").read_text()
    page.evaluate(
        """(text) => {
        const dt = new DataTransfer();
        dt.items.add(new File([text], "crash.log", {type: "text/plain"}));
        const zone = document.getElementById("drop");
        zone.dispatchEvent(new DragEvent("dragover", {dataTransfer: dt, bubbles: true, cancelable: true}));
        zone.dispatchEvent(new DragEvent("drop", {dataTransfer: dt, bubbles: true, cancelable: true}));
    }""",
        other,
    )
    page.wait_for_function("() => document.getElementById('log').value.length > 100")
    assert page.input_value("#log") == other
    assert "crash.log" in page.inner_text("#file-name")


def test_a_pending_replay_is_polled_until_done(
    new_page: NewPage, web_server: WebServer, seed_id: str, shots: Path
) -> None:
    rec = web_server.records.get(seed_id)
    assert rec is not None
    result = json.loads(json.dumps(rec["result"]))
    result["replay"] = {
        "status": "pending",
        "detail": f"GET /triage/{seed_id} shows the replay verdicts",
    }
    web_server.records.save(seed_id, rec["request"], result)
    # poll every ~0.1 s instead of every few seconds
    page = new_page(init_script="window.__triagePollScale = 0.05;")
    page.goto(f"/t/{seed_id}")
    _wait_result(page)
    assert "pending" in page.inner_text("#replay-status")
    done = json.loads(json.dumps(result))
    done["replay"] = {
        "status": "reproduced",
        "detail": "replay on 0.5.11: AssertionError at the same check",
    }
    done["fixes"][0]["replay"] = {"status": "verified", "detail": "verified by replay on 0.5.11"}
    web_server.records.save(seed_id, rec["request"], done)
    page.wait_for_function(
        "() => document.getElementById('replay-status').textContent.includes('reproduced')",
        timeout=30_000,
    )
    assert "verified by replay" in page.inner_text("#fix-1")
    page.screenshot(path=str(shots / "09-replay-done.png"), full_page=True)
    web_server.records.save(seed_id, rec["request"], rec["result"])


def test_with_api_keys_the_page_loads_and_uses_the_typed_key(
    new_page: NewPage, keyed_server: WebServer
) -> None:
    page = new_page(server=keyed_server)
    page.goto("/")
    _wait_ready(page)
    page.wait_for_function(
        "() => document.getElementById('options-note').textContent.includes('API key')"
    )
    assert page.evaluate("document.getElementById('key-details').open") is True
    page.fill("#log", "x")
    page.click("#submit")
    page.wait_for_selector("#error:not([hidden])")
    assert "API key" in page.inner_text("#error h2")
    page.fill("#key", "s3cret")
    page.press("#key", "Enter")
    page.wait_for_selector("#release option[value='0.5.11']", state="attached")
    assert page.evaluate("sessionStorage.getItem('sglang-triage.api-key')") == "s3cret"
    # the hardware list comes after the releases; then the "needs a key" note is gone
    page.wait_for_selector("#hardware option[value='rtx-pro-6000-x8']", state="attached")
    page.wait_for_function("() => document.getElementById('options-note').textContent === ''")
