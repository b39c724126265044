"""Peak live tensor bytes of eager attention's backward under gradient checkpointing, on the CPU.

A TorchDispatchMode notes every op output's untyped storage the first time it is seen (its
nbytes added to a running total) and a weakref.finalize on that storage takes it off again when
it is freed; the maximum of the total is the peak of live tensor bytes. Parameters' storages are
ignored (they live throughout). Cross-checked against torch.profiler's allocator events
(profile_memory=True), which also see kernel-internal scratch buffers.

Tiny Gemma-2 (eager, attention soft-cap 50) and tiny Llama (eager, no soft-cap), bf16, frozen
base + PEFT LoRA r=8 on the 7 projections, adapters cast to bf16 as DeepSpeed does
(bench/saved_tensors.py with_lora), 1 row of packed samples (position_ids restart -> 4-D float
mask), labels = input_ids, gradient checkpointing non-reentrant and reentrant (dojo's:
use_reentrant=True).

    python bench/eager_backward_cpu.py [SEQ ...]   (about 90 s on 2 cores)

Result (transformers 5.x): under checkpointing the backward peaks at softmax's backward, 14.000 B a
score element with the soft-cap and 12.000 without, above the checkpointed state; a layer keeps
8.000 and 6.000 (dojo/estimate/activations.py charges these).
"""

import gc
import sys
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

sys.path.insert(0, str(Path(__file__).resolve().parent))
from saved_tensors import with_lora  # noqa: E402

torch.set_num_threads(2)
HEADS, KV, HEAD_DIM, HIDDEN, INTER, LAYERS, VOCAB = 8, 4, 64, 256, 512, 2, 256
SEQS = [int(x) for x in sys.argv[1:]] or [1024, 2048, 3072, 4096]


class LiveBytes(TorchDispatchMode):
    """Running total of live tensor storage bytes made by ops inside the mode."""

    def __init__(self, ignore: set[int] = frozenset(), big: int = 1 << 62) -> None:
        super().__init__()
        self.ignore, self.big = set(ignore), big
        self.live = self.peak = 0
        self.meta: dict[tuple[int, int], tuple] = {}
        self.phase = "fwd"
        self.snap: list[tuple] = []
        self.peak_op = ""

    def _free(self, key: tuple[int, int], n: int) -> None:
        self.live -= n
        self.meta.pop(key, None)

    def reset_peak(self, phase: str) -> None:
        self.peak, self.phase, self.snap, self.peak_op = self.live, phase, [], ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            st = t.untyped_storage()
            ptr, n = st.data_ptr(), st.nbytes()
            key = (ptr, n)
            if ptr == 0 or ptr in self.ignore or key in self.meta:
                continue
            self.meta[key] = (self.phase, func.__name__, str(t.dtype)[6:], tuple(t.shape), n)
            self.live += n
            weakref.finalize(st, self._free, key, n)
            if self.live > self.peak:
                self.peak, self.peak_op = self.live, f"{self.phase}:{func.__name__}"
                if n >= self.big:  # a new peak set by a big tensor: note the big ones live
                    self.snap = sorted(m for m in self.meta.values() if m[4] >= self.big)
        return out


def build(kind: str, reentrant: bool | None) -> Any:
    from transformers import Gemma2Config, Gemma2ForCausalLM, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    sizes = {"hidden_size": HIDDEN, "intermediate_size": INTER, "num_hidden_layers": LAYERS,
                 "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": HEAD_DIM,
                 "vocab_size": VOCAB, "max_position_embeddings": 8192, "tie_word_embeddings": True,
                 "attention_bias": False, "attention_dropout": 0.0}  # fmt: skip
    if kind == "gemma2":
        cfg = Gemma2Config(**sizes, hidden_activation="gelu_pytorch_tanh", sliding_window=4096,
                           query_pre_attn_scalar=HEAD_DIM, attn_logit_softcapping=50.0,
                           final_logit_softcapping=30.0)  # fmt: skip
        cls: Any = Gemma2ForCausalLM
    else:
        cfg, cls = LlamaConfig(**sizes), LlamaForCausalLM
    cfg._attn_implementation = "eager"
    model = cls(cfg).to(torch.bfloat16)
    model.config._attn_implementation = "eager"
    model.requires_grad_(False)
    if reentrant is not None:  # dojo's order (prepare_kbit): input grads, checkpointing, LoRA
        model.enable_input_require_grads()
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": reentrant}
        )
    model = with_lora(model)
    model.train()
    return model


def inputs(s: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(s)
    ids = torch.randint(0, VOCAB, (1, s), generator=g)
    lens = [s // 2, s // 4, s - s // 2 - s // 4]  # three packed samples
    pos = torch.cat([torch.arange(n) for n in lens])[None]
    return ids, pos


def param_ptrs(model: Any) -> set[int]:
    return {
        t.untyped_storage().data_ptr() for t in list(model.parameters()) + list(model.buffers())
    }


def step(model: Any, s: int, big: int) -> dict[str, Any]:
    """One forward + backward under the tracker: live bytes before forward, before backward,
    peaks of each phase (above the state before the phase)."""
    ids, pos = inputs(s)
    gc.collect()
    with LiveBytes(param_ptrs(model), big) as m:
        base = m.live
        m.reset_peak("fwd")
        loss = model(input_ids=ids, position_ids=pos, labels=ids).loss
        fwd_peak, before = m.peak, m.live
        m.reset_peak("bwd")
        loss.backward()
        del loss
        bwd_peak, after = m.peak, m.live
    for p in model.parameters():
        p.grad = None
    return {
        "kept": before - base,
        "fwd_peak": fwd_peak - base,
        "bwd_above": bwd_peak - before,
        "after": after - base,
        "peak_op": m.peak_op,
        "snap": m.snap,
    }


kept_big: list[tuple] = []


def layer_kept(model: Any, s: int) -> float:
    """Without checkpointing: live bytes a decoder layer's forward adds (saved for backward +
    its output), mean over layers."""
    ids, pos = inputs(s)
    layers = model.base_model.model.model.layers
    deltas: list[int] = []
    mode: list[LiveBytes] = []
    kept_big.clear()

    def pre(_mod: Any, _a: Any) -> None:
        deltas.append(-mode[0].live)

    def post(_mod: Any, _a: Any, _o: Any) -> None:
        deltas[-1] += mode[0].live
        if len(deltas) == 1:  # score-sized tensors live after layer 0 (masks are (1, 1, s, s))
            kept_big[:] = sorted(m for m in mode[0].meta.values()
                                 if m[4] >= HEADS * s * s and m[3][1] == HEADS)  # fmt: skip

    hs = [layer.register_forward_pre_hook(pre) for layer in layers]
    hs += [layer.register_forward_hook(post) for layer in layers]
    gc.collect()
    with LiveBytes(param_ptrs(model)) as m:
        mode.append(m)
        out = model(input_ids=ids, position_ids=pos, labels=ids)
        del out
    for h in hs:
        h.remove()
    return sum(deltas) / len(deltas)


def fit(seqs: list[int], ys: list[float]) -> tuple[float, float, float, float]:
    """Least squares y = a + b s + c s^2; returns (a, b, c, max |residual|)."""
    x = np.array(seqs, dtype=float)
    A = np.stack([np.ones_like(x), x, x * x], 1)
    coef, *_ = np.linalg.lstsq(A, np.array(ys, dtype=float), rcond=None)
    res = np.abs(A @ coef - np.array(ys)).max()
    return float(coef[0]), float(coef[1]), float(coef[2]), float(res)


def dropout_check() -> str:
    x = torch.randn(2, 8, 128, 128, dtype=torch.bfloat16, requires_grad=True)
    with LiveBytes() as m:
        y = torch.nn.functional.dropout(x, p=0.0, training=True)
        made = m.live
    return (f"F.dropout(p=0.0, training=True) on CPU: returns the input object itself: {y is x}; "
            f"same storage: {y.data_ptr() == x.data_ptr()}; bytes allocated: {made}; "
            f"grad_fn: {y.grad_fn}")  # fmt: skip


def validate() -> None:
    """The tracker against known sizes, and against the profiler's allocator events."""
    a = torch.randn(1000, 2000, dtype=torch.bfloat16)
    b = torch.randn(2000, 3000, dtype=torch.bfloat16)
    with LiveBytes() as m:
        c = a @ b
        l1 = m.live
        d = c.float()
        del c
        e = torch.softmax(d, -1)
        del d, e
        l2, pk = m.live, m.peak
    print(f"tracker check: mm out live {l1:,} (expect {6_000_000:,}); after frees {l2:,} "
          f"(expect 0); peak {pk:,} (expect {6_000_000 + 12_000_000 + 12_000_000 - 6_000_000:,})")  # fmt: skip
    print(dropout_check())


def profiler_check(kind: str, reentrant: bool, s: int) -> None:
    """Backward peak above the pre-backward state, from the allocator (profiler) and from the
    tracker, same run."""
    from torch.profiler import ProfilerActivity, profile, record_function

    model = build(kind, reentrant)
    ids, pos = inputs(s)
    gc.collect()
    with (
        profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
        LiveBytes(param_ptrs(model)) as m,
    ):
        loss = model(input_ids=ids, position_ids=pos, labels=ids).loss
        before = m.live
        m.reset_peak("bwd")
        with record_function("BWD"):
            loss.backward()
        trk = m.peak - before
    evs = prof.profiler.kineto_results.events()
    mem = sorted((e.start_ns(), e.nbytes()) for e in evs if e.name() == "[memory]")
    t0, t1 = next((e.start_ns(), e.end_ns()) for e in evs if e.name() == "BWD")
    cum, at0, peak = 0, None, None
    for t, n in mem:
        if at0 is None and t >= t0:
            at0 = peak = cum
        cum += n
        if at0 is not None and t <= t1:
            peak = max(peak, cum)
    print(f"profiler check ({kind}, reentrant={reentrant}, s={s}): backward peak above "
          f"pre-backward: allocator {peak - at0:,} B, tracker {trk:,} B, "
          f"difference {peak - at0 - trk:,} B")  # fmt: skip


def main() -> None:
    t_start = time.time()
    validate()
    profiler_check("gemma2", False, 1024)
    profiler_check("gemma2", True, 1024)
    profiler_check("llama", False, 1024)
    rows = []
    for kind in ("gemma2", "llama"):
        for reent in (False, True):
            model = build(kind, reent)
            for s in SEQS:
                big = HEADS * s * s  # >= half a bf16 score tensor: the score-sized ones
                r = step(model, s, big)
                r.update(kind=kind, reentrant=reent, s=s)
                if not reent:  # per-layer kept without checkpointing (the same ops)
                    base = model.base_model.model
                    base.gradient_checkpointing_disable()
                    r["layer"] = layer_kept(model, s)
                    r["layer_big"] = list(kept_big)
                    base.gradient_checkpointing_enable(
                        gradient_checkpointing_kwargs={"use_reentrant": reent}
                    )
                rows.append(r)
                print(f"  {kind} reentrant={reent} s={s} done {time.time() - t_start:.0f}s",
                      file=sys.stderr)  # fmt: skip
            del model
            gc.collect()

    MiB = 2**20
    print("\n| model | ckpt | seq | kept before bwd MiB | fwd peak MiB | bwd peak - before MiB"
          " | layer fwd keeps (no ckpt) MiB | bwd peak at |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        lk = f"{r['layer'] / MiB:.2f}" if "layer" in r else ""
        ck = "reentrant" if r["reentrant"] else "non-reentrant"
        print(f"| {r['kind']} | {ck} | {r['s']} | {r['kept'] / MiB:.2f} | {r['fwd_peak'] / MiB:.2f}"
              f" | {r['bwd_above'] / MiB:.2f} | {lk} | {r['peak_op']} |")  # fmt: skip

    print("\nDifferences between lengths (bwd peak - before), MiB, and per score element "
          "if all s^2: d / (heads (s2^2 - s1^2))")  # fmt: skip
    for kind in ("gemma2", "llama"):
        for reent in (False, True):
            rs = [r for r in rows if r["kind"] == kind and r["reentrant"] == reent]
            for r1, r2 in zip(rs, rs[1:], strict=False):
                d = r2["bwd_above"] - r1["bwd_above"]
                per = d / (HEADS * (r2["s"] ** 2 - r1["s"] ** 2))
                print(f"  {kind} reentrant={reent} {r1['s']}->{r2['s']}: {d / MiB:.2f} MiB, "
                      f"{per:.2f} B/score elem")  # fmt: skip

    print("\nFits a + b s + c s^2; c / heads = bytes per score element (one layer, b=1)")
    print(
        "| model | ckpt | quantity | c/heads B per score elem | b B per token | a B | max resid B |"
    )
    print("|---|---|---|---|---|---|---|")
    for kind in ("gemma2", "llama"):
        for reent in (False, True):
            rs = [r for r in rows if r["kind"] == kind and r["reentrant"] == reent]
            seqs = [r["s"] for r in rs]
            qs = [("bwd peak - before", "bwd_above", 1), ("fwd peak", "fwd_peak", 1),
                  ("kept before bwd", "kept", 1)]  # fmt: skip
            if not reent:
                qs.append(("layer fwd keeps (no ckpt)", "layer", 1))
            for name, key, _ in qs:
                a, b, c, res = fit(seqs, [r[key] for r in rs])
                ck = "reentrant" if reent else "non-reentrant"
                print(
                    f"| {kind} | {ck} | {name} | {c / HEADS:.3f} | {b:.1f} | {a:,.0f} | {res:,.0f} |"
                )

    print(
        f"\nScore-sized tensors a layer's forward keeps (no checkpointing, layer 0, s={SEQS[-1]}):"
    )
    for r in rows:
        if r["s"] == SEQS[-1] and "layer_big" in r:
            print(f"  {r['kind']}:")
            E = HEADS * r["s"] ** 2
            for _ph, op, dt, shape, n in r["layer_big"]:
                print(f"    {op:28s} {dt:9s} {shape} {n / E:.2f} B/score elem")
    print(f"\nScore-sized tensors (>= heads*s^2 bytes) live at the backward peak, s={SEQS[-1]}:")
    for r in rows:
        if r["s"] == SEQS[-1]:
            ck = "reentrant" if r["reentrant"] else "non-reentrant"
            print(f"  {r['kind']} {ck}: peak set by {r['peak_op']}")
            E = HEADS * r["s"] ** 2
            for ph, op, dt, shape, n in r["snap"]:
                print(f"    made in {ph}: {op:28s} {dt:9s} {shape} {n / E:.2f} B/score elem")
    print(f"\ntotal {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
