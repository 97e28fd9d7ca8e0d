"""A small decoder-only transformer language model in NumPy: forward, hand-written backward, Adam.

Pre-LayerNorm blocks (causal multi-head self-attention, a GELU MLP), learned token and position
embeddings, a final LayerNorm and an untied output projection; cross-entropy over next-token targets.
The backward pass is checked against finite differences in tests/unit/test_runner_model.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["Adam", "ModelConfig", "corpus", "encode", "init_params", "loss_and_grads", "sample_batch"]

Array = npt.NDArray[Any]
Params = dict[str, Array]
_EPS = 1e-5


@dataclass(frozen=True)
class ModelConfig:
    vocab: int = 32
    seq_len: int = 32
    d_model: int = 48
    heads: int = 4
    d_ff: int = 192
    layers: int = 2

    def n_params(self) -> int:
        return sum(int(v.size) for v in init_params(self, 0).values())


def init_params(cfg: ModelConfig, seed: int, dtype: type = np.float32) -> Params:
    rng = np.random.default_rng(seed)
    d, f, v = cfg.d_model, cfg.d_ff, cfg.vocab

    def w(*shape: int) -> Array:
        return (rng.standard_normal(shape) * 0.02).astype(dtype)

    p: Params = {"tok": w(v, d), "pos": w(cfg.seq_len, d)}
    for i in range(cfg.layers):
        p[f"l{i}.ln1.g"] = np.ones(d, dtype=dtype)
        p[f"l{i}.ln1.b"] = np.zeros(d, dtype=dtype)
        p[f"l{i}.qkv"] = w(d, 3 * d)
        p[f"l{i}.o"] = w(d, d) / math.sqrt(2 * cfg.layers)
        p[f"l{i}.ln2.g"] = np.ones(d, dtype=dtype)
        p[f"l{i}.ln2.b"] = np.zeros(d, dtype=dtype)
        p[f"l{i}.w1"] = w(d, f)
        p[f"l{i}.b1"] = np.zeros(f, dtype=dtype)
        p[f"l{i}.w2"] = w(f, d) / math.sqrt(2 * cfg.layers)
        p[f"l{i}.b2"] = np.zeros(d, dtype=dtype)
    p["lnf.g"] = np.ones(d, dtype=dtype)
    p["lnf.b"] = np.zeros(d, dtype=dtype)
    p["out"] = w(d, v)
    return p


def _ln(x: Array, g: Array, b: Array) -> tuple[Array, tuple[Array, Array, Array]]:
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    inv = 1.0 / np.sqrt(var + _EPS)
    xhat = (x - mu) * inv
    return xhat * g + b, (xhat, inv, g)


def _ln_back(dout: Array, cache: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
    xhat, inv, g = cache
    n = xhat.shape[-1]
    dxhat = dout * g
    dx = inv / n * (n * dxhat - dxhat.sum(-1, keepdims=True) - xhat * (dxhat * xhat).sum(-1, keepdims=True))
    axes = tuple(range(dout.ndim - 1))
    return dx, (dout * xhat).sum(axes), dout.sum(axes)


_C = math.sqrt(2.0 / math.pi)


def _gelu(u: Array) -> tuple[Array, Array]:
    t = np.tanh(_C * (u + 0.044715 * u**3))
    out = 0.5 * u * (1 + t)
    grad = 0.5 * (1 + t) + 0.5 * u * (1 - t**2) * _C * (1 + 3 * 0.044715 * u**2)
    return out, grad


def loss_and_grads(p: Params, cfg: ModelConfig, x: npt.NDArray[np.int64], y: npt.NDArray[np.int64]) -> tuple[
        float, Params]:
    """Mean next-token cross-entropy of a batch (B, T) and the gradient of every parameter."""
    bsz, t = x.shape
    h, dh = cfg.heads, cfg.d_model // cfg.heads
    mask = np.triu(np.ones((t, t), dtype=bool), 1)
    act = p["tok"][x] + p["pos"][:t]
    caches: list[dict[str, Any]] = []
    for i in range(cfg.layers):
        c: dict[str, Any] = {}
        a_in, c["ln1"] = _ln(act, p[f"l{i}.ln1.g"], p[f"l{i}.ln1.b"])
        qkv = a_in @ p[f"l{i}.qkv"]
        q, k, v = (z.reshape(bsz, t, h, dh).transpose(0, 2, 1, 3) for z in np.split(qkv, 3, axis=-1))
        att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh)
        att = np.where(mask, -1e30, att)
        att = att - att.max(-1, keepdims=True)
        pr = np.exp(att)
        pr /= pr.sum(-1, keepdims=True)
        o = (pr @ v).transpose(0, 2, 1, 3).reshape(bsz, t, cfg.d_model)
        act2 = act + o @ p[f"l{i}.o"]
        m_in, c["ln2"] = _ln(act2, p[f"l{i}.ln2.g"], p[f"l{i}.ln2.b"])
        u = m_in @ p[f"l{i}.w1"] + p[f"l{i}.b1"]
        gu, c["dgelu"] = _gelu(u)
        act = act2 + gu @ p[f"l{i}.w2"] + p[f"l{i}.b2"]
        c.update(a_in=a_in, q=q, k=k, v=v, pr=pr, o=o, m_in=m_in, gu=gu)
        caches.append(c)
    hf, lnf = _ln(act, p["lnf.g"], p["lnf.b"])
    logits = hf @ p["out"]
    logits = logits - logits.max(-1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(-1, keepdims=True)
    n = bsz * t
    picked = probs.reshape(n, -1)[np.arange(n), y.reshape(n)]
    loss = float(-np.log(np.maximum(picked, 1e-30)).mean())

    g: Params = {}
    dlogits = probs.copy()
    dlogits.reshape(n, -1)[np.arange(n), y.reshape(n)] -= 1
    dlogits /= n
    g["out"] = hf.reshape(n, -1).T @ dlogits.reshape(n, -1)
    dact, g["lnf.g"], g["lnf.b"] = _ln_back(dlogits @ p["out"].T, lnf)
    for i in reversed(range(cfg.layers)):
        c = caches[i]
        dm = dact
        g[f"l{i}.b2"] = dm.sum((0, 1))
        g[f"l{i}.w2"] = c["gu"].reshape(n, -1).T @ dm.reshape(n, -1)
        du = (dm @ p[f"l{i}.w2"].T) * c["dgelu"]
        g[f"l{i}.b1"] = du.sum((0, 1))
        g[f"l{i}.w1"] = c["m_in"].reshape(n, -1).T @ du.reshape(n, -1)
        dx2, g[f"l{i}.ln2.g"], g[f"l{i}.ln2.b"] = _ln_back(du @ p[f"l{i}.w1"].T, c["ln2"])
        dact2 = dact + dx2
        g[f"l{i}.o"] = c["o"].reshape(n, -1).T @ dact2.reshape(n, -1)
        do = (dact2 @ p[f"l{i}.o"].T).reshape(bsz, t, h, dh).transpose(0, 2, 1, 3)
        pr, q, k, v = c["pr"], c["q"], c["k"], c["v"]
        dv = pr.transpose(0, 1, 3, 2) @ do
        dpr = do @ v.transpose(0, 1, 3, 2)
        datt = pr * (dpr - (dpr * pr).sum(-1, keepdims=True)) / math.sqrt(dh)
        dq = datt @ k
        dk = datt.transpose(0, 1, 3, 2) @ q
        dqkv = np.concatenate([z.transpose(0, 2, 1, 3).reshape(bsz, t, cfg.d_model) for z in (dq, dk, dv)], -1)
        g[f"l{i}.qkv"] = c["a_in"].reshape(n, -1).T @ dqkv.reshape(n, -1)
        dx1, g[f"l{i}.ln1.g"], g[f"l{i}.ln1.b"] = _ln_back(dqkv @ p[f"l{i}.qkv"].T, c["ln1"])
        dact = dact2 + dx1
    g["pos"] = np.zeros_like(p["pos"])
    g["pos"][:t] = dact.sum(0)
    g["tok"] = np.zeros_like(p["tok"])
    np.add.at(g["tok"], x, dact)
    return loss, g


class Adam:
    """Adam with bias correction; its moments are part of the checkpoint."""

    def __init__(self, params: Params, lr: float = 3e-3, betas: tuple[float, float] = (0.9, 0.98)) -> None:
        self.lr, (self.b1, self.b2) = lr, betas
        self.t = 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, params: Params, grads: Params) -> None:
        self.t += 1
        c1, c2 = 1 - self.b1**self.t, 1 - self.b2**self.t
        for k, gr in grads.items():
            self.m[k] = self.b1 * self.m[k] + (1 - self.b1) * gr
            self.v[k] = self.b2 * self.v[k] + (1 - self.b2) * gr * gr
            params[k] -= (self.lr * (self.m[k] / c1) / (np.sqrt(self.v[k] / c2) + 1e-8)).astype(params[k].dtype)


_WORDS = ("the", "node", "job", "rank", "step", "loss", "falls", "runs", "on", "a", "slurm", "cluster",
          "checkpoint", "saved", "resumed", "after", "requeue", "gradient", "reduced", "over", "sockets")


def corpus(seed: int = 7, n_sentences: int = 4000) -> str:
    """A deterministic text with structure a small model can learn (a tiny grammar over a fixed word list)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_sentences):
        a, b, c = rng.integers(0, len(_WORDS), 3)
        out.append(f"the {_WORDS[a]} {_WORDS[b]} on a {_WORDS[c]}. ")
    return "".join(out)


def encode(text: str, vocab: int) -> npt.NDArray[np.int64]:
    chars = sorted(set(text))
    if len(chars) > vocab:
        raise ValueError(f"corpus: expected at most {vocab} distinct characters, got {len(chars)}")
    index = {ch: i for i, ch in enumerate(chars)}
    return np.array([index[ch] for ch in text], dtype=np.int64)


def sample_batch(data: npt.NDArray[np.int64], batch: int, seq_len: int, seed: int) -> tuple[
        npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, data.size - seq_len - 1, batch)
    x = np.stack([data[s:s + seq_len] for s in starts])
    y = np.stack([data[s + 1:s + seq_len + 1] for s in starts])
    return x, y
