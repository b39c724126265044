"""Rendering of ``dojo estimate`` rows: JSON payload, aligned plain text, and a rich table (TTY)."""

from typing import Any

from dojo.estimate.result import GIB, MemoryEstimate
from dojo.run.groups.loop import BNB_OPTIMS

# (header, gpu_columns key) in table order; the plain and rich tables share it.
_GPU_COLS = [
    ("params", "params"),
    ("grads", "gradients"),
    ("optim", "optimizer_states"),
    ("activ", "activations"),
    ("logits", "logits"),
    ("comm", "comm_buffers"),
    ("reserve", "allocator_reserve"),
    ("overhead", "overhead"),
]
_GPU_SHOWN = 7  # every column before the (docs) comm figure and overhead


def payload(rows: list[MemoryEstimate]) -> dict[str, Any]:
    """The --json document: {"model": {...}, "rows": [...]} in GiB."""
    spec = rows[0].spec
    return {
        "model": {
            "name": spec.name,
            "params": spec.params,
            "trainable_params": rows[0].trainable_params,
        },
        "rows": [r.to_dict() for r in rows],
    }


def _other_rule(r: MemoryEstimate) -> str:
    """The comm figure of the rule not chosen, when overlap_comm is on ('-' otherwise)."""
    if not r.setup.overlap:
        return "-"
    other = r.comm_current if r.setup.overlap_rule == "docs" else r.comm_docs
    return _gib(other)


def _gib(n: int) -> str:
    return f"{n / GIB:.2f}"


def _offload(r: MemoryEstimate) -> str:
    s = r.setup
    if s.zero.offload_param != "none":
        return (
            f"opt+param:{s.zero.offload_param}"
            if s.zero.offload == s.zero.offload_param
            else (f"opt:{s.zero.offload},param:{s.zero.offload_param}")
        )
    return "none" if s.zero.offload == "none" else f"opt:{s.zero.offload}"


def _stage(r: MemoryEstimate) -> str:
    return str(r.setup.zero.stage) if r.setup.deepspeed else "no DeepSpeed"


def _verdict(r: MemoryEstimate) -> str:
    return {None: "?", "fits": "fits", "tight": "tight", "does not fit": "NO"}[r.verdict]


def table_rows(rows: list[MemoryEstimate]) -> tuple[list[str], list[list[str]]]:
    """Header and cells (GiB, 2 decimals); one row per stage/offload."""
    show_other = any(r.setup.overlap for r in rows)
    other = "comm(docs)" if rows[0].setup.overlap_rule == "current" else "comm(current)"
    header = ["stage", "offload"] + [h for h, _ in _GPU_COLS[:_GPU_SHOWN]]
    header += [other] if show_other else []
    header += ["overhead", "GPU total", "CPU total", "verdict"]
    body = []
    for r in rows:
        cols = r.gpu_columns()
        shown = _GPU_COLS[:_GPU_SHOWN]
        cells = [_stage(r), _offload(r)] + [_gib(cols[k]) for _, k in shown]
        cells += [_other_rule(r)] if show_other else []
        cells += [_gib(cols["overhead"]), _gib(cols["total"]), _gib(r.cpu_total), _verdict(r)]
        body.append(cells)
    return header, body


_HOST_COLS = [
    ("offloaded", ("params", "gradients", "optimizer_states", "buffers")),
    ("pinned pad", ("pinned_rounding",)),
    ("model load", ("model_load",)),
    ("processes", ("overhead",)),
]


def host_rows(rows: list[MemoryEstimate]) -> tuple[list[str], list[list[str]]]:
    """Where host RAM goes, per node (GiB): offloaded states, what torch's pinned allocator adds
    by rounding, the checkpoint load (node 0), the ranks' baseline; the total takes the larger
    of the load and the offloaded states (the load is freed before the engine builds them)."""
    header = ["stage", "offload"] + [h for h, _ in _HOST_COLS] + ["CPU total"]
    body = []
    for r in rows:
        cols = r.cpu_columns()
        cells = [_stage(r), _offload(r)]
        cells += [_gib(sum(cols[k] for k in keys)) for _, keys in _HOST_COLS]
        body.append(cells + [_gib(cols["total"])])
    return header, body


def title(rows: list[MemoryEstimate]) -> str:
    """One line naming the model and the settings every row shares."""
    r = rows[0]
    s, spec = r.setup, r.spec
    m = s.run.model.method
    method = m if m == "full" else f"{m} r={s.lora.lora_r}"
    o = s.run.objective
    if o.preference:  # chosen + rejected in one forward; the reference model, or none
        pair = " (chosen+rejected per row)" if o.paired else ""
        method = f"{o.objective.upper()}{pair} {method}, reference {s.reference}"
    nodes = s.run.devices.num_nodes
    gpus = f"{s.run.gpus_per_node} GPU(s)" + (f" x {nodes} nodes" if nodes > 1 else "")
    limit = f", GPU {s.gpu_memory_gib:.1f} GiB" if s.gpu_memory_gib else ""
    liger = "liger" if s.kernels.liger_kernels else "liger loss"
    extras = [x for x, on in ((liger, s.kernels.fused_loss), ("packing", s.run.data.packing)) if on]
    extras += [s.run.loop.optim] if s.run.loop.optim in BNB_OPTIMS else []
    extras += [] if any(x.setup.deepspeed for x in rows) else ["no DeepSpeed"]
    extras += ["fp32 adapters"] if all(x.setup.fp32_adapters for x in rows) else []
    limit = "".join(f", {x}" for x in extras) + limit
    # the run's kernel; where another kernel's memory model stands for it, that one's name too
    kernel: str = s.run.kernels.attn
    if kernel == "auto":
        kernel = s.attention
    elif kernel != s.attention:
        kernel = f"{kernel} (memory as {s.attention})"
    return (
        f"{spec.name}: {spec.params:,} params ({r.trainable_params:,} trainable), {method}, {gpus}, "
        f"micro-batch {s.run.loop.micro_batch} x seq {s.run.data.seq_len}, "
        f"grad-ckpt {'on' if s.kernels.grad_ckpt else 'off'}"
        f", {kernel}{limit}; GiB per GPU, CPU GiB per node"
    )


def _aligned(header: list[str], body: list[list[str]]) -> list[str]:
    """Aligned text (torchtune ``ls`` style): first two columns left, numbers right."""
    widths = [max(len(x[c]) for x in [header, *body]) for c in range(len(header))]

    def line(cells: list[str]) -> str:
        out = [
            f"{c:<{w}}" if i < 2 else f"{c:>{w}}"
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(out).rstrip()

    return [line(header), *(line(b) for b in body)]


def render_plain(rows: list[MemoryEstimate]) -> str:
    """The GPU table, then where host RAM goes."""
    gpu = _aligned(*table_rows(rows))
    host = _aligned(*host_rows(rows))
    return "\n".join([title(rows), *gpu, "host RAM per node (GiB):", *host])


def render_rich(rows: list[MemoryEstimate]) -> None:
    """Print a rich table to stdout (only used when stdout is a TTY)."""
    from rich.console import Console
    from rich.table import Table

    header, body = table_rows(rows)
    table = Table(title=title(rows), title_justify="left")
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i < 2 else "right")
    for cells in body:
        style = {"NO": "red", "tight": "yellow"}.get(cells[-1])
        table.add_row(*cells, style=style)
    host_header, host_body = host_rows(rows)
    host = Table(title="host RAM per node (GiB)", title_justify="left")
    for i, h in enumerate(host_header):
        host.add_column(h, justify="left" if i < 2 else "right")
    for cells in host_body:
        host.add_row(*cells)
    console = Console()
    console.print(table)
    console.print(host)
