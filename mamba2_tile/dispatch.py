"""The one place the course decides where a cuTile kernel runs.

    launch(grid, kernel, args)

* CUDA torch tensors and a working cuTile: the real compiler and the GPU
  (`ct.launch` on the current torch stream).
* anything else (NumPy arrays, CPU tensors, no GPU): the CPU tile interpreter,
  which runs the same unmodified kernel block by block on NumPy tiles.
* `MAMBA2_TILE_INTERPRET=1` forces the interpreter even on a GPU, so a kernel can be
  debugged with `print` and a debugger. CUDA tensors are then copied to the CPU,
  interpreted, and the tensors the kernel stored to are copied back in place (the others,
  only read, are left alone: their `_version` does not move). (Tensors that are views of
  one buffer become separate copies in that mode, so aliasing is lost.)

Notebooks pick where to create their tensors with `default_device()` and say what
ran with `describe_backend()` (before) or `last_backend()` (after a launch).
"""

import functools
import inspect
import numbers
import os

FORCE_ENV = "MAMBA2_TILE_INTERPRET"
# cuTile compiles for Ampere (sm_80) and newer; an older GPU (Colab's T4 is sm_75) gets the
# interpreter, as a machine without a GPU does.
MIN_CAPABILITY = (8, 0)
CUTILE = "cutile"
INTERPRETER = "interpreter"

_last_backend = None


def interpret_forced() -> bool:
    return os.environ.get(FORCE_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


@functools.lru_cache(maxsize=None)
def gpu_available() -> bool:
    """True when real cuTile can run kernels here: the package imports and torch sees a GPU of
    at least ``MIN_CAPABILITY``. (Asked once per process: it is on the path of every launch.)"""
    try:
        import cuda.tile  # noqa: F401
        import torch
    except Exception:   # ImportError, or the CUDA driver library failing to load
        return False
    return torch.cuda.is_available() and tuple(torch.cuda.get_device_capability()) >= MIN_CAPABILITY


def default_device() -> str:
    """Where the notebooks create their tensors: "cuda" when kernels will run on the GPU, else "cpu"."""
    return "cuda" if gpu_available() and not interpret_forced() else "cpu"


def describe_backend() -> str:
    """One line saying where kernels launched on `default_device()` tensors will run."""
    if interpret_forced():
        return f"CPU tile interpreter (forced by {FORCE_ENV}=1)"
    if not gpu_available():
        return "CPU tile interpreter (no GPU found)"
    import torch
    import cuda.tile as ct

    major, minor = torch.cuda.get_device_capability()
    return f"cuTile {ct.__version__} on {torch.cuda.get_device_name()} (sm_{major}{minor})"


def last_backend():
    """`"cutile"` or `"interpreter"`: where the most recent `launch` ran (None before any)."""
    return _last_backend


def launch(grid, kernel, args) -> None:
    """Run `kernel` over `grid` with `args`, on the GPU or the CPU interpreter (see module doc)."""
    global _last_backend
    args = tuple(args)
    on_cuda = _argument_device(kernel, args) == "cuda"

    if on_cuda and not interpret_forced() and gpu_available():
        _launch_cutile(grid, kernel, args)
        _last_backend = CUTILE
        return

    from mamba2_tile.interpreter import launch as interpret

    if on_cuda:
        cpu_args = _map_tensors(args, lambda t: t.detach().cpu())
        for i in interpret(grid, kernel, cpu_args):
            args[i].copy_(cpu_args[i])
    else:
        interpret(grid, kernel, args)
    _last_backend = INTERPRETER


def _launch_cutile(grid, kernel, args):
    """The one step of a launch that needs the GPU (mamba2_tile.tools.host_overhead replaces it
    to time everything else)."""
    import cuda.tile as ct
    import torch

    ct.launch(torch.cuda.current_stream(), grid, kernel, args)


def _argument_device(kernel, args):
    """Return "cuda", "cpu" or None (no arrays); refuse a mix, naming the odd argument out.

    Runs on every launch, so it only looks at each argument's device; the names for the error
    message are looked up when there is an error to report.
    """
    found = None
    for value in args:
        # _device's first two cases inline: a function call per argument would cost more than
        # the check itself (a launch has 10 to 25 arguments).
        if type(value) in _PLAIN_SCALARS:
            continue
        is_cuda = getattr(value, "is_cuda", None)
        if is_cuda is not None:
            device = "cuda" if is_cuda else "cpu"
        else:
            device = _device(value)
        if device is not None and device != found:
            if found is not None or device == "mixed":
                _refuse_mixed_devices(kernel, args)
            found = device
    return found


def _device(value):
    """"cuda", "cpu", "mixed" (a tuple of both) or None (not an array) for one argument."""
    if type(value) in _PLAIN_SCALARS:                   # most of a launch's arguments
        return None
    is_cuda = getattr(value, "is_cuda", None)          # a torch tensor
    if is_cuda is not None:
        return "cuda" if is_cuda else "cpu"
    if isinstance(value, numbers.Number):               # Python and NumPy scalars
        return None
    if isinstance(value, (tuple, list)):
        devices = {_device(item) for item in value} - {None}
        return devices.pop() if len(devices) == 1 else ("mixed" if devices else None)
    if hasattr(value, "__cuda_array_interface__"):      # CuPy, Numba, ...
        return "cuda"
    if hasattr(value, "__array_interface__"):           # a NumPy array
        return "cpu"
    return None


_PLAIN_SCALARS = {bool, int, float}


def _refuse_mixed_devices(kernel, args):
    names = _parameter_names(kernel, len(args))
    seen = {}
    for name, value in zip(names, args):
        for device in _devices(value):
            seen.setdefault(device, name)
    raise ValueError(f"kernel arguments mix devices: '{seen['cuda']}' is on the GPU but "
                     f"'{seen['cpu']}' is on the CPU; move them to the same device")


def _devices(value):
    if isinstance(value, (tuple, list)):
        for item in value:
            yield from _devices(item)
    elif _device(value) is not None:
        yield _device(value)


def kernel_function(kernel):
    """The plain Python function behind a `@ct.kernel` (real cuTile's or the interpreter's)."""
    return getattr(kernel, "_pyfunc", None) or kernel


@functools.lru_cache(maxsize=None)
def parameter_names(kernel):
    """The names of ``kernel``'s parameters, read once per kernel object (the error messages of
    every later launch use them; reading a signature costs more than a small launch's Python)."""
    try:
        return tuple(inspect.signature(kernel_function(kernel)).parameters)
    except (TypeError, ValueError):
        return ()


def _parameter_names(kernel, count):
    names = parameter_names(kernel)
    return names + tuple(f"argument {i}" for i in range(len(names), count))


def _map_tensors(value, fn):
    if isinstance(value, (tuple, list)):
        return type(value)(_map_tensors(item, fn) for item in value)
    if hasattr(value, "is_cuda"):
        return fn(value)
    if hasattr(value, "__cuda_array_interface__"):
        raise TypeError(f"{FORCE_ENV}=1 can copy torch tensors to the CPU, "
                        f"not {type(value).__name__}")
    return value

