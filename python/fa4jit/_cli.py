"""The `fa4jit` console script: runs the fa4jit command-line binary shipped in the package."""
import os
import sys

from . import _paths


def main() -> int:
    exe = _paths.cli_path()
    if not os.access(exe, os.X_OK):
        print(f"fa4jit: the command-line binary is missing at {exe} (a source checkout without a build?)",
              file=sys.stderr)
        return 1
    env = dict(os.environ)
    nvrtc = _paths.nvrtc_dir()
    if nvrtc:  # the binary has no RPATH: NVRTC from the loader's path, else where the package finds it
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [env.get("LD_LIBRARY_PATH"), nvrtc]))
    os.execve(exe, [exe] + sys.argv[1:], env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
