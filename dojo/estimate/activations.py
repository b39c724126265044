"""Activation and loss memory at the backward peak (docs/estimate.md, "Activations"), per GPU,
bytes."""

import math

from dojo.estimate.adapter_extras import dora_saved_per_token, head_trains
from dojo.estimate.moe import merged_expert_bytes, moe_saved_per_token
from dojo.estimate.setup import Setup
from dojo.modelspec import SOFTCAP_MODEL_TYPES, ModelSpec
from dojo.run.groups.kernels import liger_spares_experts

BF16 = 2
FP32 = 4
TRL_TOKEN_CHUNK = 4096  # trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE (TRL 1.16)
TRL_VOCAB_CHUNK = 32768  # trl/trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE
EAGER_BWD = 16
"""Bytes a score element that a recomputed eager layer holds at softmax's backward on CUDA: the
kept fp32 softmax output and three fp32 score-sized blocks the backward makes (the allocator's
history at the peak of Llama-3.2-1B LoRA, 1 x 8192, on the H100: 4 x 7.8 GiB). The CPU's
kernels make one fewer (12 B: bench/eager_backward_cpu.py)."""
EAGER_BWD_SOFTCAP = 18
"""The same with Gemma-2's soft-cap, whose tanh keeps its bf16 output (Gemma-2-2B QLoRA,
1 x 12288: 4 x 4.5 GiB fp32 + 2.25 GiB bf16; 14 B on the CPU)."""


def activation_bytes(spec: ModelSpec, setup: Setup) -> tuple[int, int]:
    """(activations, logits) at the activation peak.

    Peak = max(loss phase, layer phase); the split reports the logits term whole and the rest as
    activations, so the two always add up to the peak.
    """
    return split_peak(*activation_phases(spec, setup))


def split_peak(
    kept: float, loss_phase: float, layer_phase: float, loss_term: float, not_yet: float = 0.0
) -> tuple[int, int]:
    """(activations, logits) columns of the backward peak, kept + max(loss phase - not_yet,
    layer phase): ``not_yet`` = bytes of the static terms that do not exist yet at the loss (the
    ZeRO 0-2 grads and buckets, see ``dojo.estimate.model.estimate``). The logits column is the
    loss term when the loss phase is the peak (less what it overlaps of ``not_yet``), and never
    more than the whole (a one-token row, whose layer phase is the peak)."""
    extra = max(loss_phase - not_yet, layer_phase)
    logits = max(0.0, loss_term - not_yet) if loss_phase - not_yet >= layer_phase else loss_term
    whole = int(kept + extra)
    logits_col = min(int(logits), whole)
    return whole - logits_col, logits_col


def activation_phases(spec: ModelSpec, setup: Setup) -> tuple[int, int, int, int]:
    """(kept, loss phase, layer phase, loss term) in bytes: what every layer keeps through the
    backward, what the loss phase (its first op) adds to it (loss term + tail), what the worst
    layer's backward (or recompute + backward) adds, and the loss term alone."""
    s, cal = setup, setup.calibration
    tokens = s.batch_rows * s.run.data.seq_len
    # MoE: a token passes through its top-k experts (and a shared one), so the MLP tensors saved
    # per token are that wide, not one expert's intermediate_size (dense models: the same).
    h, q, kv, i = spec.hidden_size, spec.q_dim, spec.kv_dim, spec.active_intermediate_size
    # Saved per token by one HF Llama layer, bf16 (measured on the CPU): norms keep an fp32
    # input copy.
    if s.run.model.method == "full":
        per_token = 16 * h + 4 * q + 4 * kv + 8 * i
    else:
        per_token = 8 * h + 4 * q + 4 * kv + 6 * i  # frozen base: no linear inputs saved
        per_token += _lora_saved_per_token(spec, setup)
        if s.run.model.method == "lora" and s.zero.stage == 3 and s.deepspeed:
            per_token += _zero3_frozen_inputs(spec, setup, i)
    kernels = s.kernels.fused_loss and s.kernels.liger_kernels
    norm = _norm_bytes(spec, setup)
    silu_kept = s.run.model.method != "full"  # a frozen base's silu(gate), kept for the product
    if kernels and s.run.model.method == "full":
        # Liger's RMSNorm keeps its bf16 input + fp32 rstd instead of HF's fp32 copy + bf16
        # output (-8h by that count) and its SwiGLU keeps gate and up but not silu(gate) (-2i).
        # That count holds where the backward peaks at its start; under DeepSpeed the measured
        # peaks are as if the layer saved 14h + 2i less (Calibration, both constants).
        saved_h = (
            cal.liger_full_saved_per_token_h_bare
            if s.peak_before_grads
            else cal.liger_full_saved_per_token_h
        )
        per_token -= int(saved_h * h) + 2 * i
    elif (kernels and not _experts_spared(spec, setup)) or s.kernels.compiled:
        # Frozen base: HF norms keep no weight-grad inputs there (already excluded above). A
        # compiled layer gets the SwiGLU saving too: Inductor's min-cut partitioner recomputes
        # the cheap silu(gate) in the backward rather than keep it (five compile LoRA rows on
        # the H200: allocated +1.4% to +10.3% without this, -2.5% to +3.0% with it).
        per_token -= 2 * i
        silu_kept = False
    if s.fp32_rest:
        # PEFT's k-bit prep leaves the residual stream fp32, and bitsandbytes' 4-bit linear
        # returns its input's dtype: gate and up (and silu(gate) where it is kept) are fp32,
        # 2 B more a value (+6.25 i a token without Liger on the CPU: bench/kbit_saved_cpu.py).
        per_token += 2 * i * (3 if silu_kept else 2)
    if not (s.run.model.method == "full" and (kernels or s.kernels.compiled)):
        # The counts above take transformers' Llama norm for the layer's two norms (6 B a value
        # with a training weight, 4 B frozen); Gemma's keeps an fp32 output (8 B), and a frozen
        # base's under Liger or compile its bf16 input (2 B: with it every Liger LoRA/QLoRA
        # row measured on the H200 came 1-6 points closer in allocated). Full fine-tuning with Liger's kernels has
        # its own measured count above; with compile alone it was never measured.
        llama_norm = FP32 + BF16 if s.run.model.method == "full" else FP32
        per_token += 2 * (norm - llama_norm) * h
    if spec.qk_norm:
        # Qwen3/Gemma-3/OLMo-2 q_norm and k_norm (RMSNorm on q and k before RoPE) save what a
        # layer norm saves, per value of q and k. Two Qwen3-0.6B full rows without
        # checkpointing (q = 2h) measured on the H200 were 3.9 and 4.2 GiB under without this.
        per_token += norm * (q + kv)
    # Gemma-2/3: four norms a layer; the two beyond Llama's keep what any norm keeps.
    per_token += max(0, spec.norms_per_layer - 2) * norm * h
    per_token += FP32 * spec.num_heads  # log-sum-exp of SDPA / FlashAttention
    per_token += moe_saved_per_token(spec, setup)  # dispatch, combine, router (0 when dense)
    # Packed rows (position_ids restart, masking_utils find_packed_sequence_indices) always get a
    # full-size 4-D mask. Padded batches get one too, but their rows are only as long as the
    # longest sample (the estimate's seq_len is an upper bound there and those rows already
    # come out over), so the per-layer attention-mask costs below are charged for packing only.
    masked = s.run.data.packing and _mask_bytes(setup) > 0
    # Not charged: GQA's repeat_kv. transformers 5.24's sdpa_attention_forward passes
    # enable_gqa only without a mask (use_gqa_in_sdpa), so a masked call materialises k and v
    # at all heads (+4 B x (q - kv) per token); Llama-3.2-1B packed rows measured on the H200
    # under transformers 5.17 show no such cost, and charging it put them 4-10% over.
    a_layer = tokens * per_token
    eager = s.attention == "eager"
    scores = eager_scores(spec, setup)
    softcap = eager and spec.model_type in SOFTCAP_MODEL_TYPES
    # eager keeps its fp32 softmax + bf16 probabilities (CPU); with the soft-cap (scores / cap ->
    # tanh -> * cap) tanh keeps its bf16 output too (CPU, tiny Gemma-2 against Llama:
    # bench/gemma2_saved_cpu.py)
    eager_kept = (6 + (BF16 if softcap else 0)) * scores if eager else 0
    a_layer += eager_kept
    # SDPA turns a bool mask into an additive one in the query dtype on every call (ATen
    # attention.cpp convert_boolean_attn_mask), and the memory-efficient kernel, the one that
    # takes a mask, saves that bias for its backward: 2 B x b x s^2 per layer, once per layer
    # (no grad is made for it, so a recomputed layer holds it once).
    bias = (
        BF16 * s.batch_rows * s.run.data.seq_len * s.run.data.seq_len
        if s.attention == "sdpa" and masked
        else 0
    )
    # fp32 embeddings and norms (s.fp32_rest) keep the residual stream in fp32 under autocast:
    # the checkpointed layer inputs are 4 B per value.
    keep = (FP32 if s.fp32_rest else BF16) * tokens * h if s.kernels.grad_ckpt else a_layer + bias
    factor = cal.recompute_factor if s.run.model.method == "full" else cal.recompute_factor_frozen
    layer_extra = (factor * a_layer if s.kernels.grad_ckpt else a_layer) + bias
    if eager and s.kernels.grad_ckpt:
        # The recomputed layer's score-sized tensors peak at softmax's backward, not at a
        # multiple of what they keep: the fp32 softmax output and tanh's bf16 output (kept) and
        # the backward's fp32 blocks (EAGER_BWD); the bf16 probabilities are freed by then. Full
        # fine-tuning's factor (2.0) already charges 12 B of it (16 with the soft-cap).
        layer_extra += max(
            0.0, (EAGER_BWD_SOFTCAP if softcap else EAGER_BWD) * scores - factor * eager_kept
        )
    if s.fp32_rest:
        # ... and the gradient of down_proj's input, from the 4-bit base and from the adapter,
        # is fp32 too: 2 x 2 B more a value at that layer's backward (the allocator's history at
        # the peak of a Qwen2.5-1.5B QLoRA run without DeepSpeed on the H200 holds four fp32
        # tokens x intermediate blocks there: gate, up and these two).
        layer_extra += 2 * BF16 * i * tokens
    # Adapters on fused experts: each MoE layer's forward makes the merged expert weights and
    # keeps them; the backward adds their grad, and a recomputed layer makes them again.
    merged = merged_expert_bytes(spec, setup)
    layer_extra += merged * (2 if s.kernels.grad_ckpt else 1)
    logits = cal.loss_bytes_per_logit * tokens * spec.vocab_size
    if spec.model_type == "gemma2":
        # Gemma2ForCausalLM final_logit_softcapping (30.0): logits / cap -> tanh -> * cap in
        # bf16; tanh keeps its output for backward (Gemma-2-2B LoRA ZeRO-2 on the H200, plain
        # script: 13.7 B per logit at the loss peak, 12 without this).
        logits += BF16 * tokens * spec.vocab_size
    if s.kernels.fused_loss:
        logits = _fused_loss_bytes(spec, setup)  # Liger's Gemma-2 kernel softcaps per chunk
    if s.run.objective.preference:
        logits = _trl_head_bytes(spec, setup)  # softcapped per tile too
    loss_tail = cal.loss_tail_bytes_per_th * tokens * h
    kept = spec.num_layers * keep + _mask_count(spec) * _mask_bytes(setup)
    if not s.kernels.grad_ckpt:
        kept += spec.moe_layers * merged
    full_kernels = kernels and s.run.model.method == "full"
    if s.zero.stage == 3 and s.deepspeed and not s.kernels.grad_ckpt and full_kernels:
        kept += int(cal.zero3_kept_per_token_h * tokens * h) * spec.num_layers
    return int(kept), int(logits + loss_tail), int(layer_extra), int(logits)


def eager_scores(spec: ModelSpec, setup: Setup) -> int:
    """Eager attention's score elements in one layer: heads x seq-len x the micro-batch's
    tokens (0 under any other attention kernel)."""
    if setup.attention != "eager":
        return 0
    tokens = setup.batch_rows * setup.run.data.seq_len
    return spec.num_heads * setup.run.data.seq_len * tokens


def _experts_spared(spec: ModelSpec, s: Setup) -> bool:
    """Liger runs without its SwiGLU kernel: LoRA adapts the fused experts
    (dojo.run.groups.kernels.LIGER_SPARE_EXPERTS), so the MLPs keep what transformers' keep."""
    return liger_spares_experts(
        s.kernels.liger_kernels, s.run.model.adapters, s.lora.target_names, spec.model_type
    )


def _gemma_norms(spec: ModelSpec) -> bool:
    """Gemma's RMSNorm: ``x.float()`` normalised, times ``1 + weight`` in fp32, then cast."""
    return spec.model_type in ("gemma", "gemma2", "gemma3", "gemma3_text")


def _norm_bytes(spec: ModelSpec, s: Setup) -> int:
    """Bytes one RMSNorm keeps for backward per value of its input: transformers' an fp32 copy
    of the input (4 B) and, when its weight trains, its output for the weight's grad (bf16 for
    Llama's norm, 2 B; Gemma's keeps it in fp32, 4 B); Liger's RMSNorm (liger-kernel patches
    every norm of the models it knows, q_norm and k_norm included) and a compiled norm only the
    bf16 input. Measured on the CPU: 6.06 / 4.06 B per value (full / frozen) for Qwen3's q/k
    norms (bench/qknorm_saved_cpu.py)."""
    if (s.kernels.fused_loss and s.kernels.liger_kernels) or s.kernels.compiled:
        return BF16
    if s.run.model.method != "full":
        return FP32
    return FP32 + (FP32 if _gemma_norms(spec) else BF16)


SLIDING_MASK_MODEL_TYPES = ("gemma2", "gemma3", "gemma3_text")
"""Models whose forward builds a sliding-window mask beside the causal one every time
(modeling_gemma2/3 ``causal_mask_mapping``: both are made whatever the sequence length; Qwen2/3
and Mistral add one only when a layer slides, which dojo's shapes do not)."""


def _mask_count(spec: ModelSpec) -> int:
    """How many 4-D masks a forward builds and the layers keep: the causal one, and for the
    models above the sliding-window one too (same size: a dense b x s x s)."""
    return 2 if spec.model_type in SLIDING_MASK_MODEL_TYPES else 1


def _mask_bytes(s: Setup) -> int:
    """The 4-D attention mask transformers builds once per forward and every layer keeps.

    masking_utils: with packed rows (position_ids restart) or padding, SDPA gets a bool
    [b, 1, s, s] mask and eager a float one in the compute dtype; a full unpadded causal batch
    skips it (is_causal), FlashAttention-2 takes cu_seqlens instead. Without packing, rows are
    padded to the longest in the batch, so a mask is assumed there too unless the micro-batch
    is one sequence.
    """
    if s.attention == "flash_attention_2" or (not s.run.data.packing and s.batch_rows == 1):
        return 0
    per_elem = BF16 if s.attention == "eager" else 1
    return per_elem * s.batch_rows * s.run.data.seq_len * s.run.data.seq_len


def _fused_loss_bytes(spec: ModelSpec, setup: Setup) -> int:
    """Liger LigerFusedLinearCrossEntropyFunction: tokens in chunks of
    next_pow2(ceil(T / ceil(V / h))); per chunk bf16 logits + their fp32 grad (6 B x chunk x V),
    plus the bf16 grad of the hidden states (2 B x T x h) and, when the head trains, a 16-bit
    grad_weight (2 B x V x h) that lives through the loss."""
    tokens = setup.batch_rows * setup.run.data.seq_len
    v, h = spec.vocab_size, spec.hidden_size
    chunk = 1 << max(0, math.ceil(tokens / math.ceil(v / h)) - 1).bit_length()
    head_grad = BF16 * v * h if head_trains(spec, setup) else 0
    return 6 * chunk * v + BF16 * tokens * h + head_grad


def _trl_head_bytes(spec: ModelSpec, setup: Setup) -> int:
    """TRL's fused LM head (trl.trainer.utils.add_fused_lm_head: DPOTrainer and KTOTrainer,
    and dojo's ORPO and SimPO, dojo.train.worker.fused_head):
    the answer positions' hidden states gathered and kept for backward (2 B x T x h), one
    logits tile of TOKEN_CHUNK_SIZE x _CHUNKED_LOGPROB_CHUNK_SIZE in bf16 (forward and backward
    each make one), the hidden states' grad accumulated in fp32 and cast to bf16 at the end
    (6 B x T x h) and, when the head trains, its grad the same way (6 B x V x h). T = every
    token of the batch: the head scores answer tokens only (ORPO: prompts too, for its NLL
    term), so prompts make this an upper bound (trl/kernels/chunked_logprob.py
    ChunkedLogProbFunction)."""
    tokens = setup.batch_rows * setup.run.data.seq_len
    v, h = spec.vocab_size, spec.hidden_size
    tile = BF16 * min(tokens, TRL_TOKEN_CHUNK) * min(v, TRL_VOCAB_CHUNK)
    head_grad = (FP32 + BF16) * v * h if head_trains(spec, setup) else 0
    return tile + (BF16 + FP32 + BF16) * tokens * h + head_grad


def _zero3_frozen_inputs(spec: ModelSpec, setup: Setup, i: int) -> int:
    """Bytes per token a LoRA layer's frozen linears keep at ZeRO-3.

    deepspeed.zero.Init (HF's from_pretrained under a ZeRO-3 config, dojo's and the plain
    script's path) replaces ``torch.nn.functional.linear`` for the process with
    ``LinearFunctionForZeroStage3`` (DeepSpeed 0.19.8 zero/linear.py, partition_parameters.py
    ``_enable_mem_efficient_linear``), whose ``setup_context`` saves its input whether or not the
    weight trains. So the frozen q/k/v, gate/up and down projections keep their bf16 inputs (2h,
    2h, 2i), except where lora_A already keeps that very tensor (bf16 adapters without dropout,
    see ``_lora_saved_per_token``); o_proj's input is SDPA's output, counted already. Measured
    on the CPU (tiny Llama, PEFT LoRA with fp32 adapters at ZeRO-3, saved-tensor hooks): 2,400 B
    per token per layer with DeepSpeed's linear, none without it, = 4h + 2i there
    (bench/zero3_saved_cpu.py).
    QLoRA's 4-bit linears multiply through bitsandbytes' ``MatMul4Bit``, not ``F.linear``, and
    it keeps no input of a frozen weight (``ctx.tensors = (None, B)``, bitsandbytes 0.50);
    transformers also skips zero.Init for quantized models, so ``F.linear`` stays torch's."""
    targets = spec.adapted_names(setup.lora.target_names) & {n for n, *_ in spec.linears()}
    shared = not setup.fp32_adapters and setup.lora_dropout == 0
    h = spec.hidden_size
    extra = 0
    if not (shared and targets & {"q_proj", "k_proj", "v_proj"}):
        extra += BF16 * h
    if not (shared and targets & {"gate_proj", "up_proj"}):
        extra += BF16 * h
    if not (shared and "down_proj" in targets):
        extra += BF16 * i
    return extra


def _lora_saved_per_token(spec: ModelSpec, setup: Setup) -> int:
    """Extra bytes per token an adapted layer saves (what lora_A and lora_B keep for backward).

    peft/tuners/lora/layer.py Linear.forward: x = _cast_input_dtype(x, lora_A.weight.dtype),
    then lora_B(lora_A(dropout(x))), per adapted module. The frozen linear keeps no input (no
    weight grad), so lora_A's input is the only copy, in the adapters' dtype a (2 or 4 B), or
    in bf16 when autocast recasts fp32 adapters' inputs for the matmul:
    - lora_dropout > 0: each module's own dropout output (a B) and its bool mask (1 B, CUDA
      native_dropout) per in_feature; x itself is not kept. (On CPU the mask has x's dtype:
      67.1 / 102.1 T*h per layer were measured there for bf16 / fp32 = these counts with a
      2 / 4 B mask; docs/estimate.md, "Activations".)
    - no dropout, bf16 adapters: lora_A reads the bf16 x itself, so q/k/v share one saved input
      and gate/up another (41.8 T*h per layer measured).
    - no dropout, fp32 adapters: every module keeps its own cast copy, a B per in_feature
      (51.0 T*h under autocast, 67.4 without, measured).
    Plus lora_A's output (r values, a B) per module, lora_B's input.
    """
    targets = spec.adapted_names(setup.lora.target_names) & {n for n, *_ in spec.linears()}
    ins = sum(a for n, a, _, _ in spec.linears() if n in targets)
    a = FP32 if setup.fp32_adapters and not setup.autocast else BF16
    extra = a * setup.lora.lora_r * len(targets)
    extra += dora_saved_per_token(spec, setup, a)
    if setup.lora_dropout > 0:
        return extra + (a + 1) * ins
    if setup.fp32_adapters:
        return extra + a * ins
    # o_proj's input is SDPA's output, saved anyway.
    if targets & {"q_proj", "k_proj", "v_proj"}:
        extra += BF16 * spec.hidden_size
    if targets & {"gate_proj", "up_proj"}:
        extra += BF16 * spec.hidden_size
    if "down_proj" in targets:
        extra += BF16 * spec.intermediate_size
    return extra
