#!/usr/bin/env python3
"""docs/config.schema.json against fa4jit's own config reader (ctest ConfigSchema).

Every preset (as written and resolved for sm_80 / sm_90a / sm_100a) and every example config in the
repo must validate; the schema's preset and arch lists must be fa4jit's; and each case below must get
the same answer from the schema and from fa4jit (refused cases: fa4jit's error names the JSON path).
Needs the `jsonschema` package (Debian python3-jsonschema, >= 4.0 for draft 2020-12).
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import jsonschema

# (document, JSON path fa4jit's error must name, or None where both accept it)
CASES = [
    ({"depth": 128.5}, "depth"),
    ({"depth": True}, "depth"),
    ({"depth": "128"}, "depth"),
    ({"depth": 4294967424}, "depth"),
    ({"depth": 1e10}, "depth"),
    ({"depth": 0}, "depth"),
    ({"depth": 128.0}, None),
    ({"mask": {"kind": "sliding_window", "top_left": True, "prefix": True}}, None),
    ({"mask": {"kind": "chunked", "prefix": True}}, "mask.prefix"),
    ({"mask": {"kind": "causal", "prefix": 1}}, "mask.prefix"),
    ({"BN": -1}, "BN"),
    ({"group": 65536}, "group"),
    ({"num_kv_stages": 65}, "num_kv_stages"),
    ({"pack_gqa": 1}, "pack_gqa"),
    ({"arch": "sm_70"}, "arch"),
    ({"arch": 90}, "arch"),
    ({"arch": ""}, None),
    ({"dtype": "fp8"}, "dtype"),
    ({"dtype": "half", "output_dtype": None}, None),
    ({"dtype": "e4m3"}, None),
    ({"dtype": "float8_e4m3fn", "output_dtype": "fp16"}, None),
    ({"dtype": "fp8_e4m3", "output_dtype": None}, None),
    ({"dtype": "e5m2"}, "dtype"),
    ({"dtype": "e4m3", "output_dtype": "e4m3"}, "output_dtype"),
    ({"output_dtype": "float8_e4m3fn"}, "output_dtype"),
    ({"output_dtype": 16}, "output_dtype"),
    ({"kv_dtype": "e4m3"}, None),
    ({"dtype": "fp16", "kv_dtype": "float8_e4m3fn"}, None),
    ({"kv_dtype": None}, None),
    ({"kv_dtype": "e5m2"}, "kv_dtype"),
    ({"kv_dtype": 8}, "kv_dtype"),
    ({"dpeth": 64}, "dpeth"),
    ({"mask": "custom"}, "mask.snippet"),
    ({"mask": "all_of"}, "mask.masks"),
    ({"mask": {"kind": "custom"}}, "mask.snippet"),
    ({"mask": {"kind": "custom", "snippet": " \n\t"}}, "mask.snippet"),
    ({"mask": {"kind": "custom", "snippet": "return true;\u0000"}}, "mask snippet line 1"),
    ({"mask": {"kind": "causal", "snippet": "return true;"}}, "mask.snippet"),
    ({"mask": {"kind": "none", "top_left": True}}, "mask.top_left"),
    ({"mask": {"kind": "none", "top_left": False}}, None),
    ({"mask": {"kind": "chunked", "top_left": True}}, None),
    ({"mask": {"kind": "causal", "block_snippet": ""}}, "mask.block_snippet"),
    ({"mask": {"kind": "all_of"}}, "mask.masks"),
    ({"mask": {"kind": "all_of", "masks": []}}, "mask.masks"),
    ({"mask": {"kind": "chunked", "masks": ["causal"]}}, "mask.masks"),
    ({"mask": {"kind": "diagonal"}}, "mask.kind"),
    ({"mask": {"kind": "causal", "x": 1}}, "mask"),
    ({"mask": {"top_left": True}}, "mask.kind"),
    ({"mask": {"kind": "all_of", "masks": ["causal", {"kind": 7}]}}, "mask.masks[1].kind"),
    ({"mask": {"kind": "any_of", "masks": ["causal", {"kind": "custom", "snippet": "return kv_idx == 0;",
                                                      "block_snippet": "return PARTIAL;"}]}}, None),
    ({"score_mod": "custom"}, "score_mod.snippet"),
    ({"score_mod": {"kind": "alibi", "snippet": "return score;"}}, "score_mod.snippet"),
    ({"score_mod": {"kind": "custom"}}, "score_mod.snippet"),
    ({"score_mod": {"kind": "custom", "snippet": "return score * 0.5f;"}}, None),
    ({"score_mod": 1}, "score_mod"),
    ([{"depth": 64}, {"depth": 64.5}], "[1].depth"),
    ({"configs": {"depth": 64}}, "configs"),
    ({"configs": [{"mask": {"kind": "custom", "snippet": 1}}]}, "configs[0].mask.snippet"),
    ({"presets": ["nope"]}, "preset"),
    ({"presets": [1]}, "presets"),
    ({"configs": [], "x": 1}, "x"),
    ({"configs": [{"depth": 64}], "presets": ["fp16"]}, None),
]


def example_configs(repo):
    """(name, document) of every example config JSON in the repo."""
    out = []
    for pattern in ("docs/configs/*.json", "fuzz/corpus/config_json/*.json"):
        for path in sorted(glob.glob(os.path.join(repo, pattern))):
            with open(path) as f:
                out.append((os.path.relpath(path, repo), json.load(f)))
    for path in sorted(glob.glob(os.path.join(repo, "bench/*.txt"))):  # sweep lines: TUNE  {config}  flags
        with open(path) as f:
            for n, line in enumerate(f, 1):
                m = re.search(r"\{.*\}", line)
                if m:
                    out.append((f"{os.path.relpath(path, repo)}:{n}", json.loads(m.group(0))))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--schema", required=True)
    ap.add_argument("--tool", required=True, help="schema_tool binary")
    ap.add_argument("--repo", required=True)
    args = ap.parse_args()

    with open(args.schema) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    failures = []

    def errors(doc):
        return [e.message for e in validator.iter_errors(doc)]

    dump = json.loads(subprocess.run([args.tool, "dump"], check=True, capture_output=True, text=True).stdout)
    defs = schema["$defs"]
    if defs["file"]["properties"]["presets"]["items"]["enum"] != dump["preset_names"]:
        failures.append(f"schema presets {defs['file']['properties']['presets']['items']['enum']} != fa4jit's {dump['preset_names']}")
    if defs["config"]["properties"]["arch"]["enum"] != [""] + dump["archs"]:
        failures.append(f"schema archs {defs['config']['properties']['arch']['enum']} != fa4jit's {dump['archs']}")

    checked = 0
    for name, configs in dump["presets"].items():
        for i, entry in enumerate(configs):
            docs = [("as written", entry["config"])] + [(f"resolved {a}", c) for a, c in entry["resolved"].items()]
            if len(docs) < 2:
                failures.append(f"preset {name}[{i}]: resolves for no arch family")
            for what, doc in docs:
                checked += 1
                for e in errors(doc):
                    failures.append(f"preset {name}[{i}] {what}: {e}")

    examples = example_configs(args.repo)
    if not examples:
        failures.append("no example configs found")
    with tempfile.TemporaryDirectory() as tmp:
        def load(doc):
            path = os.path.join(tmp, "c.json")
            with open(path, "w") as f:
                json.dump(doc, f)
            r = subprocess.run([args.tool, "load", path], capture_output=True, text=True)
            return r.returncode, r.stdout.strip()

        for where, doc in examples:
            checked += 1
            for e in errors(doc):
                failures.append(f"{where}: {e}")
            rc, out = load(doc)
            if rc != 0:
                failures.append(f"{where}: fa4jit refuses it: {out}")

        for doc, path in CASES:
            checked += 1
            schema_ok = validator.is_valid(doc)
            rc, out = load(doc)
            text = json.dumps(doc)
            if path is None:
                if not schema_ok:
                    failures.append(f"{text}: the schema refuses it: {errors(doc)}")
                if rc != 0:
                    failures.append(f"{text}: fa4jit refuses it: {out}")
            else:
                if schema_ok:
                    failures.append(f"{text}: the schema accepts it")
                if rc == 0:
                    failures.append(f"{text}: fa4jit accepts it")
                elif path not in out:
                    failures.append(f"{text}: fa4jit's error does not name {path!r}: {out}")

    for f in failures:
        print("FAIL:", f)
    print(f"config schema: {checked} documents checked, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
