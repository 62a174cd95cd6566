"""No shape users paste is refused over HTTP (issue 28): prefixed tracebacks, argparse
variants, bare messages, cut tracebacks and command fragments are all answered."""

from __future__ import annotations

import httpx
import pytest

from tests.service.engine.logparse import shapes


@pytest.mark.parametrize("shape", sorted(shapes.ALL))
def test_no_shape_is_a_422(client: httpx.Client, shape: str) -> None:
    r = client.post(
        "/triage?release=0.5.11",
        content=shapes.ALL[shape].encode(),
        headers={"content-type": "text/plain"},
    )
    assert r.status_code == 200, r.text[:500]
    body = r.json()
    assert body["status"] in ("located", "argparse", "unlocated")


def test_junk_is_still_a_422(client: httpx.Client) -> None:
    r = client.post("/triage", content=shapes.JUNK.encode(), headers={"content-type": "text/plain"})
    assert r.status_code == 422 and "understood" in r.json()
