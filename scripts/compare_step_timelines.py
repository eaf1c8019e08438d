#!/usr/bin/env python3
"""Compares decode steps' launch sequences (gemma-bench --step-timeline CSVs) between trees.

Usage: compare_step_timelines.py [--top N] LABEL=CSV [LABEL=CSV ...]

A label given more than once (rounds) is averaged position by position. The first label is the
reference. Every launch is measured two ways:
- duration: its own start to end, as the kernel timeline reports it. With programmatic launches a
  kernel starts before its predecessor ends and waits inside, so a duration includes waiting.
- marginal: its end minus the previous launch's end (the first launch: its duration). The
  marginals add up to the step's span and charge each launch only with what it adds after its
  predecessor, so a saving shows at the launch whose own work got shorter.
Prints, per kernel (template instances apart), the launches per step and both means per label
with the difference from the reference, then the N positions whose marginal moved most, and with
--each REGEX every position of the matching kernels (one per layer, say) side by side.
Sequences that differ (a variant that adds or removes launches, e.g. --separate-norms) are aligned
on their kernel names (difflib): the positions are the reference's launches that every run has,
and a launch no other run matches is charged to the next aligned launch of its own run (its
marginal; the step's trailing unmatched launches to a last "(unmatched tail)" position), so the
marginals still add up to each run's span and a position compares the same stretch of work.
The unmatched launches are listed per run. --fold REGEX replaces every match of REGEX in a kernel's
name with "*" before anything else, so that instances that differ only there (a cache type's
template argument, say) count as one kernel. Exit status 1 when an argument is not LABEL=CSV or a
file cannot be read.
"""
import argparse
import csv
import difflib
import re
import sys
from collections import Counter, OrderedDict


def read(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path}: no launches")
    return [(r["kernel"], float(r["start_us"]), float(r["end_us"])) for r in rows]


def measures(rows):
    """Per position: (kernel, duration, marginal)."""
    out, previous_end = [], None
    for kernel, start, end in rows:
        marginal = end - (previous_end if previous_end is not None else start)
        out.append((kernel, end - start, marginal))
        previous_end = end
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10, help="positions listed by the change of their marginal (default 10)")
    parser.add_argument("--each", metavar="REGEX",
                        help="also list every aligned position whose kernel matches REGEX, in step order, with each "
                             "label's marginal (e.g. 'MmaKernel<true' for the GeGLU of every layer)")
    parser.add_argument("--fold", metavar="REGEX",
                        help="replace REGEX's matches in kernel names with '*' (e.g. '__half|float' to compare the "
                             "same kernel over KV-cache types)")
    parser.add_argument("runs", nargs="+", metavar="LABEL=CSV")
    args = parser.parse_args()
    try:
        each = re.compile(args.each) if args.each else None
        fold = re.compile(args.fold) if args.fold else None
    except re.error as error:
        print(f"compare_step_timelines: --each or --fold: {error}", file=sys.stderr)
        return 1
    by_label = OrderedDict()
    for run in args.runs:
        label, sep, path = run.rpartition("=")  # a label may hold "=" (an A/B variant's NAME=VALUE), a path not
        if not sep or not label or not path:
            print(f"compare_step_timelines: '{run}' is not LABEL=CSV", file=sys.stderr)
            return 1
        try:
            rows = measures(read(path))
            if fold:
                rows = [(fold.sub("*", kernel), duration, marginal) for kernel, duration, marginal in rows]
            by_label.setdefault(label, []).append(rows)
        except (OSError, ValueError, KeyError) as error:
            print(f"compare_step_timelines: {error}", file=sys.stderr)
            return 1
    # Positions: the reference's launches that every run matches (all of them when the sequences
    # are equal). Each run's launches are mapped onto them; an unmatched launch's marginal goes to
    # the next aligned position of its run (the tail position after the last).
    reference = [k for k, _, _ in next(iter(by_label.values()))[0]]
    kept = set(range(len(reference)))
    matches = []  # per (label, run): {reference position: run position}
    for label, runs in by_label.items():
        for run in runs:
            names_run = [k for k, _, _ in run]
            matcher = difflib.SequenceMatcher(None, reference, names_run, autojunk=False)
            mapping = {}
            for block in matcher.get_matching_blocks():
                for offset in range(block.size):
                    mapping[block.a + offset] = block.b + offset
            kept &= set(mapping)
            matches.append((label, run, mapping))
    positions = sorted(kept)
    tail = len(positions)  # index of the "(unmatched tail)" position
    names = [reference[i] for i in positions] + ["(unmatched tail)"]
    aligned = OrderedDict()  # label -> list of runs, each a list of [duration, marginal] per position
    unmatched = OrderedDict()  # label -> Counter of unmatched kernels over its runs
    for label, run, mapping in matches:
        slot_of = {mapping[p]: j for j, p in enumerate(positions)}
        cells = [[0.0, 0.0] for _ in names]
        pending = 0.0
        counter = unmatched.setdefault(label, Counter())
        for r, (kernel, duration, marginal) in enumerate(run):
            if r in slot_of:
                j = slot_of[r]
                cells[j] = [duration, marginal + pending]
                pending = 0.0
            else:
                pending += marginal
                counter[kernel] += 1
        cells[tail] = [0.0, pending]
        aligned.setdefault(label, []).append(cells)
    if not any(unmatched.values()):  # equal sequences: no tail position
        names.pop()
        for runs in aligned.values():
            for cells in runs:
                cells.pop()
    else:
        print(f"sequences differ: {len(positions)} aligned launches of the reference's {len(reference)}; "
              "an unmatched launch is charged to its run's next aligned launch")
        for label, counter in unmatched.items():
            if counter:
                runs = len(aligned[label])
                print(f"  {label}: unmatched per step: " + ", ".join(f"{n / runs:g} × {k[:60]}" for k, n in counter.most_common()))
    # Means over a label's rounds, position by position.
    means = OrderedDict()
    for label, runs in aligned.items():
        means[label] = [(sum(r[i][0] for r in runs) / len(runs), sum(r[i][1] for r in runs) / len(runs)) for i in range(len(names))]
    labels = list(means)
    first = labels[0]
    spans = {label: sum(m for _, m in means[label]) for label in labels}
    print("step span (sum of marginals, µs): " + ", ".join(
        f"{label} {spans[label]:.1f}" + ("" if label == first else f" ({spans[label] - spans[first]:+.1f})") for label in labels))
    kernels = OrderedDict()
    for i, name in enumerate(names):
        kernels.setdefault(name, []).append(i)
    header = "| kernel | per step | " + " | ".join(f"{label} duration / marginal µs" for label in labels) + " |"
    print(header)
    print("|" + "---|" * (2 + len(labels)))
    for name, positions in sorted(kernels.items(), key=lambda kv: -sum(means[first][i][1] for i in kv[1])):
        cells = []
        for label in labels:
            duration = sum(means[label][i][0] for i in positions) / len(positions)
            marginal = sum(means[label][i][1] for i in positions) / len(positions)
            cell = f"{duration:.2f} / {marginal:.2f}"
            if label != first:
                d0 = sum(means[first][i][0] for i in positions) / len(positions)
                m0 = sum(means[first][i][1] for i in positions) / len(positions)
                cell += f" ({duration - d0:+.2f} / {marginal - m0:+.2f})"
            cells.append(cell)
        print(f"| `{name}` | {len(positions)} | " + " | ".join(cells) + " |")
    if len(labels) > 1 and args.top > 0:
        last = labels[-1]
        moved = sorted(range(len(names)), key=lambda i: abs(means[last][i][1] - means[first][i][1]), reverse=True)[: args.top]
        print(f"\npositions whose marginal moved most ({last} against {first}, µs):")
        for i in sorted(moved):
            previous = names[i - 1] if i > 0 else "(step start)"
            print(f"  {i:4d} {names[i][:60]:60s} {means[first][i][1]:7.2f} -> {means[last][i][1]:7.2f}"
                  f" ({means[last][i][1] - means[first][i][1]:+.2f}), after {previous[:40]}")
    if each:
        chosen = [i for i, name in enumerate(names) if each.search(name)]
        print(f"\nevery position matching '{args.each}' ({len(chosen)}), marginal µs (with the unmatched launches "
              "charged to it):")
        print("| # | position | " + " | ".join(labels) + " |")
        print("|" + "---|" * (2 + len(labels)))
        for n, i in enumerate(chosen):
            print(f"| {n} | {i} | " + " | ".join(f"{means[label][i][1]:.2f}" for label in labels) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
