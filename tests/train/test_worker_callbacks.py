"""A diverged run stops at the first logged loss that is not finite (dojo writes
bf16.check_grad_overflow false, so DeepSpeed no longer skips those steps)."""

from types import SimpleNamespace

import pytest

from dojo.errors import DojoError

pytest.importorskip("transformers")  # the worker's callbacks subclass its TrainerCallback
from dojo.train.worker.callbacks import StopOnNonFinite  # noqa: E402


@pytest.mark.parametrize("loss", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_loss_stops_with_one_error(loss: float) -> None:
    state = SimpleNamespace(global_step=17)
    with pytest.raises(DojoError) as e:
        StopOnNonFinite().on_log(None, state, None, logs={"loss": loss, "learning_rate": 1e-4})
    assert "step 17" in e.value.message and "--overflow-check" in (e.value.hint or "")
    assert "from the start" in (e.value.hint or "")  # no finite loss logged before it


def test_the_hint_names_the_last_finite_step() -> None:
    cb = StopOnNonFinite()
    cb.on_log(None, SimpleNamespace(global_step=10), None, logs={"loss": 3.0})
    with pytest.raises(DojoError) as e:
        cb.on_log(None, SimpleNamespace(global_step=20), None, logs={"loss": float("nan")})
    assert "checkpoint from step 10 or earlier" in (e.value.hint or "")


def test_finite_and_other_logs_pass() -> None:
    cb, state = StopOnNonFinite(), SimpleNamespace(global_step=3)
    cb.on_log(None, state, None, logs={"loss": 2.5})
    cb.on_log(None, state, None, logs={"eval_loss": float("nan")})  # eval is reported, not fatal
    cb.on_log(None, state, None, logs=None)
