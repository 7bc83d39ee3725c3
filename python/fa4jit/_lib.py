"""ctypes binding of the fa4jit C API (include/fa4jit/c_api.h, docs/C_API.md).

Loads lib/libfa4jit.so.0 from the package (or $FA4JIT_LIBRARY). libfa4jit needs NVRTC
(libnvrtc.so.13): found on the loader's path (an installed library has no RPATH naming the build
machine), else this module preloads it from $FA4JIT_NVRTC, a CUDA toolkit ($CUDA_HOME,
/usr/local/cuda) or the nvidia-cuda-nvrtc wheel that PyTorch installs. It also connects the
library's log messages to logging.getLogger("fa4jit").
"""
import atexit
import ctypes
import functools
import json
import logging
import os
import re
import struct
import sys

from . import _paths, errors, launch_schema

C_API_VERSION = 12  # FA4JIT_C_API_VERSION this module was written against (3: FP8, descale_q/k/v; 4: kv_dtype;
#                     5: max_seqlen_k; 6: the log callback and level, runtime info's "problems"; 7: fa4jit_tile_map;
#                     8: page_descale; 9: fa4jit_model_configs_with; 10: mask_prefix; 11: fa4jit_choose_kernel;
#                     12: fa4jit_choose_kernel2, with the launch's window)

library_path = _paths.library_path
_nvrtc_candidates = _paths.nvrtc_candidates


_preloaded = []  # keeps the preloaded NVRTC mapped


def _load():
    path = library_path()
    mode = ctypes.DEFAULT_MODE  # RTLD_LOCAL: libfa4jit exports only the C API anyway
    try:
        return ctypes.CDLL(path, mode=mode)
    except OSError as e:
        m = re.search(r"(libnvrtc[^:\s]*): cannot open", str(e))
        if not m:
            raise ImportError(f"fa4jit: cannot load {path}: {e}") from e
        soname = m.group(1)
        tried = []
        for cand in _nvrtc_candidates(soname):
            if not os.path.exists(cand):
                continue
            tried.append(cand)
            try:
                _preloaded.append(ctypes.CDLL(cand, mode=ctypes.RTLD_GLOBAL))
                return ctypes.CDLL(path, mode=mode)
            except OSError:
                continue
        raise ImportError(
            f"fa4jit: {path} needs {soname} (NVRTC from the CUDA 13 toolkit), which was not found"
            f" (tried {tried or 'no existing candidate'}); set FA4JIT_NVRTC=/path/to/{soname},"
            " install nvidia-cuda-nvrtc, or put the toolkit's lib64 on LD_LIBRARY_PATH") from e


lib = _load()

c_char_p, c_void_p, c_int32, c_uint32, c_uint64 = ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint32, ctypes.c_uint64
_out_str = ctypes.POINTER(ctypes.c_void_p)  # char** (kept as void* so ctypes does not copy and lose the pointer)


def _sig(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


fa4jit_c_api_version = _sig("fa4jit_c_api_version", c_uint32)
fa4jit_version = _sig("fa4jit_version", c_char_p)
fa4jit_last_error = _sig("fa4jit_last_error", c_char_p)
fa4jit_last_error_code = _sig("fa4jit_last_error_code", c_int32)
fa4jit_last_driver_result = _sig("fa4jit_last_driver_result", c_int32)
fa4jit_free = _sig("fa4jit_free", None, c_void_p)
fa4jit_kernel_get = _sig("fa4jit_kernel_get", c_int32, c_char_p, c_char_p, ctypes.POINTER(c_void_p))
fa4jit_kernel_release = _sig("fa4jit_kernel_release", None, c_void_p)
fa4jit_kernel_info = _sig("fa4jit_kernel_info", c_int32, c_void_p, _out_str)
fa4jit_launch_args_init = _sig("fa4jit_launch_args_init", None, c_void_p)
# Launch args go in as bytes packed by LAUNCH_ARGS (below): one struct.pack, no per-field ctypes work.
fa4jit_launch = _sig("fa4jit_launch", c_int32, c_void_p, c_char_p, c_void_p)
fa4jit_num_splits = _sig("fa4jit_num_splits", c_int32, c_void_p, c_char_p, ctypes.POINTER(c_int32))
fa4jit_workspace_bytes = _sig("fa4jit_workspace_bytes", c_int32, c_void_p, c_char_p, ctypes.POINTER(c_uint64))
fa4jit_generate_source = _sig("fa4jit_generate_source", c_int32, c_char_p, c_char_p, _out_str)
fa4jit_cache_key = _sig("fa4jit_cache_key", c_int32, c_char_p, c_char_p, _out_str)
fa4jit_resolve_config = _sig("fa4jit_resolve_config", c_int32, c_char_p, c_char_p, _out_str)
fa4jit_prewarm = _sig("fa4jit_prewarm", c_int32, c_char_p, c_char_p, c_int32, _out_str)
fa4jit_runtime_info = _sig("fa4jit_runtime_info", c_int32, _out_str)
fa4jit_device_arch = _sig("fa4jit_device_arch", c_int32, c_int32, _out_str)
fa4jit_set_compile_policy = _sig("fa4jit_set_compile_policy", c_int32, c_char_p)
fa4jit_model_configs_with = _sig("fa4jit_model_configs_with", c_int32, c_char_p, c_char_p, _out_str)
_i32p = ctypes.POINTER(c_int32)
fa4jit_choose_kernel2 = _sig("fa4jit_choose_kernel2", c_int32, c_char_p, c_char_p, c_char_p, c_int32, c_int32, c_int32,
                             c_int32, c_int32, ctypes.c_int64, c_int32, c_int32, c_int32, c_int32, _i32p, _i32p)

if fa4jit_c_api_version() < C_API_VERSION:
    raise ImportError(f"fa4jit: {library_path()} has C API version {fa4jit_c_api_version()}, "
                      f"this package needs {C_API_VERSION} or newer")

LOG_FN = ctypes.CFUNCTYPE(None, c_int32, c_char_p, c_void_p)
fa4jit_set_log_callback = _sig("fa4jit_set_log_callback", None, LOG_FN, c_void_p)
fa4jit_set_log_level = _sig("fa4jit_set_log_level", c_int32, c_int32)
fa4jit_get_log_level = _sig("fa4jit_get_log_level", c_int32)

# The library's messages (cache warnings; one info line per kernel compiled: the kernel, its arch,
# seconds, the cache tier written) become records of this logger.
logger = logging.getLogger("fa4jit")
LOG_LEVELS = (logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG)  # fa4jit_log_level 0..3
_STDERR_NAMES = ("error", "warning", "info", "debug")


def _on_log(level, message, _user):
    # Called from whichever thread logs (ctypes takes the GIL); an exception here would only be
    # printed by ctypes, so none escapes.
    try:
        text = message.decode("utf-8", "replace")
        py_level = LOG_LEVELS[level] if 0 <= level < len(LOG_LEVELS) else logging.WARNING
        if logger.hasHandlers():
            logger.log(py_level, "%s", text)
        elif py_level >= logging.WARNING:
            # No logging configured: Python's last-resort handler would print the bare message; keep
            # the library's own stderr format, which says where it comes from.
            sys.stderr.write(f"fa4jit: {_STDERR_NAMES[LOG_LEVELS.index(py_level)]}: {text}\n")
    except Exception:  # noqa: BLE001 (a log line must never become an error)
        pass


_log_callback = LOG_FN(_on_log)  # kept alive for as long as the library holds its pointer


def connect_logging():
    """Routes the library's messages to logging.getLogger("fa4jit"). With FA4JIT_LOG unset the
    library's level becomes info, so a compile reaches the logger and Python's logging decides
    (by default only warnings are shown); FA4JIT_LOG, when set, stays the library's level."""
    fa4jit_set_log_callback(_log_callback, None)
    if not os.environ.get("FA4JIT_LOG"):
        fa4jit_set_log_level(2)


def _disconnect_logging():
    # Library threads may still log while the interpreter shuts down: back to plain stderr first.
    fa4jit_set_log_callback(LOG_FN(), None)


connect_logging()
atexit.register(_disconnect_logging)


def raise_last(code: int):
    raise errors.from_status(code, fa4jit_last_error().decode("utf-8", "replace"), fa4jit_last_driver_result())


def take_string(p: ctypes.c_void_p) -> str:
    """A char* from the library as str, released with fa4jit_free."""
    if not p.value:
        return ""
    try:
        return ctypes.string_at(p.value).decode("utf-8", "replace")
    finally:
        fa4jit_free(p.value)


def call_str(fn, *args) -> str:
    """Calls a C API function whose last argument is char** out and returns the string."""
    out = c_void_p()
    code = fn(*args, ctypes.byref(out))
    if code:
        take_string(out)
        raise_last(code)
    return take_string(out)


def enc(s):
    return None if s is None else s.encode("utf-8")


# fa4jit_launch_args as a struct.Struct in native alignment (the C compiler's layout on this
# platform), in field order. Field offsets are checked against fa4jit_launch_args_init's output
# when this module loads, so a layout mismatch fails at import, not as a wrong launch.
_TENSOR = "P i i 4q 4q"  # data, dtype, reserved_, shape, stride
LAUNCH_FIELDS = launch_schema.struct_fields(_TENSOR)  # from launch_table.FIELDS, as the C header is
# "0P": the C struct's trailing padding to pointer alignment (sizeof counts it; struct would not).
LAUNCH_ARGS = struct.Struct("@" + " ".join(f for _, f in LAUNCH_FIELDS) + " 0P")
LAUNCH_ARGS_SIZE = LAUNCH_ARGS.size


def _check_layout():
    buf = ctypes.create_string_buffer(LAUNCH_ARGS_SIZE + 64)
    fa4jit_launch_args_init(buf)
    size = struct.unpack_from("@I", buf.raw)[0]
    values = LAUNCH_ARGS.unpack_from(buf.raw)
    # Defaults at the offsets this module computed: device -1, window -1/-1, block mask 128x128.
    want = {"size": LAUNCH_ARGS_SIZE, "device": -1, "window_left": -1, "window_right": -1, "block_mask_q": 128,
            "block_mask_k": 128}
    got = dict(zip(field_names(), values))
    if size != LAUNCH_ARGS_SIZE or any(got[k] != v for k, v in want.items()):
        raise ImportError(f"fa4jit: fa4jit_launch_args layout mismatch (library size {size}, "
                          f"package {LAUNCH_ARGS_SIZE}; defaults {[(k, got[k]) for k in want]})")


def field_names():
    """The flat value names of LAUNCH_ARGS, in pack order (a tensor is 11 values, aux_ptr 4, ...)."""
    names = []
    for name, fmt in LAUNCH_FIELDS:
        if fmt == _TENSOR:
            names += [f"{name}.data", f"{name}.dtype", f"{name}.reserved_"] + \
                     [f"{name}.shape[{i}]" for i in range(4)] + [f"{name}.stride[{i}]" for i in range(4)]
        elif fmt[0] == "4":
            names += [f"{name}[{i}]" for i in range(4)]
        else:
            names.append(name)
    return names


_check_layout()


def launch_values(fields: dict) -> list:
    """The LAUNCH_ARGS values of the fields by name (a tensor: its 11 values, an array its 4); the
    fields not given take the launch table's defaults."""
    values = []
    for name, fmt in LAUNCH_FIELDS:
        x = fields.get(name)
        if x is None:
            x = launch_schema.default(name)
            if fmt == _TENSOR or fmt[0] == "4":
                x = [x] * (11 if fmt == _TENSOR else 4)
        if fmt == _TENSOR or fmt[0] == "4":
            values += x
        else:
            values.append(x)
    return values


def _flat_codes():
    codes = []
    for _, fmt in LAUNCH_FIELDS:
        for part in fmt.split():
            codes += [part[-1]] * (int(part[:-1]) if len(part) > 1 else 1)
    return codes


_CODES = _flat_codes()
FIELD_INDEX = {n: i for i, n in enumerate(field_names())}
# Byte offset of each flat value in LAUNCH_ARGS (native alignment: "0<code>" pads to the field's alignment).
FIELD_OFFSETS = {n: struct.calcsize("@" + "".join(_CODES[:i]) + "0" + _CODES[i]) for n, i in FIELD_INDEX.items()}
assert len(_CODES) == len(FIELD_INDEX) and all(_CODES[FIELD_INDEX[n]] == "P" for n in FIELD_OFFSETS if n.endswith(".data"))


@functools.lru_cache(maxsize=256)
def _struct(fmt: str) -> struct.Struct:
    return struct.Struct(fmt)


class PointerPatch:
    """fa4jit_launch_args whose fields are fixed except some pointers: the fixed bytes are packed once
    and a call packs only the pointers between them (one struct.pack of a few arguments instead of
    the 78 values of LAUNCH_ARGS; about 10x cheaper)."""

    __slots__ = ("struct", "template")

    def __init__(self, values, pointer_fields):
        raw = LAUNCH_ARGS.pack(*values)
        fmt, chunks, pos = "=", [], 0
        for name in pointer_fields:  # in field order
            off = FIELD_OFFSETS[name]
            if _CODES[FIELD_INDEX[name]] != "P" or off < pos:
                raise ValueError(f"PointerPatch: {name} is not a pointer field in order")
            chunks.append(raw[pos:off])
            fmt += f"{off - pos}sQ"  # "=Q": 8 bytes in native byte order, as a 64-bit "P"
            pos = off + 8
        chunks.append(raw[pos:])
        fmt += f"{len(raw) - pos}s"
        self.struct = _struct(fmt)
        self.template = [0] * (2 * len(chunks) - 1)
        self.template[0::2] = chunks

    def pack(self, pointers) -> bytes:
        """The struct with these pointer values (in the order of pointer_fields)."""
        a = self.template[:]
        a[1::2] = pointers
        return self.struct.pack(*a)


def last_error() -> str:
    return fa4jit_last_error().decode("utf-8", "replace")


def version() -> str:
    return fa4jit_version().decode()


def runtime_info() -> dict:
    return json.loads(call_str(fa4jit_runtime_info))


def set_compile_policy(policy: str) -> None:
    code = fa4jit_set_compile_policy(str(policy).encode())
    if code:
        raise_last(code)


def device_arch(device: int) -> str:
    return call_str(fa4jit_device_arch, int(device))
