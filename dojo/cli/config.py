"""`dojo config`: write a DeepSpeed ZeRO JSON for the HF Trainer, or lint one.

Examples:
    dojo config --stage 2 > ds_zero2.json
    dojo config --zero 3 --offload cpu --optimizer ds --model 8b --output ds.json --explain
    dojo config --check ds.json

Options come from the run schema (dojo.run.schema), resolved by dojo.run.resolve like train's.
"""

from typing import Annotated, Any

import typer

from dojo import _output
from dojo.cli.options import with_run_options
from dojo.errors import ConfigError


@with_run_options("config")
def config_cmd(
    opts: dict[str, Any],
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", help="Write the JSON here instead of stdout (- = stdout)."),
    ] = None,
    force: Annotated[bool, typer.Option(help="Replace an existing --output file.")] = False,
    explain: Annotated[
        bool,
        typer.Option(
            help="Say on stderr which optimizer/scheduler will run and what overlap_comm costs."
        ),
    ] = False,
    check: Annotated[
        str | None,
        typer.Option(
            help="Lint an existing DeepSpeed JSON instead of writing one.", metavar="FILE"
        ),
    ] = None,
) -> None:
    """Write a DeepSpeed ZeRO config (JSON) for the HF Trainer, or --check an existing one.

    \b
    dojo config --stage 2 > ds_zero2.json
    dojo config --zero 3 --offload cpu --optimizer ds --model 8b --output ds.json --explain
    dojo config --check ds.json
    """
    from dojo.run import inputs

    typed = inputs.given(opts)
    if output == "-":  # the Unix convention: "-" is standard output, not a file named "-"
        output = None
    if check is not None:
        if typed or output is not None:
            raise ConfigError(
                "--check FILE lints a file and takes no other option",
                hint=f"run 'dojo config --check {check}' alone",
            )
        raise typer.Exit(_run_check(check))
    options = inputs.merge("config", {}, opts)  # every flag parsed before anything is read
    from dojo.run import machine, render, resolve

    run = resolve.resolve(options, machine=machine.for_plan(), given=typed, world_known=False)
    if not run.zero.deepspeed:
        where = f"; nothing written to {output}" if output is not None else ""
        _output.info("note: --zero none trains with the HF Trainer alone (no DeepSpeed): it needs "
                     f"no DeepSpeed config{where}")  # fmt: skip
        return
    from dojo.cli.options import ARGV

    out_flag = "-o" if "-o" in ARGV else "--output"
    if output is not None:
        from dojo._io import check_writable

        check_writable(output, force=force, flag=out_flag)
    spec = None
    if options.model.model is not None:
        from dojo.modelspec import resolve_model

        spec = resolve_model(options.model.model, revision=options.model.revision)
        run = resolve.resolve(
            options, machine=machine.for_plan(), spec=spec, given=typed, world_known=False
        )
    if run.zero.nvme_path and "nvme" not in (run.zero.offload, run.zero.offload_param):
        _output.warn(f"--nvme-path {run.zero.nvme_path} is unused: nothing is offloaded to nvme")
    precision = options.kernels.precision if "precision" in typed else "auto"
    ds = render.ds_config(run, spec, precision=precision)
    assert ds is not None  # a DeepSpeed stage (none returned above)
    if explain:
        from dojo.zero import explain as zero_explain

        for line in zero_explain.explain_optim_sched(ds):
            _output.info(line)
        for line in zero_explain.explain_overlap_comm(ds, getattr(spec, "hidden_size", None)):
            _output.info(line)
    text = _output.dumps(ds) + "\n"
    if output is None:
        _output.echo(text, end="")
        return
    from dojo._io import write_text_atomic

    write_text_atomic(output, text, force=force, flag=out_flag)
    _output.info(f"wrote {output}")


def _run_check(path: str) -> int:
    from dojo.zero.check import check_file

    findings = check_file(path)
    for f in findings:  # messages, as every error and warning dojo prints: stdout stays empty
        _output.info(f.format(path))
    errors = sum(f.level == "error" for f in findings)
    warnings = len(findings) - errors
    if not findings:
        _output.info(f"{path}: ok")
    else:
        _output.info(f"{path}: {errors} error(s), {warnings} warning(s)")
    return 1 if errors else 0
