"""The launch table (launch_table.py) for Python: the struct layout _lib.py packs, and the launch
checks evaluated on tensor metadata, the same rules C++ runs in pack_params (tools/gen_launch.py
translates them), so the two cannot drift. Imports nothing that needs the library or torch."""
import itertools
import re
import struct
from types import SimpleNamespace

from . import launch_table

FIELDS = launch_table.FIELDS
FIELD = {f["name"]: f for f in FIELDS}
_STRUCT_CODE = {"uint32_t": "I", "int32_t": "i", "int64_t": "q", "uint64_t": "Q", "float": "f"}


def _split_array(c):
    m = re.fullmatch(r"(.*)\[(\d+)\]", c)
    return (m.group(1), int(m.group(2))) if m else (c, 0)


def struct_code(c, tensor):
    """The struct module's format of a C type of the table (tensor: fa4jit_tensor's)."""
    base, n = _split_array(c)
    if base == "fa4jit_tensor":
        return tensor
    code = "P" if base.endswith("*") else _STRUCT_CODE[base]
    return f"{n}{code}" if n else code


def struct_fields(tensor):
    """[(name, struct format)] of fa4jit_launch_args, in C order."""
    return [(f["name"], struct_code(f["c"], tensor)) for f in FIELDS]


def offsets(fields, tensor):
    """{name: byte offset} of each field in the C struct (native alignment), for `fields` in C order."""
    out, fmt = {}, "@"
    for f in fields:
        code = struct_code(f["c"], tensor)
        first = code.split()[0].lstrip("0123456789")
        out[f["name"]] = struct.calcsize(fmt + "0" + first)
        fmt += " " + code
    return out


def is_pointer(name):
    return _split_array(FIELD[name]["c"])[0].endswith("*")


def default(name):
    d = FIELD[name].get("default", 0)
    return 0 if d == "sizeof" else d


# ---- the checks ----------------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")


def _compile(src):
    return compile(src, "<launch rule>", "eval")


def expand(checks):
    """The checks with every `each` row made one row per combination of its values (tools/gen_launch.py
    expands them the same way; tests/python/test_launch_table.py compares the two)."""
    out = []
    for c in checks:
        keys = list(c.get("each", {}))
        for combo in itertools.product(*(c["each"][k].split(",") for k in keys)):
            row = {k: v for k, v in c.items() if k != "each"}
            for k, v in zip(keys, combo):
                row = {f: (x.replace("{" + k + "}", v) if isinstance(x, str) else x) for f, x in row.items()}
            out.append(row)
    return out


_LETS = [(name, _compile(src)) for name, src in launch_table.LETS]
_CHECKS = [(_compile(c.get("when") or "True"), _compile(c["rule"]), c["msg"],
            [(m.group(0), _compile(m.group(1))) for m in _PLACEHOLDER.finditer(c["msg"])])
           for c in expand(launch_table.CHECKS)]
_NO_BUILTINS = {"__builtins__": {}}


def tensor(shape, stride=(0, 0, 0, 1), itemsize=2):
    """A tensor field's view for the rules: .shape and .stride (4 values each) and .itemsize (bytes per
    element)."""
    return SimpleNamespace(shape=tuple(shape), stride=tuple(stride), itemsize=itemsize)


def check(values: dict):
    """The first failed launch check's message for these field values (pointers: 0 when null, else
    nonzero; tensors: tensor(shape, stride)), or None. Fields not given take their defaults."""
    env = {f["name"]: default(f["name"]) for f in FIELDS if f["c"] != "fa4jit_tensor"}
    env.update(values)
    for name, code in _LETS:
        env[name] = eval(code, _NO_BUILTINS, env)  # noqa: S307 (the package's own table)
    for when, rule, msg, holes in _CHECKS:
        if eval(when, _NO_BUILTINS, env) and not eval(rule, _NO_BUILTINS, env):  # noqa: S307
            for text, code in holes:
                msg = msg.replace(text, str(eval(code, _NO_BUILTINS, env)), 1)  # noqa: S307
            return msg
    return None
