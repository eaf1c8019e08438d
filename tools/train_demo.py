#!/usr/bin/env python3
"""Trains the embedded demo model: a small Gemma 4 text model (Gemma4ForCausalLM) on the
WordNet chat corpus that tools/prepare_corpus.py made (docs/DEMO_MODEL.md).

Runs on the GPU machine (torch + transformers 5.x, one CUDA device):
    python3 tools/train_demo.py --corpus .demo --out /tmp/demo/hf --time-budget 200

What it does:
  1. builds the config (sliding + full layers, attention_k_eq_v, no PLE, tied embeddings),
     checks the per-layer shapes transformers made from it,
  2. smoke test: one forward/backward, and save_pretrained -> from_pretrained(eager) gives the
     same logits (fails fast, before the long part),
  3. trains with AdamW in bf16 autocast on packed windows that start at a conversation start,
     for --steps steps, or (--steps 0) for as many steps as fit in --time-budget seconds,
     measured on the first steps and then fixed, so the run is a fixed step count,
  4. saves the model (float32 safetensors) + tokenizer.model to --out, and a training.json
     beside it (config, parameter count, losses, held-out loss, timings, greedy answers).
"""

import argparse
import json
import math
import os
import shutil
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import prepare_corpus  # noqa: E402  (Renderer: the chat layout the engine renders)

SLIDING, FULL = "sliding_attention", "full_attention"
DEFAULT_SEED = 4242
SAMPLE_QUESTIONS = ["What is a dog?", "What does 'happy' mean?", "Use the word 'river' in a sentence.",
                    "What does 'harbor' mean?", "Hello!"]


def log(*a):
    print("[train %s]" % time.strftime("%H:%M:%S"), *a, flush=True)


def architecture(args, vocab):
    """Geometry of the demo model; every linear's input dim is a multiple of 128."""
    n = args.layers
    types = [FULL if (i + 1) % 6 == 0 or i == n - 1 else SLIDING for i in range(n)]
    return dict(
        vocab_size=vocab, hidden_size=args.hidden, intermediate_size=args.intermediate, num_hidden_layers=n,
        num_attention_heads=8, num_key_value_heads=2, head_dim=64, global_head_dim=128,
        num_global_key_value_heads=1, attention_k_eq_v=True, hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=4096, rms_norm_eps=1e-6, pad_token_id=0, eos_token_id=1, bos_token_id=2,
        tie_word_embeddings=True, attention_bias=False, attention_dropout=0.0, sliding_window=args.window,
        layer_types=types, final_logit_softcapping=30.0, vocab_size_per_layer_input=vocab,
        hidden_size_per_layer_input=0, num_kv_shared_layers=0, use_double_wide_mlp=False,
        enable_moe_block=False, initializer_range=0.02,
    )


def make_config(arch):
    from transformers import Gemma4TextConfig
    try:
        return Gemma4TextConfig(**arch), "flat kwargs"
    except TypeError as e:   # a release without the kwargs pop: spell per_layer_config out
        log("flat global_head_dim kwargs refused (%s); passing per_layer_config" % e)
        kw = dict(arch)
        ghd, gkv = kw.pop("global_head_dim"), kw.pop("num_global_key_value_heads")
        kw["per_layer_config"] = {i: {"head_dim": ghd, "num_key_value_heads": gkv}
                                  for i, t in enumerate(kw["layer_types"]) if t == FULL}
        return Gemma4TextConfig(**kw), "per_layer_config kwargs"


def from_config(Model, cfg, attn, torch):
    try:
        return Model._from_config(cfg, attn_implementation=attn, dtype=torch.float32)
    except TypeError:   # releases that still spell it torch_dtype
        return Model._from_config(cfg, attn_implementation=attn, torch_dtype=torch.float32)


def load_pretrained(Model, path, attn, torch):
    try:
        return Model.from_pretrained(path, attn_implementation=attn, dtype=torch.float32)
    except TypeError:
        return Model.from_pretrained(path, attn_implementation=attn, torch_dtype=torch.float32)


def check_geometry(model, arch):
    """The shapes transformers built must be the ones the config means (GEMMA4.md §1.3, §4)."""
    H = arch["hidden_size"]
    problems = []
    for i, t in enumerate(arch["layer_types"]):
        a = model.model.layers[i].self_attn
        d = arch["head_dim"] if t == SLIDING else arch["global_head_dim"]
        kv = arch["num_key_value_heads"] if t == SLIDING else arch["num_global_key_value_heads"]
        want = {"q_proj": (8 * d, H), "k_proj": (kv * d, H), "o_proj": (H, 8 * d)}
        for name, shape in want.items():
            got = tuple(getattr(a, name).weight.shape)
            if got != shape:
                problems.append("layer %d %s %s != %s" % (i, name, got, shape))
        has_v = getattr(a, "v_proj", None) is not None
        if has_v != (t == SLIDING):
            problems.append("layer %d (%s) v_proj present=%s" % (i, t, has_v))
    if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        problems.append("lm_head is not tied to embed_tokens")
    if problems:
        raise RuntimeError("unexpected geometry: " + "; ".join(problems))


def load_corpus(path):
    tr = np.load(os.path.join(path, "train.npz"))
    ho = np.load(os.path.join(path, "heldout.npz"))
    meta = json.load(open(os.path.join(path, "corpus.json"), encoding="utf-8"))
    return tr["ids"], tr["starts"], ho["ids"], ho["starts"], meta


def eval_windows(ids, starts, seq, count):
    """Non-overlapping windows of seq+1 tokens, each starting at a conversation start."""
    out, end = [], 0
    for s in starts:
        s = int(s)
        if s < end or s + seq + 1 > len(ids):
            continue
        out.append(ids[s:s + seq + 1].astype(np.int64))
        end = s + seq + 1
        if len(out) == count:
            break
    return np.stack(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=".demo")
    ap.add_argument("--out", required=True, help="folder for the HF checkpoint (config.json, model.safetensors, tokenizer.model)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--steps", type=int, default=0, help="optimizer steps; 0 = as many as fit in --time-budget")
    ap.add_argument("--time-budget", type=float, default=200.0, help="seconds of training when --steps 0")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--intermediate", type=int, default=1280)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--attn", default="sdpa", help="attention implementation for training (sdpa or eager)")
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F
    import transformers
    from transformers import Gemma4ForCausalLM

    t_start = time.time()
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    tr_ids, tr_starts, ho_ids, ho_starts, meta = load_corpus(args.corpus)
    vocab = int(meta["vocab_size"])
    log("corpus: %d train tokens in %d conversations, %d held-out tokens; vocab %d" % (
        tr_ids.size, tr_starts.size, ho_ids.size, vocab))

    arch = architecture(args, vocab)
    cfg, cfg_route = make_config(arch)
    model = from_config(Gemma4ForCausalLM, cfg, args.attn, torch)
    check_geometry(model, arch)
    n_params = sum(p.numel() for p in model.parameters())
    n_embed = model.model.embed_tokens.weight.numel()
    log("model: %d parameters (%d embedding, %d in the decoder), config via %s, transformers %s, torch %s" % (
        n_params, n_embed, n_params - n_embed, cfg_route, transformers.__version__, torch.__version__))
    model.to(dev)

    out_dir = args.out
    os.makedirs(out_dir, exist_ok=True)

    # ---- smoke test: one step and a save/reload round trip, before the long part -------------
    x = torch.randint(4, vocab, (2, 64), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(input_ids=x, use_cache=False).logits.float().view(-1, vocab), x.view(-1))
    loss.backward()
    model.zero_grad(set_to_none=True)
    smoke_dir = out_dir + ".smoke"
    model.save_pretrained(smoke_dir)
    reloaded = load_pretrained(Gemma4ForCausalLM, smoke_dir, "eager", torch).to(dev)
    with torch.no_grad():
        torch.backends.cuda.matmul.allow_tf32 = False
        a = model(input_ids=x, use_cache=False).logits.float()
        b = reloaded(input_ids=x, use_cache=False).logits.float()
        torch.backends.cuda.matmul.allow_tf32 = True
    smoke_diff = float((a - b).abs().max())
    log("smoke test: initial loss %.3f (ln V = %.3f), save/reload(eager) max |dlogit| %.2e" % (
        loss.item(), math.log(vocab), smoke_diff))
    del reloaded
    shutil.rmtree(smoke_dir, ignore_errors=True)
    if smoke_diff > 1e-3:   # measure_quality.py compares against the saved model anyway
        log("WARNING: save_pretrained -> from_pretrained(eager) changed the logits by %g" % smoke_diff)

    # ---- data on the device --------------------------------------------------------------------
    seq, B = args.seq, args.batch
    ids_d = torch.from_numpy(tr_ids.astype(np.int64)).to(dev)
    st = tr_starts.astype(np.int64)
    st = st[st + seq + 1 <= tr_ids.size]
    starts_d = torch.from_numpy(st).to(dev)
    ar = torch.arange(seq + 1, device=dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    ev = torch.from_numpy(eval_windows(ho_ids, ho_starts, seq, 64)).to(dev)

    def batch():
        pick = torch.randint(0, starts_d.numel(), (B,), device=dev, generator=gen)
        w = ids_d[starts_d[pick][:, None] + ar[None, :]]
        return w[:, :-1], w[:, 1:]

    def heldout_loss():
        model.eval()
        tot, n = 0.0, 0
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            for i in range(0, ev.shape[0], 32):
                w = ev[i:i + 32]
                lg = model(input_ids=w[:, :-1], use_cache=False).logits.float()
                tot += float(F.cross_entropy(lg.reshape(-1, vocab), w[:, 1:].reshape(-1), reduction="sum"))
                n += w[:, 1:].numel()
        model.train()
        return tot / n

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)

    total = args.steps if args.steps > 0 else None
    calib_steps = 40

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        horizon = total if total else 10 ** 9
        p = min(1.0, (step - args.warmup) / max(1, horizon - args.warmup))
        return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p)))

    history = []
    model.train()
    torch.cuda.synchronize()
    t_train = time.time()
    t_calib = None
    step = 0
    ema = None
    while total is None or step < total:
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        x, y = batch()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits.float().view(-1, vocab), y.reshape(-1))
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step == 10:
            torch.cuda.synchronize()
            t_calib = time.time()
        if total is None and step == 10 + calib_steps:
            torch.cuda.synchronize()
            per_step = (time.time() - t_calib) / calib_steps
            remaining = args.time_budget - (time.time() - t_train)
            total = step + max(0, int(remaining / per_step))
            log("%.1f ms/step (%.0f tokens/s) -> %d steps in total" % (per_step * 1e3, B * seq / per_step, total))
        if step % 50 == 0 or step == 1:
            lv = float(loss)
            ema = lv if ema is None else 0.9 * ema + 0.1 * lv
            rec = dict(step=step, loss=round(lv, 4), lr=lr_at(step - 1), grad_norm=round(float(gnorm), 3),
                       seconds=round(time.time() - t_train, 1))
            if step % 500 == 0:
                rec["heldout_loss"] = round(heldout_loss(), 4)
            history.append(rec)
            log(json.dumps(rec))
    torch.cuda.synchronize()
    train_seconds = time.time() - t_train
    final_heldout = heldout_loss()
    log("trained %d steps (%d tokens) in %.1f s; held-out loss %.4f (ppl %.3f, bf16 autocast, %d windows)" % (
        step, step * B * seq, train_seconds, final_heldout, math.exp(final_heldout), ev.shape[0]))

    # ---- save ------------------------------------------------------------------------------------
    model.eval()
    model.to(torch.float32)
    model.save_pretrained(out_dir)
    shutil.copy(os.path.join(args.corpus, "tokenizer.model"), os.path.join(out_dir, "tokenizer.model"))
    saved_cfg = json.load(open(os.path.join(out_dir, "config.json"), encoding="utf-8"))

    # greedy answers from transformers itself (the engine's are in measure_quality's output)
    renderer = prepare_corpus.Renderer(os.path.join(args.corpus, "tokenizer.model"))
    answers = []
    turn_end = renderer.ids["<turn|>"]
    def greedy(q):
        prompt, _ = renderer.render(dict(system=None, turns=[(q, "")]))
        prompt = prompt[:-1]                                  # drop the closing <turn|> of the empty answer
        cur = torch.tensor([prompt], device=dev)
        out = []
        with torch.no_grad():
            for _ in range(60):
                nxt = int(model(input_ids=cur, use_cache=False).logits[0, -1].argmax())
                if nxt == turn_end or nxt == 1:
                    break
                out.append(nxt)
                cur = torch.cat([cur, torch.tensor([[nxt]], device=dev)], dim=1)
        return renderer.sp.decode(out)

    for q in SAMPLE_QUESTIONS:
        try:
            answers.append(dict(question=q, answer=greedy(q)))
            log("Q: %s\n    A: %s" % (q, answers[-1]["answer"]))
        except Exception as e:  # noqa: BLE001 - the checkpoint is saved already; report and go on
            answers.append(dict(question=q, error=repr(e)))
            log("sample %r failed: %r" % (q, e))

    info = dict(
        command="python3 tools/train_demo.py " + " ".join(sys.argv[1:]),
        resolved_steps=step, seed=args.seed, args=vars(args), architecture=arch, config_route=cfg_route,
        saved_config=saved_cfg, parameters=n_params, embedding_parameters=n_embed,
        decoder_parameters=n_params - n_embed, tokens_seen=step * B * seq,
        train_seconds=round(train_seconds, 1), total_seconds=round(time.time() - t_start, 1),
        final_heldout_loss_bf16=final_heldout, smoke_save_reload_max_abs_logit_diff=smoke_diff, history=history, greedy_answers_transformers=answers,
        versions=dict(torch=torch.__version__, transformers=transformers.__version__,
                      cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0)),
        corpus=dict((k, v) for k, v in meta.items() if k != "samples"),
    )
    with open(os.path.join(os.path.dirname(os.path.abspath(out_dir)), "training.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1)
    log("saved %s (%s)" % (out_dir, ", ".join(sorted(os.listdir(out_dir)))))


if __name__ == "__main__":
    main()
