"""The package without a GPU or torch: import, version, Config, resolve, gen, cache_key, prewarm, the
C API's layout and error mapping, the CLI entry point, and snippet typing."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import fa4jit
from fa4jit import _lib, _snippets, errors
from conftest import REPO


def test_version_matches_library_and_cmake():
    assert fa4jit.__version__ == fa4jit.library_version == _lib.version()
    cmake = open(os.path.join(REPO, "CMakeLists.txt")).read()
    assert re.search(r"project\(fa4jit VERSION ([0-9.]+)", cmake).group(1) == fa4jit.__version__


def test_installed_library_is_the_packaged_one():
    # `pip install .` puts libfa4jit next to the package (not a build tree's copy).
    if "FA4JIT_LIBRARY" not in os.environ:
        assert os.path.dirname(fa4jit.library_path) == os.path.join(os.path.dirname(fa4jit.__file__), "lib")
    assert _lib.fa4jit_c_api_version() == _lib.C_API_VERSION


def test_the_installed_package_carries_its_license():
    from importlib import metadata
    try:
        md = metadata.metadata("fa4jit")
    except metadata.PackageNotFoundError:
        pytest.skip("fa4jit is not pip-installed (tests run from the source tree)")
    assert md["License"] == "Apache-2.0" or md["License-Expression"] == "Apache-2.0", md
    assert "License :: OSI Approved :: Apache Software License" in md.get_all("Classifier")
    files = [str(f) for f in metadata.files("fa4jit") or []]
    assert any(f.endswith(".dist-info/licenses/LICENSE") for f in files), files
    # The CMake install inside the package has it too (share/licenses/fa4jit, as any install).
    text = open(os.path.join(REPO, "LICENSE")).read()
    assert open(os.path.join(os.path.dirname(fa4jit.__file__), "share", "licenses", "fa4jit", "LICENSE")).read() == text


def test_launch_args_layout_matches_the_c_struct():
    # fa4jit_launch_args_init writes sizeof(struct) and the defaults; the package's struct.Struct
    # must see them at its own offsets (also checked at import).
    buf = _lib.ctypes.create_string_buffer(_lib.LAUNCH_ARGS_SIZE + 64)
    _lib.fa4jit_launch_args_init(buf)
    values = dict(zip(_lib.field_names(), _lib.LAUNCH_ARGS.unpack_from(buf.raw)))
    assert values["size"] == _lib.LAUNCH_ARGS_SIZE
    assert values["device"] == -1 and values["window_left"] == -1 and values["window_right"] == -1
    assert values["block_mask_q"] == 128 and values["block_mask_k"] == 128
    assert all(v == 0 for k, v in values.items()
               if k not in ("size", "device", "window_left", "window_right", "block_mask_q", "block_mask_k"))
    assert len(_lib.field_names()) == len(values)


def test_pointer_patch_packs_what_the_full_struct_packs():
    # The per-call packer: fixed bytes packed once, pointers between them, must give the same bytes as
    # LAUNCH_ARGS with those pointers, at each pointer field's offset.
    names = _lib.field_names()
    values = [0.5 if code == "f" else 3 * i + 1 for i, code in enumerate(_lib._CODES)]  # distinct, nonzero
    pointers = ["q.data", "k.data", "o.data", "lse", "aux_ptr[1]", "cu_seqlens_k", "page_table", "workspace"]
    patch = _lib.PointerPatch(values, pointers)
    new = [0x7f0000001000 + 16 * i for i in range(len(pointers))]
    for name, p in zip(pointers, new):
        values[names.index(name)] = p
    assert patch.pack(new) == _lib.LAUNCH_ARGS.pack(*values)
    assert len(patch.pack(new)) == _lib.LAUNCH_ARGS_SIZE
    with pytest.raises(ValueError, match="softcap is not a pointer"):
        _lib.PointerPatch(values, ["softcap"])
    with pytest.raises(ValueError, match="q.data is not a pointer field in order"):
        _lib.PointerPatch(values, ["k.data", "q.data"])


def test_runtime_info_without_gpu():
    info = fa4jit.runtime_info()
    assert info["version"] == fa4jit.__version__
    assert info["c_api_version"] == 12
    assert info["problems"] == [] and info["log_level"] in ("error", "warn", "info", "debug")
    assert "sm_90a" in info["supported_archs"] and "sm_100a" in info["supported_archs"]
    assert info["nvrtc"].startswith("13.")


def _python(code, tmp_path, **env):
    # No kernel bundle: an installed package ships the presets' kernels, which would be hits.
    e = dict(os.environ, FA4JIT_CACHE_DIR=str(tmp_path), FA4JIT_BUNDLE_PATH="")
    e.pop("FA4JIT_LOG", None)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=300)


_RECORD_LOGS = ("import json, logging, fa4jit\n"
                "records = []\n"
                "class Keep(logging.Handler):\n"
                "    def emit(self, r): records.append([r.name, r.levelname, r.getMessage()])\n"
                "logging.getLogger('fa4jit').addHandler(Keep())\n"
                "logging.getLogger('fa4jit').setLevel(logging.DEBUG)\n"
                "report = fa4jit.prewarm([{'depth': 64, 'mask': 'causal'}], archs=['sm_90a'])\n"
                "print(json.dumps({'key': report[0]['key'], 'status': report[0]['status'], 'records': records}))\n")


def test_a_compile_logs_one_info_line_through_python_logging(tmp_path):
    # A fresh cache: the kernel is compiled, and says so once (kernel, arch, seconds, the tier written)
    # as a record of logging.getLogger("fa4jit"), with FA4JIT_LOG unset.
    out = _python(_RECORD_LOGS, tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["status"] == "compiled"
    mine = [r for r in got["records"] if got["key"] in r[2]]
    assert len(mine) == 1, got["records"]
    name, level, message = mine[0]
    assert (name, level) == ("fa4jit", "INFO")
    assert re.search(r"kernel sm_90a d64 bf16 \(key [0-9a-f]{32}\): compiled in [0-9.]+ s, cached in ", message), message
    assert str(tmp_path) in message, message
    # Again: a disk hit, which the library logs at debug, so only under FA4JIT_LOG=debug.
    again = json.loads(_python(_RECORD_LOGS, tmp_path).stdout.strip().splitlines()[-1])
    assert again["status"] == "hit" and [r for r in again["records"] if got["key"] in r[2]] == []
    debug = json.loads(_python(_RECORD_LOGS, tmp_path, FA4JIT_LOG="debug").stdout.strip().splitlines()[-1])
    assert [r[1] for r in debug["records"] if got["key"] in r[2]] == ["DEBUG"]
    # FA4JIT_LOG=warn, set, stays the library's level: a compile in a fresh cache sends nothing.
    quiet = json.loads(_python(_RECORD_LOGS, tmp_path / "fresh", FA4JIT_LOG="warn").stdout.strip().splitlines()[-1])
    assert quiet["status"] == "compiled" and [r for r in quiet["records"] if got["key"] in r[2]] == []


def test_warnings_without_logging_configured_keep_the_stderr_format(tmp_path):
    out = _python("import fa4jit\nfa4jit.prewarm([{'depth': 64}], archs=['sm_90a'])\n", tmp_path,
                  FA4JIT_REMOTE_CACHE="bogus://x")
    assert out.returncode == 0, out.stderr
    # "... is not redis://host:port/db", or "built without hiredis" (the wheel's default build).
    assert re.search(r"^fa4jit: warning: cache: .*remote cache.*bogus://x", out.stderr, re.M), out.stderr
    assert "compiled in" not in out.stderr, "info lines stay out of an unconfigured program's stderr"


def test_runtime_info_reports_bad_environment_values_instead_of_failing(tmp_path):
    code = "import json, fa4jit\nprint(json.dumps(fa4jit.runtime_info()['problems']))\n"
    out = _python(code, tmp_path, FA4JIT_CACHE_MAX_BYTES="lots", FA4JIT_COMPILE="sometimes", FA4JIT_LOG="loud")
    assert out.returncode == 0, out.stderr
    problems = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(problems) == 3, problems
    assert any("FA4JIT_CACHE_MAX_BYTES" in p for p in problems), problems
    assert any(p.startswith("FA4JIT_COMPILE") for p in problems), problems
    assert any("FA4JIT_LOG='loud'" in p for p in problems), problems


def test_config_json_round_trip():
    c = fa4jit.Config(dtype="fp16", depth=64, mask={"kind": "all_of", "masks": ["causal", "chunked"]},
                      score_mod="softcap", group=4, pack_gqa=True)
    assert fa4jit.Config.from_json(c.to_json()) == c
    assert fa4jit.Config.from_dict(json.loads(c.to_json())) == c
    r = c.resolve("sm_90a")
    assert r["backend"] == "sm90a"
    back = fa4jit.Config.from_dict(r["config"])  # the library's JSON reads back into a Config
    assert (back.dtype, back.depth, back.group, back.pack_gqa, back.arch) == ("fp16", 64, 4, True, "sm_90a")
    assert back.mask["kind"] == "all_of" and back.score_mod == {"kind": "softcap"}
    assert back.BM > 0 and back.BN > 0  # derived


def test_fp8_config_resolves_and_its_refusals_name_the_field():
    c = fa4jit.Config(dtype="e4m3", depth=128, mask="causal")
    assert fa4jit.Config.from_json(c.to_json()) == c
    r = c.resolve("sm_90a")
    assert (r["config"]["dtype"], r["config"]["output_dtype"]) == ("e4m3", "bf16")
    assert fa4jit.resolve({"dtype": "float8_e4m3fn", "output_dtype": "fp16"}, "sm_90a")["config"]["output_dtype"] == "fp16"
    with pytest.raises(fa4jit.ConfigError, match="e4m3 on sm_80"):
        c.resolve("sm_80")
    with pytest.raises(fa4jit.ConfigError, match="output_dtype"):
        fa4jit.resolve({"dtype": "e4m3", "output_dtype": "e4m3"}, "sm_90a")


def test_config_errors_name_the_field():
    with pytest.raises(fa4jit.ConfigError, match="unknown field 'dpth'"):
        fa4jit.Config.from_dict({"dpth": 128})
    with pytest.raises(fa4jit.ConfigError, match="depth: 100"):
        fa4jit.resolve({"depth": 100}, "sm_90a")
    with pytest.raises(fa4jit.ConfigError, match="unknown field 'dpth'"):
        fa4jit.resolve('{"dpth": 128}', "sm_90a")  # the library's own check
    with pytest.raises(fa4jit.ConfigError, match="mask"):
        fa4jit.resolve({"mask": "diagonal"}, "sm_90a")
    with pytest.raises(ValueError):  # ConfigError is a ValueError
        fa4jit.resolve({"depth": 100}, "sm_90a")
    with pytest.raises(fa4jit.ConfigError, match="config JSON"):
        fa4jit.resolve("{not json", "sm_90a")


def test_empty_arch_without_gpu_is_a_config_error():
    if fa4jit.runtime_info()["gpus"]:
        pytest.skip("a GPU is present: an empty arch means its arch")
    with pytest.raises(fa4jit.ConfigError, match="no GPU"):
        fa4jit.cache_key({"depth": 128})


def test_generate_source_and_cache_key():
    src = fa4jit.generate_source({"depth": 128, "mask": "causal"}, "sm_90a")
    assert "fa4::mask::Causal" in src
    assert src == fa4jit.generate_source(fa4jit.Config(mask="causal"), "sm_90a")  # deterministic
    k90 = fa4jit.cache_key({"mask": "causal"}, "sm_90a")
    k100 = fa4jit.cache_key({"mask": "causal"}, "sm_100a")
    assert re.fullmatch(r"[0-9a-f]{32}", k90) and k90 != k100
    assert k90 == fa4jit.cache_key({"mask": "causal", "arch": "sm_90a"})
    snippet = "return score - 0.5f * (q_idx - kv_idx);"
    assert snippet in fa4jit.generate_source({"score_mod": {"kind": "custom", "snippet": snippet}}, "sm_90a")


def test_prewarm_compiles_then_hits_without_gpu():
    cfgs = [{"depth": 64, "mask": "causal"}, fa4jit.Config(depth=128, score_mod="softcap")]
    report = fa4jit.prewarm(cfgs, archs=["sm_90a", "sm_100a"], jobs=2)
    assert len(report) == 4
    assert {r["arch"] for r in report} == {"sm_90a", "sm_100a"}
    assert all(r["status"] in ("compiled", "hit") and re.fullmatch(r"[0-9a-f]{32}", r["key"]) for r in report)
    assert {r["key"] for r in report} == {fa4jit.cache_key(c, a) for c in cfgs for a in ("sm_90a", "sm_100a")}
    # Another process finds them in the disk cache.
    code = ("import fa4jit, json\n"
            "print(json.dumps(fa4jit.prewarm([{'depth': 64, 'mask': 'causal'}, {'score_mod': 'softcap'}],"
            " archs=['sm_90a', 'sm_100a'])))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    again = json.loads(out.stdout.strip().splitlines()[-1])
    assert [r["status"] for r in again] == ["hit"] * 4
    assert [r["key"] for r in again] == [r["key"] for r in report]


def test_prewarm_validates_every_config_before_compiling(tmp_path):
    # In a fresh process and cache: the good config must not have been compiled by the failed call.
    code = ("import fa4jit\n"
            "good = {'depth': 128, 'mask': 'sliding_window'}\n"
            "try:\n    fa4jit.prewarm([good, {'depth': 100}], archs=['sm_90a'])\n"
            "except fa4jit.ConfigError as e:\n    print('refused:', e)\n"
            "print('then:', fa4jit.prewarm([good], archs=['sm_90a'])[0]['status'])\n")
    env = dict(os.environ, FA4JIT_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "refused: configs[1] (sm_90a): depth: 100" in out.stdout, out.stdout + out.stderr
    assert "then: compiled" in out.stdout, out.stdout + out.stderr


def test_snippet_compile_error_points_at_the_snippet_line():
    bad = {"mask": {"kind": "custom", "snippet": "bool ok = true;\nreturn undefined_name;"}}
    with pytest.raises(fa4jit.CompileError, match=r"mask\(2\)|mask:2") as e:
        fa4jit.prewarm([bad], archs=["sm_90a"])
    assert "undefined_name" in str(e.value)
    assert e.value.report[0]["status"] == "failed"


def test_error_classes_mirror_the_cpp_ones():
    assert issubclass(fa4jit.CacheMissError, fa4jit.CacheError)
    for cls in (fa4jit.ConfigError, fa4jit.CompileError, fa4jit.CacheError, fa4jit.DriverError, fa4jit.LaunchError):
        assert issubclass(cls, fa4jit.Error)
    assert issubclass(fa4jit.LaunchError, ValueError) and issubclass(fa4jit.ConfigError, ValueError)
    codes = {2: fa4jit.ConfigError, 3: fa4jit.CompileError, 4: fa4jit.CacheError, 5: fa4jit.CacheMissError,
             6: fa4jit.DriverError, 7: fa4jit.LaunchError, 1: fa4jit.Error}
    for code, cls in codes.items():
        assert type(errors.from_status(code, "m")) is cls
    assert errors.from_status(6, "m", 2).result == 2


def test_sealed_miss_is_a_cache_miss_error(tmp_path, monkeypatch):
    code = ("import fa4jit\n"
            "try:\n    fa4jit.prewarm([{'depth': 64, 'mask': 'chunked'}], archs=['sm_90a'])\n"
            "except fa4jit.CacheMissError as e:\n    print('miss', type(e).__name__)\n")
    env = dict(os.environ, FA4JIT_SEALED="1", FA4JIT_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "miss CacheMissError" in out.stdout, out.stderr


def test_console_script_runs_the_cli():
    exe = shutil.which("fa4jit")
    if exe is None or os.environ.get("FA4JIT_CLI"):
        pytest.skip("the fa4jit console script is not installed (source tree)")
    out = subprocess.run([exe, "gen", "--preset", "default", "--arch", "sm_90a", "--key"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert re.search(r"[0-9a-f]{32}", out.stdout)
    out = subprocess.run([sys.executable, "-m", "fa4jit", "info"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and fa4jit.__version__ in out.stdout, out.stdout + out.stderr


# ---- typed aux names in snippets ---------------------------------------------------------------

def test_free_indexed_names():
    f = _snippets.free_indexed_names
    assert f("return doc[q_idx] == doc[kv_idx];") == ["doc"]
    assert f("return score + aux[0][h] * (kv_idx - q_idx);") == []
    assert f("float w[4] = {1, 2, 3, 4}; return score * w[h % 4] + bias[h];") == ["bias"]
    assert f("const int* p = (const int*)aux[0]; return p[q_idx] == 1;") == []
    assert f("// doc[x] in a comment\nreturn params.aux_ptr[0] != 0 && seg [q_idx] == seg[kv_idx];") == ["seg"]
    assert f("return score * slope[h] + a[q_idx] - b2[kv_idx];") == ["slope", "a", "b2"]


def test_typed_snippets_compile_for_sm90a_and_sm100a():
    # The issue's two snippets exactly as written, with a list of aux tensors: aux[0] typed (one
    # dtype) and the undeclared `doc` bound to the list's tensor.
    score, = _snippets.typed_snippets((("score", "return score + aux[0][h] * (kv_idx - q_idx);"),), (),
                                      ("torch.float32",))
    mask, = _snippets.typed_snippets((("mask", "return doc[q_idx] == doc[kv_idx];"),), (), ("torch.int32",))
    named = _snippets.typed_snippets((("mask", "return doc[q_idx] == doc[kv_idx] && q_idx >= kv_idx;"),
                                      ("block", "return kv_lo > q_hi ? SKIP : PARTIAL;"),
                                      ("score", "return score * w[h] + (float)bias[kv_idx];")),
                                     ("doc", "w", "bias"), ("torch.int64", "torch.float32", "torch.uint8"))
    assert "aux[0][h]" in score and "doc[q_idx] == doc[kv_idx];" in mask
    cfgs = [{"score_mod": {"kind": "custom", "snippet": score}},
            {"mask": {"kind": "custom", "snippet": mask}},
            {"mask": {"kind": "custom", "snippet": named[0], "block_snippet": named[1]},
             "score_mod": {"kind": "custom", "snippet": named[2]}}]
    report = fa4jit.prewarm(cfgs, archs=["sm_90a", "sm_100a"])
    assert all(r["status"] in ("compiled", "hit") for r in report)


def test_typed_snippets_keep_line_numbers():
    mask, = _snippets.typed_snippets((("mask", "bool a = true;\nreturn nope[q_idx] && a && missing;"),), (),
                                     ("torch.int32",))
    with pytest.raises(fa4jit.CompileError, match=r"mask\(2\)|mask:2"):
        fa4jit.prewarm([{"mask": {"kind": "custom", "snippet": mask}}], archs=["sm_90a"])


def test_aux_list_with_ambiguous_names_is_refused():
    with pytest.raises(fa4jit.ConfigError, match="pass aux as a dict"):
        _snippets.typed_snippets((("mask", "return doc[q_idx] == seg[kv_idx];"),), (),
                                 ("torch.int32",))
    with pytest.raises(fa4jit.ConfigError, match="dtype"):
        _snippets.typed_snippets((("mask", "return aux0[q_idx];"),), (), ("torch.complex64",))
    with pytest.raises(fa4jit.ConfigError, match=r"bfloat16 tensors cannot be read by snippets; pass .float\(\)"):
        _snippets.typed_snippets((("score", "return score + aux0[h];"),), (), ("torch.bfloat16",))
    with pytest.raises(fa4jit.ConfigError, match="cannot name"):
        _snippets.typed_snippets((("mask", "return q_idx[0];"),), ("q_idx",), ("torch.int32",))


C_CONSUMER = r"""
#include <stdio.h>
#include <string.h>
#include <fa4jit/c_api.h>

int main(void) {
  if (fa4jit_c_api_version() < FA4JIT_C_API_VERSION) return 10;
  printf("version %s\n", fa4jit_version());
  fa4jit_kernel* k = NULL;
  if (fa4jit_kernel_get("{\"depth\": 64, \"mask\": \"causal\"}", "sm_90a", &k) != FA4JIT_OK) {
    printf("get failed: %s\n", fa4jit_last_error());
    return 11;
  }
  char* info = NULL;
  if (fa4jit_kernel_info(k, &info) != FA4JIT_OK || !strstr(info, "\"backend\":\"sm90a\"")) return 12;
  fa4jit_free(info);
  fa4jit_launch_args a;
  fa4jit_launch_args_init(&a);
  int rc = fa4jit_launch(k, &a, NULL);  /* q.data is NULL: refused before anything runs */
  printf("launch %d %s\n", rc, fa4jit_last_error());
  if (rc != FA4JIT_LAUNCH_ERROR || !strstr(fa4jit_last_error(), "q.data is null")) return 13;
  a.size = 8;  /* a struct from no known header */
  if (fa4jit_launch(k, &a, NULL) != FA4JIT_INVALID_ARGUMENT) return 14;
  if (fa4jit_kernel_get("{\"depth\": 100}", "sm_90a", &k) != FA4JIT_CONFIG_ERROR || k != NULL) return 15;
  printf("config error: %s\n", fa4jit_last_error());
  fa4jit_kernel_release(k);
  return 0;
}
"""


def test_c_consumer_of_the_installed_header_and_library(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    pkg = os.path.dirname(fa4jit.__file__)
    include = os.path.join(pkg, "include")
    if not os.path.exists(os.path.join(include, "fa4jit", "c_api.h")):
        include = os.path.join(REPO, "include")  # a source tree: the repository's header
    src = tmp_path / "consumer.c"
    src.write_text(C_CONSUMER)
    exe = tmp_path / "consumer"
    lib = fa4jit.library_path
    build = subprocess.run([cc, "-std=c99", "-Wall", "-Werror", "-pedantic", f"-I{include}", str(src), lib,
                            f"-Wl,-rpath,{os.path.dirname(lib)}", "-o", str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"version {fa4jit.__version__}" in run.stdout and "depth: 100" in run.stdout


# ---- every launch-args field reaches the library at its place (no GPU: the checks come first) -----

def _kernel_handle(config):
    h = _lib.ctypes.c_void_p()
    assert _lib.fa4jit_kernel_get(json.dumps(config).encode(), b"sm_90a", _lib.ctypes.byref(h)) == 0, _lib.last_error()
    return h.value


def _launch_fields(**fields):
    buf = _lib.ctypes.create_string_buffer(_lib.LAUNCH_ARGS_SIZE)
    _lib.fa4jit_launch_args_init(buf)
    values = dict(zip(_lib.field_names(), _lib.LAUNCH_ARGS.unpack_from(buf.raw)))
    B, S, H, D = 2, 64, 4, 64
    buffer = 1 << 20  # any 16-byte aligned non-null address: the checks below fail before it is read
    for name in "qkvo":
        values.update({f"{name}.data": buffer, f"{name}.dtype": 0})
        for i, (n, st) in enumerate(zip((B, S, H, D), (S * H * D, H * D, D, 1))):
            values[f"{name}.shape[{i}]"], values[f"{name}.stride[{i}]"] = n, st
    values.update(fields)
    return _lib.LAUNCH_ARGS.pack(*values.values())


@pytest.mark.parametrize("fields, message", [
    ({"q.stride[2]": 4}, r"q.stride\[2\] = 4"),
    ({"k.dtype": 1}, "k.dtype is fp16"),
    ({"v.shape[3]": 32}, r"v.shape\[3\] \(head_dim\) is 32"),
    ({"o.data": 0}, "o.data is null"),
    ({"o.shape[1]": 63}, r"o.shape \(63, 4\)"),
    ({"cu_seqlens_q": 64, "cu_seqlens_k": 64}, "batch is 0"),
    ({"cu_seqlens_q": 64, "cu_seqlens_k": 64, "batch": 2}, "max_seqlen_q is 0"),
    ({"max_pages": 5}, "max_pages is 5 without a page_table"),
    ({"max_seqlen_k": -1}, "max_seqlen_k is -1"),
    ({"page_table": 64, "cu_seqlens_k": 64}, "cu_seqlens_k with page_table"),
    ({"softmax_scale": -1.0}, "softmax_scale is -1"),
    ({"block_mask": 64}, "block_mask is set but the kernel's mask has no custom part"),
    ({"mask_prefix": -1}, "mask_prefix is -1: a count of keys"),
    ({"mask_prefix": 100}, "mask_prefix is 100: the kernel's mask has no prefix"),
    ({"q.dtype": 7}, "q.dtype is 7"),
    ({"q.dtype": 2}, "q.dtype is e4m3, the kernel was built for bf16"),
    ({"descale_q": 64}, "descale_q is set but the kernel's dtype is bf16: descale factors are for e4m3"),
    ({"descale_v": 64}, "descale_v is set but the kernel's dtype is bf16: descale factors are for e4m3"),
])
def test_launch_args_reach_the_library_field_by_field(fields, message):
    h = _kernel_handle({"depth": 64, "mask": "causal"})
    try:
        code = _lib.fa4jit_launch(h, _launch_fields(**fields), None)
        assert code == 7, (code, _lib.last_error())  # FA4JIT_LAUNCH_ERROR: refused before the driver is needed
        assert re.search(message, _lib.last_error()), _lib.last_error()
    finally:
        _lib.fa4jit_kernel_release(h)


def test_valid_launch_args_get_as_far_as_the_driver():
    if fa4jit.runtime_info()["gpus"]:
        pytest.skip("a GPU is present")
    h = _kernel_handle({"depth": 64, "mask": {"kind": "custom", "snippet": "return true;"}})
    try:
        for fields in ({}, {"window_left": 3, "chunk_size": 5, "softcap": 2.0, "num_splits": 1, "lse": 64,
                            "block_mask": 64, "block_mask_q": 64, "aux_scalar[3]": 1.5, "sinks": 64}):
            code = _lib.fa4jit_launch(h, _launch_fields(**fields), None)
            assert code == 6 and "no CUDA driver" in _lib.last_error(), (code, _lib.last_error())
            assert _lib.fa4jit_last_error_code() == 6
    finally:
        _lib.fa4jit_kernel_release(h)


def test_a_version_2_struct_leaves_the_descale_factors_at_their_default():
    # A caller compiled against C API version 2 passes a struct that ends at workspace_bytes: the
    # library must not read the descale fields past its size (here: garbage that would be refused).
    if fa4jit.runtime_info()["gpus"]:
        pytest.skip("a GPU is present")
    v2_size = _lib.FIELD_OFFSETS["descale_q"]
    assert v2_size == _lib.FIELD_OFFSETS["workspace_bytes"] + 8
    h = _kernel_handle({"depth": 64, "mask": "causal"})
    try:
        args = _launch_fields(size=v2_size, descale_q=64, descale_k=64, descale_v=64)
        code = _lib.fa4jit_launch(h, args, None)
        assert code == 6 and "no CUDA driver" in _lib.last_error(), (code, _lib.last_error())
        code = _lib.fa4jit_launch(h, _launch_fields(descale_q=64), None)  # the full struct: read and refused
        assert code == 7 and "descale_q is set" in _lib.last_error(), (code, _lib.last_error())
    finally:
        _lib.fa4jit_kernel_release(h)


def test_fp8_launch_args_reach_the_library():
    # An FP8 (e4m3) kernel through the C API: FA4JIT_E4M3 q/k/v with a 16-bit o, strides of 16-byte
    # steps (16 elements), descale pointers accepted; compiled for sm_90a without a GPU.
    h = _kernel_handle({"depth": 64, "dtype": "e4m3", "mask": "causal"})
    info = json.loads(_lib.call_str(_lib.fa4jit_kernel_info, h))
    assert info["config"]["dtype"] == "e4m3" and info["config"]["output_dtype"] == "bf16"
    fp8 = {f"{n}.dtype": 2 for n in "qkv"}
    try:
        for fields, message in (({"o.dtype": 2}, "o.dtype is e4m3, the kernel was built for bf16"),
                                ({"q.dtype": 0}, "q.dtype is bf16, the kernel was built for e4m3"),
                                ({"k.stride[2]": 72}, r"k.stride\[2\] = 72 must be a non-negative multiple of 16 "
                                                      r"elements \(16 bytes\)"),
                                ({"descale_k": 66}, "descale_k is not 4-byte aligned")):
            code = _lib.fa4jit_launch(h, _launch_fields(**{**fp8, **fields}), None)
            assert code == 7, (code, _lib.last_error())
            assert re.search(message, _lib.last_error()), _lib.last_error()
        if not fa4jit.runtime_info()["gpus"]:
            code = _lib.fa4jit_launch(h, _launch_fields(**fp8, descale_q=64, descale_k=128, descale_v=256), None)
            assert code == 6 and "no CUDA driver" in _lib.last_error(), (code, _lib.last_error())
    finally:
        _lib.fa4jit_kernel_release(h)


def test_fp8_kv_cache_config_and_launch_args_reach_the_library():
    # An FP8 KV cache through the C API: "kv_dtype": "e4m3" under a bf16 dtype; FA4JIT_E4M3 k/v
    # (16-element strides), bf16 q and o, descale_k / descale_v accepted, descale_q refused.
    c = fa4jit.Config(depth=128, kv_dtype="e4m3", mask="causal")
    assert fa4jit.Config.from_json(c.to_json()) == c and json.loads(c.to_json())["kv_dtype"] == "e4m3"
    assert "kv_dtype" not in json.loads(fa4jit.Config(depth=128).to_json())  # as the library writes it: only when set
    r = c.resolve("sm_90a")["config"]
    assert (r["dtype"], r["kv_dtype"], r["output_dtype"]) == ("bf16", "e4m3", "bf16")
    assert fa4jit.Config.from_dict(r).kv_dtype == "e4m3"
    assert "kv_dtype" not in fa4jit.resolve({"depth": 128, "kv_dtype": "bf16"}, "sm_90a")["config"]  # = dtype: unset
    assert fa4jit.cache_key(c, "sm_90a") != fa4jit.cache_key({"depth": 128, "mask": "causal"}, "sm_90a")
    with pytest.raises(fa4jit.ConfigError, match="kv_dtype"):
        fa4jit.resolve({"depth": 128, "dtype": "e4m3", "kv_dtype": "bf16"}, "sm_90a")
    h = _lib.ctypes.c_void_p()
    assert _lib.fa4jit_kernel_get(json.dumps({"depth": 128, "kv_dtype": "e4m3", "mask": "causal"}).encode(),
                                  b"sm_90a", _lib.ctypes.byref(h)) == 0, _lib.last_error()
    h = h.value
    info = json.loads(_lib.call_str(_lib.fa4jit_kernel_info, h))
    assert (info["config"]["dtype"], info["config"]["kv_dtype"], info["config"]["output_dtype"]) == (
        "bf16", "e4m3", "bf16")
    kv8 = {"k.dtype": 2, "v.dtype": 2, "q.shape[3]": 128, "k.shape[3]": 128, "v.shape[3]": 128, "o.shape[3]": 128}
    for n in "qkvo":  # (2, 64, 4, 128) contiguous
        kv8.update({f"{n}.stride[0]": 64 * 4 * 128, f"{n}.stride[1]": 4 * 128, f"{n}.stride[2]": 128})
    try:
        for fields, message in (({"k.dtype": 0}, "k.dtype is bf16, the kernel was built for e4m3"),
                                ({"q.dtype": 2}, "q.dtype is e4m3, the kernel was built for bf16"),
                                ({"o.dtype": 2}, "o.dtype is e4m3, the kernel was built for bf16"),
                                ({"v.stride[2]": 136}, r"v.stride\[2\] = 136 must be a non-negative multiple of 16 "
                                                       r"elements \(16 bytes\)"),
                                ({"descale_q": 64}, "descale_q is set but the kernel's dtype is bf16: descale factors "
                                                    "are for e4m3"),
                                ({"descale_k": 66}, "descale_k is not 4-byte aligned")):
            code = _lib.fa4jit_launch(h, _launch_fields(**{**kv8, **fields}), None)
            assert code == 7, (code, _lib.last_error())
            assert re.search(message, _lib.last_error()), _lib.last_error()
        if not fa4jit.runtime_info()["gpus"]:
            q_rows = {"q.stride[0]": 64 * 4 * 136, "q.stride[1]": 4 * 136, "q.stride[2]": 136}  # q: 8-element steps
            code = _lib.fa4jit_launch(h, _launch_fields(**{**kv8, **q_rows, "descale_k": 128, "descale_v": 256}), None)
            assert code == 6 and "no CUDA driver" in _lib.last_error(), (code, _lib.last_error())
    finally:
        _lib.fa4jit_kernel_release(h)


def test_model_configs_and_their_refusals():
    llama = os.path.join(REPO, "tests", "models", "llama3_8b.json")
    ks = fa4jit.model_configs(llama)
    assert [k["config"].get("pack_gqa", False) for k in ks] == [False, True, True]
    assert ks[1]["config"]["group"] == 4 and ks[0]["config"]["mask"]["kind"] == "causal"
    assert "decode" in ks[1]["use"]
    # sm_90a's packed prefill tile: that arch's only; arch= leaves it out elsewhere.
    assert (ks[2]["config"]["BM"], ks[2].get("only_arch"), "only_arch" in ks[1]) == (128, "sm_90a", False)
    assert fa4jit.model_configs(llama, arch="sm_90a") == ks
    assert fa4jit.model_configs(llama, arch="sm_100a") == ks[:2]
    # Multi-head attention (32 KV heads): nothing packs; sm_90a decodes at its 64-row tile.
    mha = dict(json.load(open(llama)), num_key_value_heads=32)
    ks = fa4jit.model_configs(mha)
    assert [(k["config"].get("pack_gqa", False), k["config"]["BM"], k.get("only_arch")) for k in ks] == [
        (False, 0, None), (False, 64, "sm_90a")]
    assert fa4jit.model_configs(json.load(open(llama)), dtype="fp16")[0]["config"]["dtype"] == "fp16"
    with pytest.raises(fa4jit.ConfigError, match="torch_dtype: 'float32'"):
        fa4jit.model_configs(os.path.join(REPO, "tests", "models", "gemma2_9b.json"))
    # DeepSeek-V3: MLA as transformers runs it (one causal kernel, Q/K 192 and V 128), then the
    # absorbed decode over the latent cache (Q/K 576, V 512, one KV head) at 128 and 16 heads per GPU.
    ds, *latent = fa4jit.model_configs(os.path.join(REPO, "tests", "models", "deepseek_v3.json"))
    assert (ds["config"]["depth"], ds["config"]["depth_v"]) == (192, 128)
    assert [(k["config"]["depth"], k["config"]["depth_v"], k["config"]["group"], k["config"]["pack_gqa"])
            for k in latent] == [(576, 512, 128, True), (576, 512, 16, True)]
    assert all("MLA decode" in k["use"] for k in latent)
    # Served over an FP8 KV cache: beside each kernel reading the cache its e4m3 twin (MLA: the
    # absorbed decode only; its unabsorbed kernel computes K and V). Other kv_dtype values and
    # option keys are refused, naming them.
    ks = fa4jit.model_configs(llama, kv_dtype="e4m3")
    assert [(k["config"].get("pack_gqa", False), k["config"].get("kv_dtype")) for k in ks] == [
        (False, None), (False, "e4m3"), (True, None), (True, "e4m3"), (True, None)]  # the tile reads 16-bit K/V
    assert ks[1]["use"].endswith("over an e4m3 KV cache")
    ds8 = fa4jit.model_configs(os.path.join(REPO, "tests", "models", "deepseek_v3.json"), kv_dtype="e4m3")
    assert [(k["config"]["depth"], k["config"].get("kv_dtype")) for k in ds8] == [
        (192, None), (576, None), (576, "e4m3"), (576, None), (576, "e4m3")]
    with pytest.raises(fa4jit.ConfigError, match="kv_dtype: bf16"):
        fa4jit.model_configs(llama, kv_dtype="bf16")
    with pytest.raises(fa4jit.ConfigError, match="options: kv_dtype: .*e5m2"):
        fa4jit.model_configs(llama, kv_dtype="e5m2")
    with pytest.raises(fa4jit.ConfigError, match="options: unknown key 'kv'"):
        _lib.call_str(_lib.fa4jit_model_configs_with, open(llama, "rb").read(), b'{"kv": "e4m3"}')


def test_compile_policy_forbid_raises_before_compiling_and_stats_count():
    cfg = {"depth": 64, "score_mod": {"kind": "custom", "snippet": "return score * %d.0f;" % (os.getpid() % 9973 + 2)}}
    # Its split-KV combine kernel (shared by every sm_90a d64 bf16 kernel) in first, so that the
    # counts below are the kernel's own.
    fa4jit.prewarm([{"depth": 64}], archs=["sm_90a"])
    before = fa4jit.stats()
    fa4jit.set_compile_policy("forbid")
    try:
        with pytest.raises(fa4jit.CacheMissError, match="compile policy forbid"):
            fa4jit.prewarm([cfg], archs=["sm_90a"])
        assert fa4jit.runtime_info()["compile_policy"] == "forbid"
        after = fa4jit.stats()
        assert after["compiles"] == before["compiles"] and after["forbidden"] == before["forbidden"] + 1
    finally:
        fa4jit.set_compile_policy("allow")
    assert fa4jit.prewarm([cfg], archs=["sm_90a"])[0]["status"] == "compiled"
    assert fa4jit.stats()["compiles"] == before["compiles"] + 1
    with pytest.raises(fa4jit.ConfigError, match="'sometimes' is not allowed"):
        fa4jit.set_compile_policy("sometimes")


def test_the_wheel_ships_a_bundle_that_serves_the_presets_with_no_compile(tmp_path):
    if "FA4JIT_LIBRARY" in os.environ:
        pytest.skip("FA4JIT_LIBRARY points at a build tree, which has no bundle")
    bundles = fa4jit.runtime_info()["bundles"]
    assert bundles and bundles[0].endswith(os.path.join("share", "fa4jit", "kernels")), bundles
    manifest = json.load(open(os.path.join(bundles[0], "manifest.json")))
    assert {"sm_80", "sm_90a", "sm_100a"} <= {k["arch"] for k in manifest["kernels"]}
    # A fresh process with an empty cache and compiles forbidden: every preset kernel is a hit.
    code = ("import fa4jit, json\n"
            "print(json.dumps(fa4jit.prewarm([{'depth': d, 'mask': m} for d in (64, 128) for m in ('none', 'causal')],"
            " archs=['sm_90a', 'sm_100a'])))\n")
    env = dict(os.environ, FA4JIT_CACHE_DIR=str(tmp_path), FA4JIT_COMPILE="forbid")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert [r["status"] for r in json.loads(out.stdout.strip().splitlines()[-1])] == ["hit"] * 8
