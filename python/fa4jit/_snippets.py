"""Typed names for aux tensors in snippets.

In the C++ API a snippet sees ``aux`` as ``const void* const*`` (LaunchArgs::aux_ptr). From Python
the dtypes of the aux tensors are known, so the snippet text is wrapped to give them types:

- ``aux={"doc": doc_ids, "bias": b}`` (a dict): ``const int* doc`` and ``const float* bias``;
- ``aux=[t0, t1]`` (a list): ``aux0``, ``aux1`` typed, and ``aux[i]`` typed too when all tensors
  share one dtype (``aux[0][h]`` then reads a float); names the snippet indexes (``doc[q_idx]``)
  without declaring them are bound to the list's tensors in the order they first appear, when there
  are exactly as many such names as tensors.

The user's text is kept verbatim and on its own line numbers: the declarations go on its first
line, inside a lambda (so they may shadow ``aux``), whose closing brace follows the last line.
"""
import functools
import re

from .errors import ConfigError

# torch dtype name (str(t.dtype)) -> the element type the snippet reads.
CTYPES = {
    "torch.int32": "int", "torch.int64": "long long", "torch.int16": "short", "torch.int8": "signed char",
    "torch.uint8": "unsigned char", "torch.bool": "bool", "torch.float32": "float", "torch.float64": "double",
}
# The kernels' 16-bit float types are bare bit patterns (templates/common/prelude.cuh), not arithmetic.
_NO_CTYPE = {"torch.float16": "float16", "torch.bfloat16": "bfloat16"}

# Names a snippet sees without declaring them (generator/source.cpp), and C++ words.
_BUILTINS = {
    "b", "h", "q_idx", "kv_idx", "score", "aux", "scalars", "params", "q_lo", "q_hi", "kv_lo", "kv_hi", "SKIP",
    "FULL", "PARTIAL", "aux0", "aux1", "aux2", "aux3",
}
_KEYWORDS = {
    "return", "if", "else", "for", "while", "do", "switch", "case", "default", "break", "continue", "const",
    "constexpr", "auto", "int", "float", "double", "bool", "char", "long", "short", "unsigned", "signed", "void",
    "true", "false", "sizeof", "static_cast", "reinterpret_cast", "const_cast", "new", "delete", "struct",
    "static", "volatile", "using", "namespace", "template", "typename", "this", "nullptr",
}
_IDENT = re.compile(r"[A-Za-z_]\w*")
_STRIP = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'", re.S)
_RETURN_TYPE = {"mask": "bool", "block": "int", "score": "float"}


def is_identifier(name: str) -> bool:
    return bool(_IDENT.fullmatch(name)) and name not in _KEYWORDS


_TYPE_WORDS = {"int", "float", "double", "bool", "char", "long", "short", "unsigned", "signed", "auto", "const",
               "void", "constexpr", "volatile"}


def _declares(before: str) -> bool:
    """Whether a name after ``before`` is being declared: a type word (or *, & after one) precedes it."""
    prev = re.search(r"([A-Za-z_]\w*)\s*[*&]*\s*$", before)
    return bool(prev) and (prev.group(1) in _TYPE_WORDS or prev.group(1).endswith("_t"))


def free_indexed_names(snippet: str):
    """Names the snippet indexes (``name[``) but neither declares nor gets from the kernel, in order."""
    text = _STRIP.sub(" ", snippet)
    used, declared = [], set()
    for m in _IDENT.finditer(text):
        name = m.group(0)
        if name in _BUILTINS or name in _KEYWORDS:
            continue
        before = text[:m.start()].rstrip()
        if before.endswith((".", "->", "::")):
            continue  # a member: params.aux_ptr[0]
        if _declares(before):
            declared.add(name)  # "float w[4]", "const int* p = ...": the snippet's own
        elif re.match(r"\s*\[", text[m.end():]) and name not in used:
            used.append(name)
    return [n for n in used if n not in declared]


def _names_in_any(snippets, names):
    order = []
    for s in snippets:
        for n in free_indexed_names(s):
            if n not in order:
                order.append(n)
    return order


@functools.lru_cache(maxsize=1024)
def typed_snippets(snippets, aux_names, aux_dtypes):
    """Wraps each (kind, text) of ``snippets`` (kind: "mask" | "block" | "score"; text "" = none).

    ``aux_names``: the dict's keys, or () for a list; ``aux_dtypes``: str(t.dtype) per tensor.
    Returns the texts in the same order (unchanged when there are no aux tensors).
    """
    if not aux_dtypes:
        return tuple(text for _, text in snippets)
    ctypes = []
    for i, dt in enumerate(aux_dtypes):
        if dt in _NO_CTYPE:
            raise ConfigError(f"aux[{i}]: {_NO_CTYPE[dt]} tensors cannot be read by snippets; pass .float() (aux "
                              f"tensors are small) or reinterpret the bits (.view(torch.int16))")
        if dt not in CTYPES:
            raise ConfigError(f"aux[{i}]: dtype {dt} has no element type for snippets; use one of "
                              f"{', '.join(sorted(CTYPES))}")
        ctypes.append(CTYPES[dt])
    decls = []
    for i, ct in enumerate(ctypes):
        decls.append(f"const {ct}* aux{i} = (const {ct}*)params.aux_ptr[{i}];")
    if aux_names:
        for name, (i, ct) in zip(aux_names, enumerate(ctypes)):
            if not is_identifier(name) or name in _BUILTINS:
                raise ConfigError(f"aux: '{name}' cannot name an aux tensor in a snippet (a C++ identifier that is "
                                  f"not one of {', '.join(sorted(_BUILTINS))})")
            decls.append(f"const {ct}* {name} = aux{i};")
    else:
        if len(set(ctypes)) == 1:
            ct = ctypes[0]
            items = ", ".join(f"aux{i}" for i in range(len(ctypes)))
            decls.append(f"const {ct}* const aux[{len(ctypes)}] = {{{items}}};")
        free = _names_in_any([t for _, t in snippets if t], ())
        if free and len(free) != len(ctypes):
            raise ConfigError(
                f"aux: the snippets index {len(free)} name(s) they do not declare ({', '.join(free)}) but aux has "
                f"{len(ctypes)} tensor(s); pass aux as a dict ({{'{free[0]}': tensor, ...}}) to name them, or use "
                f"aux0..aux{len(ctypes) - 1}")
        for i, name in enumerate(free):
            decls.append(f"const {ctypes[i]}* {name} = aux{i};")
    uses = " ".join(f"(void){d.split('=')[0].split()[-1].split('[')[0]};" for d in decls)
    out = []
    for kind, text in snippets:
        if not text:
            out.append(text)
            continue
        rt = _RETURN_TYPE[kind]
        out.append(f"return [&]() -> {rt} {{ {' '.join(decls)} {uses} {text}\n}}();")
    return tuple(out)
