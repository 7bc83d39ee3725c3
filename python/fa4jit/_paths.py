"""Where the package's native parts are, and where NVRTC can be found (no library loaded here)."""
import glob
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))


def library_path() -> str:
    """libfa4jit: $FA4JIT_LIBRARY, else lib/libfa4jit.so.0 in the package."""
    env = os.environ.get("FA4JIT_LIBRARY")
    if env:
        return env
    for name in ("libfa4jit.so.0", "libfa4jit.so"):
        p = os.path.join(here, "lib", name)
        if os.path.exists(p):
            return p
    return os.path.join(here, "lib", "libfa4jit.so.0")


def cli_path() -> str:
    """The fa4jit command-line binary shipped in the package ($FA4JIT_CLI overrides)."""
    return os.environ.get("FA4JIT_CLI") or os.path.join(here, "bin", "fa4jit")


def nvrtc_candidates(soname: str = "libnvrtc.so.13"):
    """Paths to try for NVRTC, in order: $FA4JIT_NVRTC, CUDA toolkits, then the nvidia-cuda-nvrtc wheel
    (which PyTorch's CUDA wheels install)."""
    env = os.environ.get("FA4JIT_NVRTC")
    if env:
        yield env
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    for root in filter(None, roots):
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib"):
            yield os.path.join(root, sub, soname)
    yield from sorted(glob.glob(f"/usr/local/cuda-*/lib64/{soname}"), reverse=True)
    for base in sys.path:
        for sub in ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"):
            yield os.path.join(base or ".", sub, soname)


def nvrtc_dir(soname: str = "libnvrtc.so.13"):
    """The directory of the first NVRTC found, or None."""
    for p in nvrtc_candidates(soname):
        if os.path.exists(p):
            return os.path.dirname(os.path.abspath(p))
    return None
