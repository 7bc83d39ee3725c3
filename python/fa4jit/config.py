"""Config (the JSON schema of docs/CONFIG.md as a dataclass) and the functions that need no GPU:
prewarm, generate_source, cache_key, resolve, runtime_info."""
import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from . import _lib
from .errors import ConfigError

MaskSpec = Union[str, Dict[str, Any]]
ScoreModSpec = Union[str, Dict[str, Any]]


# Fields that took one value only, removed (the library's reader names them the same way).
_REMOVED = {
    "padded_depth": "it is the depth rounded up to whole swizzle rows (the resolved config reports it)",
    "BK1": "the P.V chunk is always BN",
    "num_mma_stages": "every backend runs one MMA stage",
    "swizzle_bytes": "the backend derives it from the dtype and depth (128 bytes; 64 for sm_90a e4m3 at depth 64)",
}


@dataclass
class Config:
    """One kernel's compile-time choices; fields as in docs/CONFIG.md (0 / "" / None: derived per arch).

    ``mask`` and ``score_mod`` are a kind name (``"causal"``) or an object
    (``{"kind": "custom", "snippet": "return kv_idx <= q_idx;"}``), exactly as in the JSON files.
    Validation is the library's (``resolve()`` raises :class:`ConfigError` naming the field).
    """

    dtype: str = "bf16"
    output_dtype: Optional[str] = None
    # K and V in memory; None: dtype. "e4m3" under a bf16/fp16 dtype is an FP8 KV cache (e4m3 K/V,
    # 16-bit Q and O, descale_k / descale_v at launch).
    kv_dtype: Optional[str] = None
    depth: int = 128
    BM: int = 0
    BN: int = 0
    BK0: int = 0
    num_q_heads: int = 0
    group: int = 0
    num_kv_stages: int = 0
    num_qk_stages: int = 0
    arch: str = ""
    mask: MaskSpec = "none"
    score_mod: ScoreModSpec = "identity"
    pack_gqa: bool = False

    def to_dict(self) -> Dict[str, Any]:
        """The config as a JSON object (every field; kv_dtype only when set, as the library writes it)."""
        d = dataclasses.asdict(self)
        if d["kv_dtype"] is None:
            del d["kv_dtype"]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Config":
        """From a JSON object of the schema; unknown fields are a ConfigError, as in the library."""
        if isinstance(d, Config):
            return d
        if not isinstance(d, dict):
            raise ConfigError(f"config: expected a dict or a Config, got {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        removed = sorted(set(d) & set(_REMOVED))
        if removed:
            raise ConfigError(f"{removed[0]}: removed, it accepted one value only "
                              f"({_REMOVED[removed[0]]}); delete the field")
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"config: unknown field '{unknown[0]}'; fields: {', '.join(sorted(names))}")
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> "Config":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"config JSON: {e}") from e
        return cls.from_dict(d)

    def resolve(self, arch: Optional[str] = None) -> Dict[str, Any]:
        """Every field derived for the arch and validated by the library: {"config", "backend", "tuning",
        "num_threads", "smem_bytes", ...}. No GPU needed when an arch is given."""
        return resolve(self, arch)


def _config_json(config: Union[Config, Dict[str, Any], str]) -> str:
    if isinstance(config, str):
        return config  # already JSON
    if isinstance(config, Config):
        return config.to_json()
    if isinstance(config, dict):
        return json.dumps(config)
    raise ConfigError(f"config: expected a Config, a dict or a JSON string, got {type(config).__name__}")


def generate_source(config: Union[Config, Dict[str, Any], str], arch: Optional[str] = None) -> str:
    """The CUDA source the library compiles for ``config`` (``arch`` overrides config.arch; neither: the current GPU)."""
    return _lib.call_str(_lib.fa4jit_generate_source, _lib.enc(_config_json(config)), _lib.enc(arch))


def cache_key(config: Union[Config, Dict[str, Any], str], arch: Optional[str] = None) -> str:
    """The cache key (32 hex characters) of the kernel for ``config`` on ``arch``."""
    return _lib.call_str(_lib.fa4jit_cache_key, _lib.enc(_config_json(config)), _lib.enc(arch))


def resolve(config: Union[Config, Dict[str, Any], str], arch: Optional[str] = None) -> Dict[str, Any]:
    """``config`` with every field derived and validated (raises ConfigError naming the field)."""
    return json.loads(_lib.call_str(_lib.fa4jit_resolve_config, _lib.enc(_config_json(config)), _lib.enc(arch)))


def model_configs(model: Union[str, "os.PathLike[str]", Dict[str, Any]], dtype: Optional[str] = None,
                  kv_dtype: Optional[str] = None, arch: Optional[str] = None) -> List[Dict[str, Any]]:
    """The kernels a Hugging Face model's attention layers launch through this package (prefill, and
    decode with the group's heads packed), as ``[{"use": ..., "config": {...}}]``: ``model`` is a
    config.json path or its dict (e.g. ``AutoConfig.from_pretrained(...).to_dict()``). ``dtype``
    ("bf16" / "fp16") overrides the model's torch_dtype. ``kv_dtype="e4m3"``: the model is served
    over an FP8 KV cache, so beside each kernel whose keys come from the cache comes its twin with
    ``"kv_dtype": "e4m3"`` (MLA models: the absorbed decode over the latent cache). A feature fa4jit
    has no kernel for raises ConfigError naming its key. A kernel of one arch only (sm_90a's packed
    prefill tile, BM 128 or 192, and 64-row tile) carries ``"only_arch"``; ``arch`` (e.g.
    "sm_100a") leaves out those of other archs. Feed ``[k["config"] for k in model_configs(...,
    arch=a)]`` to ``prewarm(..., archs=[a])``."""
    if isinstance(model, dict):
        text = json.dumps(model)
    else:
        with open(model, encoding="utf-8") as f:
            text = f.read()
    options = json.dumps({"dtype": dtype, "kv_dtype": kv_dtype})
    kernels = json.loads(_lib.call_str(_lib.fa4jit_model_configs_with, text.encode(), options.encode()))
    return [k for k in kernels if arch is None or k.get("only_arch", arch) == arch]


def prewarm(configs: Iterable[Union[Config, Dict[str, Any]]], archs: Optional[Sequence[str]] = None,
            jobs: Optional[int] = None) -> List[Dict[str, Any]]:
    """Compiles ``configs`` for each of ``archs`` into the kernel cache; no GPU needed.

    ``configs``: Config objects or dicts in the JSON schema (one config alone is accepted too).
    ``archs``: e.g. ``["sm_90a", "sm_100a"]``; None: each config's own arch (else the current GPU's).
    ``jobs``: parallel compiles (None: the core count). Returns one report per kernel:
    ``{"arch", "key", "status": "compiled" | "hit", "seconds", "error"}``. Every config is validated
    before anything is compiled; if any kernel fails, the error of the first failure is raised with
    ``.report`` set to the full report.
    """
    if isinstance(configs, (Config, dict, str)):
        configs = [configs]
    items = [json.loads(_config_json(c)) for c in configs]
    if isinstance(archs, str):
        archs = [archs]
    arch_csv = ",".join(archs) if archs else None
    out = _lib.c_void_p()
    code = _lib.fa4jit_prewarm(json.dumps(items).encode(), _lib.enc(arch_csv), int(jobs or 0), _lib.ctypes.byref(out))
    report = json.loads(_lib.take_string(out) or "[]")
    if code:
        try:
            _lib.raise_last(code)
        except Exception as e:
            e.report = report
            raise
    return report


def runtime_info() -> Dict[str, Any]:
    """Library version, NVRTC version and archs, driver, GPUs, cache directories, the compile policy,
    the log level and this process's kernel counters (no GPU needed). "problems" lists environment
    values the library refuses (each message names its variable) instead of raising on the first."""
    return _lib.runtime_info()


def set_compile_policy(policy: str) -> None:
    """"allow", "warn" (compile, and log the config at warn level) or "forbid": after warm-up, a
    kernel missing from every cache tier raises CacheMissError instead of compiling (seconds of
    NVRTC inside a request). Overrides FA4JIT_COMPILE."""
    _lib.set_compile_policy(policy)


def stats() -> Dict[str, Any]:
    """This process's kernel counters: compiles, memory_hits, disk_hits, remote_hits, failures,
    forbidden, compile_ms."""
    return _lib.runtime_info()["stats"]
