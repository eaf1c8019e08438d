#!/usr/bin/env python3
"""Golden-data generator for the Gemma Desk engine (see docs/GOLDENS.md).

Builds four tiny random Gemma 4 text models, a small sentencepiece tokenizer, and for every
model two goldens computed by Hugging Face transformers (the oracle) on the CPU in float32 with
eager attention:

  golden.json / logits.f32          the model as saved (float32, or bf16-rounded for 12b_like)
  golden_fp4.json / logits_fp4.f32  the same model after the package quantization
                                    (FP4-E2M1 g128 linears, FP8-E4M3 per-row embeddings)

Usage (GPU machine, which has torch + transformers; the work itself runs on the CPU):
    python3 tools/make_goldens.py --out DIR
Local checks without torch/transformers (numpy + sentencepiece only):
    python3 tools/make_goldens.py --selftest
    python3 tools/make_goldens.py --numpy-only --out DIR    # same tree, numpy reference as oracle
    python3 tools/make_goldens.py --search 30               # seed statistics with the numpy reference

Everything is deterministic: weights, prompts and training text come from fixed seeds.
"""

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time

import numpy as np

F32 = np.float32

# --------------------------------------------------------------------------------------------
# Constants and model specs
# --------------------------------------------------------------------------------------------

VOCAB = 512
PROMPT_LEN = 40
GEN_LEN = 40
GAP_REL = 1e-2            # every greedy step: top1 - top2 >= GAP_REL * max|logits|
MAX_SEED_TRIES = 40
MIN_UNIQUE = 2            # a greedy continuation must not be one token repeated 40 times
BOS, EOS, PAD, UNK = 2, 1, 0, 3
TOKENIZER_SEED = 20260401

CONTROL_TOKENS = [
    "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>", "<|tool>", "<tool|>",
    "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>',
    "<|image|>", "<|audio|>",
]

SLIDING, FULL = "sliding_attention", "full_attention"
T41 = ([SLIDING] * 4 + [FULL]) * 2          # E2B-style 4:1 pattern, 10 layers
T51 = [SLIDING] * 5 + [FULL]                # 5:1 pattern, 6 layers

COMMON = dict(
    heads=4, head_dim=32, global_head_dim=64, intermediate=128, window=16,
    softcap=30.0, eps=1e-6, vocab=VOCAB,
    rope_sliding_theta=1e4, rope_full_theta=1e6, rope_full_partial=0.25,
)

# seed: first seed tried (picked with --search); the script re-seeds (seed+1, ...) until both goldens
# pass the gap test. embed_std / final_norm_scale: see docs/GOLDENS.md "Weights".
MODELS = [
    dict(name="e2b_like", seed=1004, embed_std=2.0, final_norm_scale=0.1,
         hidden=128, layer_types=T41, kv=2, global_kv=None,
         k_eq_v=False, ple=64, kv_shared=4, double_wide=True, dtype="float32", form="flat",
         what="PLE (P=64, so per_layer_projection has a 64-wide input), KV sharing (last 4 of 10 "
              "layers; sources: layer 5 sliding, layer 4 full), double-wide MLP on shared layers, "
              "4:1 layer pattern, flat config (global_head_dim), float32 single file"),
    dict(name="31b_like", seed=2005, embed_std=0.5, final_norm_scale=0.5,
         hidden=128, layer_types=T51, kv=4, global_kv=2,
         k_eq_v=True, ple=0, kv_shared=0, double_wide=False, dtype="float32", form="wrapped",
         what="attention_k_eq_v (full layers: no v_proj, V = v_norm(raw K)), 2 global KV heads vs 4 "
              "sliding, no PLE, 5:1 pattern, multimodal wrapper config + model.language_model. "
              "tensor prefix, float32 single file"),
    dict(name="12b_like", seed=3007, embed_std=0.12, final_norm_scale=1.0,
         hidden=256, layer_types=T51, kv=2, global_kv=1,
         k_eq_v=True, ple=0, kv_shared=0, double_wide=False, dtype="bfloat16", form="native",
         what="MQA full layers (1 global KV head vs 2 sliding) with k_eq_v, hidden 256 (bf16(sqrt(H)) "
              "= 16 exact), BF16 weights in two safetensors shards + index json, per_layer_config "
              "form as transformers writes it"),
    dict(name="plc_form", seed=4004, embed_std=0.5, final_norm_scale=0.5,
         hidden=128, layer_types=T51, kv=1, global_kv=None,
         k_eq_v=False, ple=0, kv_shared=0, double_wide=False, dtype="float32", form="plc",
         what="per_layer_config config form (no global_head_dim field), MQA on every layer "
              "(k_eq_v off, so full layers keep v_proj and the 1 sliding KV head), float32"),
]

# Initialisation (see docs/GOLDENS.md "Weights").
EMBED_STD = 0.35           # embed_tokens: logits spread over several units
LINEAR_GAIN = 1.0          # linears: std = gain / sqrt(fan_in)
NORM_RANGE = (0.5, 1.5)    # every RMSNorm weight (not ones: catches x*(1+w))
SCALAR_RANGE = (0.5, 1.0)  # layer_scalar


# --------------------------------------------------------------------------------------------
# Per-layer geometry (GEMMA4.md §1.3, §2.6, §2.8)
# --------------------------------------------------------------------------------------------

def layer_geometry(spec):
    types = spec["layer_types"]
    n = len(types)
    first_shared = n - spec["kv_shared"]
    out = []
    for i, t in enumerate(types):
        sliding = t == SLIDING
        d = COMMON["head_dim"] if sliding else COMMON["global_head_dim"]
        if sliding or not spec["k_eq_v"] or spec["global_kv"] is None:
            kv = spec["kv"]
        else:
            kv = spec["global_kv"]
        shared = spec["kv_shared"] > 0 and i >= first_shared
        src = i
        if shared:
            src = max(j for j in range(first_shared) if types[j] == t)
        inter = COMMON["intermediate"] * (2 if (spec["double_wide"] and shared) else 1)
        out.append(dict(layer=i, type=t, sliding=sliding, head_dim=d, kv_heads=kv, shared=shared,
                        kv_source=src, has_v=(not shared) and not (spec["k_eq_v"] and not sliding),
                        intermediate=inter))
    return out


def param_list(spec):
    """(name, shape, kind) of every stored tensor, HF text-model names (prefix 'model.')."""
    H, P, L, V, nH = spec["hidden"], spec["ple"], len(spec["layer_types"]), VOCAB, COMMON["heads"]
    out = []

    def add(name, shape, kind):
        out.append(("model." + name, tuple(shape), kind))

    add("embed_tokens.weight", (V, H), "embed")
    if P:
        add("embed_tokens_per_layer.weight", (V, L * P), "ple_embed")
        add("per_layer_model_projection.weight", (L * P, H), "linear")
        add("per_layer_projection_norm.weight", (P,), "norm")
    add("norm.weight", (H,), "norm")
    for g in layer_geometry(spec):
        b = "layers.%d." % g["layer"]
        d, kv, inter = g["head_dim"], g["kv_heads"], g["intermediate"]
        for nm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                   "post_feedforward_layernorm"):
            add(b + nm + ".weight", (H,), "norm")
        add(b + "layer_scalar", (1,), "scalar")
        add(b + "self_attn.q_proj.weight", (nH * d, H), "linear")
        add(b + "self_attn.q_norm.weight", (d,), "norm")
        if not g["shared"]:
            add(b + "self_attn.k_proj.weight", (kv * d, H), "linear")
            add(b + "self_attn.k_norm.weight", (d,), "norm")
            if g["has_v"]:
                add(b + "self_attn.v_proj.weight", (kv * d, H), "linear")
        add(b + "self_attn.o_proj.weight", (H, nH * d), "linear")
        add(b + "mlp.gate_proj.weight", (inter, H), "linear")
        add(b + "mlp.up_proj.weight", (inter, H), "linear")
        add(b + "mlp.down_proj.weight", (H, inter), "linear")
        if P:
            add(b + "per_layer_input_gate.weight", (P, H), "linear")
            add(b + "per_layer_projection.weight", (H, P), "linear")
            add(b + "post_per_layer_input_norm.weight", (H,), "norm")
    return out


def init_weights(spec, seed):
    """Seeded weights as float32 numpy arrays (bf16-rounded for bf16 models)."""
    rng = np.random.default_rng([seed, 0])
    W = {}
    for name, shape, kind in param_list(spec):
        if kind == "linear":
            w = rng.standard_normal(shape) * (LINEAR_GAIN / math.sqrt(shape[1]))
        elif kind == "embed":
            w = rng.standard_normal(shape) * spec.get("embed_std", EMBED_STD)
        elif kind == "ple_embed":
            w = rng.standard_normal(shape) / math.sqrt(spec["ple"])
        elif kind == "norm":
            w = rng.uniform(NORM_RANGE[0], NORM_RANGE[1], shape)
        elif kind == "scalar":
            w = rng.uniform(SCALAR_RANGE[0], SCALAR_RANGE[1], shape)
        else:
            raise AssertionError(kind)
        W[name] = np.ascontiguousarray(w.astype(F32))
    W["model.norm.weight"] *= F32(spec.get("final_norm_scale", 1.0))
    if spec["dtype"] == "bfloat16":
        W = {k: bf16_round(v) for k, v in W.items()}
    return W


def make_prompt(seed, excluded):
    rng = np.random.default_rng([seed, 1])
    allowed = np.array([i for i in range(4, VOCAB) if i not in excluded], dtype=np.int64)
    return [BOS] + [int(x) for x in rng.choice(allowed, PROMPT_LEN - 1)]


def weights_digest(W):
    h = hashlib.sha256()
    for k in sorted(W):
        h.update(k.encode())
        h.update(np.ascontiguousarray(W[k], "<f4").tobytes())
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# Rounding and the package quantization (numpy float32, the rules of docs/GOLDENS.md)
# --------------------------------------------------------------------------------------------

def bf16_round(x):
    """float32 -> nearest bf16 (ties to even), returned as float32."""
    x = np.ascontiguousarray(x, dtype=F32)
    if not np.all(np.isfinite(x)):
        raise ValueError("bf16_round: non-finite input")
    u = x.view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return r.astype(np.uint32).view(F32).reshape(x.shape)


FP4_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=F32)
FP4_MIDPOINTS = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=F32)
FP4_GROUP = 128


def fp4_code_index(v):
    """Index into FP4_GRID of |v|: nearest, exact midpoints to the even index, >6 saturates."""
    a = np.abs(np.asarray(v, dtype=F32))
    idx = np.zeros(a.shape, dtype=np.int32)
    for k, m in enumerate(FP4_MIDPOINTS):
        # crossing midpoint k moves from index k to k+1; at an exact tie go to the even index
        idx += ((a > m) | ((a == m) & ((k + 1) % 2 == 0))).astype(np.int32)
    return idx


def fp4_quant_dequant(w):
    """FP4-E2M1, one bf16-rounded scale per 128 consecutive inputs of a row. Returns
    (dequantized float32 [out,in], scales float32 [out, ngroups], codes int8 [out,in] signed idx)."""
    w = np.ascontiguousarray(w, dtype=F32)
    rows, cols = w.shape
    ng = (cols + FP4_GROUP - 1) // FP4_GROUP
    deq = np.empty_like(w)
    scales = np.empty((rows, ng), dtype=F32)
    codes = np.empty((rows, cols), dtype=np.int8)
    for g in range(ng):
        blk = w[:, g * FP4_GROUP:(g + 1) * FP4_GROUP]
        absmax = np.max(np.abs(blk), axis=1)
        scale = bf16_round(absmax / F32(6.0))
        zero = scale == 0
        v = blk / np.where(zero, F32(1.0), scale)[:, None]
        idx = fp4_code_index(v)
        idx[zero, :] = 0
        neg = (v < 0) & (idx > 0)
        mag = FP4_GRID[idx]
        signed = np.where(neg, -mag, mag).astype(F32)
        deq[:, g * FP4_GROUP:(g + 1) * FP4_GROUP] = signed * scale[:, None]
        scales[:, g] = scale
        codes[:, g * FP4_GROUP:(g + 1) * FP4_GROUP] = np.where(neg, -idx, idx).astype(np.int8)
    return deq, scales, codes


def e4m3fn_round(x):
    """float32 -> nearest FP8-E4M3FN value (ties to even, saturating at +-448), as float32.
    Normals: 3 mantissa bits, exponent >= -6; subnormals: multiples of 2^-9."""
    x = np.asarray(x, dtype=F32).astype(np.float64)
    m = np.abs(x)
    _, e = np.frexp(m)                      # m = f * 2^e, f in [0.5, 1)
    e = np.maximum(e - 1, -6)               # floor(log2 m), clamped to the subnormal binade
    quantum = np.ldexp(1.0, e - 3)
    r = np.round(m / quantum) * quantum     # np.round: half to even; m/quantum is exact
    r = np.minimum(r, 448.0)
    r = np.where(m == 0, 0.0, r)
    return np.where(x < 0, -r, r).astype(F32)


def fp8_row_quant_dequant(w):
    """FP8-E4M3FN with one float32 scale per row (scale = absmax / 448, not rounded).
    Returns (dequantized float32, scales float32 [rows], e4m3 values float32). Zero -> +0."""
    w = np.ascontiguousarray(w, dtype=F32)
    absmax = np.max(np.abs(w), axis=1)
    scale = absmax / F32(448.0)
    zero = scale == 0
    q = e4m3fn_round(w / np.where(zero, F32(1.0), scale)[:, None])
    q[zero, :] = 0
    deq = (q * scale[:, None]).astype(F32)
    deq[deq == 0] = F32(0.0)                # canonical +0
    q[q == 0] = F32(0.0)
    return deq, scale, q


def quantize_model(spec, W):
    """The package's weights, dequantized: FP4 for decoder linears, FP8 for embedding tables."""
    out, info = {}, {}
    for name, _shape, kind in param_list(spec):
        w = W[name]
        if kind == "linear":
            deq, _s, _c = fp4_quant_dequant(w)
            fmt = "fp4_e2m1_g128"
        elif kind in ("embed", "ple_embed"):
            deq, _s, _q = fp8_row_quant_dequant(w)
            fmt = "fp8_e4m3fn_row"
        else:
            deq, fmt = w.copy(), "float32"
        out[name] = deq
        info[name] = dict(format=fmt, shape=list(w.shape),
                          dequant_sha256=hashlib.sha256(np.ascontiguousarray(deq, "<f4").tobytes()).hexdigest())
    return out, info


def selftest_rounding():
    """Unit checks of the rounding rules (ties) listed in docs/GOLDENS.md."""
    # bf16
    one = 1.0
    cases = [(one, one), (1 + 2 ** -8, one), (1 + 3 * 2 ** -8, 1 + 2 ** -6), (1 + 2 ** -8 + 2 ** -20, 1 + 2 ** -7),
             (-(1 + 2 ** -8), -one), (6.0, 6.0), (2 ** -130, 2 ** -130), (0.0, 0.0)]
    for a, b in cases:
        got = float(bf16_round(np.array([a], F32))[0])
        assert got == F32(b), ("bf16", a, got, b)
    # FP4 magnitudes and ties: with absmax 6 the scale is exactly 1, so v == w
    ties = {0.25: 0.0, 0.75: 1.0, 1.25: 1.0, 1.75: 2.0, 2.5: 2.0, 3.5: 4.0, 5.0: 4.0}
    others = {0.0: 0.0, 0.2: 0.0, 0.26: 0.5, 0.5: 0.5, 0.74: 0.5, 0.76: 1.0, 1.3: 1.5, 2.49: 2.0,
              2.51: 3.0, 3.49: 3.0, 4.99: 4.0, 5.01: 6.0, 6.0: 6.0}
    for table in (ties, others):
        for a, b in table.items():
            for sgn in (1.0, -1.0):
                row = np.zeros((1, 128), F32)
                row[0, 0] = 6.0
                row[0, 1] = sgn * a
                deq, sc, _ = fp4_quant_dequant(row)
                assert sc[0, 0] == 1.0
                exp = sgn * b if b != 0 else 0.0
                assert deq[0, 1] == exp, ("fp4", sgn * a, deq[0, 1], exp)
                if b == 0:
                    assert not np.signbit(deq[0, 1]), "fp4 zero must be +0"
    # saturation above 6 (scale rounded down): absmax 6.0234375 -> scale bf16(1.00390625) = 1.0
    row = np.zeros((1, 128), F32)
    row[0, 0] = 6.0234375
    deq, sc, _ = fp4_quant_dequant(row)
    assert sc[0, 0] == 1.0 and deq[0, 0] == 6.0, (sc, deq[0, 0])
    # zero group, partial group, scale rounding to bf16
    deq, sc, _ = fp4_quant_dequant(np.zeros((2, 200), F32))
    assert sc.shape == (2, 2) and np.all(sc == 0) and np.all(deq == 0) and not np.any(np.signbit(deq))
    row = np.zeros((1, 64), F32)
    row[0, 0] = 1.0
    deq, sc, _ = fp4_quant_dequant(row)
    assert sc[0, 0] == bf16_round(np.array([1.0 / 6.0], F32))[0] and sc.shape == (1, 1)
    # second group uses its own scale
    row = np.zeros((1, 256), F32)
    row[0, 0], row[0, 128], row[0, 129] = 6.0, 3.0, 0.75
    deq, sc, _ = fp4_quant_dequant(row)
    assert sc[0, 0] == 1.0 and sc[0, 1] == 0.5 and deq[0, 129] == 0.75, (sc, deq[0, 129])
    # E4M3FN rounding: normals, subnormals, ties to even, saturation
    e = {1.0: 1.0, 1.0625: 1.0, 1.1875: 1.25, 1.125: 1.125, 448.0: 448.0, 449.0: 448.0, 470.0: 448.0,
         2 ** -9: 2 ** -9, 2 ** -10: 0.0, 3 * 2 ** -10: 2 ** -8, 5 * 2 ** -10: 2 ** -8, 2 ** -6: 2 ** -6,
         2 ** -6 + 2 ** -10: 2 ** -6, 2 ** -6 + 3 * 2 ** -10: 2 ** -6 + 2 ** -8, 0.0: 0.0,
         15.5: 16.0, 17.0: 16.0, 19.0: 20.0, 240.0: 240.0, 248.0: 256.0, 232.0: 224.0, 0.3: 0.3125}
    for a, b in e.items():
        for sgn in (1.0, -1.0):
            got = float(e4m3fn_round(np.array([sgn * a], F32))[0])
            assert got == sgn * b, ("e4m3", sgn * a, got, sgn * b)
    # FP8 per-row: absmax 448 -> scale 1
    row = np.array([[448.0, 1.0625, -3 * 2 ** -10, 0.0]], F32)
    deq, sc, _ = fp8_row_quant_dequant(row)
    assert sc[0] == 1.0 and list(deq[0]) == [448.0, 1.0, -(2 ** -8), 0.0]
    deq, sc, _ = fp8_row_quant_dequant(np.zeros((1, 8), F32))
    assert sc[0] == 0 and np.all(deq == 0) and not np.any(np.signbit(deq))
    return True


# --------------------------------------------------------------------------------------------
# Independent numpy reference of GEMMA4.md (cross-check of transformers; float32)
# --------------------------------------------------------------------------------------------

def _rms(x, w, eps):
    v = np.mean(x * x, axis=-1, keepdims=True)
    y = x * np.power(v + F32(eps), F32(-0.5))
    return y if w is None else y * w


def _gelu_tanh(x):
    return F32(0.5) * x * (F32(1.0) + np.tanh(F32(math.sqrt(2.0 / math.pi)) * (x + F32(0.044715) * x * x * x)))


def _rope_tables(S):
    pos = np.arange(S, dtype=F32)[:, None]
    d = COMMON["head_dim"]
    inv_s = F32(1.0) / (F32(COMMON["rope_sliding_theta"]) ** (np.arange(0, d, 2).astype(F32) / F32(d)))
    g = COMMON["global_head_dim"]
    ang = int(COMMON["rope_full_partial"] * g // 2)
    inv_f = np.zeros(g // 2, F32)
    inv_f[:ang] = F32(1.0) / (F32(COMMON["rope_full_theta"]) ** (np.arange(0, 2 * ang, 2).astype(F32) / F32(g)))
    tabs = {}
    for t, inv in ((SLIDING, inv_s), (FULL, inv_f)):
        fr = pos * inv[None, :]
        emb = np.concatenate([fr, fr], axis=-1)
        tabs[t] = (np.cos(emb).astype(F32), np.sin(emb).astype(F32))
    return tabs


def _rope(x, cs):
    cos, sin = cs
    h = x.shape[-1] // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def np_forward(spec, W, ids):
    """Logits [S, V] (after softcap) for a token sequence, written from GEMMA4.md."""
    ids = np.asarray(ids, dtype=np.int64)
    S, H, P, L = len(ids), spec["hidden"], spec["ple"], len(spec["layer_types"])
    nH, eps, win = COMMON["heads"], COMMON["eps"], COMMON["window"]
    p = "model."
    x = W[p + "embed_tokens.weight"][ids] * F32(math.sqrt(H))
    if P:
        tok = (W[p + "embed_tokens_per_layer.weight"][ids] * F32(math.sqrt(P))).reshape(S, L, P)
        ctx = (x @ W[p + "per_layer_model_projection.weight"].T) * F32(H ** -0.5)
        ctx = _rms(ctx.reshape(S, L, P), W[p + "per_layer_projection_norm.weight"], eps)
        pli = (ctx + tok) * F32(2.0 ** -0.5)
    tabs = _rope_tables(S)
    qi, kj = np.arange(S)[:, None], np.arange(S)[None, :]
    masks = {FULL: kj <= qi, SLIDING: (kj <= qi) & (kj > qi - win)}
    published = {}
    for g in layer_geometry(spec):
        b = p + "layers.%d." % g["layer"]
        t, d = g["type"], g["head_dim"]
        xn = _rms(x, W[b + "input_layernorm.weight"], eps)
        q = (xn @ W[b + "self_attn.q_proj.weight"].T).reshape(S, nH, d)
        q = _rope(_rms(q, W[b + "self_attn.q_norm.weight"], eps), tabs[t])
        if g["shared"]:
            k, v = published[t]
        else:
            kr = (xn @ W[b + "self_attn.k_proj.weight"].T).reshape(S, g["kv_heads"], d)
            vr = (xn @ W[b + "self_attn.v_proj.weight"].T).reshape(S, g["kv_heads"], d) if g["has_v"] else kr
            k = _rope(_rms(kr, W[b + "self_attn.k_norm.weight"], eps), tabs[t])
            v = _rms(vr, None, eps)
            published[t] = (k, v)   # the last non-shared layer of each type is the source
        grp = nH // k.shape[1]
        o = np.empty((S, nH, d), F32)
        for h in range(nH):
            sc = q[:, h, :] @ k[:, h // grp, :].T
            sc = np.where(masks[t], sc, -np.inf)
            sc = np.exp(sc - sc.max(axis=-1, keepdims=True))
            o[:, h, :] = (sc / sc.sum(axis=-1, keepdims=True)).astype(F32) @ v[:, h // grp, :]
        a = o.reshape(S, nH * d) @ W[b + "self_attn.o_proj.weight"].T
        x = x + _rms(a, W[b + "post_attention_layernorm.weight"], eps)
        m = _rms(x, W[b + "pre_feedforward_layernorm.weight"], eps)
        m = (_gelu_tanh(m @ W[b + "mlp.gate_proj.weight"].T) * (m @ W[b + "mlp.up_proj.weight"].T)) \
            @ W[b + "mlp.down_proj.weight"].T
        x = x + _rms(m, W[b + "post_feedforward_layernorm.weight"], eps)
        if P:
            gt = _gelu_tanh(x @ W[b + "per_layer_input_gate.weight"].T) * pli[:, g["layer"], :]
            x = x + _rms(gt @ W[b + "per_layer_projection.weight"].T, W[b + "post_per_layer_input_norm.weight"], eps)
        x = x * W[b + "layer_scalar"]
    h = _rms(x, W[p + "norm.weight"], eps)
    z = h @ W[p + "embed_tokens.weight"].T
    c = F32(COMMON["softcap"])
    return (c * np.tanh(z / c)).astype(F32)


# --------------------------------------------------------------------------------------------
# Greedy decoding without a KV cache, gap test
# --------------------------------------------------------------------------------------------

def greedy_nocache(last_logits_fn, prompt, n, stop_on_fail=False):
    """Repeated full forward, argmax of the last row. Returns (ids, min_gap_abs, min_gap_rel, ok)."""
    ids = list(prompt)
    out, min_abs, min_rel, ok = [], float("inf"), float("inf"), True
    for _ in range(n):
        lg = np.asarray(last_logits_fn(ids), dtype=F32)
        order = np.argsort(-lg, kind="stable")
        top1, top2 = float(lg[order[0]]), float(lg[order[1]])
        gap, mx = top1 - top2, float(np.max(np.abs(lg)))
        min_abs, min_rel = min(min_abs, gap), min(min_rel, gap / mx)
        if gap < GAP_REL * mx:
            ok = False
            if stop_on_fail:
                break
        nxt = int(order[0])
        out.append(nxt)
        ids.append(nxt)
    return out, min_abs, min_rel, ok


# --------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------

WORDS = (
    "the a an and or but if then when while because so of to in on at by for with from about "
    "over under after before between into through during without within model token window cache "
    "layer head query key value attention norm scale weight matrix vector engine kernel memory "
    "device screen window garden river mountain city village morning evening winter summer light "
    "shadow water stone bread coffee tea music story letter number question answer reason idea "
    "friend teacher student doctor artist farmer writer child people house road bridge station "
    "is are was were be been has have had do does did can could will would should may might must "
    "run runs ran walk walks walked read reads write writes wrote think thinks thought see sees saw "
    "make makes made take takes took give gives gave find finds found keep keeps kept begin began "
    "small large quick slow bright dark warm cold quiet loud early late simple careful happy tired "
    "green blue red yellow white black old new young long short high low first last next every "
    "very often never always sometimes quickly slowly carefully together again still already "
    "café naïve résumé über"
).split()


def training_lines(seed, n_bytes=320_000):
    r = random.Random(seed)
    lines, size = [], 0
    while size < n_bytes:
        n = r.randint(3, 14)
        words = [r.choice(WORDS) for _ in range(n)]
        if r.random() < 0.15:
            words.insert(r.randint(0, n), str(r.randint(0, 99999)))
        if r.random() < 0.2:
            words.insert(r.randint(1, n), r.choice(WORDS) + ",")
        words[0] = words[0][:1].upper() + words[0][1:]
        s = " ".join(words) + r.choice([".", ".", ".", "?", "!", ":", ";"])
        if r.random() < 0.1:
            s = s + " " + r.choice(["(yes)", "\"ok\"", "'no'", "- done", "[1]", "{x}"])
        lines.append(s)
        size += len(s.encode("utf-8")) + 1
    return lines


def train_tokenizer(workdir):
    import sentencepiece as spm
    txt = os.path.join(workdir, "train.txt")
    with open(txt, "w", encoding="utf-8") as f:
        f.write("\n".join(training_lines(TOKENIZER_SEED)) + "\n")
    prefix = os.path.join(workdir, "tok")
    spm.SentencePieceTrainer.train(
        input=txt, model_prefix=prefix, vocab_size=VOCAB, model_type="bpe", byte_fallback=True,
        add_dummy_prefix=False, remove_extra_whitespaces=False, normalization_rule_name="identity",
        pad_id=PAD, eos_id=EOS, bos_id=BOS, unk_id=UNK, pad_piece="<pad>", eos_piece="<eos>",
        bos_piece="<bos>", unk_piece="<unk>", user_defined_symbols=CONTROL_TOKENS, num_threads=1,
        character_coverage=1.0, hard_vocab_limit=True, minloglevel=2)
    path = prefix + ".model"
    with open(path, "rb") as f:
        buf = f.read()
    with open(path, "wb") as f:
        f.write(strip_trainer_paths(buf))
    return path


def strip_trainer_paths(buf):
    """Drops TrainerSpec.input and .model_prefix (the temporary training paths) from a serialized
    sentencepiece ModelProto, so the file depends only on the training text and options."""
    out = bytearray()
    for field, wt, val, raw in _proto_fields_raw(buf):
        if field == 2 and wt == 2:             # ModelProto.trainer_spec
            spec = bytearray()
            for f2, wt2, _v2, raw2 in _proto_fields_raw(val):
                if f2 in (1, 2) and wt2 == 2:  # input, model_prefix
                    continue
                spec += raw2
            out += _encode_varint((2 << 3) | 2) + _encode_varint(len(spec)) + spec
        else:
            out += raw
    return bytes(out)


def _encode_varint(v):
    b = bytearray()
    while True:
        if v < 0x80:
            b.append(v)
            return bytes(b)
        b.append((v & 0x7F) | 0x80)
        v >>= 7


TOKENIZER_TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "trailing spaces  ",
    "two\nlines\n\nand a blank one",
    "tabs\tand  double  spaces",
    "café ☕ 日本",
    "emoji 😀👍🏽 and ZWJ 👩‍💻",
    "<|turn>user\nHi there<turn|>\n<|turn>model\n",
    "<bos>text that contains <bos> and <eos> as plain text",
    "a<|turn>b<turn|>c",
    "<|channel>thought\n<channel|>The answer is 42.",
    '<|tool_call>call:f{x:<|"|>hi<|"|>}<tool_call|>',
    "numbers 12345 and 3.14159",
    "",
    "   ",
    "Über naïve résumé Ж €",
]


def tokenizer_cases(model_path):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=model_path)
    assert sp.get_piece_size() == VOCAB, sp.get_piece_size()
    ids = {p: sp.piece_to_id(p) for p in ["<pad>", "<eos>", "<bos>", "<unk>"] + CONTROL_TOKENS}
    assert ids["<pad>"] == PAD and ids["<eos>"] == EOS and ids["<bos>"] == BOS and ids["<unk>"] == UNK
    cases = []
    for t in TOKENIZER_TEXTS:
        enc = [int(i) for i in sp.encode(t)]
        cases.append(dict(text=t, ids=enc, pieces=[sp.id_to_piece(i) for i in enc],
                          decoded_roundtrip=sp.decode(enc) == t))
    types = piece_types(model_path)
    assert len(types) == VOCAB
    kinds = {}
    for t in types:
        kinds[t] = kinds.get(t, 0) + 1
    for p, i in ids.items():
        want = "user_defined" if p in CONTROL_TOKENS else "unknown" if p == "<unk>" else "control"
        assert types[i] == want, (p, i, types[i])
    return dict(
        sentencepiece_version=getattr(spm, "__version__", "?"),
        vocab_size=VOCAB,
        special_ids={p: ids[p] for p in ["<pad>", "<eos>", "<bos>", "<unk>"]},
        control_token_ids={p: ids[p] for p in CONTROL_TOKENS},
        piece_kind_counts=kinds,
        note=("ids are sentencepiece encode(text) with no BOS added. The control tokens are "
              "USER_DEFINED pieces in this tokenizer, so sentencepiece matches them inside raw text."),
        cases=cases,
    )


PIECE_TYPES = {1: "normal", 2: "unknown", 3: "control", 4: "user_defined", 5: "unused", 6: "byte"}


def _varint(buf, pos):
    val, shift = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        val |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return val, pos


def _proto_fields(buf):
    """(field number, wire type, value) of one protobuf message (varint / 64-bit / bytes / 32-bit)."""
    for field, wt, val, _raw in _proto_fields_raw(buf):
        yield field, wt, val


def _proto_fields_raw(buf):
    """As _proto_fields, plus the field's raw bytes (key included)."""
    pos = 0
    while pos < len(buf):
        start = pos
        key, pos = _varint(buf, pos)
        field, wt = key >> 3, key & 7
        if wt == 0:
            val, pos = _varint(buf, pos)
        elif wt == 1:
            val, pos = buf[pos:pos + 8], pos + 8
        elif wt == 2:
            n, pos = _varint(buf, pos)
            val, pos = buf[pos:pos + n], pos + n
        elif wt == 5:
            val, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError("unsupported wire type %d" % wt)
        yield field, wt, val, buf[start:pos]


def piece_types(model_path):
    """Piece types read straight from tokenizer.model (ModelProto.pieces = field 1, type = field 3)."""
    with open(model_path, "rb") as f:
        buf = f.read()
    out = []
    for field, wt, val in _proto_fields(buf):
        if field == 1 and wt == 2:
            t = 1
            for f2, wt2, v2 in _proto_fields(val):
                if f2 == 3 and wt2 == 0:
                    t = v2
            out.append(PIECE_TYPES.get(t, str(t)))
    return out


def excluded_prompt_ids(model_path):
    return {i for i, t in enumerate(piece_types(model_path)) if t in ("control", "unknown", "user_defined")}


def fixed_excluded_ids():
    """What excluded_prompt_ids must return: ids 0..3 special, 4..17 the control tokens."""
    return set(range(4 + len(CONTROL_TOKENS)))


# --------------------------------------------------------------------------------------------
# File helpers
# --------------------------------------------------------------------------------------------

def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")


def write_hf_config(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_logits(path, rows):
    rows = np.ascontiguousarray(rows, dtype="<f4")
    rows.tofile(path)
    return hashlib.sha256(rows.tobytes()).hexdigest()


def geometry_summary(spec):
    return dict(
        hidden_size=spec["hidden"], num_hidden_layers=len(spec["layer_types"]),
        num_attention_heads=COMMON["heads"], head_dim=COMMON["head_dim"],
        global_head_dim=COMMON["global_head_dim"], num_key_value_heads=spec["kv"],
        num_global_key_value_heads=spec["global_kv"], attention_k_eq_v=spec["k_eq_v"],
        intermediate_size=COMMON["intermediate"], hidden_size_per_layer_input=spec["ple"],
        num_kv_shared_layers=spec["kv_shared"], use_double_wide_mlp=spec["double_wide"],
        sliding_window=COMMON["window"], final_logit_softcapping=COMMON["softcap"],
        vocab_size=VOCAB, weights_dtype=spec["dtype"], config_form=spec["form"],
        layers=[{k: g[k] for k in ("type", "head_dim", "kv_heads", "shared", "kv_source", "has_v",
                                   "intermediate")} for g in layer_geometry(spec)],
    )


# --------------------------------------------------------------------------------------------
# Seed choice (shared by the numpy and the transformers paths)
# --------------------------------------------------------------------------------------------

def choose_seed(spec, excluded, last_logits_factory, log):
    """First seed >= spec['seed'] whose greedy runs (plain and FP4) pass the gap test and are not a
    single repeated token."""
    for k in range(MAX_SEED_TRIES):
        seed = spec["seed"] + k
        W = init_weights(spec, seed)
        prompt = make_prompt(seed, excluded)
        Wq, _ = quantize_model(spec, W)
        ok_all = True
        for tag, ww in (("plain", W), ("fp4", Wq)):
            ids, _ga, grel, ok = greedy_nocache(last_logits_factory(ww), prompt, GEN_LEN, stop_on_fail=True)
            if not ok:
                log("  %s seed %d: %s greedy fails the gap test (rel gap %.2e)" % (spec["name"], seed, tag, grel))
                ok_all = False
                break
            if len(set(ids)) < MIN_UNIQUE:
                log("  %s seed %d: %s greedy repeats one token" % (spec["name"], seed, tag))
                ok_all = False
                break
        if ok_all:
            return seed, k + 1, W, Wq, prompt
    raise RuntimeError("%s: no seed passed in %d tries" % (spec["name"], MAX_SEED_TRIES))


# --------------------------------------------------------------------------------------------
# Local modes (no torch)
# --------------------------------------------------------------------------------------------

def np_last_logits_factory(spec):
    def factory(W):
        return lambda ids: np_forward(spec, W, ids)[-1]
    return factory


def run_search(n, only=None, embed_std=None, final_scale=None, start=0):
    excluded = fixed_excluded_ids()
    for spec in MODELS:
        if only and spec["name"] != only:
            continue
        spec = dict(spec)
        if embed_std is not None:
            spec["embed_std"] = embed_std
        if final_scale is not None:
            spec["final_norm_scale"] = final_scale
        spec["seed"] += start
        fac = np_last_logits_factory(spec)
        for k in range(n):
            seed = spec["seed"] + k
            W = init_weights(spec, seed)
            prompt = make_prompt(seed, excluded)
            Wq, _ = quantize_model(spec, W)
            res = []
            for ww in (W, Wq):
                ids, ga, gr, ok = greedy_nocache(fac(ww), prompt, GEN_LEN)
                mx = float(np.max(np.abs(np_forward(spec, ww, prompt + ids[:-1]))))
                res.append((ok, gr, len(set(ids)), ids[:12], mx))
            good = res[0][0] and res[1][0] and min(res[0][2], res[1][2]) >= MIN_UNIQUE
            print("%s seed %d %s: plain ok=%d rel=%.4f uniq=%d max=%.1f %s | fp4 ok=%d rel=%.4f uniq=%d max=%.1f %s" % (
                spec["name"], seed, "GOOD" if good else "----", res[0][0], res[0][1], res[0][2], res[0][4],
                res[0][3], res[1][0], res[1][1], res[1][2], res[1][4], res[1][3]), flush=True)


def file_size_report(out):
    total = 0
    for root, _dirs, files in os.walk(out):
        for fn in files:
            total += os.path.getsize(os.path.join(root, fn))
    return total


# --------------------------------------------------------------------------------------------
# transformers path
# --------------------------------------------------------------------------------------------

class HF:
    """Lazy holder of torch / transformers (absent on the development machine)."""

    def __init__(self):
        import torch
        import transformers
        from transformers import Gemma4ForCausalLM, Gemma4TextConfig, GenerationConfig
        torch.set_num_threads(1)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.torch, self.transformers = torch, transformers
        self.Model, self.Config, self.GenerationConfig = Gemma4ForCausalLM, Gemma4TextConfig, GenerationConfig

    def config(self, spec):
        kw = dict(
            vocab_size=VOCAB, hidden_size=spec["hidden"], intermediate_size=COMMON["intermediate"],
            num_hidden_layers=len(spec["layer_types"]), num_attention_heads=COMMON["heads"],
            num_key_value_heads=spec["kv"], head_dim=COMMON["head_dim"],
            global_head_dim=COMMON["global_head_dim"], hidden_activation="gelu_pytorch_tanh",
            max_position_embeddings=2048, rms_norm_eps=COMMON["eps"], pad_token_id=PAD,
            eos_token_id=EOS, bos_token_id=BOS, tie_word_embeddings=True, attention_bias=False,
            sliding_window=COMMON["window"], layer_types=list(spec["layer_types"]),
            final_logit_softcapping=COMMON["softcap"], vocab_size_per_layer_input=VOCAB,
            hidden_size_per_layer_input=spec["ple"], attention_k_eq_v=spec["k_eq_v"],
            num_kv_shared_layers=spec["kv_shared"], use_double_wide_mlp=spec["double_wide"],
        )
        if spec["global_kv"] is not None:
            kw["num_global_key_value_heads"] = spec["global_kv"]
        cfg = self.Config(**kw)
        try:
            cfg._attn_implementation = "eager"
        except Exception:  # noqa: BLE001 - older/newer API, checked below
            pass
        return cfg

    def new_model(self, cfg):
        try:
            model = self.Model._from_config(cfg, attn_implementation="eager", dtype=self.torch.float32)
        except TypeError:
            model = self.Model._from_config(cfg, attn_implementation="eager", torch_dtype=self.torch.float32)
        model.eval()
        self.attn_impl = getattr(model.config, "_attn_implementation", None)
        if self.attn_impl != "eager":
            raise RuntimeError("attention implementation is %r, not eager" % self.attn_impl)
        return model

    def load_pretrained(self, path):
        try:
            model = self.Model.from_pretrained(path, attn_implementation="eager", dtype=self.torch.float32)
        except TypeError:
            model = self.Model.from_pretrained(path, attn_implementation="eager", torch_dtype=self.torch.float32)
        model.eval()
        impl = getattr(model.config, "_attn_implementation", None)
        if impl != "eager":
            raise RuntimeError("reloaded model uses attention %r, not eager" % impl)
        return model

    def check_names(self, model, spec):
        sd = model.state_dict()
        mine = {n: s for n, s, _k in param_list(spec)}
        params = dict(model.named_parameters())
        missing = sorted(set(mine) - set(sd))
        extra = sorted(set(sd) - set(mine) - {"lm_head.weight"})
        bad_shape = [(n, tuple(sd[n].shape), mine[n]) for n in mine if n in sd and tuple(sd[n].shape) != mine[n]]
        extra_params = [n for n in extra if n in params]
        if missing or bad_shape or extra_params:
            raise RuntimeError("tensor table mismatch: missing=%s shape=%s extra_params=%s" % (
                missing, bad_shape, extra_params))
        return extra

    def set_weights(self, model, W):
        torch = self.torch
        sd = model.state_dict()
        with torch.no_grad():
            for n, arr in W.items():
                sd[n].copy_(torch.from_numpy(np.ascontiguousarray(arr)))
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "lm_head not tied"

    def logits(self, model, ids):
        torch = self.torch
        with torch.no_grad():
            out = model(input_ids=torch.tensor([list(ids)], dtype=torch.long), use_cache=False)
        return out.logits[0].float().numpy().copy()

    def last_logits_factory(self, model):
        def factory(W):
            self.set_weights(model, W)
            return lambda ids: self.logits(model, ids)[-1]
        return factory

    def generate(self, model, prompt):
        torch = self.torch
        gc = self.GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=GEN_LEN, eos_token_id=None,
                                   pad_token_id=PAD, bos_token_id=BOS, use_cache=True,
                                   return_dict_in_generate=True, output_logits=True)
        saved_eos = model.generation_config.eos_token_id
        model.generation_config.eos_token_id = None     # never stop at EOS
        ids = torch.tensor([list(prompt)], dtype=torch.long)
        try:
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gc)
        finally:
            model.generation_config.eos_token_id = saved_eos
        seq = [int(t) for t in out.sequences[0, len(prompt):]]
        lg = torch.stack([x[0] for x in out.logits]).float().numpy()
        return seq, lg


def rewrite_flat(cfg_dict, spec):
    """config dict as transformers wrote it -> flat form (global_head_dim, num_global_key_value_heads),
    after checking that every per_layer_config entry says exactly what the flat fields say."""
    d = dict(cfg_dict)
    plc = d.pop("per_layer_config", None)
    ghd = COMMON["global_head_dim"]
    gkv = spec["global_kv"] if spec["k_eq_v"] else None
    if plc is not None:
        types = spec["layer_types"]
        want = {SLIDING: dict(head_dim=COMMON["head_dim"], num_key_value_heads=spec["kv"]),
                FULL: dict(head_dim=ghd, num_key_value_heads=spec["global_kv"]
                           if (spec["k_eq_v"] and spec["global_kv"] is not None) else spec["kv"])}
        seen_full = set()
        for key, entry in plc.items():
            key = str(key)
            if key.isdigit():
                t = types[int(key)]
                if t == FULL:
                    seen_full.add(int(key))
            elif key in want:
                t = key
            else:
                raise RuntimeError("per_layer_config: unexpected key %r" % key)
            for field, val in (entry or {}).items():
                if not (want[t].get(field, d.get(field)) == val):
                    raise RuntimeError("per_layer_config[%s].%s = %r is not expressible in flat form" % (key, field, val))
        missing = [i for i, t in enumerate(types) if t == FULL and i not in seen_full]
        if missing and not any(str(k) == FULL for k in plc):
            raise RuntimeError("per_layer_config has no entry for full layers %s" % missing)
    # transformers >= 5.15 may leave the per-layer attributes out of the global dict
    d.setdefault("head_dim", COMMON["head_dim"])
    d.setdefault("num_key_value_heads", spec["kv"])
    d["global_head_dim"] = ghd
    d["num_global_key_value_heads"] = gkv
    return d


def save_safetensors_np(path, tensors, dtype):
    """tensors: name -> float32 numpy; dtype 'float32' or 'bfloat16'. Writes via safetensors.torch."""
    import torch
    from safetensors.torch import save_file
    tt = {}
    for n, a in tensors.items():
        t = torch.from_numpy(np.ascontiguousarray(a))
        if dtype == "bfloat16":
            t16 = t.to(torch.bfloat16)
            assert torch.equal(t16.float(), t), n   # values were bf16-rounded already
            t = t16
        tt[n] = t.contiguous()
    save_file(tt, path, metadata={"format": "pt"})


def read_safetensors_np(path):
    from safetensors.torch import load_file
    return {k: v.float().numpy() for k, v in load_file(path).items()}


def write_hf_folder(hf, spec, W, model, folder, tok_path, log, findings):
    """Writes DIR/<name>/hf in the model's form and proves it reloads to the same logits."""
    os.makedirs(folder, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="g4hf_")
    model.save_pretrained(tmp)
    with open(os.path.join(tmp, "config.json"), encoding="utf-8") as f:
        written = json.load(f)
    notes = dict(native_config_has_per_layer_config="per_layer_config" in written,
                 native_config_has_head_dim="head_dim" in written,
                 native_config_has_num_key_value_heads="num_key_value_heads" in written,
                 native_config_has_global_head_dim="global_head_dim" in written,
                 native_per_layer_config=written.get("per_layer_config"),
                 save_pretrained_files=sorted(os.listdir(tmp)))
    form = spec["form"]
    if form in ("flat", "wrapped"):
        flat = rewrite_flat(written, spec)
        write_hf_config(os.path.join(tmp, "config.json"), flat)
        notes["flat_rewrite"] = True
    elif form == "plc":
        if "per_layer_config" not in written or "global_head_dim" in written:
            findings.append("%s: transformers did not write a pure per_layer_config form (keys: %s)" % (
                spec["name"], sorted(written)))
            raise RuntimeError("plc_form: config.json is not in per_layer_config form")
    # the stored tensors must be exactly W
    st_files = sorted(fn for fn in os.listdir(tmp) if fn.endswith(".safetensors"))
    stored = {}
    for fn in st_files:
        stored.update(read_safetensors_np(os.path.join(tmp, fn)))
    notes["saved_tensor_names_extra"] = sorted(set(stored) - set(W))
    for n, a in W.items():
        if n not in stored or not np.array_equal(stored[n], a):
            raise RuntimeError("save_pretrained did not store %s as given" % n)
    if form == "wrapped":
        text_cfg = json.load(open(os.path.join(tmp, "config.json"), encoding="utf-8"))
        text_cfg.pop("architectures", None)
        text_cfg.pop("transformers_version", None)
        # proof on the flat text-only folder first (transformers can load it)
        m2 = hf.load_pretrained(tmp)
        notes["reload_flat_text_folder"] = "ok"
        reload_model = m2
        cfg = {"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"],
               "text_config": text_cfg, "tie_word_embeddings": True,
               "transformers_version": hf.transformers.__version__}
        write_hf_config(os.path.join(folder, "config.json"), cfg)
        renamed = {"model.language_model." + n[len("model."):]: a for n, a in W.items()}
        save_safetensors_np(os.path.join(folder, "model.safetensors"), renamed, "float32")
    elif spec["dtype"] == "bfloat16":
        cfg = json.load(open(os.path.join(tmp, "config.json"), encoding="utf-8"))
        if "dtype" in cfg or "torch_dtype" not in cfg:
            cfg["dtype"] = "bfloat16"
        if "torch_dtype" in cfg:
            cfg["torch_dtype"] = "bfloat16"
        write_hf_config(os.path.join(folder, "config.json"), cfg)
        names = [n for n, _s, _k in param_list(spec)]
        sizes = [W[n].size * 2 for n in names]
        total, acc, cut = sum(sizes), 0, len(names)
        for i, s in enumerate(sizes):
            acc += s
            if acc >= total / 2:
                cut = i + 1
                break
        shards = [names[:cut], names[cut:]]
        weight_map = {}
        for si, part in enumerate(shards):
            fn = "model-%05d-of-%05d.safetensors" % (si + 1, len(shards))
            save_safetensors_np(os.path.join(folder, fn), {n: W[n] for n in part}, "bfloat16")
            weight_map.update({n: fn for n in part})
        write_hf_config(os.path.join(folder, "model.safetensors.index.json"),
                        {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})
        reload_model = hf.load_pretrained(folder)
    else:
        for fn in os.listdir(tmp):
            shutil.copy(os.path.join(tmp, fn), os.path.join(folder, fn))
        reload_model = hf.load_pretrained(folder)
    shutil.copy(tok_path, os.path.join(folder, "tokenizer.model"))
    shutil.rmtree(tmp, ignore_errors=True)
    final_cfg = json.load(open(os.path.join(folder, "config.json"), encoding="utf-8"))
    tc = final_cfg.get("text_config", final_cfg)
    notes["final_config_has_per_layer_config"] = "per_layer_config" in tc
    notes["final_config_has_global_head_dim"] = "global_head_dim" in tc
    if form in ("flat", "wrapped"):
        assert "per_layer_config" not in tc and "global_head_dim" in tc and "num_global_key_value_heads" in tc
    if form in ("plc", "native"):
        notes["plc_without_global_head_dim"] = "per_layer_config" in tc and "global_head_dim" not in tc
    return reload_model, notes


def try_wrapped_load(hf, folder, ids, rows, log):
    """Optional: load the wrapped folder with Gemma4ForConditionalGeneration (text-only input)."""
    try:
        from transformers import Gemma4ForConditionalGeneration
        torch = hf.torch
        try:
            m = Gemma4ForConditionalGeneration.from_pretrained(folder, attn_implementation="eager",
                                                               dtype=torch.float32)
        except TypeError:
            m = Gemma4ForConditionalGeneration.from_pretrained(folder, attn_implementation="eager",
                                                               torch_dtype=torch.float32)
        m.eval()
        with torch.no_grad():
            lg = m(input_ids=torch.tensor([list(ids)]), use_cache=False).logits[0].float().numpy()
        return dict(status="ok", max_abs_diff=float(np.max(np.abs(lg - rows))))
    except Exception as e:  # noqa: BLE001 - informational only
        return dict(status="error", error="%s: %s" % (type(e).__name__, str(e)[:300]))


def golden_for_variant(spec, W, prompt, seed, attempts, hf, model, log, variant, versions):
    """Greedy (no cache), full-forward rows, numpy cross-check and generate() cross-check."""
    if hf is not None:
        hf.set_weights(model, W)
        last = lambda ids: hf.logits(model, ids)[-1]  # noqa: E731
        full = lambda ids: hf.logits(model, ids)      # noqa: E731
    else:
        last = lambda ids: np_forward(spec, W, ids)[-1]  # noqa: E731
        full = lambda ids: np_forward(spec, W, ids)      # noqa: E731
    greedy, gap_abs, gap_rel, ok = greedy_nocache(last, prompt, GEN_LEN)
    if not ok:
        raise RuntimeError("%s/%s: gap test failed on the chosen seed" % (spec["name"], variant))
    seq = prompt + greedy[:-1]
    rows = full(seq)
    assert rows.shape == (PROMPT_LEN + GEN_LEN - 1, VOCAB)
    for k in range(GEN_LEN):
        assert int(np.argmax(rows[PROMPT_LEN - 1 + k])) == greedy[k], (variant, k)
    g = dict(prompt_ids=prompt, greedy_ids=greedy, rows=int(rows.shape[0]), vocab=VOCAB,
             min_top_gap=gap_abs, min_top_gap_rel=gap_rel, gap_threshold_rel=GAP_REL,
             max_abs_logit=float(np.max(np.abs(rows))), greedy_unique=len(set(greedy)),
             seed=seed, seed_attempts=attempts, variant=variant,
             attn_implementation=getattr(hf, "attn_impl", None) if hf is not None else "numpy", **versions)
    npr = np_forward(spec, W, seq)
    g["numpy_reference_max_abs_diff"] = float(np.max(np.abs(npr - rows)))
    g["numpy_reference_argmax_matches"] = bool(np.all(np.argmax(npr, -1) == np.argmax(rows, -1)))
    if hf is not None:
        try:
            gen, glog = hf.generate(model, prompt)
            g["generate_ids"] = gen
            g["generate_matches"] = gen == greedy
            n = min(len(gen), GEN_LEN)
            g["generate_logits_max_abs_diff"] = float(np.max(np.abs(glog[:n] - rows[PROMPT_LEN - 1:PROMPT_LEN - 1 + n])))
        except Exception as e:  # noqa: BLE001 - a finding, recorded
            g["generate_matches"] = False
            g["generate_error"] = "%s: %s" % (type(e).__name__, str(e)[:500])
    else:
        g["generate_matches"] = None
    return g, rows


def run_all(out, numpy_only):
    t0 = time.time()
    log = lambda s: print(s, flush=True)  # noqa: E731
    assert selftest_rounding()
    log("rounding self-test: ok")
    os.makedirs(out, exist_ok=True)
    findings = []
    versions = dict(numpy_version=np.__version__, python_version=sys.version.split()[0])
    hf = None
    if not numpy_only:
        hf = HF()
        versions["transformers_version"] = hf.transformers.__version__
        versions["torch_version"] = hf.torch.__version__
        check_torch_rounding(hf, findings, log)
    else:
        versions["transformers_version"] = None
        versions["torch_version"] = None
        versions["reference"] = "numpy (local dry run; NOT a transformers golden)"
    import sentencepiece as spm
    versions["sentencepiece_version"] = getattr(spm, "__version__", "?")

    work = tempfile.mkdtemp(prefix="g4tok_")
    tok_path = os.path.join(out, "tokenizer.model")
    shutil.copy(train_tokenizer(work), tok_path)
    shutil.rmtree(work, ignore_errors=True)
    write_json(os.path.join(out, "tokenizer_cases.json"), tokenizer_cases(tok_path))
    excluded = excluded_prompt_ids(tok_path)
    if excluded != fixed_excluded_ids():
        raise RuntimeError("unexpected special/user-defined ids: %s" % sorted(excluded))
    log("tokenizer: %d pieces, sha256 %s" % (VOCAB, sha256_file(tok_path)[:16]))

    summary, errors = [], []
    for spec in MODELS:
        try:
            summary.append(make_model_goldens(spec, out, hf, excluded, tok_path, versions, findings, log, t0))
        except Exception:  # noqa: BLE001 - keep going so one run reports every problem
            import traceback
            tb = traceback.format_exc()
            log(tb)
            errors.append("%s: %s" % (spec["name"], tb.strip().splitlines()[-1]))

    write_json(os.path.join(out, "findings.json"), dict(findings=findings, errors=errors, **versions))
    print_summary(summary, findings, out, time.time() - t0)
    if errors:
        print("ERRORS (%d):" % len(errors))
        for e in errors:
            print("  - " + e)
        sys.exit(1)


def make_model_goldens(spec, out, hf, excluded, tok_path, versions, findings, log, t0):
    name = spec["name"]
    mdir = os.path.join(out, name)
    os.makedirs(mdir, exist_ok=True)
    model = None
    if hf is not None:
        cfg = hf.config(spec)
        model = hf.new_model(cfg)
        extra = hf.check_names(model, spec)
        if extra:
            findings.append("%s: state_dict has extra buffers %s" % (name, extra))
        try:
            check_config_against_spec(cfg, spec)
        except Exception as e:  # noqa: BLE001 - recorded; the numpy cross-check shows the effect
            findings.append("%s: config check failed: %s: %s" % (name, type(e).__name__, e))
        factory = hf.last_logits_factory(model)
    else:
        factory = np_last_logits_factory(spec)
    seed, attempts, W, Wq, prompt = choose_seed(spec, excluded, factory, log)
    log("%s: seed %d (%d attempt(s)), weights sha256 %s" % (name, seed, attempts, weights_digest(W)[:16]))
    g, rows = golden_for_variant(spec, W, prompt, seed, attempts, hf, model, log, "plain", versions)
    gq, rows_q = golden_for_variant(spec, Wq, prompt, seed, attempts, hf, model, log, "fp4", versions)
    _wq, qinfo = quantize_model(spec, W)
    if hf is not None:
        gq["torch_float8_agrees_on_data"] = torch_fp8_agrees(hf, spec, W)
        if not gq["torch_float8_agrees_on_data"]:
            findings.append("%s: torch float8_e4m3fn conversion differs from the numpy rule on the data" % name)
    common = dict(model=name, exercises=spec["what"], geometry=geometry_summary(spec),
                  init=dict(embed_std=spec.get("embed_std", EMBED_STD), linear_gain=LINEAR_GAIN,
                            norm_range=NORM_RANGE, final_norm_scale=spec.get("final_norm_scale", 1.0),
                            layer_scalar_range=SCALAR_RANGE),
                  weights_sha256=weights_digest(W))
    g.update(common)
    gq.update(common)
    g["weights"] = ("bf16 values (stored as BF16; golden computed in float32 from them)"
                    if spec["dtype"] == "bfloat16" else "float32 as stored")
    gq["weights"] = "package quantization of the stored weights, dequantized to float32"
    gq["quantization"] = qinfo
    g["logits_file"], gq["logits_file"] = "logits.f32", "logits_fp4.f32"
    g["logits_sha256"] = write_logits(os.path.join(mdir, "logits.f32"), rows)
    gq["logits_sha256"] = write_logits(os.path.join(mdir, "logits_fp4.f32"), rows_q)
    g["logits_layout"] = gq["logits_layout"] = (
        "float32 little-endian, row-major [rows][vocab]; row i = logits at position i of "
        "prompt_ids + greedy_ids[:-1] (after softcap)")
    for gg in (g, gq):
        if gg["numpy_reference_max_abs_diff"] > 1e-3 or not gg["numpy_reference_argmax_matches"]:
            findings.append("%s/%s: numpy reference (GEMMA4.md) differs from the oracle by %.3g" % (
                name, gg["variant"], gg["numpy_reference_max_abs_diff"]))
        if gg.get("generate_matches") is False:
            findings.append("%s/%s: generate(use_cache=True) ids differ from no-cache greedy: %s" % (
                name, gg["variant"], gg.get("generate_error") or gg.get("generate_ids")))
    # write the goldens first, so a failure in the HF folder step still leaves them
    write_json(os.path.join(mdir, "golden.json"), g)
    write_json(os.path.join(mdir, "golden_fp4.json"), gq)
    hfdir = os.path.join(mdir, "hf")
    if hf is not None:
        hf.set_weights(model, W)
        reload_model, notes = write_hf_folder(hf, spec, W, model, hfdir, tok_path, log, findings)
        seq = prompt + g["greedy_ids"][:-1]
        d = float(np.max(np.abs(hf.logits(reload_model, seq) - rows)))
        notes["reload_logits_max_abs_diff"] = d
        if spec["form"] == "wrapped":
            notes["wrapped_load_Gemma4ForConditionalGeneration"] = try_wrapped_load(hf, hfdir, seq, rows, log)
        g["hf_folder_notes"] = notes
        if d > 1e-5:
            raise RuntimeError("%s: reloaded folder gives different logits (%g)" % (name, d))
    else:
        write_numpy_hf_folder(spec, W, hfdir, tok_path)
    g["hf_files"] = {fn: dict(bytes=os.path.getsize(os.path.join(hfdir, fn)),
                              sha256=sha256_file(os.path.join(hfdir, fn)))
                     for fn in sorted(os.listdir(hfdir))}
    write_json(os.path.join(mdir, "golden.json"), g)
    log("%s: done (%.1fs)" % (name, time.time() - t0))
    return spec, g, gq, file_size_report(mdir)


def write_numpy_hf_folder(spec, W, folder, tok_path):
    """Local dry run only: a minimal config.json + numpy .npz so the layout can be inspected."""
    os.makedirs(folder, exist_ok=True)
    write_json(os.path.join(folder, "config.json"), dict(note="numpy dry run", **geometry_summary(spec)))
    np.savez(os.path.join(folder, "weights_dry_run.npz"), **{k.replace(".", "_"): v for k, v in W.items()})
    shutil.copy(tok_path, os.path.join(folder, "tokenizer.model"))


def check_config_against_spec(cfg, spec):
    """The numpy reference hard-codes GEMMA4.md's RoPE defaults; make sure transformers agrees."""
    rp = cfg.rope_parameters
    s, f = rp[SLIDING], rp[FULL]
    assert s.get("rope_type", "default") == "default" and float(s["rope_theta"]) == COMMON["rope_sliding_theta"], s
    assert f["rope_type"] == "proportional" and float(f["rope_theta"]) == COMMON["rope_full_theta"], f
    assert float(f["partial_rotary_factor"]) == COMMON["rope_full_partial"], f
    assert float(f.get("factor", 1.0)) == 1.0, f
    assert list(cfg.layer_types) == list(spec["layer_types"])


def check_torch_rounding(hf, findings, log):
    """torch's float32->bf16 and ->float8_e4m3fn must equal the numpy rules (on edge values and data)."""
    torch = hf.torch
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(100000).astype(F32) * 3,
                        np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 2 ** -130], F32)])
    tb = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    assert np.array_equal(tb, bf16_round(x)), "torch bf16 rounding differs from numpy"
    y = np.concatenate([rng.uniform(-448, 448, 100000).astype(F32), rng.uniform(-0.02, 0.02, 100000).astype(F32),
                        np.array([1.0625, 1.1875, 2 ** -10, 3 * 2 ** -10, 448.0, 15.5, 17.0, 248.0], F32)])
    t8 = torch.from_numpy(y).to(torch.float8_e4m3fn).float().numpy()
    mine = e4m3fn_round(y)
    if not np.array_equal(t8, mine):
        bad = np.nonzero(t8 != mine)[0][:5]
        findings.append("torch float8_e4m3fn differs from the numpy rule at %s" % [(float(y[i]), float(t8[i]), float(mine[i])) for i in bad])
    else:
        log("torch bf16 / float8_e4m3fn conversions equal the numpy rules")


def torch_fp8_agrees(hf, spec, W):
    """torch's float8_e4m3fn rounding of w/scale equals e4m3fn_round for every FP8 tensor of the model."""
    torch = hf.torch
    for name, _shape, kind in param_list(spec):
        if kind not in ("embed", "ple_embed"):
            continue
        w = W[name]
        scale = np.max(np.abs(w), axis=1) / F32(448.0)
        v = w / np.where(scale == 0, F32(1.0), scale)[:, None]
        t = torch.from_numpy(np.ascontiguousarray(v)).to(torch.float8_e4m3fn).float().numpy()
        if not np.array_equal(t, e4m3fn_round(v)):
            return False
    return True


def read_safetensors_plain(path):
    """Minimal safetensors reader (F32 / BF16) returning float32 numpy arrays; no torch needed."""
    import struct
    with open(path, "rb") as f:
        buf = f.read()
    (hlen,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + hlen].decode("utf-8"))
    base = 8 + hlen
    out = {}
    for name, ent in header.items():
        if name == "__metadata__":
            continue
        s0, s1 = ent["data_offsets"]
        raw = buf[base + s0:base + s1]
        if ent["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4").astype(F32)
        elif ent["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(F32)
        else:
            raise ValueError("%s: dtype %s" % (name, ent["dtype"]))
        out[name] = a.reshape(ent["shape"])
    return out


def verify_tree(root):
    """Checks a committed golden tree without torch: weights regenerate bit-exactly from the seed,
    files match their recorded hashes, the numpy reference reproduces the logits, and the FP4
    dequantized tensors hash as recorded. Returns the number of problems."""
    problems = []
    for spec in MODELS:
        name = spec["name"]
        mdir = os.path.join(root, name)
        g = json.load(open(os.path.join(mdir, "golden.json"), encoding="utf-8"))
        gq = json.load(open(os.path.join(mdir, "golden_fp4.json"), encoding="utf-8"))
        hfdir = os.path.join(mdir, "hf")
        for fn, ent in g["hf_files"].items():
            if sha256_file(os.path.join(hfdir, fn)) != ent["sha256"]:
                problems.append("%s: hf/%s sha256 differs" % (name, fn))
        stored = {}
        for fn in sorted(os.listdir(hfdir)):
            if fn.endswith(".safetensors"):
                stored.update(read_safetensors_plain(os.path.join(hfdir, fn)))
        stored = {("model." + k[len("model.language_model."):] if k.startswith("model.language_model.") else k): v
                  for k, v in stored.items()}
        W = init_weights(spec, g["seed"])
        if set(stored) != set(W) or any(not np.array_equal(stored[k], W[k]) for k in W):
            problems.append("%s: stored weights differ from init_weights(seed %d)" % (name, g["seed"]))
        if weights_digest(W) != g["weights_sha256"]:
            problems.append("%s: weights_sha256 differs" % name)
        Wq, qinfo = quantize_model(spec, W)
        for k, ent in gq["quantization"].items():
            if qinfo[k]["dequant_sha256"] != ent["dequant_sha256"]:
                problems.append("%s: dequantized %s hashes differently" % (name, k))
        for gg, ww in ((g, W), (gq, Wq)):
            path = os.path.join(mdir, gg["logits_file"])
            rows = np.fromfile(path, dtype="<f4").reshape(gg["rows"], gg["vocab"])
            if hashlib.sha256(rows.tobytes()).hexdigest() != gg["logits_sha256"]:
                problems.append("%s: %s sha256 differs" % (name, gg["logits_file"]))
            seq = gg["prompt_ids"] + gg["greedy_ids"][:-1]
            am = np.argmax(rows, axis=-1)[PROMPT_LEN - 1:]
            if list(map(int, am)) != gg["greedy_ids"]:
                problems.append("%s: argmax of %s rows != greedy_ids" % (name, gg["logits_file"]))
            d = float(np.max(np.abs(np_forward(spec, ww, seq) - rows)))
            print("%s %-15s numpy reference max |diff| %.2e" % (name, gg["logits_file"], d))
            if d > 1e-3:
                problems.append("%s: numpy reference differs from %s by %g" % (name, gg["logits_file"], d))
    try:
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=os.path.join(root, "tokenizer.model"))
        cases = json.load(open(os.path.join(root, "tokenizer_cases.json"), encoding="utf-8"))["cases"]
        bad = [c["text"] for c in cases if [int(i) for i in sp.encode(c["text"])] != c["ids"]]
        if bad:
            problems.append("tokenizer cases differ: %r" % bad)
    except ImportError:
        print("sentencepiece not installed: tokenizer cases not checked")
    for p in problems:
        print("PROBLEM: " + p)
    print("verify: %d problem(s)" % len(problems))
    return len(problems)


def print_summary(summary, findings, out, secs):
    print("\n%-9s %3s %4s %6s %4s %4s %5s %-8s %-7s %5s %3s %9s %9s %4s %4s %5s %7s" % (
        "model", "L", "H", "kv s/g", "keqv", "PLE", "shard", "dtype", "form", "seed", "try",
        "gap", "gap_fp4", "uniq", "uq4", "gen", "KB"))
    for spec, g, gq, size in summary:
        print("%-9s %3d %4d %6s %4s %4d %5d %-8s %-7s %5d %3d %9.4f %9.4f %4d %4d %5s %7.0f" % (
            spec["name"], len(spec["layer_types"]), spec["hidden"],
            "%d/%s" % (spec["kv"], spec["global_kv"] if spec["k_eq_v"] else spec["kv"]),
            "y" if spec["k_eq_v"] else "n", spec["ple"], spec["kv_shared"], spec["dtype"], spec["form"],
            g["seed"], g["seed_attempts"], g["min_top_gap"], gq["min_top_gap"], g["greedy_unique"],
            gq["greedy_unique"], "%s/%s" % (str(g["generate_matches"])[0], str(gq["generate_matches"])[0]),
            size / 1024))
    print("numpy-reference max |diff|: " + ", ".join("%s %.2e/%.2e" % (s["name"], g["numpy_reference_max_abs_diff"],
                                                                     gq["numpy_reference_max_abs_diff"])
                                                    for s, g, gq, _ in summary))
    print("total size of %s: %.2f MB; %.1f s" % (out, file_size_report(out) / 1e6, secs))
    print("findings (%d):" % len(findings))
    for f in findings:
        print("  - " + f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output directory of the golden tree")
    ap.add_argument("--numpy-only", action="store_true", help="no torch: numpy reference as oracle (dry run)")
    ap.add_argument("--selftest", action="store_true", help="rounding unit checks only")
    ap.add_argument("--verify", metavar="DIR", help="check a golden tree without torch (numpy reference)")
    ap.add_argument("--search", type=int, default=0, help="numpy seed statistics for N seeds per model")
    ap.add_argument("--only", help="--search: one model")
    ap.add_argument("--embed-std", type=float, help="--search: override the embedding std")
    ap.add_argument("--final-scale", type=float, help="--search: override the final-norm weight scale")
    ap.add_argument("--start", type=int, default=0, help="--search: first seed offset")
    a = ap.parse_args()
    if a.selftest:
        selftest_rounding()
        print("rounding self-test: ok")
        return
    if a.verify:
        sys.exit(1 if verify_tree(a.verify) else 0)
    if a.search:
        run_search(a.search, a.only, a.embed_std, a.final_scale, a.start)
        return
    if not a.out:
        ap.error("--out is required")
    run_all(a.out, a.numpy_only)


if __name__ == "__main__":
    main()
