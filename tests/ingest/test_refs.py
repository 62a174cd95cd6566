"""Writes of ``declare_resolution(server_args, source, **fields)`` with a local dict."""

from __future__ import annotations

import textwrap

from ingest import ts
from ingest.refs import extract_refs

SOURCE = textwrap.dedent("""
    def handle_ratio(server_args):
        cfg = resolving_view(server_args)
        fields = {"page_size": 16, 3: "not a name"}
        if cfg.ratio is None and cfg.mode != "decode":
            fields["ratio"] = 1.2 if cfg.host_mode == "buffer_only" else 2.0
        fields[cfg.key] = 1  # a key not known statically: no write

        def nested():
            fields["inner"] = 0  # another function's statement

        if fields:
            declare_resolution(server_args, "_handle_ratio", **fields)
        fields["after"] = 1  # after the call: not declared by it
        declare_resolution(server_args, "other", **overrides(cfg))
""")


def _declared() -> dict[str, tuple[int, str, list[tuple[str, bool]]]]:
    root = ts.parse(SOURCE.encode()).root_node
    return {
        r.attr: (r.line, r.value or "", [(g.condition, g.polarity) for g in r.guards])
        for r in extract_refs(root)
        if r.kind == "declare"
    }


def test_the_keys_a_splatted_local_dict_gets_before_the_call_are_writes() -> None:
    got = _declared()
    assert set(got) == {"page_size", "ratio"}
    assert got["page_size"] == (4, "16", [])
    line, value, guards = got["ratio"]
    assert line == 6 and value.startswith("1.2 if cfg.host_mode")
    # its own guard; the call's `if fields:` holds whenever a key was given
    assert guards == [('cfg.ratio is None and cfg.mode != "decode"', True)]
