"""The rules that tie ZeRO options together, written once: the resolver (dojo.run.resolve) and the
JSON builder's own guard (dojo.zero.build.ZeroConfig) both ask these."""


def param_device(stage: int, offload: str, offload_param: str | None) -> str:
    """Where parameters go: at ZeRO-3 they follow --offload unless --offload-param says otherwise
    (None or "auto"); below ZeRO-3 nothing partitions them."""
    if offload_param not in (None, "auto"):
        return offload_param
    return offload if stage == 3 else "none"


def offload_problems(
    stage: int, offload: str, offload_param: str | None, nvme_path: str | None
) -> list[tuple[str, str]]:
    """(message, hint) for every rule the offload flags break."""
    out: list[tuple[str, str]] = []
    if offload != "none" and stage == 0:
        out.append((f"--offload {offload} needs ZeRO stage 1, 2 or 3 (got --zero 0)",
                    f"use --zero 2 --offload {offload}, or drop --offload"))  # fmt: skip
    if offload_param not in (None, "auto", "none") and stage != 3:
        out.append((f"--offload-param {offload_param} needs --zero 3 (got --zero {stage}): only "
                    "ZeRO-3 partitions parameters",
                    f"use --zero 3, or --offload {offload_param} for the optimizer only"))  # fmt: skip
    if "nvme" in (offload, param_device(stage, offload, offload_param)) and not nvme_path:
        flag = "--offload" if offload == "nvme" else "--offload-param"
        out.append((f"{flag} nvme needs --nvme-path",
                    "pass --nvme-path DIR (a folder on a fast local NVMe disk), or use cpu offload"))  # fmt: skip
    return out
