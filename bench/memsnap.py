"""Where the CUDA caching allocator's reserve comes from: a summary of a memory-history trace
(bench/hook/sitecustomize.py writes one when DOJO_BENCH_MEMSNAP is set).

Full fine-tuning under expandable segments held 0.7-6.8 GiB reserved beyond allocated on the H200
(the heldout-expandable to heldout-expandable-default sets) that no term of the estimate follows. Each time the allocator maps more memory
(``segment_map``, or ``segment_alloc`` under the default allocator), the trace says how much, how
much was allocated then, and which Python frames asked for the allocation that did not fit: the
summary lists those growths, largest first, and the free blocks (holes) left at the end.

    python bench/memsnap.py SNAPSHOT.pickle     # or from the hook, summarize(snapshot) -> str
"""

import pickle
import sys
from typing import Any

GIB = 2**30
GROW = ("segment_alloc", "segment_map")
SHRINK = ("segment_free", "segment_unmap")


def _where(frames: list[dict[str, Any]], n: int = 4) -> str:
    """The innermost Python frames outside torch itself, innermost first."""
    keep = [f for f in frames if "/torch/" not in f.get("filename", "")] or frames
    return " < ".join(f"{f.get('name', '?')} ({f.get('filename', '?').rsplit('/', 2)[-1]}:"
                      f"{f.get('line', '?')})" for f in keep[:n])  # fmt: skip


def growths(trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each growth of the reserve: its size, reserved and allocated after it, and the frames of
    the allocation that needed it (the next ``alloc`` event on the same stream)."""
    reserved = allocated = 0
    out: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    for ev in trace:
        act, size = ev.get("action"), int(ev.get("size", 0))
        if act in GROW:
            reserved += size
            g = {"size": size, "reserved": reserved, "allocated": allocated, "where": "?",
                 "stream": ev.get("stream"), "request": 0}  # fmt: skip
            out.append(g)
            pending.append(g)
        elif act in SHRINK:
            reserved -= size
        elif act == "alloc":
            allocated += size
            for g in [g for g in pending if g["stream"] == ev.get("stream")]:
                g["where"], g["request"] = _where(ev.get("frames", [])), size
                pending.remove(g)
        elif act == "free_completed":
            allocated -= size
    return out


def at_peak(trace: list[dict[str, Any]], n: int = 15) -> tuple[int, list[tuple[int, int, str]]]:
    """What the trace's allocations hold at their highest: (bytes above the trace's start, the
    live blocks grouped by size and frames, largest total first: (total, count, "size at where")).
    Blocks made before the trace began (weights, optimizer states) are not in it; an allocation
    from the autograd engine's own thread has no Python frames ("backward")."""
    live: dict[int, tuple[int, str]] = {}
    now = top = 0
    best: dict[int, tuple[int, str]] = {}
    for ev in trace:
        act, size = ev.get("action"), int(ev.get("size", 0))
        if act == "alloc":
            frames = ev.get("frames", [])
            live[int(ev.get("addr", id(ev)))] = (size, _where(frames) if frames else "backward")
            now += size
            if now > top:
                top, best = now, dict(live)
        elif act == "free_completed":
            gone = live.pop(int(ev.get("addr", -1)), None)
            now -= gone[0] if gone else size
    groups: dict[tuple[int, str], int] = {}
    for size, where in best.values():
        groups[(size, where)] = groups.get((size, where), 0) + 1
    rows = sorted(((size * k, k, f"{size / GIB:.3f} GiB at {where}") for (size, where), k in
                   groups.items()), reverse=True)  # fmt: skip
    return top, rows[:n]


def holes(segments: list[dict[str, Any]], n: int = 12) -> list[tuple[int, int, int]]:
    """The largest free blocks inside the reserve at snapshot time: (size, segment, stream)."""
    free = [
        (int(b["size"]), i, int(s.get("stream", 0)))
        for i, s in enumerate(segments)
        for b in s.get("blocks", [])
        if b.get("state") == "inactive"
    ]
    return sorted(free, reverse=True)[:n]


def summarize(snap: dict[str, Any], marks: list[str] | None = None, top: int = 15) -> str:
    trace = (snap.get("device_traces") or [[]])[0]
    segs = snap.get("segments", [])
    lines = list(marks or [])
    total = sum(int(s.get("total_size", 0)) for s in segs)
    used = sum(int(s.get("allocated_size", 0)) for s in segs)
    lines.append(f"at the snapshot: {len(segs)} segments, reserved {total / GIB:.2f} GiB, "
                 f"allocated {used / GIB:.2f} GiB")  # fmt: skip
    gs = growths(trace)
    lines.append(f"{len(gs)} growths of the reserve in the trace; the {top} largest:")
    for g in sorted(gs, key=lambda g: -g["size"])[:top]:
        lines.append(
            f"  +{g['size'] / GIB:6.3f} GiB -> reserved {g['reserved'] / GIB:6.2f}, allocated "
            f"{g['allocated'] / GIB:6.2f} GiB; request {g['request'] / GIB:.3f} GiB at {g['where']}"
        )
    top, live = at_peak(trace)
    lines.append(f"the trace's own allocations at their peak: {top / GIB:.2f} GiB; the largest:")
    for total, k, what in live:
        lines.append(f"  {total / GIB:6.3f} GiB = {k} x {what}")
    lines.append("largest free blocks (holes) in the reserve:")
    for size, seg, stream in holes(segs):
        lines.append(f"  {size / GIB:6.3f} GiB in segment {seg} (stream {stream})")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    with open(sys.argv[1], "rb") as f:
        sys.stdout.write(summarize(pickle.load(f)))
