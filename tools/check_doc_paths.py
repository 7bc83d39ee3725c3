#!/usr/bin/env python3
"""Every repository path that README.md and docs/*.md cite must exist (ctest docs.CitedPathsExist).

A cited path is a word that starts with one of the repository's top-level folders and a slash
(`runtime/x.cpp`, templates/sm90a/kernel.cuh, docs/HOPPER.md), in code spans or plain text. Skipped:
patterns and placeholders (`*`, `<`, `{`, `...`, `$`), URLs, and historical citations: a path
right after `COMMIT:` (as in `git show 083570c:docs/perf/run17/x.json`), or on a line that names
a commit hash, which says the text is about that commit. A path that was renamed or removed must be
fixed where it is cited, or cited with the commit that had it.

Usage: tools/check_doc_paths.py [REPO_ROOT]   (exit 1 and one line per stale citation)
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
TOP = sorted(d for d in os.listdir(ROOT) if os.path.isdir(os.path.join(ROOT, d)) and not d.startswith((".", "build")))
PATH = re.compile(r"(?<![\w./:-])((?:%s)/[\w./+-]*)" % "|".join(re.escape(d) for d in TOP))
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def cited(line):
    for m in PATH.finditer(line):
        path = m.group(1).rstrip(".,;:)")
        rest = line[m.end():m.end() + 1]
        if (rest and rest in "*<{$") or "..." in path or "://" in line[max(0, m.start() - 60):m.start()]:
            continue
        yield path


def main():
    docs = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
    stale = []
    for doc in docs:
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                historical = COMMIT.search(line) is not None
                for path in cited(line):
                    if os.path.exists(os.path.join(ROOT, path)) or historical:
                        continue
                    stale.append(f"{doc}:{n}: `{path}` does not exist")
    for s in stale:
        print(s)
    if stale:
        print(f"\n{len(stale)} cited path(s) missing. Fix the citation (the file may have been renamed or moved), or "
              "cite a removed file with the last commit that had it, e.g. `git show 083570c:PATH`.")
        return 1
    print(f"{len(docs)} documents: every cited path exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
