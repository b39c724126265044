"""The one resolver: options + model + machine -> ``Run``. "auto" is decided here only, by each
group's own rules (``dojo.run.groups``).

Every rule that ties options together is checked first, all at once: one ConfigError lists every
problem, each with its hint.
"""

from typing import Any

from dojo.errors import ConfigError
from dojo.run.groups.data import context_line
from dojo.run.groups.devices import device_problems
from dojo.run.groups.kernels import (
    kernel_problems,
    liger_spares_experts,
    resolve_kernels,
    softcap_problem,
    spare_experts_line,
)
from dojo.run.groups.loop import loop_problems, resolve_loop
from dojo.run.groups.lora import (
    expert_dropout_problem,
    lora_problems,
    resolve_lora,
    target_names,
    targets_problem,
)
from dojo.run.groups.objective import objective_problems, resolve_objective
from dojo.run.groups.output import output_problems, resolve_output
from dojo.run.groups.zero import (
    leaf_problem,
    nvme_path_problem,
    resolve_zero,
    stage3_problems,
    zero_problems,
)
from dojo.run.machine import Machine
from dojo.run.run import Run
from dojo.run.schema import RunOptions


def problems(o: RunOptions, machine: Machine, given: set[str]) -> list[tuple[str, str]]:
    """(message, hint) for every rule the options break together."""
    out = zero_problems(o.zero) + stage3_problems(o.zero, given)
    out += kernel_problems(o.kernels, o.data.packing, machine, o.objective.preference)
    out += lora_problems(o.lora, full=not o.model.adapters, given=given)
    out += loop_problems(
        o.loop, evaluates=o.data.evaluates, save_steps=o.output.save_steps,
        ds_scheduler=o.zero.scheduler == "ds", ds_optimizer=o.zero.optimizer == "ds",
        offload=o.zero.offload != "none", cuda=machine.cuda, given=given,
    )  # fmt: skip
    out += output_problems(o.output, machine.assumed)
    out += device_problems(o.devices)
    out += objective_problems(o.objective, micro_batch=o.loop.micro_batch, packing=o.data.packing,
                              liger=o.kernels.liger, given=given)  # fmt: skip
    if o.data.eval_data and o.data.eval_split is not None:
        out.append(("--eval-data and --eval-split exclude each other",
                    "keep --eval-data FILE for a fixed held-out set, or --eval-split to hold out "
                    "training rows"))  # fmt: skip
    if o.model.revision is not None and o.model.model is None:
        out.append((f"--revision {o.model.revision} applies to a Hub --model (org/name)",
                    "add --model org/name, or drop --revision"))  # fmt: skip
    return out


def check(o: RunOptions, machine: Machine, given: set[str], spec: Any = None) -> None:
    found = problems(o, machine, given)
    for problem in (softcap_problem(o.kernels, spec),
                    expert_dropout_problem(o.lora, spec, o.model.adapters, given),
                    leaf_problem(o.zero, spec, o.model.trust_remote_code),
                    targets_problem(o.lora, spec, o.model.adapters)):  # fmt: skip
        if problem:
            found.append(problem)
    if found:
        raise ConfigError.of(found)


def resolve(
    options: RunOptions,
    *,
    machine: Machine,
    spec: Any = None,
    gpus: tuple[int, ...] = (),
    gpus_per_node: int = 1,
    given: set[str] | None = None,
    world_known: bool = True,
) -> Run:
    """``spec``: the ModelSpec when known (buckets are then numbers, not "auto"); ``gpus``: ids
    or CPU slots chosen; ``world_known``: False when nobody said how many GPUs (``dojo config``)."""
    given = given or set()
    o = options
    check(o, machine, given, spec)
    _check_data(o)
    _check_template(o)
    said: list[str] = []
    if gpus and not machine.assumed and o.devices.hostfile is None:  # dojo train, on this machine
        nvme = nvme_path_problem(o.zero, said)
        if nvme:
            raise ConfigError(*nvme)
    full = not o.model.adapters
    preference = o.objective.preference
    kernels = resolve_kernels(o.kernels, machine=machine, spec=spec, packing=o.data.packing,
                              said=said, preference=preference, adapters=o.model.adapters,
                              stage=o.zero.stage, offload=o.zero.offload)  # fmt: skip
    world = max(1, gpus_per_node) * o.devices.num_nodes if world_known else None
    zero = resolve_zero(o.zero, full=full, spec=spec, adapter_params=adapter_params(o, spec),
                        world=world, given=given, said=said)  # fmt: skip
    loop = resolve_loop(o.loop, full=full, cuda=machine.cuda, ds_optimizer=o.zero.optimizer == "ds",
                        evaluates=o.data.evaluates, save_steps=o.output.save_steps,
                        preference=preference)  # fmt: skip
    lora = resolve_lora(o.lora, spec, o.model.adapters, said)
    context = context_line(o.data, spec)
    if context:
        said.append(context)
    model_type = getattr(spec, "model_type", None)
    if liger_spares_experts(kernels.liger_kernels, o.model.adapters, lora.target_names, model_type):
        said.append(spare_experts_line(model_type))
    if machine.assumed:
        said.insert(0, f"machine: {machine.describe()}")
    return Run(
        model=o.model,
        objective=resolve_objective(o.objective),
        data=o.data,
        zero=zero,
        kernels=kernels,
        lora=lora,
        loop=loop,
        output=resolve_output(o.output, o.loop.max_steps),
        devices=o.devices,
        device="cuda" if machine.cuda else "cpu",
        gpu_ids=tuple(gpus),
        gpus_per_node=max(1, gpus_per_node),
        machine=machine.describe(),
        machine_assumed=machine.assumed,
        assumed=tuple(said),
    )


def adapter_params(o: RunOptions, spec: Any) -> int | None:
    """LoRA/QLoRA trainable params when the model is known and nothing is trained in full."""
    if not o.model.adapters or spec is None or o.lora.modules_to_save or o.lora.dora:
        return None
    return int(spec.lora_params(o.lora.lora_r, target_names(o.lora.lora_targets))) or None


def _check_data(o: RunOptions) -> None:
    """--data-columns, checked where the data reader would (DataError names the flag)."""
    from dojo.train import sources

    sources.parse_columns(o.data.data_columns)


def _check_template(o: RunOptions) -> None:
    """--template must mark assistant tokens for training: one that renders none of them would
    train on nothing, and every row would be dropped only once the ranks render them. (The
    model's own template, used without --template, is checked where the model folder is read.)"""
    if o.model.template is None:
        return
    from dojo.chat.check import check_trains

    check_trains(o.model.template)
