"""What this machine offers the course: a GPU? cuTile? its compiler? And so which path kernels take.

    env = detect_environment()
    print(env)            # a few readable lines, ending with the path later notebooks take
    env.runs_on_gpu       # True: kernels compile with cuTile and run on the GPU

Every probe is defensive: a machine without torch, without a CUDA GPU or without cuda-tile gets
a summary saying so, never an exception. Without cuda-tile it also says what the course skips
there: compiling kernels to cubins and reading their registers. Nothing is probed on import; the compiler is looked up
only when ``detect_environment`` is called, the same way cuTile looks it up before compiling.

The GPU-or-interpreter rule is the one ``mamba2_tile.dispatch`` applies to every launch (a GPU
visible to torch, cuTile importable, and ``MAMBA2_TILE_INTERPRET`` not set), so the summary
predicts what later notebooks really do.
"""

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from mamba2_tile.compiler import NO_COMPILER
from mamba2_tile.dispatch import FORCE_ENV, MIN_CAPABILITY, interpret_forced

GPU_PATH = "kernels run on the GPU through cuTile"
INTERPRETER_PATH = "kernels run on the CPU tile interpreter"


@dataclass(frozen=True)
class Environment:
    """The facts, each ``None`` where the thing is missing; ``str()`` gives the summary."""

    torch_version: str | None
    gpu_name: str | None
    compute_capability: tuple[int, int] | None
    cutile_version: str | None
    cutile_problem: str | None      # why ``import cuda.tile`` failed, if it did
    tileiras_path: str | None
    tileiras_version: str | None
    interpret_forced: bool = False

    @property
    def has_gpu(self):
        return self.gpu_name is not None

    @property
    def runs_on_gpu(self):
        return (self.has_gpu and self.cutile_version is not None and not self.interpret_forced
                and self.compute_capability >= MIN_CAPABILITY)

    @property
    def path(self):
        return GPU_PATH if self.runs_on_gpu else INTERPRETER_PATH

    def summary(self):
        lines = [
            f"torch:    {self.torch_version or 'not installed'}",
            f"GPU:      {self._gpu_line()}",
            f"cuTile:   {self._cutile_line()}",
            f"tileiras: {self._tileiras_line()}",
            f"=> {self.path}{self._path_reason()}",
        ]
        if self.runs_on_gpu and self.tileiras_path is None:
            lines.append("   Warning: without tileiras no kernel can compile; "
                         "`pip install cuda-tile[tileiras]` provides it.")
        if self.cutile_version is None:
            lines += [f"   Skipped: {NO_COMPILER}.",
                      "   (cuda-tile ships wheels for Linux and Windows only. Every kernel still "
                      "runs, with the same results.)"]
        return "\n".join(lines)

    __str__ = summary

    def _gpu_line(self):
        if not self.has_gpu:
            return "none (CPU only)"
        major, minor = self.compute_capability
        return f"{self.gpu_name} (sm_{major}{minor})"

    def _cutile_line(self):
        if self.cutile_version is not None:
            return f"cuda.tile {self.cutile_version}"
        return f"not importable ({self.cutile_problem})"

    def _tileiras_line(self):
        if self.tileiras_path is None:
            return "not found"
        version = f" {self.tileiras_version}" if self.tileiras_version else ""
        return f"found{version} at {self.tileiras_path}"

    def _path_reason(self):
        if self.interpret_forced:
            return f" ({FORCE_ENV} is set)"
        if not self.has_gpu:
            return " (no GPU)"
        if self.cutile_version is None:
            return " (cuTile is not installed)"
        if self.compute_capability < MIN_CAPABILITY:
            return " (cuTile needs sm_{}{} or newer)".format(*MIN_CAPABILITY)
        return ""


def detect_environment():
    """Probe torch, the GPU, cuTile and its compiler; return an :class:`Environment`."""
    torch_version, gpu_name, capability = _probe_gpu()
    cutile_version, cutile_problem = _probe_cutile()
    tileiras_path = _find_tileiras() if cutile_version is not None else None
    return Environment(
        torch_version=torch_version,
        gpu_name=gpu_name,
        compute_capability=capability,
        cutile_version=cutile_version,
        cutile_problem=cutile_problem,
        tileiras_path=tileiras_path,
        tileiras_version=_tileiras_version(tileiras_path) if tileiras_path else None,
        interpret_forced=interpret_forced(),
    )


def _probe_gpu():
    """(torch version, GPU name, compute capability); the last two are None without a GPU."""
    try:
        import torch
    except ImportError:
        return None, None, None
    try:
        if not torch.cuda.is_available():
            return torch.__version__, None, None
        return (torch.__version__, torch.cuda.get_device_name(0),
                tuple(torch.cuda.get_device_capability(0)))
    except Exception:  # a broken driver counts as no GPU: the interpreter still works
        return torch.__version__, None, None


def _probe_cutile():
    """(version, None) when ``cuda.tile`` imports, else (None, the reason)."""
    try:
        import cuda.tile as ct
    except Exception as error:  # ImportError, or a library failing to load inside it
        return None, f"{type(error).__name__}: {error}"
    return getattr(ct, "__version__", "(unknown version)"), None


def _find_tileiras():
    """Where cuTile would find ``tileiras``, or None.

    cuTile searches the ``nvidia-cuda-tileiras`` pip package, then ``PATH``, then
    ``$CUDA_HOME/bin``, then the default CUDA Toolkit folders; asking its own (private) finder
    keeps that order exact. Should a cuTile release move the finder, we search ``PATH`` and
    ``$CUDA_HOME/bin`` ourselves.
    """
    try:
        from cuda.tile._compile import _find_compiler_bin
    except ImportError:
        return _search_path_and_cuda_home()
    try:
        return _find_compiler_bin().path
    except Exception:  # FileNotFoundError when absent; never let a probe crash the notebook
        return None


def _search_path_and_cuda_home():
    found = shutil.which("tileiras")
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if found is None and cuda_home:
        found = shutil.which("tileiras", path=os.path.join(cuda_home, "bin"))
    return found


def _tileiras_version(path):
    """The compiler's version (e.g. ``13.4.92``) from ``tileiras --version``, or None."""
    try:
        result = subprocess.run([path, "--version"], capture_output=True, text=True,
                                timeout=30, check=True)
    except Exception:
        return None
    match = re.search(r"\bV(\d+(?:\.\d+)+)", result.stdout)
    return match.group(1) if match else None
