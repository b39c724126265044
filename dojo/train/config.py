"""The run configuration of ``dojo train``: one frozen dataclass, its YAML file and its checks.

Precedence (torchtune's rule): built-in default < ``--config run.yaml`` < command-line flag. Flags
default to ``None`` ("not given") so they never silently override a value from the file.

    dojo train --config templates/train/lora.yaml --max-steps 20
"""

import dataclasses
import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dojo.errors import ConfigError

METHODS = ("full", "lora", "qlora")
OFFLOADS = ("none", "cpu")
CHOICES_HF_DS = ("hf", "ds")
PRECISIONS = ("auto", "bf16", "fp16", "fp32")
OVERFLOWS = ("truncate", "drop")
ATTNS = ("auto", "sdpa", "eager", "flex_attention", "flash_attention_2")
LIGERS = ("auto", "on", "off")
COMPILES = ("auto", "on", "off")


@dataclass(frozen=True)
class TrainConfig:
    method: str = "lora"
    """full | lora | qlora. LoRA is the default: it fits on one GPU for most models."""
    model: str | None = None
    """Local model folder or Hub id; None = the bundled tiny random-weight model (no download)."""
    data: tuple[str, ...] = ()
    """Local jsonl/json/parquet files or a Hub dataset name; empty = the bundled demo chat data."""
    template: str | None = None
    """A bundled chat template name, or None = the model's own chat template."""
    output_dir: str = "runs/dojo"
    """Run folder: train.json, ds_config.json, checkpoints, TensorBoard logs, final weights."""
    gpus: str | None = None
    """'all' or ids like '0,1'; None = all GPUs found, or the CPU when there are none."""
    nproc: int | None = None
    """CPU processes when no GPU is used (DeepSpeed CPU accelerator, gloo); None = 1."""
    hostfile: str | None = None
    """DeepSpeed hostfile for several machines (passed to its runner as --hostfile)."""
    num_nodes: int | None = None
    """Machines to use from the hostfile (DeepSpeed runner --num_nodes)."""
    master_addr: str | None = None
    """Address of the first machine for multi-node runs (DeepSpeed runner --master_addr)."""
    master_port: int | None = None
    """Rendezvous port; None = a free port found just before launch."""
    zero_stage: int = 2
    """DeepSpeed ZeRO stage 0-3. Stage 2 shards gradients + optimizer states at no extra comm."""
    offload: str = "none"
    """Optimizer-state offload: none | cpu (ZeRO-Offload, stage >= 1)."""
    offload_param: str = "none"
    """Parameter offload: none | cpu (ZeRO-Infinity, stage 3 only)."""
    optimizer: str = "hf"
    """Who builds the optimizer: hf (TrainingArguments optim) or ds (DeepSpeed JSON block)."""
    scheduler: str = "hf"
    """Who builds the LR scheduler: hf (TrainingArguments) or ds (DeepSpeed WarmupDecayLR)."""
    overlap_comm: bool = True
    """Overlap gradient reduction with backward (costs one more 2-byte reduce bucket at stage 1/2)."""
    bucket_size: int | None = None
    """reduce_bucket_size in elements; None = 5e8 (DeepSpeed's own default) for full fine-tuning
    at ZeRO-1/2, else HF "auto" (hidden_size squared). On the H200 HF's auto (4.2M for a 1B
    model: about 300 reductions a step) made a full ZeRO-2 run 11% slower than 5e8."""
    attn: str = "auto"
    """Attention kernel: auto (sdpa; flex_attention is an option for packed rows), sdpa, eager,
    flex_attention, flash_attention_2 (needs the flash-attn package)."""
    liger: str = "auto"
    """Liger kernels (fused RMSNorm, SwiGLU, RoPE and the linear cross-entropy that never
    materialises the fp32 logits): auto = on when liger-kernel is installed and the run is on
    CUDA; on; off."""
    compile: str = "auto"
    """torch.compile of each repeated decoder layer (accelerate's regional compilation: one
    compile shared by every layer, 10-13 s once). auto = on where it was measured to work and
    help (H200: +23% tokens/s): CUDA with Triton, full fine-tuning, ZeRO 0-2, no offload, no
    gradient checkpointing; on = wherever CUDA is; off."""
    save_model: bool = True
    """Write the final model/adapter (off for memory and speed benchmarks)."""
    precision: str = "auto"
    """auto = bf16 on GPU, fp32 on CPU (the DeepSpeed CPU accelerator trains in fp32 here)."""
    seq_len: int = 1024
    """Max tokens per sample (prompt + response), tokens."""
    overflow: str = "truncate"
    """What to do with samples longer than seq_len: truncate | drop (both are counted)."""
    micro_batch: int = 4
    """Samples per GPU (or CPU process) per forward pass."""
    grad_accum: int = 1
    """Micro-batches accumulated per optimizer step."""
    lr: float | None = None
    """Peak learning rate; None = 2e-4 for LoRA/QLoRA (PEFT's usual), 2e-5 for full fine-tuning."""
    warmup_steps: int = 0
    """Linear warmup, optimizer steps."""
    epochs: float = 1.0
    """Passes over the data (ignored when max_steps is set)."""
    max_steps: int | None = None
    """Stop after this many optimizer steps; None = run for `epochs`."""
    grad_ckpt: bool = False
    """Gradient (activation) checkpointing: less memory, about 30% more compute."""
    packing: bool = False
    """Pack short samples into full seq_len rows (no cross-sample attention)."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA alpha; scale = alpha / r = 2 (the PEFT examples' ratio)."""
    lora_dropout: float = 0.05
    """Dropout on the LoRA branch."""
    lora_targets: str = "all-linear"
    """Comma-separated module names, or all-linear (every linear layer but the output head)."""
    save_steps: int = 50
    """Write a checkpoint every N optimizer steps (0 = only at the end)."""
    save_total_limit: int = 2
    """Checkpoints kept on disk; older ones are deleted."""
    resume: bool = False
    """Continue from the latest complete checkpoint in output_dir."""
    seed: int = 42
    """Seeds model init, data order and dropout: the same seed gives the same losses."""
    logging_steps: int = 1
    """Log loss / lr / tokens per second every N steps."""
    trust_remote_code: bool = False
    """Run Python code shipped with a Hub model. Off: only enable it for models you trust."""
    merge: bool = False
    """After LoRA/QLoRA training also write base + adapter merged weights to output_dir/merged."""

    def resolved_bucket_size(self, params: int | None) -> int | None:
        """What --bucket-size means when not given (see bucket_size); None = HF "auto".

        Capped at the model's parameter count: DeepSpeed allocates the whole bucket however
        small the model (a 5e8 fp32 bucket is 2 GB per rank for the bundled tiny model)."""
        if self.bucket_size is not None:
            return self.bucket_size
        if self.method == "full" and self.zero_stage in (1, 2):
            return min(500_000_000, params) if params else 500_000_000
        return None

    def resolved_lr(self) -> float:
        if self.lr is not None:
            return self.lr
        return 2e-5 if self.method == "full" else 2e-4


FIELDS = {f.name for f in dataclasses.fields(TrainConfig)}


def _yaml_line(err: Exception) -> str:
    mark = getattr(err, "problem_mark", None)
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


def load(path: str | Path) -> dict[str, Any]:
    """Read a run YAML (or JSON) file into a dict of TrainConfig fields; unknown keys are refused."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"--config {str(path)!r} is a folder", hint="give a .yaml run file")
    if not p.is_file():
        raise ConfigError(
            f"--config {str(path)!r} does not exist",
            hint="see the presets: ls templates/train/ (lora.yaml, qlora.yaml, full.yaml)",
        )
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"--config {str(path)!r} is not a text file") from None
    import yaml  # lazy: keeps `dojo --help` fast

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(
            f"--config {str(path)!r}: malformed YAML{_yaml_line(e)}",
            hint="fix the YAML syntax (key: value, one per line)",
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"--config {str(path)!r}: expected a mapping of option: value, got {type(data).__name__}"
        )
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in FIELDS:
            close = difflib.get_close_matches(name, sorted(FIELDS), n=1, cutoff=0.6)
            hint = (
                f"did you mean {close[0]!r}?"
                if close
                else f"known keys: {', '.join(sorted(FIELDS))}"
            )
            raise ConfigError(f"--config {str(path)!r}: unknown key {key!r}", hint=hint)
        out[name] = value
    return out


def _coerce(name: str, value: Any) -> Any:
    """Give YAML values the field's type (data may be one string; numbers may come as str)."""
    if name == "data":
        if value is None:
            return ()
        if isinstance(value, str):
            return (value,)
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ConfigError(f"data: expected a path or a list of paths, got {value!r}")
    if name == "bucket_size" and isinstance(value, str | float) and not isinstance(value, bool):
        try:  # 5e8 / "5e8": DeepSpeed configs write bucket sizes in float notation
            f = float(value)
        except ValueError:
            return value
        return int(f) if f.is_integer() else value
    if name == "gpus" and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if name in ("lr", "lora_dropout", "epochs") and isinstance(value, str):
        try:
            return float(value)  # YAML 1.1 reads 2e-4 (no dot) as a string
        except ValueError:
            return value
    return value


def merge(
    file_values: dict[str, Any] | None = None, flags: dict[str, Any] | None = None
) -> TrainConfig:
    """default < file < flag; flags whose value is None were not given."""
    values: dict[str, Any] = {}
    for src in (file_values or {}, {k: v for k, v in (flags or {}).items() if v is not None}):
        for k, v in src.items():
            if k not in FIELDS:
                raise ConfigError(f"unknown run option {k!r}")
            values[k] = _coerce(k, v)
    return dataclasses.replace(TrainConfig(), **values)


def _is(value: Any, kind: type | tuple[type, ...]) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)


def validate(cfg: TrainConfig) -> list[str]:
    """Every problem in one pass, each naming the flag, the value and the fix."""
    p: list[str] = []

    def choice(flag: str, value: Any, allowed: tuple[str, ...]) -> None:
        if value not in allowed:
            p.append(f"--{flag} {value!r}: choose one of {', '.join(allowed)}")

    def integer(flag: str, value: Any, lo: int, hi: int | None = None) -> None:
        if not _is(value, int) or value < lo or (hi is not None and value > hi):
            rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
            p.append(f"--{flag} {value!r}: must be an integer {rng}")

    def number(flag: str, value: Any, lo: float, hi: float | None, *, open_lo: bool) -> None:
        bad = not _is(value, (int, float)) or value != value  # NaN
        if not bad:
            bad = value <= lo if open_lo else value < lo
            bad = bad or (hi is not None and value > hi)
        if bad:
            rng = f"{'>' if open_lo else '>='} {lo}" + (f" and <= {hi}" if hi is not None else "")
            p.append(f"--{flag} {value!r}: must be a number {rng}")

    choice("method", cfg.method, METHODS)
    choice("offload", cfg.offload, OFFLOADS)
    choice("offload-param", cfg.offload_param, OFFLOADS)
    choice("optimizer", cfg.optimizer, CHOICES_HF_DS)
    choice("scheduler", cfg.scheduler, CHOICES_HF_DS)
    choice("precision", cfg.precision, PRECISIONS)
    choice("overflow", cfg.overflow, OVERFLOWS)
    choice("attn", cfg.attn, ATTNS)
    choice("liger", cfg.liger, LIGERS)
    choice("compile", cfg.compile, COMPILES)
    if cfg.bucket_size is not None:
        integer("bucket-size", cfg.bucket_size, 1)
    integer("zero", cfg.zero_stage, 0, 3)
    # 1M tokens: beyond every released context window; catches a typo'd extra digit early.
    integer("seq-len", cfg.seq_len, 8, 1 << 20)
    integer("micro-batch", cfg.micro_batch, 1, 4096)
    integer("grad-accum", cfg.grad_accum, 1, 65536)
    integer("warmup-steps", cfg.warmup_steps, 0)
    integer("lora-r", cfg.lora_r, 1, 65536)
    integer("lora-alpha", cfg.lora_alpha, 1)
    integer("save-steps", cfg.save_steps, 0)
    integer("save-total-limit", cfg.save_total_limit, 1)
    integer("seed", cfg.seed, 0, 2**32 - 1)
    integer("logging-steps", cfg.logging_steps, 1)
    if cfg.lr is not None:
        number("lr", cfg.lr, 0.0, 1.0, open_lo=True)
    number("epochs", cfg.epochs, 0.0, None, open_lo=True)
    number("lora-dropout", cfg.lora_dropout, 0.0, 0.99, open_lo=False)
    if cfg.max_steps is not None:
        integer("max-steps", cfg.max_steps, 1)
    if cfg.nproc is not None:
        integer("nproc", cfg.nproc, 1, 256)
    if cfg.num_nodes is not None:
        integer("num-nodes", cfg.num_nodes, 1)
    if cfg.master_port is not None:
        integer("master-port", cfg.master_port, 1024, 65535)
    for flag, value in (("gpus", cfg.gpus), ("model", cfg.model), ("template", cfg.template)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            p.append(f"--{flag} {value!r}: must be a non-empty string")
    if not isinstance(cfg.output_dir, str) or not cfg.output_dir.strip():
        p.append(f"--output-dir {cfg.output_dir!r}: must be a folder path")
    if not isinstance(cfg.lora_targets, str) or not cfg.lora_targets.strip():
        p.append(f"--lora-targets {cfg.lora_targets!r}: give module names or all-linear")
    for name in (
        "grad_ckpt",
        "packing",
        "resume",
        "trust_remote_code",
        "merge",
        "overlap_comm",
        "save_model",
    ):
        if not isinstance(getattr(cfg, name), bool):
            p.append(f"{name}: {getattr(cfg, name)!r} must be true or false")
    if p:
        return p  # the combination checks below assume well-typed values
    if cfg.offload_param != "none" and cfg.zero_stage != 3:
        p.append(
            f"--offload-param {cfg.offload_param} needs --zero 3 (got --zero {cfg.zero_stage}): "
            "only stage 3 partitions parameters"
        )
    if cfg.offload != "none" and cfg.zero_stage == 0:
        p.append(
            "--offload cpu needs --zero 1, 2 or 3: ZeRO-Offload moves sharded optimizer states"
        )
    if cfg.merge and cfg.method == "full":
        p.append("--merge applies to --method lora or qlora only: full fine-tuning saves the model")
    if cfg.gpus is not None and cfg.nproc is not None:
        p.append("--gpus and --nproc exclude each other: --nproc N is for CPU runs without a GPU")
    if cfg.hostfile is None and (cfg.num_nodes or 1) > 1:
        p.append(f"--num-nodes {cfg.num_nodes} needs --hostfile FILE listing the machines")
    return p


def check(cfg: TrainConfig) -> TrainConfig:
    """Raise one ConfigError listing every problem, or return cfg unchanged."""
    problems = validate(cfg)
    if problems:
        more = (
            f" (and {len(problems) - 1} more: {'; '.join(problems[1:])})"
            if len(problems) > 1
            else ""
        )
        raise ConfigError(problems[0] + more, hint="see 'dojo train --help'")
    return cfg


def to_dict(cfg: TrainConfig) -> dict[str, Any]:
    d = dataclasses.asdict(cfg)
    d["data"] = list(cfg.data)
    return d


def to_json(cfg: TrainConfig, **extra: Any) -> str:
    """The resolved run config as written to run_dir/train.json (plus launcher-derived keys)."""
    return json.dumps({**to_dict(cfg), **extra}, indent=2)
