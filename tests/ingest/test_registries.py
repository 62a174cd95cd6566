"""Registrations read off source snippets: each kind, what is not one, and the bounds."""

from __future__ import annotations

from textwrap import dedent

from ingest import ts
from ingest.analyze import BatchRows, analyze_file
from ingest.registries import (
    MAX_KEY,
    MAX_KEYS,
    MAX_ROWS,
    MAX_TARGET,
    Registration,
    extract_registrations,
)


def _regs(source: str) -> list[Registration]:
    blob = dedent(source).encode()
    found = extract_registrations(ts.parse(blob).root_node, blob)
    # the module's own text (which starts at its first token) gives the same rows
    assert extract_registrations(ts.parse(blob).root_node) == found
    return found


def _rows(source: str) -> list[tuple]:
    return [(r.registry, list(r.keys), r.target, r.line, r.kind) for r in _regs(source)]


def test_decorators_with_string_arguments_register_their_target() -> None:
    assert _rows("""
        @register_fused_func("none", "flashinfer_trtllm")
        def fused_none_trtllm(x):
            return x

        @FusedOpPool.register_fused_func("deepep", "flashinfer_cutedsl")
        @register_fused_func("flashinfer", "flashinfer_cutedsl")
        def fused_deepep(x):
            return x

        @CustomOp.register("silu_and_mul")
        class SiluAndMul:
            @_register_for("Llama4ForCausalLM", name="llama4", enabled=True)
            def method(self):
                pass
    """) == [
        ("register_fused_func", ["none", "flashinfer_trtllm"], "fused_none_trtllm", 2, "decorator"),
        ("register_fused_func", ["deepep", "flashinfer_cutedsl"], "fused_deepep", 6, "decorator"),
        (
            "register_fused_func",
            ["flashinfer", "flashinfer_cutedsl"],
            "fused_deepep",
            7,
            "decorator",
        ),
        # a bare ``register`` method is named with its receiver
        ("CustomOp.register", ["silu_and_mul"], "SiluAndMul", 11, "decorator"),
        # positional strings in order, then string keyword values
        ("_register_for", ["Llama4ForCausalLM", "llama4"], "method", 13, "decorator"),
    ]


def test_decorators_that_register_no_key_are_not_rows() -> None:
    assert (
        _regs("""
        @register_custom_op
        def a(): pass

        @register_custom_op(fake_impl=a_fake, mutates_args=[])
        def b(): pass

        @unregister("x")
        def c(): pass

        @app.route("/x")
        def d(): pass

        @register_backend(f"{prefix}_fa3", b"raw", BACKEND)
        def e(): pass

        @register_x("a")("b")
        def f(): pass
    """)
        == []
    )


def test_call_statements_register_their_first_other_argument() -> None:
    assert _rows("""
        import registries
        registry = registries.Registry()

        register_draft_binder("dense", _bind_dense)
        AttentionBackendRegistry.register("fa3", handle_attention_fa3)
        CONFIG_MAPPING.register("cohere2_moe", Cohere2MoeConfig, exist_ok=True)
        register_pre_permute("deepep_ll", "aiter")(_pre_permute_deepep_to_aiter)
        registry.register_model("Llama", LlamaForCausalLM)
        registries.default.register_parser("qwen", QwenParser)
        register_kernel(op_name="mxfp4_gemm", op_func=_gemm, mutates_args=[])
        StorageBackendFactory.register_backend("file", "pkg.mod", "HiCacheFile")

        def setup():
            register_backend(
                "flexkv",
                lambda config:   FlexKV(
                    config),
            )
    """) == [
        ("register_draft_binder", ["dense"], "_bind_dense", 5, "call"),
        ("AttentionBackendRegistry.register", ["fa3"], "handle_attention_fa3", 6, "call"),
        ("CONFIG_MAPPING.register", ["cohere2_moe"], "Cohere2MoeConfig", 7, "call"),
        ("register_pre_permute", ["deepep_ll", "aiter"], "_pre_permute_deepep_to_aiter", 8, "call"),
        ("register_model", ["Llama"], "LlamaForCausalLM", 9, "call"),
        ("register_parser", ["qwen"], "QwenParser", 10, "call"),
        ("register_kernel", ["mxfp4_gemm"], "_gemm", 11, "call"),
        ("register_backend", ["file", "pkg.mod", "HiCacheFile"], "", 12, "call"),
        ("register_backend", ["flexkv"], "lambda config: FlexKV( config)", 15, "call"),
    ]


def test_calls_on_local_objects_or_without_leading_keys_are_not_registrations() -> None:
    assert (
        _regs("""
        class Layer(Module):
            def __init__(self, weight):
                self.register_buffer("weight", weight)
                self.pool.register("job", num_outputs=1)

        def create_weights(layer, w13):
            layer.register_parameter("w13_weight", w13)
            tracker = Tracker()
            tracker.register("barrier", num_outputs=1)
            _register_weight(layer, "weight", (4, 4))
            backend = register_backend("fa3", FA3)
            register_backend(name, FA3)
            get_registry().register("x", X)
            register_backend(f"{name}", FA3)
            print(register_backend("in", "an expression"))
            direct_register_custom_op(op_name="not_a_register_callee", op_func=f)
    """)
        == []
    )


def test_registry_like_dicts_give_one_row_per_entry() -> None:
    long_value = "make_backend(" + ", ".join(f"arg{i}" for i in range(60)) + ")"
    assert _rows(f"""
        QUANTIZATION_METHODS = {{"fp8": Fp8Config, "awq": AWQConfig}}
        _ATTENTION_BACKENDS: dict[
            str, type
        ] = {{
            "fa3":   FlashAttentionBackend,
            # a comment between entries
            "triton": TritonBackend,
            **EXTRA,
        }}
        attn_backend_map = {{AttentionBackend.FA3: fa3, pkg.AttentionBackend.TRITON: triton}}

        class ToolParser:
            DetectorMap = {{"qwen": QwenDetector, "llama3": {long_value}}}

            def __init__(self):
                self._parsers = {{"json": JsonParser, "xml": XmlParser}}
    """) == [
        ("QUANTIZATION_METHODS", ["fp8"], "Fp8Config", 2, "dict"),
        ("QUANTIZATION_METHODS", ["awq"], "AWQConfig", 2, "dict"),
        ("_ATTENTION_BACKENDS", ["fa3"], "FlashAttentionBackend", 6, "dict"),
        ("_ATTENTION_BACKENDS", ["triton"], "TritonBackend", 8, "dict"),
        # Enum.MEMBER keys are stored by the member's name
        ("attn_backend_map", ["FA3"], "fa3", 11, "dict"),
        ("attn_backend_map", ["TRITON"], "triton", 11, "dict"),
        ("DetectorMap", ["qwen"], "QwenDetector", 14, "dict"),
        ("DetectorMap", ["llama3"], long_value[: MAX_TARGET - 1] + "…", 14, "dict"),
        ("_parsers", ["json"], "JsonParser", 17, "dict"),
        ("_parsers", ["xml"], "XmlParser", 17, "dict"),
    ]


def test_dicts_that_are_not_registries_are_not_rows() -> None:
    assert (
        _regs("""
        ONE_BACKEND = {"fa3": FA3}
        defaults = {"a": 1, "b": 2}
        MIXED_MAP = {"fa3": FA3, Backend.TRITON: Triton}
        COMPUTED_MAP = {name: FA3, "triton": Triton}
        LOWER_ENUM_MAP = {backend.fa3: FA3, backend.triton: Triton}
        BACKENDS = dict(fa3=FA3, triton=Triton)
        A_MAP = B_MAP = {"a": 1, "b": 2}

        def build():
            BACKENDS = {"fa3": FA3, "triton": Triton}
            return BACKENDS

        class Model:
            def load(self):
                self.param_map = {"q": "q_proj", "k": "k_proj"}
            call(mapping={"a": 1, "b": 2})
    """)
        == []
    )


def test_subscript_assignments_to_module_registries() -> None:
    assert _rows("""
        _CONFIG_REGISTRY = {}
        _CONFIG_REGISTRY["deepseek_v32"] = DeepseekV32Config
        ALL_ATTENTION_FUNCTIONS[Backend.SGLANG] = sglang_attention

        def add_aliases():
            _CONFIG_REGISTRY["kimi_k2"] = (
                KimiK2Config
            )
            backend_map = {}
            backend_map["fa3"] = FA3
            cache = {}
            _CONFIG_REGISTRY[name] = Other
            _CONFIG_REGISTRY["a"]["b"] = Nested
            result = _CONFIG_REGISTRY["x"] == Other
    """) == [
        ("_CONFIG_REGISTRY", ["deepseek_v32"], "DeepseekV32Config", 3, "subscript"),
        ("ALL_ATTENTION_FUNCTIONS", ["SGLANG"], "sglang_attention", 4, "subscript"),
        ("_CONFIG_REGISTRY", ["kimi_k2"], "( KimiK2Config )", 7, "subscript"),
    ]


def test_registrations_in_comments_and_strings_are_not_rows() -> None:
    assert (
        _regs('''
        """The entries:

        @register_fused_func("deepep", "flashinfer_cutedsl")
        BACKENDS["fa3"] = FA3
        """
        # register_backend("fa3", FA3)
        x = 'MODEL_MAP = {"a": 1, "b": 2}'
    ''')
        == []
    )


def test_rows_come_in_source_order_across_kinds() -> None:
    assert [
        (r.line, r.kind)
        for r in _regs("""
        BACKENDS = {"a": A, "b": B}
        @register_backend("c")
        def c(): pass
        BACKENDS["d"] = D
        register_backend("e", E)
    """)
    ] == [(2, "dict"), (2, "dict"), (3, "decorator"), (5, "subscript"), (6, "call")]


def test_rows_keys_and_strings_are_bounded() -> None:
    many = "\n".join(f'register_backend("k{i}", B{i})' for i in range(MAX_ROWS + 50))
    rows = _regs(many)
    assert len(rows) == MAX_ROWS and rows[-1].keys == (f"k{MAX_ROWS - 1}",)
    keys = ", ".join(f'"k{i}"' for i in range(MAX_KEYS + 5))
    long_key = "x" * (MAX_KEY + 100)
    (wide,) = _regs(f"@register_x({keys})\ndef {'f' * 300}(): pass\n")
    assert len(wide.keys) == MAX_KEYS and len(wide.target) == MAX_TARGET
    (long,) = _regs(f'register_x("{long_key}", T)\n')
    assert long.keys == ("x" * MAX_KEY,)
    assert _regs(f'register_x("{"y" * 600}", T)\n') == []  # a literal too long to be a key


def test_a_file_with_syntax_errors_still_gives_its_whole_statements() -> None:
    rows = _rows("""
        @register_attention_backend("fa3")
        def create_fa3(runner):
            return FA3(runner

        register_backend("triton", Triton)
    """)
    assert ("register_attention_backend", ["fa3"], "create_fa3", 2, "decorator") in rows


def test_analyze_file_writes_registration_rows() -> None:
    out = BatchRows()
    src = b'@register_fused_func("none", "triton")\ndef f(): pass\n'
    analyze_file("0.5.23", "sglang/srt/x.py", src, out)
    assert out.tables["registrations"] == [
        (
            "0.5.23",
            "sglang/srt/x.py",
            "register_fused_func",
            '["none", "triton"]',
            "f",
            1,
            "decorator",
        )
    ]
