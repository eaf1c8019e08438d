#!/usr/bin/env python3
"""Builds the training corpus of the embedded demo model (docs/DEMO_MODEL.md).

Reads the WordNet 3.0 database as Debian's `wordnet-base` package installs it
(/usr/share/wordnet/data.{noun,verb,adj,adv}; licence in resources/models/LICENSE-DATA.txt),
turns every synset's gloss, example sentences, synonyms and hypernym into short chat
conversations in the Gemma 4 turn format, trains a sentencepiece BPE tokenizer with the Gemma 4
control tokens, and writes everything the GPU machine needs, already tokenized:

  OUT/tokenizer.model        sentencepiece model (pad 0, eos 1, bos 2, unk 3, control tokens)
  OUT/train.npz              ids (uint16 token stream), starts (uint32 conversation offsets)
  OUT/heldout.npz            ids, starts, answer_mask (uint8: 1 where the token is answer text
                             or the closing <turn|>) for the held-out synsets (~2%)
  OUT/corpus.json            counts, seed, token ids of the control tokens, sample conversations

Each conversation is laid out token for token as the engine renders a chat
(engine/src/Tokenizer.cpp renderChat, GEMMA4.md §7):

  <bos> [<|turn> enc("system\\nS") <turn|> enc("\\n")]
        ( <|turn> enc("user\\nQ") <turn|> enc("\\n") <|turn> enc("model\\nA") <turn|> enc("\\n") )*   earlier turns
        <|turn> enc("user\\nQ") <turn|> enc("\\n") <|turn> enc("model\\n") <|channel> enc("thought\\n") <channel|>
        enc(A) <turn|>

Runs on the development machine with numpy + sentencepiece (no torch):
    python3 tools/prepare_corpus.py --out .demo
Everything is deterministic for a given --seed and WordNet release.
"""

import argparse
import collections
import json
import os
import random
import re
import sys
import time
import zlib

import numpy as np

WORDNET_DIR = "/usr/share/wordnet"
POS_FILES = [("n", "data.noun"), ("v", "data.verb"), ("a", "data.adj"), ("r", "data.adv")]
PAD, EOS, BOS, UNK = 0, 1, 2, 3
CONTROL_TOKENS = [
    "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>", "<|tool>", "<tool|>",
    "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>',
    "<|image|>", "<|audio|>",
]
HELDOUT_MODULUS = 50        # a synset is held out when crc32(pos:offset) % 50 == 0 (2%)
DEFAULT_SEED = 20260501
DEFAULT_VOCAB = 8192

# --------------------------------------------------------------------------------------------
# WordNet parsing
# --------------------------------------------------------------------------------------------

Synset = collections.namedtuple("Synset", "pos offset words definition examples hypernyms")


def clean_word(word):
    word = re.sub(r"\([a-z]+\)$", "", word)          # adjective markers: (a) (p) (ip)
    return word.replace("_", " ")


def split_gloss(gloss):
    """'def; "ex one"; "ex two"' -> ('def', ['ex one', 'ex two'])."""
    quote = gloss.find('"')
    definition = gloss if quote < 0 else gloss[:quote]
    definition = definition.strip().rstrip(";").strip()
    examples = [e.strip() for e in re.findall(r'"([^"]+)"', gloss[quote:] if quote >= 0 else "")]
    return definition, [e for e in examples if len(e) > 3]


def parse_data_file(path, pos):
    synsets = []
    with open(path, encoding="latin-1") as f:   # WordNet 3.0 is ASCII plus a few Latin-1 bytes
        for line in f:
            if line.startswith("  "):
                continue                          # licence header
            head, _, gloss = line.partition(" | ")
            fields = head.split()
            offset = fields[0]
            w_cnt = int(fields[3], 16)
            words = [clean_word(fields[4 + 2 * i]) for i in range(w_cnt)]
            k = 4 + 2 * w_cnt
            p_cnt = int(fields[k])
            hypernyms = []
            for i in range(p_cnt):
                symbol, target, target_pos = fields[k + 1 + 4 * i: k + 4 + 4 * i]
                if symbol in ("@", "@i") and target_pos == "n":
                    hypernyms.append(target)
            definition, examples = split_gloss(gloss.strip())
            if definition:
                synsets.append(Synset(pos, offset, words, definition, examples, hypernyms))
    return synsets


def load_wordnet(directory):
    out = []
    for pos, name in POS_FILES:
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            sys.exit("missing %s: install the Debian package wordnet-base (apt-get install wordnet-base)" % path)
        out.extend(parse_data_file(path, pos))
    return out


def load_sense_ranks(directory):
    """(lemma, offset) -> (rank, tagged): the sense's position in the lemma's index entry (0 = most
    frequent sense) and whether the sense was seen in WordNet's sense-tagged corpus."""
    ranks = {}
    for _pos, name in POS_FILES:
        with open(os.path.join(directory, name.replace("data.", "index.")), encoding="latin-1") as f:
            for line in f:
                if line.startswith("  "):
                    continue
                fields = line.split()
                lemma, synset_cnt, p_cnt = fields[0].replace("_", " "), int(fields[2]), int(fields[3])
                tagged = int(fields[5 + p_cnt])
                offsets = fields[6 + p_cnt: 6 + p_cnt + synset_cnt]
                for rank, offset in enumerate(offsets):
                    ranks[(lemma, offset)] = (rank, rank < tagged)
    return ranks


def is_heldout(synset):
    return zlib.crc32(("%s:%s" % (synset.pos, synset.offset)).encode()) % HELDOUT_MODULUS == 0


# --------------------------------------------------------------------------------------------
# Conversations (text); rendering to ids happens later
# --------------------------------------------------------------------------------------------

def article(word):
    return "an" if word[:1].lower() in "aeiou" else "a"


def needs_article(word):
    """Common nouns take 'a'/'an'; names and taxonomic groups ('Canis', 'genus Canis') do not."""
    return word[:1].islower() and not re.match(r"(genus|family|order|class|phylum|subfamily|suborder) ", word)


def with_article(word, capital=False):
    text = "%s %s" % (article(word), word) if needs_article(word) else word
    return cap(text) if capital else text


def is_taxonomic(synset):
    w = synset.words[0]
    return not needs_article(w) or synset.definition.startswith(("a genus", "any of", "a family", "family of",
                                                                 "genus of", "an order", "order of"))


def cap(text):
    return text[:1].upper() + text[1:] if text else text


def sentence(text):
    text = cap(text.strip())
    return text if text[-1:] in ".!?" else text + "."


def join_words(words):
    words = ["'%s'" % w for w in words]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


DEFINE_Q = {
    "n": ["What does '{w}' mean?", "What is {aw}?", "What is the meaning of {w}?", "Define {w}.",
          "What is the definition of {w}?", "Explain the word {w}.", "Tell me what {aw} is.",
          "what is {aw}", "Define the noun '{w}'.", "What is meant by {w}?"],
    "v": ["What does it mean to {w}?", "What does '{w}' mean?", "Define {w}.", "Define the verb '{w}'.",
          "What is the meaning of the verb {w}?", "Explain what it means to {w}.", "what does {w} mean"],
    "a": ["What does '{w}' mean?", "What does {w} mean?", "Define {w}.", "What is the meaning of {w}?",
          "Define the adjective '{w}'.", "Explain the word {w}.", "what does {w} mean"],
    "r": ["What does '{w}' mean?", "What does {w} mean?", "Define {w}.", "What is the meaning of {w}?",
          "Define the adverb '{w}'.", "what does {w} mean"],
}
EXAMPLE_Q = ["Use '{w}' in a sentence.", "Give me an example sentence with {w}.", "How do you use the word {w}?",
             "Can you use {w} in a sentence?", "Write a sentence with the word '{w}'.", "Show me how to use {w}."]
EXAMPLE_A = ["{e}", "{e}", "Here is an example: {e}", "For example: {e}", "You could say: {e}"]
SYNONYM_Q = ["What is another word for {w}?", "Give me a synonym for {w}.", "What is a synonym of '{w}'?",
             "Which words mean the same as {w}?", "Is there another word for {w}?"]
KIND_Q = ["What kind of thing is {aw}?", "{Aw} is a type of what?", "What category does {w} belong to?",
          "What is {aw} a kind of?"]
SYSTEM_PROMPTS = [
    "You are a helpful assistant.", "You are a concise dictionary. Answer in one or two sentences.",
    "You are the Gemma Desk demo model.", "Answer briefly and clearly.", "You explain English words.",
    "You are a friendly assistant that knows the meanings of words.",
]
SMALL_TALK = [
    (["Hello", "Hello!", "Hi", "Hi!", "Hi there", "Hey", "Good morning", "hello"],
     ["Hello! I am a small demo model trained on the WordNet dictionary. Ask me what a word means.",
      "Hi! Ask me about an English word and I will tell you what it means.",
      "Hello! I can define English words and use them in sentences."]),
    (["Who are you?", "What are you?", "Tell me about yourself.", "What is your name?", "who are you"],
     ["I am the Gemma Desk demo model, a small Gemma 4 model trained on WordNet definitions.",
      "I am a small demo model with the Gemma 4 architecture. I know the meanings of many English words."]),
    (["What can you do?", "How can you help me?", "What do you know?", "Help", "What should I ask you?"],
     ["I can tell you what an English word means, give an example sentence or suggest another word for it. "
      "Try: What does 'harbor' mean?",
      "Ask me to define a word, to use a word in a sentence or for a synonym."]),
    (["Thank you", "Thanks!", "thanks", "Thank you very much.", "Great, thanks."],
     ["You are welcome!", "Glad to help. Ask me about another word any time.", "You are welcome."]),
    (["Goodbye", "Bye", "See you later."],
     ["Goodbye!", "Bye! Come back when you need a word explained."]),
]


def definition_answer(s, w, r, lookup):
    d = s.definition
    if s.pos == "n":
        if re.match(r"(a|an|any|one|someone|something|somebody) ", d):
            text = "%s is %s" % (with_article(w, True), d)
        elif d.startswith("the "):
            text = "%s is %s" % (cap(w), d)
        else:                                   # 'primitive long-bodied fish': count or mass noun
            text = "%s means %s" % (cap(w), d)
    elif s.pos == "v":
        text = "To %s means to %s" % (w, re.sub(r"^to ", "", d))
    else:
        text = "%s means %s" % (cap(w), d)
    parts = [sentence(text)]
    others = [x for x in s.words if x.lower() != w.lower()]
    if s.hypernyms and r.random() < 0.35:
        parts.append("It is a kind of %s." % lookup[s.hypernyms[0]].words[0])
    if others and r.random() < 0.35:
        parts.append(("Another word for it is %s." if len(others) == 1 else "Other words for it are %s.")
                     % join_words(others[:3]))
    if s.examples and r.random() < 0.3:
        parts.append("For example: %s" % sentence(s.examples[0]))
    return " ".join(parts)


def question(templates, w, r):
    q = r.choice(templates)
    return q.format(w=w, aw=with_article(w), Aw=with_article(w, True))


def synset_exchanges(s, r, lookup, ranks):
    """A list of (question, answer) pairs drawn from one synset. Frequent senses of a word get
    more questions (so 'What is a dog?' meets the animal first), rare taxonomic names fewer."""
    out = []
    taxonomic = is_taxonomic(s)
    for w in s.words[:3]:
        rank, tagged = ranks.get((w.lower(), s.offset), (99, False))
        copies = 3 if (tagged and rank == 0) else 2 if tagged else 1
        if taxonomic and r.random() > 0.35:
            copies = 0
        for _ in range(copies):
            out.append((question(DEFINE_Q[s.pos], w, r), definition_answer(s, w, r, lookup)))
    w = s.words[0]
    for e in s.examples[:2]:
        out.append((question(EXAMPLE_Q, w, r), r.choice(EXAMPLE_A).format(e=sentence(e))))
    if len(s.words) > 1:
        others = [x for x in s.words if x.lower() != w.lower()][:3]
        if others:
            a = ("Another word for %s is '%s'." % (w, others[0]) if len(others) == 1 else
                 "Other words for %s are %s." % (w, join_words(others)))
            out.append((question(SYNONYM_Q, w, r), a))
    if s.pos == "n" and s.hypernyms and r.random() < 0.5:
        h = lookup[s.hypernyms[0]].words[0]
        out.append((question(KIND_Q, w, r), "%s is a kind of %s." % (with_article(w, True), h)))
    return out


def small_talk(r, n):
    out = []
    for _ in range(n):
        qs, answers = r.choice(SMALL_TALK)
        out.append((r.choice(qs), r.choice(answers)))
    return out


def build_conversations(synsets, ranks, seed):
    """-> (train, heldout): lists of conversations; a conversation = dict(system, turns=[(q, a), ...])."""
    r = random.Random(seed)
    lookup = {s.offset: s for s in synsets if s.pos == "n"}
    pools = {"train": [], "heldout": []}
    for s in synsets:
        pools["heldout" if is_heldout(s) else "train"].extend(synset_exchanges(s, r, lookup, ranks))
    pools["train"].extend(small_talk(r, 3000))
    result = {}
    for name, exchanges in pools.items():
        r.shuffle(exchanges)
        convs, i = [], 0
        while i < len(exchanges):
            n = 2 if r.random() < 0.15 and i + 1 < len(exchanges) else 1
            system = r.choice(SYSTEM_PROMPTS) if r.random() < 0.06 else None
            convs.append(dict(system=system, turns=exchanges[i:i + n]))
            i += n
        result[name] = convs
    return result["train"], result["heldout"]


# --------------------------------------------------------------------------------------------
# Tokenizer and rendering
# --------------------------------------------------------------------------------------------

def train_tokenizer(convs, out_dir, vocab, seed):
    import sentencepiece as spm
    r = random.Random(seed + 1)
    lines = set()
    for c in convs:
        if c["system"]:
            lines.add(c["system"])
        for q, a in c["turns"]:
            lines.add(q)
            lines.add(a)
    lines = sorted(lines)
    r.shuffle(lines)
    lines = lines[:400000] + ["user", "model", "system", "thought"] * 50
    txt = os.path.join(out_dir, "tokenizer_input.txt")
    with open(txt, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    prefix = os.path.join(out_dir, "tokenizer")
    spm.SentencePieceTrainer.train(
        input=txt, model_prefix=prefix, vocab_size=vocab, model_type="bpe", byte_fallback=True,
        add_dummy_prefix=False, remove_extra_whitespaces=False, normalization_rule_name="identity",
        pad_id=PAD, eos_id=EOS, bos_id=BOS, unk_id=UNK, pad_piece="<pad>", eos_piece="<eos>",
        bos_piece="<bos>", unk_piece="<unk>", user_defined_symbols=CONTROL_TOKENS,
        character_coverage=1.0, num_threads=2, shuffle_input_sentence=False, split_digits=True,
        minloglevel=2)
    os.remove(txt)
    os.remove(prefix + ".vocab")
    return prefix + ".model"


class Renderer:
    def __init__(self, model_path):
        import sentencepiece as spm
        self.sp = spm.SentencePieceProcessor(model_file=model_path)
        self.ids = {p: self.sp.piece_to_id(p) for p in CONTROL_TOKENS}
        assert self.sp.pad_id() == PAD and self.sp.eos_id() == EOS and self.sp.bos_id() == BOS
        assert self.sp.unk_id() == UNK
        for p, i in self.ids.items():
            assert self.sp.id_to_piece(i) == p, p
        self.cache = {}
        self.nl = self.enc("\n")

    def enc(self, text):
        ids = self.cache.get(text)
        if ids is None:
            ids = self.sp.encode(text)
            if len(self.cache) < 200000:
                self.cache[text] = ids
        return ids

    def render(self, conv):
        """-> (ids, answer_mask) exactly as the engine renders the chat plus the model's answer."""
        T, E = self.ids["<|turn>"], self.ids["<turn|>"]
        C0, C1 = self.ids["<|channel>"], self.ids["<channel|>"]
        ids, mask = [BOS], [0]

        def add(seq, m):
            ids.extend(seq)
            mask.extend([m] * len(seq))

        if conv["system"]:
            add([T] + self.sp.encode("system\n" + conv["system"]) + [E] + self.nl, 0)
        turns = conv["turns"]
        for q, a in turns[:-1]:
            add([T] + self.sp.encode("user\n" + q) + [E] + self.nl, 0)
            add([T] + self.sp.encode("model\n" + a) + [E] + self.nl, 0)
        q, a = turns[-1]
        add([T] + self.sp.encode("user\n" + q) + [E] + self.nl + [T] + self.enc("model\n") + [C0]
            + self.enc("thought\n") + [C1], 0)
        add(self.sp.encode(a) + [E], 1)
        return ids, mask


def render_all(renderer, convs):
    chunks, masks, starts, pos = [], [], [], 0
    for c in convs:
        ids, mask = renderer.render(c)
        starts.append(pos)
        pos += len(ids)
        chunks.append(np.asarray(ids, dtype=np.uint16))
        masks.append(np.asarray(mask, dtype=np.uint8))
    return np.concatenate(chunks), np.concatenate(masks), np.asarray(starts, dtype=np.uint32)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".demo", help="output folder (default .demo)")
    ap.add_argument("--wordnet", default=WORDNET_DIR, help="WordNet dict folder (default %(default)s)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--vocab", type=int, default=DEFAULT_VOCAB)
    args = ap.parse_args()
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    synsets = load_wordnet(args.wordnet)
    train, heldout = build_conversations(synsets, load_sense_ranks(args.wordnet), args.seed)
    print("synsets %d, conversations: train %d, held-out %d (%.1fs)" % (
        len(synsets), len(train), len(heldout), time.time() - t0), flush=True)
    model_path = train_tokenizer(train, args.out, args.vocab, args.seed)
    print("tokenizer trained (%.1fs)" % (time.time() - t0), flush=True)
    renderer = Renderer(model_path)
    tr_ids, _tr_mask, tr_starts = render_all(renderer, train)
    ho_ids, ho_mask, ho_starts = render_all(renderer, heldout)
    assert int(tr_ids.max()) < args.vocab and int(ho_ids.max()) < args.vocab
    np.savez_compressed(os.path.join(args.out, "train.npz"), ids=tr_ids, starts=tr_starts)
    np.savez_compressed(os.path.join(args.out, "heldout.npz"), ids=ho_ids, starts=ho_starts, answer_mask=ho_mask)
    sp = renderer.sp
    samples = []
    for c in train[:6] + heldout[:3]:
        ids, _ = renderer.render(c)
        samples.append(dict(conversation=c, ids=ids, pieces=[sp.id_to_piece(i) for i in ids]))
    meta = dict(
        source="WordNet 3.0 (Debian package wordnet-base), %s/data.{noun,verb,adj,adv}" % args.wordnet,
        licence="WordNet 3.0 licence, see resources/models/LICENSE-DATA.txt",
        command="python3 tools/prepare_corpus.py --out %s --seed %d --vocab %d" % (args.out, args.seed, args.vocab),
        seed=args.seed, vocab_size=sp.get_piece_size(), synsets=len(synsets),
        heldout_rule="crc32('pos:offset') %% %d == 0" % HELDOUT_MODULUS,
        train_conversations=len(train), heldout_conversations=len(heldout),
        train_tokens=int(tr_ids.size), heldout_tokens=int(ho_ids.size),
        heldout_answer_tokens=int(ho_mask.sum()),
        special_ids=dict(pad=PAD, eos=EOS, bos=BOS, unk=UNK, **renderer.ids),
        sentencepiece_version=__import__("sentencepiece").__version__,
        samples=samples,
    )
    with open(os.path.join(args.out, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1)
    print("train tokens %d, held-out tokens %d, done in %.1fs" % (tr_ids.size, ho_ids.size, time.time() - t0))


if __name__ == "__main__":
    main()
