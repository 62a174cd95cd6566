"""The table of other engines' flags (``kb/data/foreign_flags.json``) and its reader."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from kb.catalogs import load_catalog
from kb.foreign_flags import DATA_FILE, foreign_flag, foreign_flags

# owner/repo@tag:path:line of the foreign engine's own declaration
_SOURCE = re.compile(
    r"[\w.-]{1,100}/[\w.-]{1,100}@v\d{1,4}(?:\.\d{1,4}){1,3}:[\w/.-]{1,200}\.(?:py|rs):\d{1,6}"
)


def test_every_entry_is_well_formed_and_cited() -> None:
    entries = foreign_flags()
    assert len(entries) >= 15
    seen: set[str] = set()
    for e in entries:
        assert _SOURCE.fullmatch(e.source), e.source
        for s in e.spellings():
            assert s.startswith("-") and s not in seen, s
            seen.add(s)
        if e.value == "drop":
            assert e.note, f"{e.flag}: a flag without an SGLang equivalent says why"
        else:
            assert e.sglang, f"{e.flag}: a mapping names SGLang's flag"
            assert all(f.startswith("--") for f in e.sglang)
        if not e.exact:
            assert e.note, f"{e.flag}: an approximation says how it differs"
        for c in e.also:
            assert c.flag.startswith("--") and (c.value != "plus_one" or e.value == "same")


def test_lookup_accepts_the_spellings_people_type() -> None:
    entry = foreign_flag("--max-model-len")
    assert entry is not None and entry.engine == "vLLM"
    assert foreign_flag("--max_model_len") is entry
    assert foreign_flag("--max-model-len=4096") is entry
    tgi = foreign_flag("--num_shard")
    assert tgi is not None and tgi.engine == "TGI" and tgi.sglang == ["--tp-size"]
    short = foreign_flag("-tp")
    assert short is not None and "-tp" in short.aliases
    assert foreign_flag("--reasoning-parser") is None  # SGLang's own flag is not foreign


def test_every_mapped_sglang_flag_exists_in_an_indexed_release(store) -> None:
    releases = [r["version"] for r in store.releases()]
    spellings: set[str] = set()
    for v in releases:
        spellings.update(load_catalog(store, v).by_flag())
    for e in foreign_flags():
        missing = [f for f in e.sglang if f not in spellings]
        assert not missing or len(missing) < len(e.sglang), (e.flag, missing)
        for c in e.also:
            assert c.flag in spellings, (e.flag, c.flag)


def test_a_malformed_table_is_refused(tmp_path: Path) -> None:
    data = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    del data["flags"][0]["source"]
    bad = tmp_path / "foreign_flags.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValidationError):
        foreign_flags(bad)
    data["flags"][0]["source"] = "x/y@v1.0:a.py:1"
    data["flags"][0]["value"] = "scale"  # not a value rule the engine knows
    bad.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValidationError):
        foreign_flags(bad)
