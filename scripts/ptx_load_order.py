#!/usr/bin/env python3
"""Where a kernel's global loads sit against its barriers and its dependency wait, from PTX.

The compiler does not move a global load above a block barrier that precedes it in the source,
so a load of a constant (a norm weight, a table) written after a reduction waits for that
reduction: docs/PERFORMANCE.md version 37 step 3 found two such round trips in every normed
matvec launch. This prints, for each kernel entry whose mangled name matches REGEX, the
sequence of its `griddepcontrol.wait`, `bar.sync` / `barrier.cluster` and the global loads
between them (counted by instruction form), so a load that could be issued earlier stands out.
PTX order is the compiler's front-end order; ptxas may still reorder within a segment, never
across a barrier.

  ptx_load_order.py --ptx FILE.ptx REGEX            an existing PTX file
  ptx_load_order.py --build build --source kernels/cuda/Fp4Matvec.cu REGEX
                                                    PTX made here from the build's own nvcc command
                                                    for that object (`ninja -t commands`), no GPU
  --lines   list every load's PTX line instead of counts per segment
"""
import argparse
import collections
import os
import re
import shlex
import subprocess
import sys
import tempfile

ENTRY = re.compile(r"^\.(?:visible\s+)?\.entry\s+(\S+)\(")
LOAD = re.compile(r"\bld\.global(\.[\w:]+)*")
MARKERS = (
    ("griddepcontrol.wait", re.compile(r"\bgriddepcontrol\.wait\b")),
    ("bar.sync", re.compile(r"\bbar(?:rier)?\.sync\b")),
    ("barrier.cluster.wait", re.compile(r"\bbarrier\.cluster\.wait\b")),
)


def ptx_from_build(build, source, directory):
    """Runs the build's nvcc command for `source`'s object with -ptx into `directory`; returns the PTX path."""
    name = os.path.basename(source)
    commands = subprocess.run(["ninja", "-C", build, "-t", "commands"], capture_output=True, text=True, check=True).stdout
    lines = [c for c in commands.splitlines() if "nvcc" in c and f"/{name}.o" in c and " -c " in f" {c} "]
    if not lines:
        sys.exit(f"no nvcc command for {name} in {build} (is it a CUDA source of that build?)")
    args = shlex.split(lines[-1])
    out = os.path.join(directory, name + ".ptx")
    kept = []
    skip = 0
    for a in args:
        if skip:
            skip -= 1
            continue
        if a in ("-o", "-MF", "-MT"):
            skip = 1
            continue
        if a in ("-c", "-MD"):
            continue
        kept.append(a)
    subprocess.run(kept + ["-ptx", "-o", out], cwd=build, check=True)
    return out


def entries(path, pattern):
    """Yields (name, [(line number, text)]) for each entry whose name matches `pattern`."""
    name, body = None, []
    with open(path) as f:
        for number, text in enumerate(f, 1):
            m = ENTRY.match(text)
            if m:
                if name and pattern.search(name):
                    yield name, body
                name, body = m.group(1), []
            elif name is not None:
                body.append((number, text.strip()))
    if name and pattern.search(name):
        yield name, body


def report(name, body, list_lines):
    print(f"== {name}")
    loads = collections.Counter()
    segment_start = body[0][0] if body else 0

    def flush(until):
        if loads:
            summary = ", ".join(f"{count} × {form}" for form, count in sorted(loads.items()))
            print(f"   lines {segment_start}-{until}: {summary}")
        loads.clear()

    for number, text in body:
        marker = next((label for label, rx in MARKERS if rx.search(text)), None)
        if marker:
            flush(number)
            print(f"   {number}: {marker}")
            segment_start = number
            continue
        m = LOAD.search(text)
        if m:
            if list_lines:
                print(f"      {number}: {text}")
            else:
                loads[m.group(0)] += 1
    flush(body[-1][0] if body else 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("regex", help="a regular expression over mangled kernel names")
    parser.add_argument("--ptx", help="an existing PTX file")
    parser.add_argument("--build", help="a configured Ninja build directory (with --source)")
    parser.add_argument("--source", help="the CUDA source whose object's command makes the PTX")
    parser.add_argument("--lines", action="store_true", help="list every load's line")
    options = parser.parse_args()
    if bool(options.ptx) == bool(options.build and options.source):
        parser.error("give either --ptx FILE or both --build DIR and --source FILE")
    if options.ptx:
        print_entries(options.ptx, options.regex, options.lines)
        return
    with tempfile.TemporaryDirectory() as directory:  # the PTX of one source runs to megabytes
        print_entries(ptx_from_build(options.build, options.source, directory), options.regex, options.lines)


def print_entries(path, regex, list_lines):
    found = 0
    for name, body in entries(path, re.compile(regex)):
        report(name, body, list_lines)
        found += 1
    if not found:
        sys.exit(f"no kernel entry matches {regex!r} in {path}")


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # output cut short by a pager or `head`
        sys.stderr.close()
