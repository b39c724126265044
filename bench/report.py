"""docs/benchmarks.md from bench/results/*.json: every table, each with the command behind it.

    python bench/report.py > docs/benchmarks.md      # the whole page (tests check it is current)
    python bench/report.py merge A.json B.json -o bench/results/speed-peer.json

Nothing here is typed by hand: the measured numbers are the result files' (one file per
benchmark: memory-SET.json, speed-SET.json, startup.json; the latest run of each), and the
memory tables' "now" columns are today's `dojo estimate` for the settings each row ran with
(bench/memory.py estimate_row), recomputed at every run. `merge` joins two GPU calls of one
benchmark into one file (each call keeps its own runs: a ratio never crosses calls).
"""

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))

from rows import MEMORY_SETS, SPEED_SETS, Row, crashed  # noqa: E402

HEAD = """# Benchmarks

The current tables of every benchmark in `bench/` (bench/README.md says how each is measured),
made by `python bench/report.py > docs/benchmarks.md` from the latest result file of each
(`bench/results/`); no number here is typed by hand. GPU numbers come from a lent NVIDIA H200,
or an H100 where a call names it (the software: `bench/gpu-wheels.sh`, installed by
`bench/gpu_setup.sh`); a speed ratio divides two systems of one call, so of one card. Results
measured with scripts that `bench/` no longer has name them and their commit; git history keeps
them, and the command to measure the same rows today is given beside.
"""

SPEED_PROSE = """Real (non-padding) tokens per second per GPU after step 1, the median of each system's
recorded runs; "vs plain" divides by the plain script's median of the same row in the same GPU
call, never across calls. Windows: tokens/s over steps 2-10, 11-20 and 21-30 (medians): a window
steadily slower than the one before means the run recompiles; one slow step is a kernel's first
call on a new shape (on the mix, dojo's first micro-batch of four whole 2,048-token samples, step
23 in its data order, takes the dense attention kernel for the first time: 100-200 ms more than
the steps beside it, in every run). MFU: tokens/s x (6N + 12·L·h·T) / 989
TFLOP/s, T the token-weighted mean sample length. Peaks after step 1: torch's max allocated,
nvidia-smi's for the GPU. Loss: each system's own logged loss at its last logging step (TRL
averages over assistant tokens of a padding-free batch; the others as the HF Trainer does)."""

MEMORY_PROSE = """Each row is one short training run beside `dojo estimate` for the same settings
(bench/memory.py); "device" is nvidia-smi's per-process peak (GiB), "allocated" torch's max
allocated after step 1. "when run": the estimate the bench recorded as the row ran (the
estimator of that call's commit); "now": today's `dojo estimate`, with the settings the row ran
with pinned (its DeepSpeed zero_optimization and attention kernel). A held-out claim is about
rows committed before they ran: bench/rows.py gives each set's commit. A row today's dojo
refuses (e.g. SDPA for Gemma-2, which older transformers ran by dropping the soft-cap) has no
"now" estimate; nor does an ORPO or SimPO row run before dojo scored them through TRL's fused LM
head ("whole logits": that run made the batch's whole logits, which dojo's runs no longer do), or a
QLoRA row without DeepSpeed run while sdpa_varlen sent its fp32 query through a per-sample loop
("per-sample attention": today's run takes FlashAttention). Since dojo keeps ZeRO-1/2's gradient
partition between steps (checkpointed full fine-tuning with the fused loss), a run made before
that is judged as it ran unless the same row ran again with the partition kept ("run again,
partition kept"); a run that kept it where dojo does not ("partition kept": LoRA beside a trained
embedding or head, HF's unfused loss) shows what keeping it did there.
Right: an OOM run estimated "does not fit", a finished one "fits" or "tight"."""


def load(name: str) -> dict[str, Any] | None:
    f = RESULTS / name
    return json.loads(f.read_text()) if f.exists() else None


def pct(est: float | None, meas: float | None) -> str:
    return "" if not est or not meas else f"{100 * (est - meas) / meas:+.1f}%"


def num(v: Any, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


# ------------------------------------------------------------------------------------ start-up


def startup() -> list[str]:
    doc = load("startup.json")
    if not doc:
        return []
    out = ["## Start-up time (CPU)", "",
           f"`{doc['command']}` ({doc['cores']} cores; median of {doc['runs']} fresh interpreters, "
           f"target under {doc['target_x_bare']}x a bare `python -c pass`):", "",
           "| command | median s | x bare |", "|---|---|---|"]  # fmt: skip
    for name, r in doc["results"].items():
        out.append(f"| {name} | {r['median_s']:.3f} | {r['x_bare']:.2f} |")
    return out + [""]


# ------------------------------------------------------------------------------------ memory


def memory_rows(doc: dict[str, Any], work: Path) -> list[dict[str, Any]]:
    """Each measured row with today's estimate (est_now) beside the recorded one."""
    from memory import H200_GIB, HOST_GIB, estimate_row, verdict_right

    out = []
    kept_again = {m["row"] for m in doc["rows"] if _kept(m)}
    for m in doc["rows"]:
        call = doc["calls"][m.get("call", 0)]
        p = dict(m["params"])
        p["extra"] = tuple(p.get("extra", ()))
        row = Row(**p)
        if "refused" in m:
            now = {"error": m["refused"]}
        elif whole_logits_run(row, m.get("ran") or {}):
            now = {"error": WHOLE_LOGITS, "superseded": "whole logits"}
        elif per_sample_attention_run(row, m, call.get("commit")):
            now = {"error": PER_SAMPLE, "superseded": "per-sample attention"}
        else:
            # the verdict is against the card the row ran on
            now = estimate_row(
                row, work, call.get("gpu_gib", H200_GIB), HOST_GIB, m.get("ran") or {}
            )
            keeps_now = "error" not in now and now.get("keeps_grad_partition")
            if "error" not in now and _kept(m) and not keeps_now:
                now = {"error": KEPT_OUTSIDE, "superseded": "partition kept"}
            elif keeps_now and not _kept(m) and m["row"] in kept_again:
                now = {"error": RUN_KEPT, "superseded": "run again, partition kept"}
        # a row that failed (OOM, host RAM, refused, a crash) has no peak to judge an estimate by
        ran = not (m.get("oom") or m.get("host_killed") or m.get("host_oom") or "refused" in m
                   or m.get("rc"))  # fmt: skip
        device = m.get("smi_proc_peak_gib", m.get("smi_peak_gib"))
        then = m.get("estimate") or {}
        out.append({
            "m": m,
            "ran": ran,
            "device": device if ran else None,
            "now": now,
            "right_now": None if "error" in now or (m.get("rc") and not m.get("oom"))
            else verdict_right(m, now, HOST_GIB),
            "err_now": None if "error" in now or not ran else pct(now["gpu_gib"], device),
            "err_then": pct(then.get("gpu_gib"), device) if ran else None,
        })  # fmt: skip
    return out


KEPT_OUTSIDE = (
    "ran with ZeRO-1/2's gradient partition kept between steps, which dojo does for checkpointed "
    "full fine-tuning with the fused loss only (dojo.estimate.reserve.keeps_grad_partition): "
    "today's estimate is of a run that makes it anew each backward"
)
RUN_KEPT = (
    "ran before dojo kept ZeRO-1/2's gradient partition between steps; the same row ran again "
    "with it kept, and that run is the one judged"
)


def _kept(m: dict[str, Any]) -> bool:
    """A run whose worker kept ZeRO-1/2's gradient partition (dojo.train.worker.zero_grads)."""
    return (m.get("ran") or {}).get("grad_partition") == "kept"


WHOLE_LOGITS = (
    "ran TRL's ORPO/CPO head on the whole logits; dojo now scores through TRL's "
    "fused head (dojo.train.worker.fused_head), so today's estimate is of another run"
)


def whole_logits_run(row: Row, ran: dict[str, Any]) -> bool:
    """An ORPO or SimPO row measured before dojo ran them through TRL's fused LM head: the run
    made the whole logits, which no dojo run does now (the record says "lm_head": "chunked")."""
    return row.objective in ("orpo", "simpo") and ran.get("lm_head") != "chunked"


PER_SAMPLE = (
    "ran sdpa_varlen's per-sample loop on an fp32 query; dojo now runs it in the autocast "
    "dtype through FlashAttention, so today's estimate is of another run"
)
PER_SAMPLE_COMMITS = frozenset({"929810f", "cb6c249"})
"""The calls that ran QLoRA without DeepSpeed under sdpa_varlen before 446609a. There the
residual stream is fp32 (PEFT's k-bit preparation) and so is the query, which sdpa_varlen's
FlashAttention path did not take: each sample went through SDPA alone (the allocator's history
of heldout-moe-families' Qwen2.5-1.5B row). From 446609a on the query runs in the autocast
dtype, as SDPA casts it (the GPU test test_varlen_cuda_fp32_under_autocast_takes_flash)."""


def per_sample_attention_run(row: Row, m: dict[str, Any], commit: str | None) -> bool:
    """A QLoRA row without DeepSpeed on sdpa_varlen from a call that ran the per-sample loop."""
    attn = (m.get("ran") or {}).get("attn") or (m.get("estimate") or {}).get("resolved", {}).get(
        "attn"
    )
    return (
        row.method == "qlora" and row.stage < 0 and attn == "sdpa_varlen"
        and commit in PER_SAMPLE_COMMITS
    )  # fmt: skip


def _within(rows: list[dict[str, Any]], key: str) -> tuple[int, int, float]:
    errs = [float(r[key].rstrip("%")) for r in rows if r["ran"] and r[key]]
    return sum(abs(e) <= 10 for e in errs), len(errs), max((abs(e) for e in errs), default=0.0)


def memory() -> list[str]:
    out = ["## Memory: measured against `dojo estimate`", "", MEMORY_PROSE, ""]
    summary = ["| set | rows measured | held | held within ±10%, when run | within ±10%, now "
               "| worst now | verdicts right, now | rows first committed |",
               "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    detail: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, mset in MEMORY_SETS.items():
            doc = load(f"memory-{name}.json")
            if not doc:  # committed, not yet run: the summary says so, with its commit
                summary.append(f"| {name} | not yet run (0 of {len(mset.rows)}) | "
                               f"{sum(r.split == 'held' for r in mset.rows)} | | | | "
                               f"| {mset.committed} |")  # fmt: skip
                continue
            rows = memory_rows(doc, Path(tmp))
            held = [r for r in rows if r["m"]["split"] == "held"]
            h_in, h_n, _ = _within(held, "err_then")
            a_in, a_n, worst = _within(rows, "err_now")
            judged = [r for r in rows if r["right_now"] is not None]
            right = sum(bool(r["right_now"]) for r in judged)
            kinds = [r["now"]["superseded"] for r in rows if "superseded" in r["now"]]
            superseded = len(kinds)
            refused = sum("error" in r["now"] for r in rows) - superseded
            failed = len(rows) - len(judged) - refused - superseded
            measured = len({r["m"]["row"] for r in rows})  # a row run again counts once
            runs = f" ({len(rows)} runs)" if len(rows) > measured else ""
            summary.append(
                f"| {name} | {measured} of {len(mset.rows)}{runs} | {len(held)} | {h_in}/{h_n} "
                f"| {a_in}/{a_n} | {worst:.1f}% | {right}/{len(judged)}"
                + (f" ({refused} refused)" if refused else "")
                + "".join(f" ({kinds.count(k)} {k})" for k in sorted(set(kinds)))
                + (f" ({failed} failed)" if failed else "")
                + f" | {mset.committed} |"
            )
            detail += memory_set_table(name, mset.about, doc, rows)
    return out + summary + [""] + keep_grad_experiment() + detail


KEEP_GRAD = [
    ("hook-q15-base", "without the hook", ""),
    ("hook-q15-kept", "with the hook", "BENCH_KEEP_GRAD_PARTITION=$OUT/kept.txt "),
    ("hook-q3b-kept", "with the hook", "BENCH_KEEP_GRAD_PARTITION=$OUT/kept.txt "),
]
"""bench/results/keep-grad/: the experiment behind dojo.train.worker.zero_grads, not a set."""


def keep_grad_experiment() -> list[str]:
    """The two runs that had mapped ZeRO-1/2's fp32 upcast anew (heldout-step-upcast), run again
    with bench/hook's BENCH_KEEP_GRAD_PARTITION, which keeps the gradient partition as dojo's
    worker now does, and one without it on the same card."""
    out = ["### Experiment: ZeRO-1/2's gradient partition kept between steps", "",
           "bench/hook/sitecustomize.py's BENCH_KEEP_GRAD_PARTITION keeps DeepSpeed's bf16 "
           "gradient partition after each step, as dojo.train.worker.zero_grads now does for "
           "checkpointed full fine-tuning with the fused loss. Each row is heldout-step-upcast's, "
           "whose earlier run held its fp32 upcast twice from step 2 on (the Qwen2.5-3B one at "
           "79.49 GiB on an H200); the allocator's histories are in "
           "bench/results/memsnap/keep-grad/hook/.", "",
           "| run | command | commit | card | row | device | allocated | estimate then |",
           "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, how, env in KEEP_GRAD:
        doc = load(f"keep-grad/{name}.json")
        if not doc:
            continue
        call = doc["calls"][0]
        for m in doc["rows"]:
            cmd = f"{env}DOJO_BENCH_MEMSNAP=$OUT/memsnap {call['command']}"
            out.append(f"| {how} | `{cmd}` | {call['commit']} | {call['device']} | {m['row']} "
                       f"| {num(m['smi_proc_peak_gib'])} | {num(m.get('alloc_gib'))} "
                       f"| {num(m['estimate']['gpu_gib'])} |")  # fmt: skip
    return out + [""]


def memory_set_table(
    name: str, about: str, doc: dict[str, Any], rows: list[dict[str, Any]]
) -> list[str]:
    out = [f"### {name}", "", about, ""]
    for i, c in enumerate(doc["calls"]):
        what = f"`{c['command']}`" + (f" ({c['via']})" if c.get("via") else "")
        if c.get("file"):
            what += f" (as `{c['file']}`, added in {c['added_in']})"
        elif c.get("commit"):
            what += f" at {c['commit']}"
        if c.get("device"):
            what += f", on {c['device']}"
        out.append(f"- call {i}: {what}")
    out += [
        f"- today: `{doc['command']}`; `python bench/memory.py --set {name} --dry-run` (CPU)",
        "",
    ]
    out += ["| row | split | call | device | allocated | est. now | err | alloc. now | err "
            "| verdict now | right | est. when run | err |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        m, now = r["m"], r["now"]
        if m.get("oom"):
            shown = "OOM"
        elif m.get("host_killed") or m.get("host_oom"):
            shown = "host RAM"
        elif "refused" in m:
            shown = "refused"
        elif m.get("rc"):
            shown = f"failed (rc {m['rc']})"
        else:
            shown = num(r["device"])
        then = m.get("estimate") or {}
        if "superseded" in now:
            est = f"{now['superseded']}: not today's run | | | | |"
        elif "error" in now:
            est = "refused by dojo | | | | |"
        else:
            right = {True: "yes", False: "NO", None: ""}[r["right_now"]]
            est = (f"{now['gpu_gib']:.2f} | {r['err_now'] or ''} | {now['alloc_gib']:.2f} "
                   f"| {pct(now['alloc_gib'], m.get('alloc_gib')) if r['ran'] else ''} "
                   f"| {now['verdict']} | {right} |")  # fmt: skip
        out.append(
            f"| {m['row']} | {m['split']} | {m.get('call', 0)} | {shown} | {num(m.get('alloc_gib'))} "
            f"| {est} {num(then.get('gpu_gib'))} | {r['err_then'] or ''} |"
        )
    return out + [""] + remap_lines(rows)


def remap_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The measured rows where ZeRO-1/2's step may map its largest transient anew
    (step_remap_gib, from the size `dojo estimate` notes it), each peak against the total and
    the total with that case: some runs take it by step 3, most never do."""
    from dojo.estimate.model import REMAP_NOTE_GIB

    lines = []
    for r in rows:
        remap = r["now"].get("step_remap_gib") or 0.0
        if remap < REMAP_NOTE_GIB or r["device"] is None:
            continue
        total = r["now"]["gpu_gib"]
        took = "took it" if r["device"] > total + remap / 2 else "did not take it"
        lines.append(f"- {r['m']['row']}: {total:.2f} GiB, {total + remap:.2f} with the "
                     f"{remap:.2f} GiB remap; the device peak {r['device']:.2f} {took} "
                     f"({pct(total, r['device'])} against the total)")  # fmt: skip
    if not lines:
        return []
    return ["Where the step may map its largest transient anew (`step_remap_gib`, not in the "
            "total):", "", *lines, ""]  # fmt: skip


# ------------------------------------------------------------------------------------ speed


def _median(vals: list[float]) -> float | None:
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def speed_call_table(call: dict[str, Any], order: list[str], ref: str = "plain") -> list[str]:
    """One call's runs by row and system; the ratio is to the reference system's median of the
    same row in the same call (the plain script, or TRL's DPO script for the preference set)."""
    out = [f"| row | system | runs | median tokens/s | min-max | vs {ref} | windows 2-10 / 11-20 "
           "/ 21-30 | MFU | peak alloc GiB | nvidia-smi GiB | loss |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in call["runs"]:
        groups.setdefault((r["row"], r["system"]), []).append(r)
    keys = sorted(
        groups, key=lambda k: (order.index(k[0]) if k[0] in order else 99, k[1] != ref, k[1])
    )
    for row, system in keys:
        rs = groups[(row, system)]
        ok = [r for r in rs if r["rc"] == 0 and r.get("tokens_per_s")]
        n = f"{len(ok)}" + (f" (+{len(rs) - len(ok)} failed)" if len(ok) < len(rs) else "")
        if not ok:
            out.append(f"| {row} | {system} | {n} | - | - | - | - | - | - | - | - |")
            continue
        med = statistics.median(r["tokens_per_s"] for r in ok)
        base = [
            r["tokens_per_s"]
            for r in groups.get((row, ref), [])
            if r["rc"] == 0 and r.get("tokens_per_s")
        ]
        ratio = f"{med / statistics.median(base):.2f}x" if base and system != ref else "-"
        spread = (
            f"{min(r['tokens_per_s'] for r in ok):,}-{max(r['tokens_per_s'] for r in ok):,}"
            if len(ok) > 1
            else "-"
        )
        wkeys = list(ok[0].get("windows") or {})[:3]
        windows = (
            " / ".join(
                f"{_median([r['windows'].get(k) for r in ok if r.get('windows')]):,.0f}"
                for k in wkeys
            )
            or "-"
        )
        mfu = _median([r.get("mfu") for r in ok])
        alloc = _median([r.get("peak_alloc_gib") for r in ok])
        smi = max((r.get("smi_peak_gib") or 0 for r in ok), default=0) or None
        losses = ok[0].get("losses") or {}
        loss = f"{losses[max(losses, key=int)]:.4f}" if losses else "-"
        out.append(
            f"| {row} | {system} | {n} | {med:,.0f} | {spread} | {ratio} | {windows} "
            f"| {num(mfu, '{:.1%}')} | {num(alloc, '{:.1f}')} | {num(smi, '{:.1f}')} | {loss} |"
        )
    return out


def speed_section(name: str, title: str, about: str) -> list[str]:
    doc = load(f"speed-{name}.json")
    order = list(SPEED_SETS[name])
    out = [f"### {title}", "", about, ""]
    cases = SPEED_SETS[name]
    ref = next(iter(cases.values())).systems[0]  # every row of a set has one reference
    out += ["| row | shape | method | ZeRO | micro-batch x seq | checkpointing | data | systems |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for row, c in cases.items():
        names = {"dpo": "DPO", "orpo": "ORPO", "kto": "KTO", "simpo": "SimPO"}
        method = c.method if c.objective == "sft" else f"{names[c.objective]} {c.method}"
        out.append(f"| {row} | {c.shape} | {method} | {c.zero} | {c.micro_batch} x {c.seq_len} "
                   f"| {'on' if c.grad_ckpt else 'off'} | {c.data} | {', '.join(c.systems)} |")  # fmt: skip
    out += ["", f"Today: `bash bench/gpu.sh speed {name}` (plan: `python bench/speed.py --set {name} "
            "--warmup --dry-run`).", ""]  # fmt: skip
    if not doc:
        return out + ["Not measured yet.", ""]
    for i, call in enumerate(doc["calls"]):
        what = f"`{call['command']}`"
        if call.get("file"):
            what += (f", older scripts: `{call['file']}` (case {call['case_was']}), code at "
                     f"{call['commit']}, added in {call['added_in']}")  # fmt: skip
        elif call.get("commit"):
            what += f" at {call['commit']}"
        if call.get("device"):
            what += f", on {call['device']}"
        out += [f"Call {i}: {what}.", ""]
        if call.get("dropped"):
            out += [f"Dropped for time: {', '.join(call['dropped'])}.", ""]
        out += speed_call_table(call, order, ref) + [""]
    return out


def speed() -> list[str]:
    out = ["## Speed: dojo against the plain script and TRL", "", SPEED_PROSE, ""]
    out += speed_section(
        "peer", "Realistic mix (the peer set)",
        "The realistic SFT mix (bench/workload.py); the plain script pads each batch to its "
        "longest sample, dojo and TRL pack. 1b-full is the case the older speed tables called T6. "
        "TRL runs without DeepSpeed on one GPU, as its users do: its full fine-tuning keeps bf16 "
        "weights and bf16 Adam states (no fp32 master copy), which is why its peak is below "
        "dojo's ZeRO-2 run there (fp32 master weights and states, 16 B per parameter) and its "
        "loss follows another path. On 8b-qlora-ckpt dojo's nvidia-smi peak is 0.6 GiB above "
        "TRL's while its allocator holds less (reserved 10.26 against 10.53 GiB): the process's "
        "memory outside torch's allocator is 1.66 GiB against TRL's 0.75, the part a DeepSpeed "
        "run adds to the CUDA context (NCCL's communicator and DeepSpeed's kernels; TRL runs "
        "without DeepSpeed). On 7b-full-z3-ckpt dojo runs the row's ZeRO-3 (the fp32 master "
        "copy: 110 GiB) against TRL's bf16 weights and states (53 GiB), so TRL's run is another "
        "recipe at half the memory; dojo's own --zero none runs TRL's recipe: beside TRL in "
        "call 9 on an H100 (where the row's ZeRO-3 runs, 110 GiB, do not fit, so the plain "
        "script is not in that call) at 1.29x TRL's tokens/s and 0.6 GiB more. Its MFU there is "
        "37% (49% counting the recompute checkpointing adds); 1.5x TRL would take 43% (57%). "
        "dojo's first run of call 8 (warm-up 4,548, "
        "run 4,361 tokens/s) was the slowest dojo run of the row (the others 5,735-6,740 in "
        "calls 4 and 8 and the variants' call 1); nothing in its log says why. "
        "1b-lora-longtail trains one sample of up to 16,384 tokens a "
        "micro-batch: the packers fill it, while the plain script, which does not pack, takes one "
        "chat of the mix a step (about 300 tokens at 0.55 s a step), so its ratio measures "
        "packing more than anything else. On 1b-lora and 1b-qlora calls 0 and 2 ran at a "
        "commit where dojo's default did not compile; it compiles those rows now (1.39x and "
        "1.56x the uncompiled run's tokens/s in the variants' call 5, below). Calls 10 and 11 "
        "ran the compiled default beside TRL: 2.88x TRL's median on 1b-lora (2.50x its faster "
        "run) and 2.29x on 1b-qlora, both at a lower peak, no graph compiled after step 1 and the "
        "windows within 3%; TRL's first recorded run on 1b-lora was slow in steps 2-10 (9,443 "
        "against 19,250 in its second). A call with fewer steps shows only the windows it "
        "reached; one with one run a system (repeats 1) has no min-max, as has a system whose "
        "last run the call's time limit cut (dojo in call 7). Rows not listed under a call were "
        "not run yet.",
    )  # fmt: skip
    out += speed_section(
        "peer-variants", "dojo's variants on the realistic mix",
        "dojo's defaults against each variant that resolves to a different run, with the plain "
        "script in the same call for the ratio where the call ran it. On 7b-full-z3-ckpt the "
        "row's --zero 3 is the user's choice, and --zero none trains bf16 weights and AdamW "
        "states (no fp32 master copy: docs/train.md, runs without DeepSpeed), so it is faster at "
        "half the memory but not the same training. Calls 0-5 ran at commits where dojo's "
        "default never compiled: there \"dojo\" is the uncompiled run and --compile on (which "
        "makes --liger loss and --attn sdpa) the compiled one, dojo's default for packed LoRA "
        "and QLoRA since (docs/train.md). In calls 3 and 4 compiled runs did not yet pad packed "
        "rows to one width: 3-9% faster than the default in steps 2-20, then the mix's first "
        "micro-batch of four whole samples (step 23) compiled the layers again, and over 30 "
        "steps they made 0.44-0.67x the default's tokens/s. Call 5 pads them: no run compiled "
        "a graph after step 1, the windows hold, and the compiled runs made 1.39x (1b-lora) "
        "and 1.56x (1b-qlora) the uncompiled tokens/s after step 1, 72 and 101 ms less a step. "
        "Call 5 ran without a warm-up (WARMUP=0), so each system's first run shows a machine's "
        "first compile: steps 1-10 took about 20 s longer than uncompiled ones there and 3-9 s "
        "in the second runs (Inductor's cache), which a run repays after about 50-90 steps "
        "with the cache and 200-320 steps without. The uncompiled runs of one row vary from "
        "call to call on the same kind of card (1b-qlora: 29,106 in call 5, 38,224 in call 2, "
        "48,872 in call 4) while the compiled ones held 44,070-47,001 in calls 2 and 5, so a "
        "ratio holds only within its call. Call 6 (one run a system, no warm-up) puts --compile "
        "on beside the default on the checkpointed 8B rows, which compile's auto leaves off: "
        "+1.4% (8b-lora-ckpt) and +1.9% (8b-qlora-ckpt) tokens/s at 0.6-0.7 GiB more, within "
        "5% of the default.",
    )  # fmt: skip
    out += speed_section(
        "fixed", "Fixed-length rows (secondary)",
        "Every sample longer than seq-len (truncated): no padding for any system, one sample per "
        "row. The older speed tables' cases T1-T5 and T7 (calls 0-5: the plain script and dojo "
        "only). From call 6 on TRL runs beside them as in the peer set, without DeepSpeed on one "
        "GPU; its full fine-tuning keeps bf16 weights and states there, as on the mix. On "
        "1b-qlora-z2-ckpt (call 8) dojo's nvidia-smi peak is 0.4 GiB above TRL's while torch "
        "reserved less (2.83 GiB against 2.99): the difference is outside torch's allocator "
        "(CUDA context, libraries, and the process group of a DeepSpeed run, which TRL without "
        "DeepSpeed does not make). Call 9 ran dojo alone (the --compile on it was to run beside "
        "was not one of the set's systems: fixed-variants has it): 20,929 and 28,927 tokens/s "
        "against 26,309 in call 8, the spread of dojo's runs on this row.",
    )  # fmt: skip
    out += speed_section(
        "fixed-variants", "dojo's variants on the fixed-length rows",
        "dojo's defaults against each variant that resolves to a different run, on the fixed "
        "rows: one sample a packed row, the same layout every step, the case where --compile "
        "on should compile once.",
    )  # fmt: skip
    out += speed_section(
        "preference", "DPO against TRL's own script",
        "dojo train --objective dpo against TRL's trl/scripts/dpo.py at the same settings (model "
        "folder, ChatML template, data, batch, max length, LoRA, learning rate, bf16, and the "
        "DeepSpeed JSON dojo train writes for the row), on the realistic preference mix "
        "(bench/workload.py pref-mix); \"vs trl-dpo\" divides by TRL's script's median. TRL pads "
        "each pair's sequences to the batch's longest and runs SDPA; dojo's default takes the "
        "padding out before the decoder layers (--attn sdpa_varlen, docs/train.md#preference-"
        "tuning; from 39d0fc1 on: a call at an earlier commit ran dojo padded), and \"dojo --attn "
        "sdpa\" runs padded as TRL does. Tokens: "
        "each batch's real tokens, both sequences of a pair with their prompt, counted on the "
        "host the same way for both (TRL's template keeps the newline after each answer's "
        "end-of-turn token, one token a sequence more than dojo's). A call run without the "
        "warm-up (WARMUP=0) charges the first run of a system its cold start: compare min-max "
        "before the medians.",
    )  # fmt: skip
    out += speed_section(
        "kto", "KTO against TRL's own script",
        "dojo train --objective kto against TRL's trl/scripts/kto.py at the same settings as the "
        "DPO rows, on the same pairs as KTO's unpaired rows (bench/workload.py kto-mix: each "
        "pair's chosen answer desirable, then its rejected one not), which both read in order; "
        "\"vs trl-kto\" divides by TRL's script's median. Tokens: each row's prompt and answer, "
        "counted on the host the same way for both (TRL's template keeps the newline after the "
        "answer's end-of-turn token, one token a row more than dojo's); the KL term's mismatched "
        "pairs are not counted for either.",
    )  # fmt: skip
    out += speed_section(
        "orpo-simpo", "ORPO and SimPO against TRL's trainers",
        "dojo train --objective orpo|simpo against TRL's ORPOTrainer and CPOTrainer (SimPO: "
        "loss_type simpo, cpo_alpha 0) run as TRL's example scripts run them (bench/trl_pref.py), "
        "at the same settings as the DPO rows (model folder and its ChatML template, data, batch, "
        "max length, LoRA, learning rate, bf16, SDPA, the DeepSpeed JSON dojo train writes); "
        "\"vs trl-pref\" divides by TRL's trainer's median. TRL's trainers make the whole logits "
        "of the padded batch; dojo scores through TRL's fused LM head (docs/train.md#preference-"
        "tuning) and by default takes the padding out before the decoder layers; \"dojo --attn "
        "sdpa\" keeps the padded rows (the head alone). Tokens: each batch's real tokens, both "
        "sequences of a pair with their prompt, counted on the host the same way for both.",
    )  # fmt: skip
    return out


def page() -> str:
    parts = [HEAD, *startup(), *speed(), *memory()]
    return "\n".join(parts).rstrip() + "\n"


def merge(files: list[Path], out: Path) -> None:
    """One result file from several calls of one benchmark and set (memory: rows by call)."""
    docs = [json.loads(f.read_text()) for f in files]
    if len({(d["benchmark"], d["set"]) for d in docs}) != 1:
        raise SystemExit("merge: the files hold different benchmarks or sets")
    first = dict(docs[0])
    if first["benchmark"] == "speed":
        first["calls"] = [c for d in docs for c in d["calls"]]
    else:
        calls: list[dict[str, Any]] = []
        rows: list[dict[str, Any]] = []
        for d in docs:
            base = len(calls)
            calls += d["calls"]
            again = {r["row"] for r in d["rows"]}
            # a row that crashed or was refused and ran again later keeps only its rerun
            rows = [r for r in rows if not (r["row"] in again and (crashed(r) or "refused" in r))]
            rows += [{**r, "call": base + r.get("call", 0)} for r in d["rows"]]
        first["calls"], first["rows"] = calls, rows
    out.write_text(json.dumps(first, indent=1) + "\n")


def main() -> None:
    if sys.argv[1:2] == ["merge"]:
        ap = argparse.ArgumentParser(prog="report.py merge")
        ap.add_argument("files", nargs="+", type=Path)
        ap.add_argument("-o", "--out", type=Path, required=True)
        a = ap.parse_args(sys.argv[2:])
        merge(a.files, a.out)
        return
    sys.stdout.write(page())


if __name__ == "__main__":
    main()
