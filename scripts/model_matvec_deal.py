#!/usr/bin/env python3
"""A host model of the batch-1 FP4 matvec's warp loop under docs/PERFORMANCE.md version 35 step 6.

The model follows commit 8db0beb. In it, a block's (tile, group) items are dealt round robin to its
warps. Each tile ends on a named barrier that only its reducing warp waits on, with a ring of
kPartialBuffers partial buffers and one block barrier per wrap.

The model follows the kernel's load and compute iterators, its steady rounds and tail, and its
flush, as one generator per warp (the names follow fp4MatvecMmaKernel). A scheduler runs the warps
in random order with the barriers' semantics:
- bar.sync 0 releases when every warp is waiting;
- a named barrier's phase completes when every warp has arrived, where bar.sync waits and
  bar.arrive does not.

It checks three things:
- no deadlock;
- every (tile, group) is computed exactly once, from the slot the fetch filled for it;
- every reduction reads the partials of its own tile from all warps (none overwritten by a later
  tile).

It copies the kernel's control flow, not its arithmetic: change it with the kernel.
Usage: scripts/model_matvec_deal.py [--seeds N]. It prints the number of runs, and exits 1 on
the first failure.
"""
import argparse
import random
import sys

WARPS = 8            # kMmaWarps
PARTIAL_BUFFERS = 4  # kPartialBuffers


def warp_tile_share(warp, k, groups):
    """kernels/Fp4MatvecShare.h: warp's first group of the block's k-th tile and how many."""
    first = (warp - k * groups) & (WARPS - 1)
    return first, ((groups - 1 - first) // WARPS + 1 if first < groups else 0)


def warp_program(warp, my_tiles, groups, depth, groups_per_item):
    """One warp's events, in program order: ('compute', tile, groups), ('sync0',), ('write',
    buffer, tile), ('sync', buffer), ('read', buffer, tile), ('arrive', buffer)."""
    items_of = lambda count: (count + groups_per_item - 1) // groups_per_item
    if groups_per_item == 1:
        dealt = my_tiles * groups
        items = (dealt - 1 - warp) // WARPS + 1 if dealt > warp else 0
    else:
        items = sum(items_of(warp_tile_share(warp, k, groups)[1]) for k in range(my_tiles))
    slot = [None] * depth

    load = {"tile": -1, "item": 0, "items": 0, "share": (0, 0)}

    def next_load_tile():
        while True:
            load["tile"] += 1
            load["share"] = warp_tile_share(warp, load["tile"], groups)
            if not (load["tile"] < my_tiles and load["share"][1] == 0):
                break
        load["items"] = items_of(load["share"][1])

    def groups_of_item(it):
        first, count = it["share"]
        chosen = []
        for s in range(groups_per_item):
            local = it["item"] * groups_per_item + s
            if groups_per_item > 1 and local >= count:
                break
            chosen.append(first + local * WARPS)
        return it["tile"], tuple(chosen)

    def fetch(u):
        slot[u] = groups_of_item(load)
        load["item"] += 1
        if load["item"] == load["items"]:
            load["item"] = 0
            next_load_tile()

    if items > 0:
        next_load_tile()
    for u in range(depth):
        if u < items:
            fetch(u)

    compute_it = {"tile": 0, "item": 0, "items": 0, "share": (0, 0)}

    def flush(mine):
        buffer = mine & (PARTIAL_BUFFERS - 1)
        if mine != 0 and buffer == 0:
            yield ("sync0",)
        yield ("write", buffer, mine)
        if warp == mine & (WARPS - 1):
            yield ("sync", buffer)
            yield ("read", buffer, mine)
        else:
            yield ("arrive", buffer)

    def enter_compute_tile():
        while True:
            compute_it["share"] = warp_tile_share(warp, compute_it["tile"], groups)
            if compute_it["tile"] >= my_tiles or compute_it["share"][1] > 0:
                break
            yield from flush(compute_it["tile"])
            compute_it["tile"] += 1
        compute_it["items"] = items_of(compute_it["share"][1])

    def compute(u):
        expected = groups_of_item(compute_it)
        assert slot[u] == expected, f"warp {warp} slot {u}: fetched {slot[u]}, computes {expected}"
        return ("compute",) + expected

    def advance():
        compute_it["item"] += 1
        if compute_it["item"] == compute_it["items"]:
            compute_it["item"] = 0
            yield from flush(compute_it["tile"])
            compute_it["tile"] += 1
            yield from enter_compute_tile()

    yield from enter_compute_tile()
    k0 = 0
    while k0 + 2 * depth <= items:  # steady rounds
        for u in range(depth):
            yield compute(u)
            fetch(u)
            yield from advance()
        k0 += depth
    while k0 < items:  # the tail, with its bound tests
        for u in range(depth):
            if k0 + u >= items:
                break
            yield compute(u)
            if k0 + u + depth < items:
                fetch(u)
            yield from advance()
        k0 += depth
    while compute_it["tile"] < my_tiles:
        yield from flush(compute_it["tile"])
        compute_it["tile"] += 1


def run(my_tiles, groups, depth, groups_per_item, seed):
    rng = random.Random(seed)
    programs = [warp_program(w, my_tiles, groups, depth, groups_per_item) for w in range(WARPS)]
    done = [False] * WARPS
    blocked = [False] * WARPS
    computed = set()
    written = {}  # buffer -> {warp: the tile it last wrote there}
    arrived = [0] * PARTIAL_BUFFERS
    waiting = [set() for _ in range(PARTIAL_BUFFERS)]
    at_block_barrier = set()
    label = f"{my_tiles} tiles, {groups} groups, D {depth}, {groups_per_item} groups per item, seed {seed}"
    while not all(done):
        ready = [w for w in range(WARPS) if not done[w] and not blocked[w]]
        assert ready, f"deadlock: {label}"
        w = rng.choice(ready)
        try:
            event = next(programs[w])
        except StopIteration:
            done[w] = True
            continue
        kind = event[0]
        if kind == "compute":
            for group in event[2]:
                assert (event[1], group) not in computed, f"computed twice: {label}"
                computed.add((event[1], group))
        elif kind == "write":
            written.setdefault(event[1], {})[w] = event[2]
        elif kind == "read":
            for other in range(WARPS):
                assert written[event[1]].get(other) == event[2], f"tile {event[2]} read warp {other}'s tile {written[event[1]].get(other)}: {label}"
        elif kind == "arrive":
            arrived[event[1]] += 1
        elif kind == "sync":
            arrived[event[1]] += 1
            waiting[event[1]].add(w)
            blocked[w] = True
        elif kind == "sync0":
            at_block_barrier.add(w)
            blocked[w] = True
        for b in range(PARTIAL_BUFFERS):
            assert arrived[b] <= WARPS, f"barrier {b + 1} over-arrived: {label}"
            if arrived[b] == WARPS:
                for x in waiting[b]:
                    blocked[x] = False
                arrived[b], waiting[b] = 0, set()
        if len(at_block_barrier) == WARPS:
            for x in at_block_barrier:
                blocked[x] = False
            at_block_barrier = set()
    want = {(t, g) for t in range(my_tiles) for g in range(groups)}
    assert computed == want, f"{len(computed)} of {len(want)} items computed: {label}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6, help="random schedules per shape (default 6)")
    args = parser.parse_args()
    runs = 0
    try:
        for my_tiles in range(0, 11):
            for groups in (1, 2, 3, 5, 7, 8, 9, 12, 20, 30, 32, 42, 120):
                for depth, groups_per_item in ((4, 1), (2, 1), (2, 2)):
                    for seed in range(args.seeds):
                        run(my_tiles, groups, depth, groups_per_item, seed)
                        runs += 1
    except AssertionError as failure:
        print(f"model_matvec_deal: {failure}", file=sys.stderr)
        return 1
    print(f"ok: {runs} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
