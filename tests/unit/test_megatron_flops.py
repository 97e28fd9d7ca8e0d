"""Megatron-Bridge's model FLOPs, term by term, against hand-written arithmetic from its formula code.

The oracle of each term is the expression of Megatron-Bridge's src/megatron/bridge/training/utils/flop_utils.py
(`num_floating_point_operations`) written out by hand for the model's numbers: `transformer_flops` (the MLP,
shared-expert, MLA, GQA and sliding-window terms, "MTP norms and proj", "Logit") and `hybrid_flops` with
`attn_layer_flops`, `mlp_layer_flops`, `mamba_layer_flops` and `moe_layer_flops`, every forward term x 3. DOMAIN.md's
worked numbers are a second oracle where its formula and Megatron's agree (Llama; DeepSeek-V3 up to its norms).
Shapes are NVIDIA's provider values (Megatron-Bridge src/megatron/bridge/models/<family>/<family>_provider.py).
"""

from __future__ import annotations

import pytest

from clustercert.metrics.flops import Attention, FlopsConvention, ModelShape, model_flops_per_sequence
from clustercert.metrics.megatron_flops import (
    MEGATRON,
    Architecture,
    Kind,
    MegatronConvention,
    flops_terms,
    hybrid_layer_counts,
    megatron_flops_per_sequence,
    padded_vocab,
)

T = Kind.TRANSFORMER
LLAMA_405B = Architecture(T, layers=126, hidden=16384, ffn_hidden=53248, heads=128, vocab=128256, kv_groups=8)
LLAMA_70B = Architecture(T, layers=80, hidden=8192, ffn_hidden=28672, heads=64, vocab=128256, kv_groups=8)
DEEPSEEK_V3 = Architecture(
    T, layers=61, hidden=7168, ffn_hidden=18432, heads=128, vocab=129280, experts=256, top_k=8, dense_layers=3,
    moe_ffn_hidden=2048, shared_ffn_hidden=2048, q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128,
    qk_rope_head_dim=64, v_head_dim=128, mtp_layers=1, vocab_divisible_by=1280,
)
GPT_OSS_120B = Architecture(
    T, layers=36, hidden=2880, ffn_hidden=2880, heads=64, vocab=201088, kv_groups=8, kv_channels=64, experts=128,
    top_k=4, moe_ffn_hidden=2880, window_size=(128, 0), window_skip_freq=2,
)
QWEN3_235B = Architecture(
    T, layers=94, hidden=4096, ffn_hidden=12288, heads=64, vocab=151936, kv_groups=4, kv_channels=128, experts=128,
    top_k=8, moe_ffn_hidden=1536,
)
NEMOTRON_H_56B = Architecture(
    Kind.HYBRID, layers=118, hidden=8192, ffn_hidden=32768, heads=64, vocab=131072, kv_groups=8, gated=False,
    hybrid_pattern=("M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-"
                    "M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"),
    mamba_state_dim=256, mamba_head_dim=64, mamba_groups=8, mamba_heads=256,
)
NEMOTRON_3_SUPER = Architecture(
    Kind.HYBRID, layers=88, hidden=4096, ffn_hidden=2688, heads=32, vocab=131072, kv_groups=2, kv_channels=128,
    gated=False, experts=512, top_k=22, moe_ffn_hidden=2688, shared_ffn_hidden=5376, moe_latent_size=1024,
    mtp_layers=2, mtp_pattern="*E",
    hybrid_pattern="MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME",
    mamba_state_dim=128, mamba_head_dim=64, mamba_groups=8, mamba_heads=128,
)


def test_dense_gqa_is_domain_mds_causal_formula() -> None:
    # DOMAIN.md section 4 worked numbers, c = 1/2 (Megatron counts causal attention; 128256 needs no padding at TP 1)
    assert megatron_flops_per_sequence(LLAMA_405B, 8192) == pytest.approx(2.06762e16, rel=1e-4)
    assert megatron_flops_per_sequence(LLAMA_70B, 8192) == pytest.approx(3.68003e15, rel=1e-4)


def test_the_vocabulary_is_padded_per_tensor_parallel_rank() -> None:
    # megatron.bridge.utils.vocab_utils.calculate_padded_vocab_size: a multiple of divisible_by x TP
    assert [padded_vocab(128256, 128, tp) for tp in (1, 2, 4, 8)] == [128256, 128256, 128512, 129024]
    assert padded_vocab(129280, 1280, 1) == 129280 and padded_vocab(129280, 1280, 2) == 130560
    s, h = 8192, 8192
    grown = flops_terms(LLAMA_70B, s, tensor_parallel=4).logits - flops_terms(LLAMA_70B, s).logits
    assert grown == 6 * s * h * (128512 - 128256)


def test_deepseek_v3_terms() -> None:
    s, h, a = 4096, 7168, 128
    t = flops_terms(DEEPSEEK_V3, s)
    # layers: 3 dense, 58 MoE, and the MTP layer repeats the last (MoE) layer: 62 attention layers, 59 MoE
    q_term = 1536 * (h + a * (128 + 64) + 1)
    kv_term = 512 * (h + a * (128 + 128) + 1) + h * 64
    assert t.attention_projections == s * 6 * 62 * (q_term + kv_term + a * 128 * h)
    assert t.attention_core == s * 6 * 62 * (s * a * (128 + 64) / 2 + s * a * 128 / 2)
    assert t.mlp == s * 6 * h * 18432 * 3 * 3
    assert t.routed_experts == s * 6 * h * 2048 * 8 * 3 * 59
    assert t.shared_experts == s * 6 * h * 2048 * 3 * 59
    assert t.mtp_projections == s * 6 * 1 * (3 * h + 2 * h * h)
    assert t.logits == s * 6 * h * 129280 * 2
    assert t.mamba == 0


def test_deepseek_v3_differs_from_domain_md_by_its_norms_alone() -> None:
    # DOMAIN.md's MLA formula leaves out the q and kv norms (+1 each, 62 layers) and the MTP layer's three norms
    domain = model_flops_per_sequence(
        ModelShape(layers=61, hidden=7168, ffn_hidden=18432, heads=128, vocab=129280, experts=256, top_k=8,
                   dense_layers=3, moe_ffn_hidden=2048, shared_ffn_hidden=2048, q_lora_rank=1536, kv_lora_rank=512,
                   qk_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, mtp_layers=1), 4096)
    assert domain == pytest.approx(1.06493e15, rel=1e-4)  # DOMAIN.md's worked number
    norms = 6 * 4096 * (62 * (1536 + 512) + 3 * 7168)
    assert megatron_flops_per_sequence(DEEPSEEK_V3, 4096) - domain == pytest.approx(norms, rel=1e-6)


def test_the_mtp_switch_leaves_the_mtp_layer_out() -> None:
    s, h = 4096, 7168
    on, off = flops_terms(DEEPSEEK_V3, s), flops_terms(DEEPSEEK_V3, s, MegatronConvention(mtp=False))
    assert off.mtp_projections == 0 and off.logits == on.logits / 2
    assert on.routed_experts - off.routed_experts == s * 6 * h * 2048 * 8 * 3  # one MoE layer fewer
    assert off.attention_core / on.attention_core == pytest.approx(61 / 62, rel=1e-12)
    # DOMAIN.md's formula has the same switch: its difference is one MLA + MoE layer, the MTP vocab and projection
    shape = ModelShape(layers=61, hidden=h, ffn_hidden=18432, heads=128, vocab=129280, experts=256, top_k=8,
                       dense_layers=3, moe_ffn_hidden=2048, shared_ffn_hidden=2048, q_lora_rank=1536,
                       kv_lora_rank=512, qk_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, mtp_layers=1)
    with_mtp = model_flops_per_sequence(shape, s, FlopsConvention(Attention.CAUSAL))
    without = model_flops_per_sequence(shape, s, FlopsConvention(Attention.CAUSAL, mtp=False))
    mla = h * 1536 + 1536 * 192 * 128 + h * 64 + h * 512 + 512 * 256 * 128 + 128 * 128 * h
    layer = 6 * (0.5 * 192 * 128 * s * s + 0.5 * 128 * 128 * s * s) + 6 * s * (mla + 3 * h * 2048 + 8 * 3 * h * 2048)
    assert with_mtp - without == pytest.approx(layer + 6 * 129280 * h * s + 6 * h * 2 * h * s, rel=1e-9)
    assert FlopsConvention(Attention.CAUSAL, mtp=False).describe() == "causal, no MTP"


def test_gpt_oss_sliding_window_and_head_size() -> None:
    s, h = 4096, 2880
    q, kv = 64 * 64, 64 * 8  # kv_channels 64: the query projection (4096) is wider than hidden (2880)
    t = flops_terms(GPT_OSS_120B, s)
    assert t.attention_projections == s * 6 * 36 * (h * (q + 2 * kv) + q * h)
    # window (128, 0) covers 129 tokens; every other layer (the 2nd, 4th, ...) is full: 18 windowed, 18 full;
    # a windowed layer's mean causal context is W - W (W - 1) / (2 s)
    context = 129 - 129 * 128 / (2 * s)
    assert t.attention_core == pytest.approx(s * 6 * (18 * q * s + 18 * q * context * 2), rel=1e-12)
    assert t.routed_experts == s * 6 * h * 2880 * 4 * 3 * 36
    assert t.logits == s * 6 * h * 201088
    legacy = flops_terms(GPT_OSS_120B, s, MegatronConvention(sliding_window=False, gated_mlp=False))
    assert legacy.attention_core == s * 6 * 36 * q * s
    assert legacy.routed_experts == t.routed_experts * 2 / 3
    assert MegatronConvention(sliding_window=False, gated_mlp=False).describe() == (
        "Megatron-Bridge flop_utils, causal, full attention in windowed layers, gated MLP as two matrices")
    assert MEGATRON.describe() == "Megatron-Bridge flop_utils, causal"


def test_qwen3_head_size_and_experts() -> None:
    s, h = 4096, 4096
    q, kv = 128 * 64, 128 * 4
    t = flops_terms(QWEN3_235B, s)
    assert t.attention_projections == s * 6 * 94 * (h * (q + 2 * kv) + q * h)
    assert t.attention_core == s * 6 * 94 * q * s
    assert t.mlp == 0 and t.shared_experts == 0  # every layer MoE, no shared expert
    assert t.routed_experts == s * 6 * h * 1536 * 8 * 3 * 94


def test_nemotron_h_56b_term_by_term() -> None:
    # hybrid_flops: per layer kind, forward FLOPs x 3; no published row exists for this model
    s, h = 8192, 8192
    assert hybrid_layer_counts(NEMOTRON_H_56B) == {"M": 54, "*": 10, "-": 54, "E": 0}
    t = flops_terms(NEMOTRON_H_56B, s)
    # attn_layer_flops: 4 B s h p (h + h g / a + s / 2), p = kv_channels x heads / hidden = 1
    assert t.attention_projections == 3 * 10 * 4 * s * h * (h + h * 8 / 64)
    assert t.attention_core == 3 * 10 * 4 * s * h * (s / 2)
    # mlp_layer_flops: 4 x expansion (32768 / 8192) x B s h^2, squared ReLU (not gated)
    assert t.mlp == 3 * 54 * 4 * (32768 / h) * s * h * h
    # mamba_layer_flops with d_in = 2h = 16384, state 256, 8 groups, 256 heads: in_proj, scan, out_proj
    d_in = 2 * h
    assert t.mamba == 3 * 54 * (2 * s * h * (2 * d_in + 2 * 8 * 256 + 256) + 7 * s * d_in * 256 + 2 * s * d_in * h)
    assert t.logits == 3 * 2 * s * h * 131072
    assert t.routed_experts == t.shared_experts == t.mtp_projections == 0
    assert t.total == pytest.approx(2.78726e15, rel=1e-5)  # the sum of the terms above
    # the dgxc-benchmarking 25.08 README's own notes count 2.816e15 (three in_proj matrices, chunked scan):
    # Megatron-Bridge, whose log the 26.08 recipe prints, counts 1.0 % fewer
    assert t.total / 2.816e15 == pytest.approx(0.9898, abs=5e-4)


def test_nemotron_3_super_latent_moe_and_mtp_depths() -> None:
    s, h = 8192, 4096
    # each of the 2 MTP depths repeats the pattern '*E': 8 + 2 attention layers, 40 + 2 MoE layers
    assert hybrid_layer_counts(NEMOTRON_3_SUPER) == {"M": 40, "*": 10, "-": 0, "E": 42}
    assert hybrid_layer_counts(NEMOTRON_3_SUPER, MegatronConvention(mtp=False)) == {"M": 40, "*": 8, "-": 0, "E": 40}
    t = flops_terms(NEMOTRON_3_SUPER, s)
    # moe_layer_flops with a latent size: the routed experts run on 1024 channels, plus the up and down projections
    assert t.routed_experts == 3 * 42 * (4 * s * 1024 * 2688 * 22 + 4 * s * h * 1024)
    assert t.shared_experts == 3 * 42 * 4 * s * h * 5376
    assert t.attention_projections == 3 * 10 * 4 * s * h * (h + h * 2 / 32)  # p = 128 x 32 / 4096 = 1
    assert t.logits == 3 * 2 * s * h * 131072 * 3
    off = flops_terms(NEMOTRON_3_SUPER, s, MegatronConvention(mtp=False))
    assert off.logits == t.logits / 3 and off.routed_experts == t.routed_experts * 40 / 42


def test_unusable_input_is_refused() -> None:
    with pytest.raises(ValueError, match="seq_len must be positive, got 0"):
        megatron_flops_per_sequence(LLAMA_70B, 0)
    gdn = Architecture(Kind.HYBRID, layers=4, hidden=64, ffn_hidden=64, heads=4, vocab=128, hybrid_pattern="MG*-")
    with pytest.raises(ValueError, match=r"symbols \['G'\] are not counted"):
        megatron_flops_per_sequence(gdn, 128)
    windowed = Architecture(Kind.HYBRID, layers=2, hidden=64, ffn_hidden=64, heads=4, vocab=128, hybrid_pattern="M*",
                            window_size=(16, 0))
    with pytest.raises(ValueError, match="sliding-window attention in a hybrid model"):
        megatron_flops_per_sequence(windowed, 128)
