"""``dojo estimate``: GPU and host memory of the run ``dojo train`` would launch with the same options.

By default it describes dojo train on a CUDA machine with dojo's GPU extras (this machine when it
has GPUs); ``--liger off --expandable-segments off --no-packing`` describes a plain
HF Trainer + DeepSpeed script, and with ``--zero none`` the same run without DeepSpeed (a plain
Trainer/PEFT script). ``--zero all`` lists the run without DeepSpeed, then every stage, bare and
with CPU offload (DeepSpeed's estimators' menu).
"""

from typing import TYPE_CHECKING, Annotated, Any

import typer

from dojo.cli.options import with_run_options

if TYPE_CHECKING:
    from dojo.run.groups.zero import Stage
    from dojo.run.run import Run
    from dojo.run.schema import RunOptions


@with_run_options("estimate")
def estimate_cmd(
    opts: dict[str, Any],
    overlap_rule: Annotated[
        str,
        typer.Option(
            "--overlap-rule",
            help="Bucket cost shown in the comm column: current (today's DeepSpeed) or docs "
            "(the 4.5x rule of DeepSpeed's docs, DeepSpeed <= 0.3); the other is shown beside it.",
            metavar="current|docs",
        ),
    ] = "current",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Estimate GPU and host memory per ZeRO stage (full, LoRA or QLoRA) of a dojo train run.

    \b
    dojo estimate --model 7b --zero 3
    dojo estimate --model llama-3.1-8b --zero all --micro-batch 4 --seq-len 4096 --grad-ckpt
    dojo estimate --model 8b --method qlora --liger off --expandable-segments off  # a plain HF script
    dojo estimate --model 8b --method qlora --zero none --liger off  # a plain PEFT script, no DeepSpeed
    """
    from dojo import _output
    from dojo.errors import EstimateError
    from dojo.estimate import table as estimate_table
    from dojo.estimate.model import estimate
    from dojo.modelspec import resolve_model
    from dojo.run import inputs, machine, render

    if overlap_rule not in ("current", "docs"):
        raise EstimateError(
            f"--overlap-rule {overlap_rule!r} is not a rule", hint="use current or docs"
        )
    zero_all = str(opts.get("stage") or "").strip().lower() == "all"
    if zero_all:
        opts = {**opts, "stage": None}
    if opts.get("model") is None:
        raise EstimateError(
            "missing --model", hint="e.g. dojo estimate --model 7b (see --help for the aliases)"
        )
    options = inputs.merge("estimate", {}, opts)
    target = machine.for_plan(gpu_memory_gib=options.devices.gpu_memory)
    gpus_per_node = world_per_node(options.devices, target)
    spec = resolve_model(opts["model"], revision=options.model.revision)
    runs = plan_runs(options, spec, target, gpus_per_node, inputs.given(opts), zero_all)
    cpu = options.devices.cpu_memory
    rows = []
    for run in runs:
        setup = render.estimate_setup(run, target.gpu_memory_gib, cpu)
        if overlap_rule != "current":
            import dataclasses

            setup = dataclasses.replace(setup, overlap_rule=overlap_rule)
        rows.append(estimate(spec, setup))
    if as_json:
        doc = estimate_table.payload(rows)
        doc["assumed"] = list(dict.fromkeys(a for r in runs for a in r.assumed))
        doc["runs"] = [r.to_dict() for r in runs]
        _output.echo(_output.dumps(doc))
    elif _output.stdout_is_tty():
        estimate_table.render_rich(rows)
    else:
        _output.echo(estimate_table.render_plain(rows))
    for line in dict.fromkeys(a for r in runs for a in r.assumed):  # rows may differ (compile)
        _output.info(f"assumed: {line}")
    for note in dict.fromkeys(n for r in rows for n in r.notes):
        _output.info(f"note: {note}")
    if target.gpu_memory_gib is None and not as_json:
        _output.info("note: no GPU here and no --gpu-memory given, so no fits verdict")


def world_per_node(devices: Any, target: Any) -> int:
    """GPUs per node: --num-gpus N, or how many --gpus names (ids; 'all' = the GPUs here)."""
    from dojo.errors import ConfigError

    if devices.gpus is not None and devices.num_gpus is not None:
        raise ConfigError(
            "--gpus and --num-gpus both given",
            hint="--gpus 0,1 names GPUs, --num-gpus 2 counts them",
        )
    if devices.num_gpus is not None:
        return int(devices.num_gpus)
    spec = devices.gpus
    if spec is None:
        return 1
    if spec.strip() == "all":
        return max(1, len(target.gpu_ids))
    from dojo.gpus import parse_gpus

    return len(parse_gpus(spec, None))  # ids of the target machine: the syntax is checked


def plan_runs(
    options: "RunOptions",
    spec: Any,
    target: Any,
    gpus_per_node: int,
    given: set[str],
    zero_all: bool,
) -> list["Run"]:
    """One resolved run per row: the stage asked, or the run without DeepSpeed and then every
    stage, bare and with CPU offload (an option asked leaves out the stages that cannot take it,
    and the runs' assumed lines say which and why). Each is the run dojo train would launch."""
    import dataclasses

    from dojo.run import resolve

    def one(o: "RunOptions") -> "Run":
        return resolve.resolve(
            o, machine=target, spec=spec, gpus_per_node=gpus_per_node, given=given
        )

    if not zero_all:
        return [one(options)]
    combos: list[tuple[Stage, str, str]] = []
    left_out: dict[str, list[str]] = {}
    off, off_p = options.zero.offload, options.zero.offload_param
    asked_offload = "offload" in given or "offload_param" in given
    stages: tuple[Stage, ...] = ("none", 0, 1, 2, 3)
    for st in stages:
        why = _why_not(dataclasses.replace(options.zero, stage=st), given)
        if why:
            left_out.setdefault(why, []).append(str(st))
        elif not asked_offload:
            combos.append((st, "none", "none"))
            combos += [(st, "cpu", "none")] if st in (1, 2) else []
            combos += [(st, "cpu", "none"), (st, "cpu", "cpu")] if st == 3 else []
        else:
            shards = st not in ("none", 0)  # a stage that can offload
            combos.append((st, off if shards else "none", off_p if st == 3 else "none"))
    if not combos:  # nothing fits every option: the stage asked says why
        return [one(options)]
    runs = [one(options.replace(stage=st, offload=o, offload_param=p)) for st, o, p in combos]
    if not left_out:
        return runs
    line = "--zero all leaves out " + "; ".join(
        f"--zero {', '.join(sts)} ({why})" for why, sts in left_out.items()
    )
    return [dataclasses.replace(r, assumed=(line, *r.assumed)) for r in runs]


def _why_not(zero: Any, given: set[str]) -> str:
    """Why no run at ``zero``'s stage can take the ZeRO options asked ("" when one can): the
    first option the stage cannot take, without the stage (it is named beside it), else a
    problem the options have at any stage (all are left out, and the run asked says it)."""
    from dojo.run.groups.zero import stage3_clashes, zero_clashes, zero_problems

    clashes = zero_clashes(zero) + stage3_clashes(zero, given)
    if clashes:
        return clashes[0].reason
    problems = zero_problems(zero, need_path=False)
    return problems[0][0] if problems else ""
