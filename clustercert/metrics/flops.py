"""Model FLOPs per sequence for training (forward + backward), DOMAIN.md section 4."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

__all__ = ["Attention", "FlopsConvention", "Mlp", "ModelShape", "model_flops_per_sequence"]


class Attention(StrEnum):
    CAUSAL = "causal"  # c = 1/2: only the lower triangle of the score matrix is computed
    NON_CAUSAL = "non-causal"  # c = 1


class Mlp(StrEnum):
    SWIGLU = "swiglu"  # gated: three h x f matrices
    NON_GATED = "non-gated"  # squared-ReLU (Nemotron-4): two h x f matrices


@dataclass(frozen=True)
class ModelShape:
    """Hyperparameters that decide the FLOPs; MLA fields are set for DeepSeek-V3 style models only."""

    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    vocab: int
    kv_groups: int | None = None
    mlp: Mlp = Mlp.SWIGLU
    experts: int | None = None
    top_k: int = 1
    # DeepSeek-V3 (MLA + MoE + MTP)
    dense_layers: int = 0
    moe_ffn_hidden: int | None = None
    shared_ffn_hidden: int | None = None
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    mtp_layers: int = 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None


@dataclass(frozen=True)
class FlopsConvention:
    """How a number was computed: attention discount and any deliberate overrides (errata, fixed vocab).

    `per_sample` is a fixed FLOPs-per-sample figure that replaces the formula (Google's
    `process_training_results.py` counts 2.2e15 per GPT-3 175B sample), so a published TFLOP/s can be reproduced.
    `mtp` False leaves a model's multi-token-prediction layers out (NVIDIA's "w/o MTP" figures).
    `lora` counts a LoRA fine-tune as Megatron-Bridge does (`flop_utils.py`): the frozen weights' matrix FLOPs x 2/3
    (forward and input gradients, no weight gradients), the attention-score term whole.
    """

    attention: Attention = Attention.CAUSAL
    kv_groups: int | None = None
    vocab: int | None = None
    per_sample: float | None = None
    mtp: bool = True
    lora: bool = False

    def apply(self, shape: ModelShape) -> ModelShape:
        out = shape
        if self.kv_groups is not None:
            out = replace(out, kv_groups=self.kv_groups)
        if self.vocab is not None:
            out = replace(out, vocab=self.vocab)
        return out

    def describe(self) -> str:
        if self.per_sample is not None:
            return f"fixed {self.per_sample:.4g} FLOPs per sample"
        parts = [self.attention.value]
        if self.kv_groups is not None:
            parts.append(f"g={self.kv_groups}")
        if self.vocab is not None:
            parts.append(f"V={self.vocab}")
        if not self.mtp:
            parts.append("no MTP")
        if self.lora:
            parts.append("LoRA: frozen weights x 2/3")
        return ", ".join(parts)


CANONICAL = FlopsConvention(Attention.CAUSAL)


def model_flops_per_sequence(
    shape: ModelShape, seq_len: int, convention: FlopsConvention = CANONICAL
) -> float:
    """Training FLOPs for one sequence of `seq_len` tokens under `convention`."""
    if seq_len <= 0:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    if convention.per_sample is not None:
        return convention.per_sample
    m = convention.apply(shape)
    if m.is_mla:
        if convention.lora:
            raise ValueError("the LoRA count is defined for the dense formula only, not for MLA models")
        return _mla_moe_flops(m if convention.mtp else replace(m, mtp_layers=0), seq_len, convention.attention)
    c = 0.5 if convention.attention is Attention.CAUSAL else 1.0
    s, n_l, h, f, a = float(seq_len), m.layers, float(m.hidden), float(m.ffn_hidden), float(m.heads)
    g = float(m.kv_groups if m.kv_groups is not None else m.heads)
    mlp = 18.0 * n_l * f * h * m.top_k if m.mlp is Mlp.SWIGLU else 12.0 * n_l * f * h * m.top_k
    logits = 6.0 * m.vocab * h
    if convention.lora:
        weights = 12.0 * n_l * h * h * (1.0 + g / a) + mlp + logits
        return s * ((2.0 / 3.0) * weights + 12.0 * n_l * h * c * s)
    attention = 12.0 * n_l * h * h * (1.0 + g / a + c * s / h)
    return s * (attention + mlp + logits)


def _mla_moe_flops(m: ModelShape, seq_len: int, attention: Attention) -> float:
    assert m.q_lora_rank and m.kv_lora_rank and m.qk_head_dim and m.qk_rope_head_dim and m.v_head_dim
    assert m.moe_ffn_hidden and m.shared_ffn_hidden
    s, h, a = float(seq_len), float(m.hidden), float(m.heads)
    d_qk, d_rope, d_v = float(m.qk_head_dim), float(m.qk_rope_head_dim), float(m.v_head_dim)
    r_q, r_kv = float(m.q_lora_rank), float(m.kv_lora_rank)
    n = m.layers + m.mtp_layers
    # DOMAIN.md writes the score term with its causal 0.5 built in; non-causal doubles it.
    c = 1.0 if attention is Attention.CAUSAL else 2.0
    scores = 6.0 * n * c * (0.5 * (d_qk + d_rope) * a * s * s + 0.5 * d_v * a * s * s)
    mla = h * r_q + r_q * (d_qk + d_rope) * a + h * d_rope + h * r_kv + r_kv * (d_qk + d_v) * a + d_v * a * h
    ffn = m.dense_layers * 3.0 * h * m.ffn_hidden + (m.layers - m.dense_layers + m.mtp_layers) * (
        3.0 * h * m.shared_ffn_hidden + m.top_k * 3.0 * h * m.moe_ffn_hidden
    )
    linear = 6.0 * s * (n * mla + ffn)
    vocab = 6.0 * m.vocab * h * s * (1 + m.mtp_layers) + m.mtp_layers * 6.0 * h * (2.0 * h) * s
    return scores + linear + vocab
