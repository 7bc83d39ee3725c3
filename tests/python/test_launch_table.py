"""The launch table (fa4jit/launch_table.py) is the one place a launch argument is declared: a row
added there reaches the C struct, jit::LaunchArgs, the C -> C++ copy, the C++ checks and Python's
struct layout and checks (issue 55). No GPU and no fa4jit library needed: the generator runs on a
copy of the table with one more field and one more check, and a C and a C++ program compiled
against the generated headers report the field's offset, default and copy."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABLE = os.path.join(REPO, "python", "fa4jit", "launch_table.py")
GEN = os.path.join(REPO, "tools", "gen_launch.py")
TENSOR = "P i i 4q 4q"

ROW = '''    dict(name="test_extra", c="int32_t", default=7, since=99, variants="all", doc="a field added by a test"),
'''
CHECK = '''    dict(when="paged", rule="test_extra >= 0", msg="test_extra is {test_extra}: it must be non-negative"),
'''


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _schema(table_path, tmp_path):
    """fa4jit.launch_schema over the table at table_path (a package of two files in tmp_path)."""
    pkg = os.path.join(str(tmp_path), "schema_pkg")
    os.makedirs(pkg, exist_ok=True)
    shutil.copy(table_path, os.path.join(pkg, "launch_table.py"))
    shutil.copy(os.path.join(REPO, "python", "fa4jit", "launch_schema.py"), os.path.join(pkg, "launch_schema.py"))
    open(os.path.join(pkg, "__init__.py"), "w").close()
    sys.path.insert(0, os.path.dirname(pkg))
    try:
        for m in [m for m in sys.modules if m == "schema_pkg" or m.startswith("schema_pkg.")]:
            del sys.modules[m]
        return importlib.import_module("schema_pkg.launch_schema")
    finally:
        sys.path.pop(0)


def _generate(tmp_path, table):
    inc, gen = tmp_path / "include" / "fa4jit", tmp_path / "generated"
    inc.mkdir(parents=True)
    shutil.copy(os.path.join(REPO, "include", "fa4jit", "c_api.h"), inc / "c_api.h")  # includes the new struct
    subprocess.run([sys.executable, GEN, str(table), str(inc / "c_launch_args.h"), str(inc), str(gen)], check=True)
    return tmp_path / "include", gen


def _run(cmd, cwd):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_the_source_tree_header_is_generated_from_the_table(tmp_path):
    inc, _ = _generate(tmp_path, TABLE)
    with open(os.path.join(REPO, "include", "fa4jit", "c_launch_args.h")) as f:
        assert f.read() == (inc / "fa4jit" / "c_launch_args.h").read_text(), \
            "include/fa4jit/c_launch_args.h is stale: reconfigure (cmake) or run tools/gen_launch.py"


def test_a_field_added_to_the_table_reaches_c_cpp_and_python(tmp_path):
    cc, cxx = shutil.which("gcc") or shutil.which("cc"), shutil.which("g++") or shutil.which("c++")
    if not cc or not cxx:
        pytest.skip("no C/C++ compiler")
    text = open(TABLE).read()
    text, n = re.subn(r"\n\]\n\n# Values derived", "\n" + ROW + "]\n\n# Values derived", text, count=1)
    assert n == 1
    text, n = re.subn(r"\n\]\s*$", "\n" + CHECK + "]\n", text, count=1)
    assert n == 1
    table = tmp_path / "launch_table.py"
    table.write_text(text)
    inc, gen = _generate(tmp_path, table)
    names = [f["name"] for f in _load(str(table), "table_copy").FIELDS]
    assert names[-1] == "test_extra"

    # C: the struct has it, after max_seqlen_k, and the old fields keep their offsets.
    c_src = tmp_path / "offsets.c"
    c_src.write_text("#include <stdio.h>\n#include <stddef.h>\n#include <fa4jit/c_api.h>\nint main(void) {\n" +
                     "".join(f'  printf("{n} %zu\\n", offsetof(fa4jit_launch_args, {n}));\n' for n in names) +
                     '  printf("sizeof %zu\\n", sizeof(fa4jit_launch_args));\n  return 0;\n}\n')
    _run([cc, "-std=c11", "-Wall", "-Werror", f"-I{inc}", str(c_src), "-o", str(tmp_path / "c_offsets")], tmp_path)
    c_off = dict(line.split() for line in _run([str(tmp_path / "c_offsets")], tmp_path).splitlines())

    # C++: LaunchArgs has it with its default, the copy carries it, the check runs on it.
    cpp_src = tmp_path / "cpp.cpp"
    cpp_src.write_text('''#include <cstdio>
#include <stdexcept>
#include <string>
#include <fmt/format.h>
#include <fa4jit/c_api.h>
#include <fa4jit/launch_args.hpp>
jit::Tensor jit::Tensor::contiguous(void*, DType, std::int64_t, std::int64_t, std::int64_t, std::int64_t) { return {}; }
namespace {
jit::Tensor to_tensor(const fa4jit_tensor& t, const char*) {
  jit::Tensor r;
  for (int i = 0; i < 4; ++i) r.shape[i] = t.shape[i], r.stride[i] = t.stride[i];
  return r;
}
std::int64_t itemsize(const jit::Tensor&) { return 2; }
[[noreturn]] void bad(const std::string& m) { throw std::runtime_error(m); }
using jit::LaunchArgs;
#include "launch_copy.inc"
#include "launch_checks.inc"
}  // namespace
int main() {
  std::printf("default %d\\n", jit::LaunchArgs{}.test_extra);
  fa4jit_launch_args c;
  launch_args_defaults(&c);
  std::printf("c_default %d\\n", c.test_extra);
  c.test_extra = -3;
  for (fa4jit_tensor* t : {&c.q, &c.k, &c.v, &c.o}) {
    t->shape[0] = t->shape[1] = t->shape[2] = t->shape[3] = 1;
    t->stride[3] = 1;
  }
  static const int table[1] = {0};
  c.page_table = table;
  c.max_pages = 1;
  jit::LaunchArgs a = to_launch_args(c);
  std::printf("copied %d\\n", a.test_extra);
  try {
    check_launch_fields(a);
  } catch (const std::exception& e) {
    std::printf("check %s\\n", e.what());
  }
}
''')
    _run([cxx, "-std=c++17", "-Wall", "-Werror", f"-I{inc}", f"-I{gen}", f"-I{os.path.join(REPO, 'include')}",
          "-DFMT_HEADER_ONLY", str(cpp_src), "-o", str(tmp_path / "cpp_check")], tmp_path)
    out = _run([str(tmp_path / "cpp_check")], tmp_path)
    assert "default 7\n" in out and "c_default 7\n" in out and "copied -3\n" in out, out
    assert "check test_extra is -3: it must be non-negative" in out, out

    # Python: the struct layout (as _lib.py packs it) puts it where C does, and the check says the same.
    schema = _schema(str(table), tmp_path)
    py_off = schema.offsets(schema.FIELDS, TENSOR)
    assert "test_extra" in py_off
    assert {n: int(v) for n, v in c_off.items() if n != "sizeof"} == py_off
    assert [n for n, _ in schema.struct_fields(TENSOR)][-1] == "test_extra"
    one = schema.tensor((1, 1, 1, 1))
    msg = schema.check(dict(q=one, k=one, v=one, o=one, page_table=1, max_pages=1, test_extra=-3))
    assert msg == "test_extra is -3: it must be non-negative"
    assert schema.check(dict(q=one, k=one, v=one, o=one, page_table=1, max_pages=1)) is None  # default 7


def test_python_and_c_layouts_of_the_shipped_table_agree(tmp_path):
    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc:
        pytest.skip("no C compiler")
    schema = _schema(TABLE, tmp_path)
    names = [f["name"] for f in schema.FIELDS]
    c_src = tmp_path / "offsets.c"
    c_src.write_text("#include <stdio.h>\n#include <stddef.h>\n#include <fa4jit/c_api.h>\nint main(void) {\n" +
                     "".join(f'  printf("{n} %zu\\n", offsetof(fa4jit_launch_args, {n}));\n' for n in names) +
                     "  return 0;\n}\n")
    _run([cc, "-std=c11", "-Wall", "-Werror", f"-I{os.path.join(REPO, 'include')}", str(c_src), "-o",
          str(tmp_path / "o")], tmp_path)
    c_off = {n: int(v) for n, v in (line.split() for line in _run([str(tmp_path / "o")], tmp_path).splitlines())}
    assert c_off == schema.offsets(schema.FIELDS, TENSOR)


def test_per_tensor_checks_expand_alike_in_the_generator_and_python(tmp_path):
    """The `each` rows (one rule per tensor field and dimension) become the same checks, in the same
    order, in the generator (C++) and in launch_schema (Python)."""
    gen = _load(GEN, "gen_launch_for_test")
    schema = _schema(TABLE, tmp_path)
    _, _, from_gen = gen.load_table(TABLE)
    from_py = schema.expand(schema.launch_table.CHECKS)
    assert from_gen == from_py
    rules = [c["rule"] for c in from_py]
    assert "k.stride[3] == 1" in rules and "o.stride[2] >= 0 and o.stride[2] % (16 // o.itemsize) == 0" in rules
    assert not any("{" in c["rule"] or "{t}" in c["msg"] or "{i}" in c["msg"] for c in from_py)


@pytest.mark.parametrize("stride, itemsize, msg", [
    ((1024, 64, 8, 1), 2, None),
    ((1024, 64, 8, 2), 2, "k.stride[3] is 2: head_dim must be contiguous (stride 1)"),
    ((1024, 68, 8, 1), 2, "k.stride[1] = 68 must be a non-negative multiple of 8 elements (16 bytes)"),
    ((1024, 72, 8, 1), 1, "k.stride[1] = 72 must be a non-negative multiple of 16 elements (16 bytes)"),
    ((-1024, 64, 8, 1), 2, "k.stride[0] = -1024 must be a non-negative multiple of 8 elements (16 bytes)"),
])
def test_stride_rules_follow_the_element_size(tmp_path, stride, itemsize, msg):
    schema = _schema(TABLE, tmp_path)
    q = schema.tensor((2, 16, 8, 8), (1024, 64, 8, 1))
    k = schema.tensor((2, 16, 8, 8), stride, itemsize)
    assert schema.check(dict(q=q, k=k, v=q, o=q)) == msg
