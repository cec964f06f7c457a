"""Precision chosen by the hardware: ``dtype: auto`` picks bfloat16 only where it runs natively."""

import warnings

import pytest
import torch

from teamtr.core import TeamTRError
from teamtr.policy import backbone


@pytest.mark.parametrize("native", [True, False])
def test_auto_dtype_follows_native_bf16(native, monkeypatch):
    monkeypatch.setattr(backbone, "cpu_bf16_native", lambda: native)
    device, dtype = backbone.resolve_device("cpu", "auto")
    assert device == torch.device("cpu")
    assert dtype == (torch.bfloat16 if native else torch.float32)


def test_forced_bf16_on_an_emulating_cpu_warns_with_the_slowdown(monkeypatch):
    monkeypatch.setattr(backbone, "cpu_bf16_native", lambda: False)
    monkeypatch.setattr(backbone, "bf16_slowdown", lambda: 4.96)
    with pytest.warns(RuntimeWarning, match=r"ran 5\.0x slower than float32 here; set model\.dtype=auto"):
        assert backbone.resolve_device("cpu", "bfloat16")[1] == torch.bfloat16


def test_forced_bf16_on_a_native_cpu_is_silent(monkeypatch):
    monkeypatch.setattr(backbone, "cpu_bf16_native", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert backbone.resolve_device("cpu", "bfloat16")[1] == torch.bfloat16


def test_the_probe_returns_a_time_ratio():
    ratio = backbone.bf16_slowdown(size=64, seconds=0.02)
    assert isinstance(ratio, float) and 0 < ratio < float("inf")  # its size depends on the CPU and its load


def test_unknown_dtype_and_device_name_the_choices():
    with pytest.raises(TeamTRError, match="model.dtype 'float8' is not one of auto, float32, bfloat16, float16"):
        backbone.resolve_device("cpu", "float8")
    with pytest.raises(TeamTRError, match="is not a torch device"):
        backbone.resolve_device("toaster", "auto")


def test_teamtr_cpu_bf16_overrides_the_probe_and_rejects_other_values(monkeypatch):
    monkeypatch.setenv("TEAMTR_CPU_BF16", "1")
    assert backbone.cpu_bf16_native() and backbone.resolve_device("cpu", "auto")[1] == torch.bfloat16
    monkeypatch.setenv("TEAMTR_CPU_BF16", "0")
    assert not backbone.cpu_bf16_native() and backbone.resolve_device("cpu", "auto")[1] == torch.float32
    monkeypatch.setenv("TEAMTR_CPU_BF16", "yes")
    with pytest.raises(TeamTRError, match="TEAMTR_CPU_BF16='yes': use 0"):
        backbone.cpu_bf16_native()
    monkeypatch.delenv("TEAMTR_CPU_BF16")
    probed = any(bool(getattr(torch.cpu, p, lambda: False)()) for p in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))
    assert backbone.cpu_bf16_native() == probed
