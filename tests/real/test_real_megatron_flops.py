"""Megatron-Bridge's model FLOPs (clustercert.metrics.megatron_flops) against NVIDIA's published TFLOP/s per GPU.

Each pre-training row of NVIDIA's Megatron-Bridge performance summary gives tokens/s/GPU and model TFLOP/s/GPU for one
run; their quotient is NVIDIA's model FLOPs per token for that model, sequence length and tensor-parallel size (the
vocabulary is padded per TP). Every model of the 26.08 catalogs is reproduced from the catalog's own shape to within
0.3 % of what the printed figures allow (each is rounded to the unit: 228 TFLOP/s is 227.5 to 228.5) on the rows
below: every row, for those models, of the containers that print tokens/s to the unit (26.06, 26.04, 26.02.01, 26.02,
25.11; 25.09 prints no precision). The containers that round tokens/s to a few significant bits
(26.08, 26.06.01, 26.04.01) are checked against their rounding step in test_real_published_references.py.
Nemotron-H 56B has no row; tests/unit/test_megatron_flops.py checks it term by term against flop_utils.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from clustercert.catalog import ModelSpec, load_catalog
from clustercert.metrics.megatron_flops import MEGATRON, MegatronConvention, megatron_flops_per_sequence
from tests.real.summary_tables import pretraining_rows

REFERENCES = Path(__file__).resolve().parents[2] / "references"
UNROUNDED = ("26.06", "26.04", "26.02.01", "26.02", "25.11")
# the table's model name (without its parenthesized variant) -> the 26.08 catalogs' model id
MODELS = {
    "DeepSeekV3": "pretrain_deepseek-v3_671b",
    "GPT OSS 120B": "pretrain_gpt_oss_120b",
    "Kimi_K2": "pretrain_kimi-k2_1t",
    "LLAMA3.1_405B": "pretrain_llama3.1_405b",
    "LLAMA3_70B": "pretrain_llama3.1_70b",
    "Nemotron_3_Super": "pretrain_nemotron_3_120b",
    "Qwen3_235B_a22B": "pretrain_qwen3_235b",
}
# Megatron-Bridge before 26.06 counted GPT-OSS with full attention in its windowed layers and its gated MLP as two
# matrices: that convention reproduces every GPT-OSS row of 25.11 to 26.04.01 (a finding of this test)
LEGACY_GPT_OSS = MegatronConvention(sliding_window=False, gated_mlp=False)

Key = tuple[str, str, str, int, str, int, int, int, int, int]

# (container, model as printed, system, GPUs, precision, GBS, sequence length, TP, tokens/s/GPU, TFLOP/s/GPU), copied
# from samples/real/published-tables/megatron-bridge-performance-summary-archive.md
ROWS: dict[str, list[Key]] = {
    "pretrain_deepseek-v3_671b": [
        ("26.06", "DeepSeekV3", "DGX-GB300", 256, "MXFP8", 4096, 4096, 1, 6338, 1648),
        ("26.06", "DeepSeekV3", "DGX-GB300", 256, "MXFP8", 15360, 4096, 1, 6422, 1670),
        ("26.06", "DeepSeekV3", "DGX-GB200", 256, "MXFP8", 4096, 4096, 1, 4969, 1292),
        ("26.06", "DeepSeekV3", "DGX-B300", 256, "MXFP8", 4096, 4096, 1, 3541, 920),
        ("26.04", "DeepSeekV3", "DGX-GB300", 256, "MXFP8", 4096, 4096, 1, 4965, 1290),
        ("26.04", "DeepSeekV3", "DGX-GB200", 256, "MXFP8", 4096, 4096, 1, 4193, 1090),
        ("26.04", "DeepSeekV3", "DGX-B300", 256, "MXFP8", 4096, 4096, 1, 3131, 814),
        ("26.04", "DeepSeekV3", "DGX-B200", 256, "MXFP8", 4096, 4096, 1, 2815, 732),
        ("26.02.01", "DeepSeekV3", "DGX-GB300", 256, "MXFP8", 4096, 4096, 1, 4691, 1219),
        ("26.02.01", "DeepSeekV3", "DGX-GB200", 256, "MXFP8", 4096, 4096, 1, 4021, 1046),
        ("26.02.01", "DeepSeekV3", "DGX-B300", 256, "MXFP8", 4096, 4096, 1, 3099, 806),
        ("26.02.01", "DeepSeekV3", "DGX-B200", 256, "MXFP8", 4096, 4096, 1, 2790, 725),
        ("26.02", "DeepSeekV3", "DGX-GB300", 256, "MXFP8", 4096, 4096, 1, 4612, 1199),
        ("26.02", "DeepSeekV3", "DGX-GB200", 256, "MXFP8", 4096, 4096, 1, 3955, 1028),
        ("26.02", "DeepSeekV3", "DGX-B300", 256, "MXFP8", 4096, 4096, 1, 2983, 776),
        ("26.02", "DeepSeekV3", "DGX-B200", 256, "MXFP8", 4096, 4096, 1, 2689, 699),
        ("25.11", "DeepSeekV3 (w/o MTP)", "DGX-GB300", 256, "BF16", 4096, 4096, 1, 3848, 961),
        ("25.11", "DeepSeekV3 (w/o MTP)", "DGX-GB300", 256, "FP8-MX", 4096, 4096, 1, 4357, 1088),
        ("25.11", "DeepSeekV3 (w/o MTP)", "DGX-GB200", 256, "BF16", 4096, 4096, 1, 3139, 782),
        ("25.11", "DeepSeekV3 (w/o MTP)", "DGX-GB200", 256, "FP8-MX", 4096, 4096, 1, 4018, 1003),
        ("25.11", "DeepSeekV3 (w/ MTP)", "DGX-B200", 256, "FP8-MX", 2048, 4096, 1, 2139, 557),
    ],
    "pretrain_gpt_oss_120b": [
        ("26.06", "GPT OSS 120B", "DGX-GB300", 64, "MXFP8", 1280, 4096, 1, 33166, 1081),
        ("26.06", "GPT OSS 120B", "DGX-GB200", 64, "MXFP8", 1280, 4096, 1, 28947, 943),
        ("26.06", "GPT OSS 120B", "DGX-B300", 64, "MXFP8", 1280, 4096, 1, 18534, 604),
        ("26.04", "GPT OSS 120B", "DGX-GB300", 64, "BF16", 1280, 4096, 1, 19275, 524),
        ("26.04", "GPT OSS 120B", "DGX-GB200", 64, "BF16", 1280, 4096, 1, 15938, 433),
        ("26.04", "GPT OSS 120B", "DGX-B300", 64, "BF16", 1280, 4096, 1, 15114, 410),
        ("26.04", "GPT OSS 120B", "DGX-B200", 64, "BF16", 1280, 4096, 1, 13045, 355),
        ("26.04", "GPT OSS 120B", "DGX-H100", 64, "BF16", 1280, 4096, 1, 5810, 158),
        ("26.02.01", "GPT OSS 120B", "DGX-GB300", 64, "BF16", 1280, 4096, 1, 19366, 526),
        ("26.02.01", "GPT OSS 120B", "DGX-GB200", 64, "BF16", 1280, 4096, 1, 15754, 428),
        ("26.02.01", "GPT OSS 120B", "DGX-B200", 64, "BF16", 1280, 4096, 1, 13722, 373),
        ("26.02.01", "GPT OSS 120B", "DGX-H100", 64, "BF16", 1280, 4096, 1, 5984, 163),
        ("26.02", "GPT OSS 120B", "DGX-GB300", 64, "BF16", 1280, 4096, 1, 19412, 527),
        ("26.02", "GPT OSS 120B", "DGX-GB200", 64, "BF16", 1280, 4096, 1, 15784, 428),
        ("26.02", "GPT OSS 120B", "DGX-B300", 64, "BF16", 1280, 4096, 1, 8359, 228),
        ("26.02", "GPT OSS 120B", "DGX-B200", 64, "BF16", 1280, 4096, 1, 8047, 219),
        ("26.02", "GPT OSS 120B", "DGX-H100", 64, "BF16", 1280, 4096, 1, 5993, 163),
        ("25.11", "GPT OSS 120B", "DGX-GB300", 64, "BF16", 1280, 8192, 1, 18347, 565),
        ("25.11", "GPT OSS 120B", "DGX-GB200", 64, "BF16", 1280, 8192, 1, 15876, 488),
        ("25.11", "GPT OSS 120B", "DGX-B200", 64, "BF16", 512, 4096, 1, 8213, 223),
        ("25.11", "GPT OSS 120B", "DGX-H100", 64, "BF16", 512, 4096, 1, 5630, 153),
    ],
    "pretrain_kimi-k2_1t": [
        ("26.06", "Kimi_K2", "DGX-GB300", 256, "MXFP8", 4096, 4096, 1, 5372, 1099),
        ("26.04", "Kimi_K2", "DGX-GB300", 256, "MXFP8", 4096, 4096, 1, 5332, 1090),
        ("26.02.01", "Kimi_K2", "DGX-GB300", 256, "MXFP8", 4096, 4096, 1, 5072, 1037),
    ],
    "pretrain_llama3.1_405b": [
        ("26.06", "LLAMA3.1_405B", "DGX-GB300", 256, "FP8", 1536, 8192, 4, 1048, 2646),
        ("26.06", "LLAMA3.1_405B", "DGX-GB300", 256, "MXFP8", 1536, 8192, 2, 952, 2403),
        ("26.06", "LLAMA3.1_405B", "DGX-GB300", 256, "NVFP4", 1536, 8192, 4, 1413, 3575),
        ("26.06", "LLAMA3.1_405B", "DGX-GB200", 256, "FP8", 1536, 8192, 4, 843, 2129),
        ("26.06", "LLAMA3.1_405B", "DGX-GB200", 256, "MXFP8", 1536, 8192, 4, 783, 1976),
        ("26.06", "LLAMA3.1_405B", "DGX-GB200", 256, "NVFP4", 1536, 8192, 4, 1166, 2944),
        ("26.06", "LLAMA3.1_405B", "DGX-H100", 1024, "FP8", 1536, 8192, 8, 326, 822),
        ("26.04", "LLAMA3.1_405B", "DGX-GB300", 256, "NVFP4", 1536, 8192, 4, 1424, 3594),
        ("26.04", "LLAMA3.1_405B", "DGX-GB200", 256, "NVFP4", 1536, 8192, 4, 1136, 2866),
        ("26.04", "LLAMA3.1_405B", "DGX-GB300", 256, "MXFP8", 1536, 8192, 2, 968, 2443),
        ("26.04", "LLAMA3.1_405B", "DGX-GB200", 256, "MXFP8", 1536, 8192, 4, 793, 2002),
        ("26.04", "LLAMA3.1_405B", "DGX-GB300", 256, "FP8", 1536, 8192, 4, 1036, 2615),
        ("26.04", "LLAMA3.1_405B", "DGX-GB200", 256, "FP8", 1536, 8192, 4, 842, 2126),
        ("26.02.01", "LLAMA3.1_405B", "DGX-GB300", 256, "NVFP4", 1536, 8192, 4, 1358, 3428),
        ("26.02.01", "LLAMA3.1_405B", "DGX-GB200", 256, "NVFP4", 1536, 8192, 4, 1083, 2734),
        ("26.02.01", "LLAMA3.1_405B", "DGX-GB300", 256, "MXFP8", 1536, 8192, 2, 949, 2394),
        ("26.02.01", "LLAMA3.1_405B", "DGX-GB200", 256, "MXFP8", 1536, 8192, 4, 775, 1957),
        ("26.02.01", "LLAMA3.1_405B", "DGX-GB300", 256, "FP8", 1536, 8192, 2, 1024, 2585),
        ("26.02.01", "LLAMA3.1_405B", "DGX-GB200", 256, "FP8", 1536, 8192, 4, 818, 2063),
        ("26.02", "LLAMA3.1_405B", "DGX-GB300", 256, "NVFP4", 1536, 8192, 4, 1333, 3365),
        ("26.02", "LLAMA3.1_405B", "DGX-GB200", 256, "NVFP4", 1536, 8192, 4, 1076, 2716),
        ("26.02", "LLAMA3.1_405B", "DGX-GB300", 256, "MXFP8", 1536, 8192, 2, 931, 2349),
        ("26.02", "LLAMA3.1_405B", "DGX-GB200", 256, "MXFP8", 1536, 8192, 4, 786, 1983),
        ("26.02", "LLAMA3.1_405B", "DGX-GB300", 256, "FP8", 1536, 8192, 4, 988, 2495),
        ("26.02", "LLAMA3.1_405B", "DGX-GB200", 256, "FP8", 1536, 8192, 4, 793, 2004),
        ("26.02", "LLAMA3.1_405B", "DGX-H100", 1024, "FP8", 1536, 8192, 8, 311, 784),
        ("25.11", "LLAMA3.1_405B", "DGX-GB300", 256, "FP8-CS", 1536, 8192, 2, 999, 2522),
        ("25.11", "LLAMA3.1_405B", "DGX-GB200", 256, "FP8-CS", 1536, 8192, 4, 813, 2053),
        ("25.11", "LLAMA3.1_405B", "DGX-B200", 128, "FP8-CS", 64, 8192, 4, 661, 1667),
        ("25.11", "LLAMA3.1_405B", "DGX-B200", 128, "FP8-MX", 64, 8192, 4, 624, 1576),
        ("25.11", "LLAMA3.1_405B", "DGX-H100", 1024, "FP8-CS", 512, 8192, 8, 292, 737),
    ],
    "pretrain_llama3.1_70b": [
        ("26.04", "LLAMA3_70B", "DGX-GB300", 64, "NVFP4", 256, 8192, 1, 7397, 3321),
        ("26.04", "LLAMA3_70B", "DGX-GB200", 64, "NVFP4", 256, 8192, 2, 4898, 2201),
        ("26.04", "LLAMA3_70B", "DGX-GB300", 64, "MXFP8", 256, 8192, 1, 4742, 2131),
        ("26.04", "LLAMA3_70B", "DGX-GB200", 64, "MXFP8", 256, 8192, 2, 3828, 1721),
        ("26.04", "LLAMA3_70B", "DGX-GB300", 64, "FP8", 256, 8192, 1, 5243, 2355),
        ("26.04", "LLAMA3_70B", "DGX-GB200", 64, "FP8", 256, 8192, 1, 4143, 1861),
        ("26.04", "LLAMA3_70B", "DGX-H100", 64, "FP8", 256, 8192, 4, 1633, 734),
        ("26.02.01", "LLAMA3_70B", "DGX-GB300", 64, "NVFP4", 256, 8192, 1, 7002, 3147),
        ("26.02.01", "LLAMA3_70B", "DGX-GB200", 64, "NVFP4", 256, 8192, 2, 4557, 2047),
        ("26.02.01", "LLAMA3_70B", "DGX-GB300", 64, "MXFP8", 256, 8192, 1, 4798, 2157),
        ("26.02.01", "LLAMA3_70B", "DGX-GB200", 64, "MXFP8", 256, 8192, 2, 3837, 1724),
        ("26.02.01", "LLAMA3_70B", "DGX-GB300", 64, "FP8", 256, 8192, 1, 5243, 2353),
        ("26.02.01", "LLAMA3_70B", "DGX-GB200", 64, "FP8", 256, 8192, 1, 4357, 1956),
        ("26.02.01", "LLAMA3_70B", "DGX-H100", 64, "FP8", 256, 8192, 4, 1639, 736),
        ("26.02", "LLAMA3_70B", "DGX-GB300", 64, "NVFP4", 256, 8192, 1, 6798, 3056),
        ("26.02", "LLAMA3_70B", "DGX-GB200", 64, "NVFP4", 256, 8192, 2, 4458, 2004),
        ("26.02", "LLAMA3_70B", "DGX-GB300", 64, "MXFP8", 256, 8192, 1, 4596, 2064),
        ("26.02", "LLAMA3_70B", "DGX-GB200", 64, "MXFP8", 256, 8192, 2, 3613, 1623),
        ("26.02", "LLAMA3_70B", "DGX-GB300", 64, "FP8", 256, 8192, 1, 5003, 2248),
        ("26.02", "LLAMA3_70B", "DGX-GB200", 64, "FP8", 256, 8192, 1, 4040, 1815),
        ("26.02", "LLAMA3_70B", "DGX-H100", 64, "FP8", 256, 8192, 4, 1621, 728),
        ("25.11", "LLAMA3_70B", "DGX-GB300", 64, "FP8-CS", 256, 8192, 1, 4520, 2030),
        ("25.11", "LLAMA3_70B", "DGX-GB200", 64, "FP8-CS", 256, 8192, 1, 4312, 1937),
        ("25.11", "LLAMA3_70B", "DGX-H100", 64, "FP8-CS", 128, 8192, 4, 1602, 719),
    ],
    "pretrain_nemotron_3_120b": [
        ("26.06", "Nemotron_3_Super", "DGX-GB300", 64, "MXFP8", 512, 8192, 1, 9652, 817),
        ("26.06", "Nemotron_3_Super", "DGX-GB300", 64, "NVFP4", 512, 8192, 1, 9900, 839),
        ("26.06", "Nemotron_3_Super", "DGX-GB200", 64, "MXFP8", 512, 8192, 2, 6742, 571),
        ("26.06", "Nemotron_3_Super", "DGX-GB200", 64, "NVFP4", 512, 8192, 2, 6928, 587),
        ("26.06", "Nemotron_3_Super", "DGX-B300", 64, "MXFP8", 512, 8192, 1, 7867, 667),
        ("26.06", "Nemotron_3_Super", "DGX-B300", 64, "NVFP4", 512, 8192, 1, 8131, 689),
        ("26.04", "Nemotron_3_Super", "DGX-GB300", 64, "NVFP4", 512, 8192, 1, 9623, 815),
        ("26.04", "Nemotron_3_Super", "DGX-GB200", 64, "NVFP4", 512, 8192, 2, 6777, 574),
        ("26.04", "Nemotron_3_Super", "DGX-B300", 64, "NVFP4", 512, 8192, 1, 7047, 597),
        ("26.04", "Nemotron_3_Super", "DGX-B200", 64, "NVFP4", 512, 8192, 2, 5606, 475),
        ("26.04", "Nemotron_3_Super", "DGX-GB300", 64, "MXFP8", 512, 8192, 1, 9243, 783),
        ("26.04", "Nemotron_3_Super", "DGX-GB200", 64, "MXFP8", 512, 8192, 2, 6674, 565),
        ("26.04", "Nemotron_3_Super", "DGX-B300", 64, "MXFP8", 512, 8192, 1, 7009, 594),
        ("26.04", "Nemotron_3_Super", "DGX-B200", 64, "MXFP8", 512, 8192, 1, 6302, 534),
    ],
    "pretrain_qwen3_235b": [
        ("26.06", "Qwen3_235B_a22B", "DGX-GB300", 256, "MXFP8", 8192, 4096, 1, 9015, 1335),
        ("26.06", "Qwen3_235B_a22B", "DGX-GB200", 256, "MXFP8", 8192, 4096, 1, 7376, 1092),
        ("26.04", "Qwen3_235B_a22B", "DGX-GB300", 256, "MXFP8", 8192, 4096, 1, 6994, 1035),
        ("26.04", "Qwen3_235B_a22B", "DGX-GB200", 256, "MXFP8", 8192, 4096, 1, 5672, 840),
        ("26.04", "Qwen3_235B_a22B", "DGX-B300", 256, "MXFP8", 8192, 4096, 1, 4865, 720),
        ("26.04", "Qwen3_235B_a22B", "DGX-H100", 256, "FP8", 8192, 4096, 2, 1686, 250),
        ("26.02.01", "Qwen3_235B_a22B", "DGX-GB300", 256, "MXFP8", 8192, 4096, 1, 6583, 974),
        ("26.02.01", "Qwen3_235B_a22B", "DGX-GB200", 256, "MXFP8", 8192, 4096, 1, 5530, 819),
        ("26.02.01", "Qwen3_235B_a22B", "DGX-B300", 256, "MXFP8", 8192, 4096, 1, 2644, 391),
        ("26.02.01", "Qwen3_235B_a22B", "DGX-H100", 256, "FP8", 8192, 4096, 2, 1611, 238),
        ("26.02", "Qwen3_235B_a22B", "DGX-GB300", 256, "MXFP8", 8192, 4096, 1, 6583, 974),
        ("26.02", "Qwen3_235B_a22B", "DGX-GB200", 256, "MXFP8", 8192, 4096, 1, 5448, 806),
        ("26.02", "Qwen3_235B_a22B", "DGX-B300", 256, "MXFP8", 8192, 4096, 1, 2691, 399),
        ("26.02", "Qwen3_235B_a22B", "DGX-B200", 256, "MXFP8", 8192, 4096, 1, 3805, 563),
        ("26.02", "Qwen3_235B_a22B", "DGX-H100", 256, "FP8", 8192, 4096, 2, 1633, 242),
        ("25.11", "Qwen3_235B_a22B", "DGX-GB300", 256, "BF16", 8192, 4096, 1, 6131, 907),
        ("25.11", "Qwen3_235B_a22B", "DGX-GB200", 256, "BF16", 8192, 4096, 1, 4916, 728),
        ("25.11", "Qwen3_235B_a22B", "DGX-B200", 64, "FP8-MX", 1024, 4096, 1, 3269, 484),
        ("25.11", "Qwen3_235B_a22B", "DGX-H100", 256, "FP8-CS", 2048, 4096, 2, 1575, 233),
    ],
}
# A row NVIDIA's own table contradicts: its FLOPs per token (412e12 / 15031) is 0.9 % above the same container's other
# GPT-OSS rows of the same model and sequence length, which agree with each other and with this formula to 0.3 %.
OUTLIER: Key = ("26.02.01", "GPT OSS 120B", "DGX-B300", 64, "BF16", 1280, 4096, 1, 15031, 412)


def _version(container: str) -> tuple[int, ...]:
    return tuple(int(p) for p in container.split("."))


def _base(heading: str) -> str:
    return re.sub(r"\s*\(.*\)$", "", heading)


def _convention(key: Key) -> MegatronConvention:
    container, heading = key[0], key[1]
    if "w/o MTP" in heading:
        return MegatronConvention(mtp=False)
    if _base(heading) == "GPT OSS 120B" and _version(container) < (26, 6):
        return LEGACY_GPT_OSS
    return MEGATRON


@functools.cache
def _models() -> dict[str, ModelSpec]:
    """The 26.08 GB200 catalog's models (every model of the 26.08 suites), read once."""
    return dict(load_catalog("exemplar-gb200-26.08", REFERENCES).spec.models)


def _ours_over_published(key: Key, convention: MegatronConvention) -> float:
    """Our FLOPs per token (the catalog's shape, the row's sequence length and TP) over NVIDIA's."""
    model = _models()[MODELS[_base(key[1])]]
    seq, tp, tokens, tflops = key[6], key[7], key[8], key[9]
    ours = megatron_flops_per_sequence(model.architecture(), seq, convention, tensor_parallel=tp) / seq
    return ours / (tflops * 1e12 / tokens)


def _off(key: Key, convention: MegatronConvention) -> float:
    """How far our FLOPs per token lie outside the range the row's rounded figures allow (0 inside), relative."""
    tokens, tflops = key[8], key[9]
    ours = _ours_over_published(key, convention) * tflops / tokens  # in TFLOP per token x 1e12
    low, high = (tflops - 0.5) / (tokens + 0.5), (tflops + 0.5) / (tokens - 0.5)
    return max(0.0, 1.0 - ours / low, ours / high - 1.0)


@pytest.fixture(scope="module")
def printed(real_samples: Path) -> dict[Key, str]:
    """Every pre-training row the summary prints, by key, with its file and line."""
    return {r.key: f"{r.file}:{r.line}" for r in pretraining_rows(real_samples)}


def test_every_listed_row_is_printed_in_the_summary(printed: dict[Key, str]) -> None:
    missing = [key for keys in ROWS.values() for key in keys if key not in printed]
    assert missing == [] and OUTLIER in printed


def test_the_list_is_every_unrounded_row_of_the_catalog_models(printed: dict[Key, str]) -> None:
    # no row is left out because it fails: the listed rows are all there are
    in_file = {key for key in printed if key[0] in UNROUNDED and _base(key[1]) in MODELS}
    listed = {key for keys in ROWS.values() for key in keys} | {OUTLIER}
    assert in_file == listed
    assert {MODELS[_base(key[1])] for key in listed} == set(ROWS)


@pytest.mark.parametrize("model", sorted(ROWS))
def test_model_flops_reproduce_nvidias_tflops_per_gpu(model: str) -> None:
    off = {key: round(_off(key, _convention(key)), 5) for key in ROWS[model]}
    assert {key: d for key, d in off.items() if d > 3e-3} == {}
    assert len(off) >= 3


def test_the_mtp_switch_explains_the_w_o_mtp_rows() -> None:
    with_mtp = [k for k in ROWS["pretrain_deepseek-v3_671b"] if "w/o MTP" not in k[1]]
    without = [k for k in ROWS["pretrain_deepseek-v3_671b"] if "w/o MTP" in k[1]]
    assert len(with_mtp) >= 10 and len(without) == 4
    # counting the MTP layer where the row has none is 4 % high, leaving it out where the row has it 4 % low
    assert all(_ours_over_published(k, MEGATRON) > 1.035 for k in without)
    assert all(_ours_over_published(k, MegatronConvention(mtp=False)) < 0.965 for k in with_mtp)


def test_the_gpt_oss_conventions_are_told_apart() -> None:
    rows = ROWS["pretrain_gpt_oss_120b"]
    current = [k for k in rows if _version(k[0]) >= (26, 6)]
    legacy = [k for k in rows if _version(k[0]) < (26, 6)]
    assert len(current) == 3 and len(legacy) >= 15
    assert all(_ours_over_published(k, LEGACY_GPT_OSS) < 0.85 for k in current)
    assert all(_ours_over_published(k, MEGATRON) > 1.10 for k in legacy)


def test_the_b300_gpt_oss_row_of_26_02_01_is_the_tables_own_outlier() -> None:
    assert 3e-3 < _off(OUTLIER, LEGACY_GPT_OSS) < 0.015
    per_token = {k: k[9] / k[8] for k in ROWS["pretrain_gpt_oss_120b"] if k[0] == "26.02.01" and k[6] == 4096}
    assert len(per_token) == 4 and max(per_token.values()) / min(per_token.values()) < 1.003
    assert OUTLIER[9] / OUTLIER[8] / max(per_token.values()) > 1.005
