#!/usr/bin/env python3
"""The hot path of a decode matvec's compute loop, read from its SASS (cuobjdump -sass output).

Why: the FP4 matvecs are bound by the issue of their own instructions (docs/PERFORMANCE.md
version 34: each instruction on a weight item's path is worth about 0.1-0.15 % of the 12b's
decode step), and where the refill's global loads sit among the item's tensor-core instructions
matters as much (version 34 step 2). This prints, for every function in the dump whose name
matches a pattern, each loop that holds IMMA/HMMA instructions, and for the first of them (the
steady rounds) the path one round takes when no rare event happens:

- a conditional forward branch to a place inside the loop that skips no tensor-core instruction
  and no weight load (a read-only global load, LDG.*CONSTANT) is taken (the compiler lays a rare
  block, such as a tile's end, inline and jumps over it); one that would skip either is a bound
  test and is not taken;
- a conditional branch out of the loop, or a divergence check (BRA.DIV), is not taken;
- an unconditional branch is followed; the walk ends at the loop's back edge.

Per round it reports the instructions by class, per 1 KB weight item (8 tensor-core
instructions of the integer path: a GeGLU item of gate and up counts as two), and the position of each global load as the number of the round's tensor-core
instructions issued before it.

Usage: sass_item_path.py DUMP [--function REGEX] [--mma-per-item N]
(cuobjdump -sass OBJECT > DUMP; scripts/gpu_ab_builds.sh runs it with GEMMA_AB_SASS)
"""
import argparse
import collections
import re
import sys

INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
TARGET = re.compile(r"0x([0-9a-f]+)")

# Opcode classes, by the first matching prefix.
CLASSES = [
    ("tensor core", ("IMMA", "HMMA")),
    ("global load", ("LDG",)),
    ("shared load", ("LDS",)),
    ("byte permute", ("PRMT",)),
    ("shift", ("SHF",)),
    ("int to float", ("I2F",)),
    ("float", ("FFMA", "FMUL", "FADD", "FSEL", "FSETP", "MUFU")),
    ("branch and sync", ("BRA", "BSSY", "BSYNC", "WARPSYNC", "BAR")),
    ("compare and select", ("ISETP", "SEL")),
    ("integer add", ("IADD3", "VIADD", "IMAD.IADD", "IMAD.X", "LEA")),
    ("move", ("IMAD.MOV", "MOV", "UMOV", "CS2R")),
    ("multiply-add", ("IMAD",)),
    ("logic", ("LOP3",)),
]


def opcode(text):
    """The instruction's opcode with its modifiers, predicate removed."""
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]


def classify(op):
    for name, prefixes in CLASSES:
        if any(op == p or op.startswith(p + ".") for p in prefixes):
            return name
    return "other"


def functions(lines):
    """(name, [(address, text)]) for each function in a cuobjdump dump."""
    name, body = None, []
    for line in lines:
        m = FUNCTION.match(line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
            continue
        m = INSTRUCTION.match(line)
        if m and name:
            body.append((int(m.group(1), 16), m.group(2)))
    if name:
        yield name, body


def is_mma(text):
    return classify(opcode(text)) == "tensor core"


def is_weight_load(text):
    op = opcode(text)
    return op.startswith("LDG") and "CONSTANT" in op


def loops(body):
    """(head index, back-edge index) of every backward branch whose body holds a tensor-core op."""
    index = {address: i for i, (address, _) in enumerate(body)}
    found = []
    for i, (address, text) in enumerate(body):
        if opcode(text).startswith("BRA"):
            m = TARGET.search(text)
            if m:
                target = int(m.group(1), 16)
                if target < address and target in index and any(is_mma(t) for _, t in body[index[target]:i + 1]):
                    found.append((index[target], i))
    return sorted(found)


def hot_path(body, head, back):
    """The instructions one round runs when no rare event happens (see the module's comment)."""
    index = {address: i for i, (address, _) in enumerate(body)}
    end = body[back][0]
    path, i, steps = [], head, 0
    while i <= back and steps < 100000:
        steps += 1
        address, text = body[i]
        path.append(text)
        op = opcode(text)
        if i == back:
            break
        if op.startswith("BRA") and not op.startswith("BRA.DIV"):
            m = TARGET.search(text)
            target = int(m.group(1), 16) if m else None
            conditional = text.lstrip().startswith("@")
            if target is not None and target in index:
                skipsWork = any(is_mma(t) or is_weight_load(t) for _, t in body[i + 1:index[target]]) \
                    if target > address else True
                if not conditional or (address < target <= end and not skipsWork):
                    i = index[target]
                    continue
        i += 1
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dump")
    parser.add_argument("--function", default=".", help="regex over the mangled names (default: every function)")
    parser.add_argument("--mma-per-item", type=int, default=8,
                        help="tensor-core instructions per 1 KB weight item (8 on the integer path)")
    args = parser.parse_args()
    try:
        with open(args.dump) as f:
            lines = f.read().splitlines()
    except OSError as e:
        sys.exit(f"sass_item_path: cannot read {args.dump}: {e.strerror}")
    pattern = re.compile(args.function)
    shown = 0
    for name, body in functions(lines):
        if not pattern.search(name):
            continue
        shown += 1
        print(f"== {name}: {len(body)} instructions")
        found = loops(body)
        for head, back in found:
            mma = sum(is_mma(t) for _, t in body[head:back + 1])
            print(f"   loop {body[head][0]:05x}-{body[back][0]:05x}: {back - head + 1} instructions, {mma} tensor-core")
        if not found:
            print("   no loop with tensor-core instructions")
            continue
        path = hot_path(body, *found[0])
        mma = sum(is_mma(t) for t in path)
        items = mma / args.mma_per_item if mma else 0
        print(f"   steady round's hot path: {len(path)} instructions, {mma} tensor-core"
              + (f" = {items:g} KB of weights, {len(path) / items:.1f} instructions per 1 KB item" if items else ""))
        counts = collections.Counter(classify(opcode(t)) for t in path)
        for cls, n in sorted(counts.items(), key=lambda kv: -kv[1]):
            print(f"     {cls:20s} {n:5d}" + (f"   {n / items:6.1f} per item" if items else ""))
        # Each global load's place: the round's tensor-core ops issued before it.
        places, seen = [], 0
        for t in path:
            if is_mma(t):
                seen += 1
            elif classify(opcode(t)) == "global load":
                places.append(seen)
        if places:
            print(f"   global loads after how many of the round's {mma} tensor-core ops: " + " ".join(str(p) for p in places))
    if shown == 0:
        sys.exit(f"sass_item_path: no function in {args.dump} matches {args.function!r}")


if __name__ == "__main__":
    main()
