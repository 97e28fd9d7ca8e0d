"""Model FLOPs per sequence as NVIDIA's Megatron-Bridge counts them, the number its logs print as TFLOP/s per GPU.

Written from `megatron/bridge/training/utils/flop_utils.py` (`num_floating_point_operations`: `transformer_flops`
for GQA and MLA transformers, dense or mixture-of-experts, with multi-token prediction and sliding-window
attention; `hybrid_flops` for Mamba-hybrid models). Causal attention throughout, as Megatron counts it; the vocabulary
is padded as Megatron pads it (a multiple of `vocab_divisible_by` x tensor-parallel size). Every term is training
FLOPs (forward + backward = 3 x forward) for one sequence of `seq_len` tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from enum import StrEnum

__all__ = [
    "MEGATRON",
    "Architecture",
    "FlopsTerms",
    "Kind",
    "MegatronConvention",
    "flops_terms",
    "hybrid_layer_counts",
    "megatron_flops_per_sequence",
    "padded_vocab",
]

# The layer symbols of a hybrid pattern (megatron.core.ssm.mamba_hybrid_layer_allocation.Symbols).
MAMBA, ATTENTION, MLP, MOE = "M", "*", "-", "E"
_SYMBOLS = (MAMBA, ATTENTION, MLP, MOE)


class Kind(StrEnum):
    TRANSFORMER = "transformer"  # attention (GQA or MLA) and an MLP or MoE block in every layer
    HYBRID = "hybrid"  # a pattern of Mamba (M), attention (*), MLP (-) and MoE (E) layers (Nemotron-H, Nemotron 3)


@dataclass(frozen=True)
class Architecture:
    """What Megatron-Bridge's FLOPs count reads from a model's configuration (names as in its providers).

    `kv_channels` is the head dimension (Megatron's default hidden / heads); `dense_layers` leading layers have a
    dense MLP and the rest mixture-of-experts when `experts` is set (Megatron's `moe_layer_freq` list); `gated`: a
    gated linear unit (three matrices per MLP), as SwiGLU and GPT-OSS's quick-GELU GLU are.
    """

    kind: Kind
    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    vocab: int
    kv_groups: int | None = None
    kv_channels: int | None = None
    gated: bool = True
    experts: int | None = None
    top_k: int = 1
    dense_layers: int = 0
    moe_ffn_hidden: int | None = None
    shared_ffn_hidden: int | None = None
    moe_latent_size: int | None = None
    # multi-latent attention (DeepSeek-V3, Kimi-K2)
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    mtp_layers: int = 0
    # sliding-window attention: (left, right) window, every `window_skip_freq`-th layer full (GPT-OSS: (128, 0), 2)
    window_size: tuple[int, int] | None = None
    window_skip_freq: int | None = None
    # hybrid models: the main layer pattern and the pattern one MTP depth repeats
    hybrid_pattern: str | None = None
    mtp_pattern: str | None = None
    mamba_state_dim: int = 128
    mamba_head_dim: int = 64
    mamba_groups: int = 8
    mamba_heads: int = 128
    vocab_divisible_by: int = 128

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None


@dataclass(frozen=True)
class MegatronConvention:
    """Which parts of a model a published or logged figure counted.

    `mtp`: the multi-token-prediction layers (NVIDIA's "w/o MTP" rows count none). `sliding_window`: windowed
    layers counted over their window, as Megatron-Bridge does from container 26.06; False counts full attention.
    `gated_mlp`: a gated MLP counted as three matrices; False counts two. Megatron-Bridge's GPT-OSS figures in
    containers 25.11 to 26.04.01 are reproduced with `sliding_window=False, gated_mlp=False` (tests/real).
    """

    mtp: bool = True
    sliding_window: bool = True
    gated_mlp: bool = True

    def describe(self) -> str:
        parts = ["Megatron-Bridge flop_utils, causal"]
        if not self.mtp:
            parts.append("no MTP")
        if not self.sliding_window:
            parts.append("full attention in windowed layers")
        if not self.gated_mlp:
            parts.append("gated MLP as two matrices")
        return ", ".join(parts)


MEGATRON = MegatronConvention()


@dataclass(frozen=True)
class FlopsTerms:
    """Training FLOPs of one sequence, term by term (the terms of flop_utils, forward + backward)."""

    attention_projections: float = 0.0  # Q, K, V (or the MLA low-rank projections) and the output projection
    attention_core: float = 0.0  # scores and scores x values, causal (or over the window)
    mlp: float = 0.0  # dense MLP layers (transformer) or MLP layers (hybrid '-')
    routed_experts: float = 0.0  # top-k routed experts, with a latent MoE's up and down projections
    shared_experts: float = 0.0
    mamba: float = 0.0  # in_proj, scan and out_proj of the Mamba layers
    mtp_projections: float = 0.0  # an MTP depth's norms and its 2h x h projection (transformers)
    logits: float = 0.0  # the output layer, once per prediction depth (1 + MTP)

    @property
    def total(self) -> float:
        return float(sum(getattr(self, f.name) for f in fields(self)))


def padded_vocab(vocab: int, divisible_by: int, tensor_parallel: int = 1) -> int:
    """The vocabulary Megatron allocates: rounded up to a multiple of divisible_by x tensor-parallel size."""
    multiple = divisible_by * tensor_parallel
    return math.ceil(vocab / multiple) * multiple


def hybrid_layer_counts(arch: Architecture, convention: MegatronConvention = MEGATRON) -> dict[str, int]:
    """Layers of each symbol: the main pattern's, plus each MTP depth's pattern when MTP is counted."""
    if arch.hybrid_pattern is None:
        raise ValueError("a hybrid model needs its hybrid_pattern")
    counts = {s: arch.hybrid_pattern.count(s) for s in _SYMBOLS}
    unknown = set(arch.hybrid_pattern + (arch.mtp_pattern or "")) - set(_SYMBOLS)
    if unknown:
        raise ValueError(f"hybrid pattern symbols {sorted(unknown)} are not counted (M, *, - and E are)")
    if convention.mtp and arch.mtp_layers and arch.mtp_pattern:
        for symbol in arch.mtp_pattern:
            counts[symbol] += arch.mtp_layers
    return counts


def flops_terms(
    arch: Architecture, seq_len: int, convention: MegatronConvention = MEGATRON, *, tensor_parallel: int = 1
) -> FlopsTerms:
    """Training FLOPs of one sequence of `seq_len` tokens, term by term, as flop_utils counts them."""
    if seq_len <= 0:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    if arch.kind is Kind.HYBRID:
        return _hybrid(arch, float(seq_len), convention, tensor_parallel)
    return _transformer(arch, float(seq_len), convention, tensor_parallel)


def megatron_flops_per_sequence(
    arch: Architecture, seq_len: int, convention: MegatronConvention = MEGATRON, *, tensor_parallel: int = 1
) -> float:
    """Training FLOPs of one sequence (a step's FLOPs are this x global batch size)."""
    return flops_terms(arch, seq_len, convention, tensor_parallel=tensor_parallel).total


def _transformer(arch: Architecture, s: float, conv: MegatronConvention, tp: int) -> FlopsTerms:
    """flop_utils.transformer_flops: every per-token term x 3 (fwd + bwd) x 2 (FLOPs per multiply-add) x s."""
    h = float(arch.hidden)
    n_mtp = arch.mtp_layers if conv.mtp else 0
    moe = arch.experts is not None
    n_moe = arch.layers - arch.dense_layers if moe else 0
    n_dense = arch.layers - n_moe
    # an MTP depth repeats the last layer's MLP kind
    last_is_moe = moe and n_moe > 0
    n_moe += n_mtp if last_is_moe else 0
    n_dense += 0 if last_is_moe else n_mtp
    n_layers = arch.layers + n_mtp
    matrices = 3.0 if arch.gated and conv.gated_mlp else 2.0
    moe_ffn = float(arch.moe_ffn_hidden or arch.ffn_hidden)
    if arch.moe_latent_size is None:
        routed = moe_ffn * arch.top_k * matrices
    else:
        latent = float(arch.moe_latent_size)
        routed = moe_ffn * arch.top_k * matrices * latent / h + 2.0 * latent
    projections, core = _mla(arch, s, n_layers) if arch.is_mla else _gqa(arch, s, n_layers, conv)
    vocab = padded_vocab(arch.vocab, arch.vocab_divisible_by, tp)
    return FlopsTerms(
        attention_projections=s * projections,
        attention_core=s * core,
        mlp=s * 6.0 * h * arch.ffn_hidden * matrices * n_dense,
        routed_experts=s * 6.0 * h * routed * n_moe,
        shared_experts=s * 6.0 * h * float(arch.shared_ffn_hidden or 0) * matrices * n_moe,
        mtp_projections=s * 6.0 * n_mtp * (3.0 * h + 2.0 * h * h),
        logits=s * 6.0 * h * vocab * (n_mtp + 1),
    )


def _mla(arch: Architecture, s: float, n_layers: int) -> tuple[float, float]:
    """Per-token MLA projections and causal core (flop_utils' multi_latent_attention branch)."""
    assert arch.kv_lora_rank and arch.qk_head_dim and arch.v_head_dim and arch.qk_rope_head_dim is not None
    h, a = float(arch.hidden), float(arch.heads)
    qk, rope, v = float(arch.qk_head_dim), float(arch.qk_rope_head_dim), float(arch.v_head_dim)
    # the +1 terms are the q and kv norms
    q_term = arch.q_lora_rank * (h + a * (qk + rope) + 1.0) if arch.q_lora_rank else h * a * (qk + rope)
    kv_term = arch.kv_lora_rank * (h + a * (qk + v) + 1.0) + h * rope
    projections = 6.0 * n_layers * (q_term + kv_term + a * v * h)
    core = 6.0 * n_layers * (s * a * (qk + rope) / 2.0 + s * a * v / 2.0)
    return projections, core


def _gqa(arch: Architecture, s: float, n_layers: int, conv: MegatronConvention) -> tuple[float, float]:
    """Per-token GQA projections and core, windowed layers over their window (flop_utils' MHA/GQA branch)."""
    h = float(arch.hidden)
    channels = float(arch.kv_channels or arch.hidden // arch.heads)
    q = channels * arch.heads
    kv = channels * (arch.kv_groups or arch.heads)
    projections = 6.0 * n_layers * (h * (q + 2.0 * kv) + q * h)
    full_core = q * s  # scores and values (2 x) over the causal half (/ 2) of s
    if arch.window_size is None or not conv.sliding_window:
        return projections, 6.0 * n_layers * full_core
    window = float(arch.window_size[0] + arch.window_size[1] + 1)
    # the exact mean causal context of a window W over s tokens: W - W (W - 1) / (2 s)
    context = window - window * (window - 1.0) / (2.0 * s) if window < s else s / 2.0
    freq = arch.window_skip_freq
    windowed = n_layers if freq is None else sum(1 for i in range(n_layers) if (i + 1) % freq != 0)
    return projections, 6.0 * ((n_layers - windowed) * full_core + windowed * q * context * 2.0)


def _hybrid(arch: Architecture, s: float, conv: MegatronConvention, tp: int) -> FlopsTerms:
    """flop_utils.hybrid_flops: forward FLOPs per layer kind, x 3 for forward and backward."""
    if arch.window_size is not None:
        raise ValueError("sliding-window attention in a hybrid model is not counted here")
    counts = hybrid_layer_counts(arch, conv)
    h, a = float(arch.hidden), float(arch.heads)
    g = float(arch.kv_groups or arch.heads)
    p = arch.kv_channels * a / h if arch.kv_channels else 1.0
    scale = 1.5 if arch.gated and conv.gated_mlp else 1.0
    d_in = 2.0 * h  # flop_utils takes the Mamba inner width as 2 x hidden
    heads = float(arch.mamba_heads) if arch.mamba_heads else d_in / arch.mamba_head_dim
    state, groups = float(arch.mamba_state_dim), float(arch.mamba_groups)
    mamba = (2.0 * s * h * (2.0 * d_in + 2.0 * groups * state + heads)  # in_proj
             + 7.0 * s * d_in * state  # scan
             + 2.0 * s * d_in * h)  # out_proj
    moe_ffn = float(arch.moe_ffn_hidden or arch.ffn_hidden)
    if arch.moe_latent_size is None:
        routed = 4.0 * s * h * moe_ffn * arch.top_k * scale
    else:
        latent = float(arch.moe_latent_size)
        routed = 4.0 * s * latent * moe_ffn * arch.top_k * scale + 4.0 * s * h * latent
    n_mtp = arch.mtp_layers if conv.mtp else 0
    vocab = padded_vocab(arch.vocab, arch.vocab_divisible_by, tp)
    return FlopsTerms(
        attention_projections=3.0 * counts[ATTENTION] * 4.0 * s * h * p * (h + h * g / a),
        attention_core=3.0 * counts[ATTENTION] * 4.0 * s * h * p * (s / 2.0),
        mlp=3.0 * counts[MLP] * 4.0 * arch.ffn_hidden * scale * s * h,
        routed_experts=3.0 * counts[MOE] * routed,
        shared_experts=3.0 * counts[MOE] * 4.0 * s * h * float(arch.shared_ffn_hidden or 0) * scale,
        mamba=3.0 * counts[MAMBA] * mamba,
        logits=3.0 * 2.0 * s * h * vocab * (1 + n_mtp),
    )
