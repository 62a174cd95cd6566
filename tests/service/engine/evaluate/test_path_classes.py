"""Model paths read by class (:mod:`service.engine.evaluate.path_classes`)."""

from __future__ import annotations

from service.engine.evaluate.path_classes import (
    class_needs,
    class_signature,
    swapped,
    uses_by_class,
)
from service.engine.expr.interpreter import Provenance, Value


def _path(value: object, flag: str = "--model-path") -> Value:
    return Value(value, Provenance("flag", f"{flag} {value}"))


def _sig(value: object, flag: str = "--model-path", **others: Value) -> object:
    return class_signature({"model_path": _path(value, flag), **others}, "model_path")


def test_paths_of_one_class_sign_alike_and_none_dummy_apart() -> None:
    a, b = _sig("/models/A"), _sig("/data/B-v2")
    assert a == b
    assert _sig("None") == _sig("none")  # .lower() alike
    assert len({a, _sig("none"), _sig("dummy")}) == 3
    assert _sig(None) != a
    assert _sig("/models/A", "--model") != a  # spelled otherwise
    assert class_signature({}, "model_path") == "?"
    assert _sig(3) != _sig(4)  # not text: exact
    draft = "speculative_draft_model_path"
    same = _sig("/m", **{draft: _path("/m", "--speculative-draft-model-path")})
    other = _sig("/m", **{draft: _path("/d", "--speculative-draft-model-path")})
    assert same != other  # which other paths it equals is part of the class
    assert other == _sig("/x", **{draft: _path("/y", "--speculative-draft-model-path")})


def test_only_uses_the_class_decides_keep_the_class() -> None:
    ok = [
        "not args.model_path.lower() in ['none', 'dummy']",
        "cfg.model_path.lower() not in ('none', 'dummy') and cfg.tp_size > 1",
        "self.model_path is not None",
        "get_connector_type(self.model_path) == ConnectorType.INSTANCE",
        "cfg.speculative_draft_model_path in (None, cfg.model_path)",
        "args.model_path != args.speculative_draft_model_path",
        "self.tp_size > 1",  # no use at all
        "self.speculative_draft_model_path",  # a condition: its truth
        "cfg.tp_size > 1 and not cfg.speculative_draft_model_path",
    ]
    bad = [
        "(cfg.speculative_draft_model_path or 'x') == 'x'",  # the value, not its truth
        "args.tokenizer_path in (None, args.model_path)",
        "'deepseek' in args.model_path.lower()",
        "args.model_path.lower() in ['none', 'llama']",
        "args.model_path == 'x'",
        "len(args.model_path) > 3",
        "str(args.model_path).endswith('.gguf')",
        "os.path.exists(self.model_path)",
        "getattr(args, 'model_path') is None",
        "model_path is None",  # a local: origin unknown
    ]
    for text in ok:
        assert uses_by_class([text]), text
    for text in bad:
        assert not uses_by_class([text]), text
    # a write's value: a copy of the path, unless only its truth is taken
    assert not uses_by_class(["self.model_path"], condition=False)
    assert not uses_by_class(["cfg.speculative_draft_model_path or None"], condition=False)
    assert uses_by_class(["not cfg.speculative_draft_model_path"], condition=False)
    assert uses_by_class(["'a' if cfg.speculative_draft_model_path else 'b'"], condition=False)


def test_a_path_passed_to_a_call_chain_needs_the_chains_prefixes_absent() -> None:
    """A guard such as ``not os.path.exists(self.model_path)`` is a fact looked up by its
    text while no fact answers ``os`` or ``os.path``: a write's guard may use it so (those
    keys must then be absent); a card's own text may not (nothing checks the facts)."""
    guard = "not os.path.exists(self.model_path)"
    assert class_needs([guard]) == frozenset({"os", "os.path"})
    assert not uses_by_class([guard])
    assert class_needs(["self.tp_size > 1", "self.model_path is None"]) == frozenset()
    # a method the interpreter computes on a fact's value, a chain of an argument object,
    # or the path used another way in the same text: refused
    assert class_needs(["envs.PATHS.get(self.model_path)"]) is None
    assert class_needs(["self.model_config.exists(self.model_path)"]) is None
    assert class_needs([guard, "self.model_path == 'x'"]) is None
    assert class_needs(["os.path.join(self.model_path, 'x') == 'y'"]) is None  # str.join
    assert class_needs(["utils.fs.isdir(self.model_path) == 'y'"]) == {"utils", "utils.fs"}


def test_swapped_replaces_one_old_path_and_refuses_any_other() -> None:
    moved = {"/models/A": "/models/B"}
    assert swapped("--model-path /models/A", "/models/A", moved) == "--model-path /models/B"
    assert swapped("set to 1 at x.py:3", None, moved) == "set to 1 at x.py:3"
    assert swapped("from /models/A/draft", None, moved) is None  # quotes the old path
    both = {"/a": "/x", "/b": "/y"}
    assert swapped("/a and /b", "/a", both) is None  # the other old path is quoted too
    assert swapped("/a", "/a", {"/a": "/x", "/a/d": "/y"}) is None  # olds overlap
