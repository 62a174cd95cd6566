"""The page shows each fix's edit lines and what it gives up before its command, the rule of
a bare check in words, the model facts, the fix search, the hardware source and an
upgrade as the first fix (headless Chromium)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import SEED_LOG, WebServer

NewPage = Callable[..., Any]
GPU_LINE = "GPU 0,1,2,3,4,5,6,7: NVIDIA H100 80GB HBM3 " + "x" * 150
EDITS = ["- --speculative-eagle-topk 4", "- --speculative-num-draft-tokens 8"]


@pytest.fixture(scope="module")
def record_id(web_server: WebServer) -> str:
    """The seed crash triaged over HTTP, then stored with the newer answer fields filled."""
    with httpx.Client(base_url=web_server.url, timeout=300) as client:
        r = client.post("/triage", json={"log": SEED_LOG, "release": "0.5.11"})
    assert r.status_code == 200, r.text
    tid = r.json()["id"]
    rec = web_server.records.get(tid)
    assert rec is not None
    result = json.loads(json.dumps(rec["result"]))
    result["fixes"][0].update(edits=EDITS, gives_up="the draft tree you chose (top-k 4, 8 tokens)")
    result["fixes"][1]["edits"] = []  # an older answer: derived from set/remove
    result["fixes"][1]["command_complete"] = False  # as if the log showed no full command
    result["model_facts"] = [{"name": "mla", "value": True, "source": "known_model", "detail": ""}]
    result["fix_search"] = {
        "status": "verified",
        "candidates": 2,
        "seconds": 12.4,
        "detail": "verified by replay on 0.5.11 with rtx-pro-6000-x8",
    }
    result["hardware"] = {
        "name": "h100-x8",
        "source": "log",
        "evidence": GPU_LINE,
        "detail": "by GPU name",
    }
    result["upgrade_fix"] = {
        "release": "0.5.23",
        "status": "removed",
        "sure": True,
        "note": "0.5.23 has no check with this condition or message",
        "install": 'pip install "sglang==0.5.23"',
        "command": "c",
        "citations": ["0.5.11:sglang/srt/server_args.py:3519-3522"],
        "flags_missing": [],
        "replay": None,
        "not_checked": ["the other checks of 0.5.23's start-up"],
    }
    web_server.records.save(tid, rec["request"], result)
    return tid


def test_fix_edits_gives_up_rule_facts_and_search(
    new_page: NewPage, record_id: str, web_server: WebServer, shots: Path
) -> None:
    page = new_page()
    page.goto(f"/t/{record_id}")
    page.wait_for_selector("#summary-text", timeout=180_000)
    rule = page.inner_text("#rule-text")
    assert rule.startswith("In 0.5.11, when --speculative-algorithm is one of EAGLE")
    assert "--speculative-eagle-topk" in rule and "self." not in rule
    assert page.locator("#rule-text code").count() >= 4  # flags and the citation as code
    assert page.inner_text("#model-facts") == "mla=true (known_model)"
    assert page.inner_text("#fix-search") == (
        "verified by replay on 0.5.11 with rtx-pro-6000-x8 (2 replayed, 12 s)"
    )
    assert page.inner_text("#hardware-name") == "h100-x8"
    source = page.inner_text("#hardware-source")
    assert source.startswith("(from the log: “GPU 0,1,2,3,4,5,6,7: NVIDIA H100 80GB HBM3 xxx")
    assert source.endswith("...”)") and len(source) == len("(from the log: “”)") + 120
    assert page.get_attribute("#hardware-source", "title") == f"{GPU_LINE} — by GPU name"
    upgrade = page.inner_text("#upgrade")
    assert upgrade.split()[:5] == ["Upgrade", "first", "pip", "install", '"sglang==0.5.23"']
    assert "0.5.23 has no check with this condition or message" in upgrade
    assert "Not checked: the other checks of 0.5.23's start-up" in upgrade
    up_box, fix_box = (page.locator(s).bounding_box() for s in ("#upgrade", "#fix-1"))
    assert up_box is not None and fix_box is not None and up_box["y"] < fix_box["y"]
    assert page.inner_text("#fix-1 pre.edits").strip().splitlines() == EDITS
    assert "top-k 4, 8 tokens" in page.inner_text("#fix-1 .gives-up")
    boxes = [
        page.locator(f"#fix-1 {sel}").bounding_box()
        for sel in ("pre.edits", ".gives-up", "pre.cmd")
    ]
    assert all(b is not None for b in boxes)
    assert boxes[0]["y"] < boxes[1]["y"] < boxes[2]["y"]  # type: ignore[index]
    with httpx.Client(base_url=web_server.url, timeout=60) as client:
        fix2 = client.get(f"/triage/{record_id}").json()["result"]["fixes"][1]
    derived = [f"- {f}" for f in fix2["remove"]] + [
        f"+ {k}" if v is True else f"+ {k} {v}" for k, v in fix2["set"].items()
    ]
    assert page.inner_text("#fix-2 pre.edits").strip().splitlines() == derived
    # no full command in the log: no command to copy, a note saying what to do instead
    assert page.locator("#fix-2 pre.cmd").count() == 0
    note = page.inner_text("#fix-2 .command-note")
    assert note.startswith("The log shows no full launch command: make the change above")
    assert fix2["command"] in note
    assert page.locator("#fix-2 .gives-up").count() == 0
    page.screenshot(path=str(shots / "10-edits-rule.png"), full_page=True)
    narrow = new_page(width=375, height=812)
    narrow.goto(f"/t/{record_id}")
    narrow.wait_for_selector("#fix-1 pre.edits", timeout=180_000)
    assert narrow.evaluate("document.documentElement.scrollWidth") <= 375
