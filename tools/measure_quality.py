#!/usr/bin/env python3
"""Quality of Gemma Desk packages against the full-precision model (docs/QUALITY.md).

On held-out text (the held-out WordNet conversations of tools/prepare_corpus.py), computes
  * the perplexity of the float32 model in Hugging Face transformers (CPU, eager attention),
  * the perplexity of every given package, from the logits our engine dumps
    (gemma-cli --tokens ... --max-new-tokens 0 --dump-logits FILE --device cpu),
  * the mean per-token KL(full || package) over every position, top-1 agreement and the
    largest logit difference,
and asks every package a few questions with gemma-cli --prompt (greedy).

    python3 tools/measure_quality.py --corpus .demo --hf HF_DIR --cli build/app/cli/gemma-cli \\
        --package unquantized=U.gemma --package fp4-absmax=A.gemma --package fp4-minimum-error=M.gemma \\
        --out quality.json

Each window is --seq tokens that start at a conversation start (<bos>); perplexity counts the
--seq - 1 next-token predictions of every window ("all"), and separately the predictions of
answer tokens and the closing <turn|> ("answer"). Engine runs are one process per
(package, window), each pinned to one core with taskset, as many at once as there are cores.
Without torch/transformers (or without --hf) the package named 'unquantized' is the reference.
"""

import argparse
import concurrent.futures as cf
import json
import math
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

QUESTIONS = ["What is a dog?", "What does 'happy' mean?", "Use the word 'river' in a sentence."]


def log(*a):
    print("[quality %s]" % time.strftime("%H:%M:%S"), *a, flush=True)


def choose_windows(ids, starts, mask, seq, count):
    wins, masks, end = [], [], 0
    for s in starts:
        s = int(s)
        if s < end or s + seq > len(ids):
            continue
        wins.append(ids[s:s + seq].astype(np.int64))
        masks.append(mask[s:s + seq].astype(bool))
        end = s + seq
        if len(wins) == count:
            break
    return np.stack(wins), np.stack(masks)


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def transformers_logits(hf_dir, windows, threads):
    import torch
    import transformers
    from transformers import Gemma4ForCausalLM
    torch.set_num_threads(threads)
    try:
        model = Gemma4ForCausalLM.from_pretrained(hf_dir, attn_implementation="eager", dtype=torch.float32)
    except TypeError:
        model = Gemma4ForCausalLM.from_pretrained(hf_dir, attn_implementation="eager", torch_dtype=torch.float32)
    model.eval()
    out = []
    with torch.no_grad():
        for w in windows:
            out.append(model(input_ids=torch.tensor(w[None]), use_cache=False).logits[0].float().numpy())
    return np.stack(out), dict(transformers=transformers.__version__, torch=torch.__version__)


class Cores:
    """Hands out one CPU core per engine process."""

    def __init__(self, jobs):
        try:
            cores = sorted(os.sched_getaffinity(0))
        except AttributeError:
            cores = list(range(os.cpu_count() or 1))
        self.pin = shutil.which("taskset") is not None
        self.free = queue.Queue()
        for c in cores[:jobs]:
            self.free.put(c)
        self.count = min(jobs, len(cores))

    def run(self, cmd, timeout):
        core = self.free.get()
        try:
            full = (["taskset", "-c", str(core)] if self.pin else []) + cmd
            t0 = time.time()
            p = subprocess.run(full, capture_output=True, text=True, timeout=timeout)
            return p, time.time() - t0
        finally:
            self.free.put(core)


def engine_logits(cli, package, window, vocab, cores, tmp, timeout):
    fd, path = tempfile.mkstemp(suffix=".f32", dir=tmp)
    os.close(fd)
    cmd = [cli, "--model", package, "--tokens", ",".join(str(int(t)) for t in window), "--max-new-tokens", "0",
           "--dump-logits", path, "--device", "cpu", "--context", str(len(window) + 8), "--quiet"]
    p, secs = cores.run(cmd, timeout)
    if p.returncode != 0:
        raise RuntimeError("gemma-cli failed (exit %d): %s\ncommand: %s" % (
            p.returncode, p.stderr.strip()[-2000:], " ".join(cmd[:4] + ["<ids>"] + cmd[5:])))
    rows = np.fromfile(path, dtype=np.float32)
    os.remove(path)
    if rows.size != len(window) * vocab:
        raise RuntimeError("%s: dump has %d floats, expected %d x %d" % (package, rows.size, len(window), vocab))
    return rows.reshape(len(window), vocab), secs


def metrics(windows, masks, logits, ref_logits=None):
    """Perplexities of one model; KL etc. against ref_logits when given."""
    nll_all, nll_ans = [], []
    kl, top1, maxdiff = [], [], 0.0
    for w, m, lg, i in zip(windows, masks, logits, range(len(windows))):
        lp = log_softmax(lg)
        tgt = w[1:]
        nll = -lp[np.arange(len(tgt)), tgt]
        nll_all.append(nll)
        nll_ans.append(nll[m[1:]])
        if ref_logits is not None:
            rp = log_softmax(ref_logits[i])
            kl.append((np.exp(rp) * (rp - lp)).sum(axis=-1))
            top1.append(lg.argmax(-1) == ref_logits[i].argmax(-1))
            maxdiff = max(maxdiff, float(np.abs(lg.astype(np.float64) - ref_logits[i]).max()))
    nll_all, nll_ans = np.concatenate(nll_all), np.concatenate(nll_ans)
    out = dict(ppl=float(math.exp(nll_all.mean())), ppl_answer=float(math.exp(nll_ans.mean())),
               nll=float(nll_all.mean()), predictions=int(nll_all.size), answer_predictions=int(nll_ans.size))
    if ref_logits is not None:
        kl = np.concatenate(kl)
        out.update(kl_mean=float(kl.mean()), kl_p99=float(np.percentile(kl, 99)), kl_max=float(kl.max()),
                   kl_positions=int(kl.size), top1_agreement=float(np.concatenate(top1).mean()),
                   max_abs_logit_diff=maxdiff)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=".demo")
    ap.add_argument("--hf", help="the float32 HF checkpoint (transformers reference); omit for engine-only")
    ap.add_argument("--cli", default="build/app/cli/gemma-cli")
    ap.add_argument("--package", action="append", default=[], help="NAME=PATH (repeatable)")
    ap.add_argument("--windows", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="engine processes at once")
    ap.add_argument("--question", action="append", help="question for --prompt runs (default: three built in)")
    ap.add_argument("--answer-tokens", type=int, default=60)
    ap.add_argument("--timeout", type=float, default=400.0, help="seconds per engine process")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    t0 = time.time()
    packages = [p.split("=", 1) for p in args.package]
    questions = args.question or QUESTIONS

    ho = np.load(os.path.join(args.corpus, "heldout.npz"))
    meta = json.load(open(os.path.join(args.corpus, "corpus.json"), encoding="utf-8"))
    vocab = int(meta["vocab_size"])
    windows, masks = choose_windows(ho["ids"], ho["starts"], ho["answer_mask"], args.seq, args.windows)
    log("%d windows x %d tokens of held-out text" % windows.shape)
    result = dict(windows=int(windows.shape[0]), seq=args.seq, vocab=vocab, corpus=meta.get("source"),
                  heldout_rule=meta.get("heldout_rule"), models={}, errors=[])

    ref, ref_name = None, None
    if args.hf:
        try:
            ref, versions = transformers_logits(args.hf, windows, max(1, min(16, os.cpu_count() or 1)))
            ref_name = "transformers"
            result["versions"] = versions
            result["models"]["transformers"] = metrics(windows, masks, ref)
            log("transformers fp32: ppl %.4f (%.1fs)" % (result["models"]["transformers"]["ppl"], time.time() - t0))
        except Exception as e:  # noqa: BLE001 - reported, then the engine part still runs
            result["errors"].append("transformers reference failed: %r" % e)
            log("transformers reference failed: %r" % e)

    cores = Cores(args.jobs)
    tmp = tempfile.mkdtemp(prefix="gemma_quality_")
    engine = {}
    with cf.ThreadPoolExecutor(max_workers=cores.count) as pool:
        futs = {}
        for name, path in packages:
            for i, w in enumerate(windows):
                futs[pool.submit(engine_logits, args.cli, path, w, vocab, cores, tmp, args.timeout)] = (name, i)
        asks = {}
        for name, path in packages:
            for q in questions:
                cmd = [args.cli, "--model", path, "--prompt", q, "--greedy", "--max-new-tokens",
                       str(args.answer_tokens), "--device", "cpu"]
                asks[pool.submit(cores.run, cmd, args.timeout)] = (name, q)
        for f in cf.as_completed(futs):
            name, i = futs[f]
            try:
                lg, secs = f.result()
                engine.setdefault(name, {})[i] = (lg, secs)
            except Exception as e:  # noqa: BLE001
                result["errors"].append("%s window %d: %s" % (name, i, e))
        answers = []
        for f in cf.as_completed(asks):
            name, q = asks[f]
            try:
                p, secs = f.result()
                answers.append(dict(package=name, question=q, answer=p.stdout.strip(), exit=p.returncode,
                                    stats=p.stderr.strip()[-400:], seconds=round(secs, 2)))
            except Exception as e:  # noqa: BLE001
                answers.append(dict(package=name, question=q, error=repr(e)))
    shutil.rmtree(tmp, ignore_errors=True)
    order = {n: k for k, (n, _p) in enumerate(packages)}
    result["answers"] = sorted(answers, key=lambda a: (order[a["package"]], questions.index(a["question"])))
    log("engine runs done (%.1fs)" % (time.time() - t0))

    if ref is None and "unquantized" in engine and len(engine["unquantized"]) == len(windows):
        ref = np.stack([engine["unquantized"][i][0] for i in range(len(windows))])
        ref_name = "unquantized package"
    result["reference"] = ref_name
    for name, _path in packages:
        got = engine.get(name, {})
        if len(got) != len(windows):
            result["errors"].append("%s: %d of %d windows ran" % (name, len(got), len(windows)))
            continue
        lg = np.stack([got[i][0] for i in range(len(windows))])
        m = metrics(windows, masks, lg, ref)
        m["engine_seconds_per_window"] = round(float(np.mean([got[i][1] for i in range(len(windows))])), 2)
        if ref_name == "transformers":
            base = result["models"]["transformers"]
            m["ppl_rel_diff_vs_transformers"] = (m["ppl"] - base["ppl"]) / base["ppl"]
            m["ppl_answer_rel_diff_vs_transformers"] = (m["ppl_answer"] - base["ppl_answer"]) / base["ppl_answer"]
        result["models"][name] = m
        log("%-18s ppl %.4f  answer ppl %.4f  KL %s" % (name, m["ppl"], m["ppl_answer"],
                                                        "%.5f" % m["kl_mean"] if "kl_mean" in m else "-"))
    fp4 = {n: result["models"][n] for n, _ in packages if n.startswith("fp4") and n in result["models"]}
    if fp4 and all("kl_mean" in m for m in fp4.values()):
        result["better_fp4_rule"] = min(fp4, key=lambda n: fp4[n]["kl_mean"])
    result["seconds"] = round(time.time() - t0, 1)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    for a in result["answers"]:
        log("[%s] Q: %s\n    A: %s" % (a["package"], a["question"], a.get("answer", a.get("error"))))
    if result["errors"]:
        log("errors: %s" % result["errors"])
    return 0 if not result["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
