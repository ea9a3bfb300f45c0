"""Compile a cuTile kernel to GPU machine code on a machine without a GPU.

cuTile's compiler (`tileiras`) is an ordinary program: it turns a kernel into a
cubin (the binary a GPU loads) for any NVIDIA architecture, whether or not a GPU
is present. That lets a laptop answer "does my kernel compile for an H100?" and
lets CI check every kernel for sm_80 (A100), sm_90 (H100/H200) and sm_100 (B200).

A launch compiles a kernel *specialised* to its arguments: dtypes, ranks and a
few facts about the arrays (unit strides, 16-byte alignment, sizes divisible by
16) that let the compiler emit wider memory instructions. `compile_kernel` takes
the same example arguments a launch would, derives that specialisation the way
cuTile's launcher does, and compiles ahead of time:

    result = compile_kernel(add_kernel, (x, y, out, 1024), target="sm_90")
    print(result)   # add_kernel for sm_90: 17.3 KiB cubin, 10 registers/thread, ...

Example arrays may be NumPy arrays or CPU torch tensors: only their metadata
(dtype, shape, strides, address) matters, their values are never read.
"""

from __future__ import annotations

import io
import struct
import time
from dataclasses import dataclass

TARGETS = ("sm_80", "sm_90", "sm_100")

# cuTile's launcher records these facts only for arrays of up to 5 dimensions.
_MAX_SPECIALISED_NDIM = 5
_ALIGN = 16  # bytes


# What `CompileError.summary` says where cuda-tile is absent (it has no macOS wheel, for one).
NO_COMPILER = ("cuda-tile is not installed, so kernels are not compiled to cubins here "
               "and their registers and shared memory are not known")
_NO_COMPILER_DETAIL = (
    f"{NO_COMPILER}.\n"
    "cuda-tile ships wheels for Linux (x86_64, aarch64) and Windows only; there, "
    "`pip install cuda-tile[tileiras]` brings its compiler, which needs no GPU.\n"
    "Without it every kernel still runs, on the CPU tile interpreter (mamba2_tile.interpreter).")


class CompileError(RuntimeError):
    """A kernel was not compiled: the compiler rejected it, or there is no compiler.

    `summary` is one line, fit to print after a label ("not compiled: ..."); `str(err)` is the
    whole story: which kernel, for which target, and the compiler's message with the source line.
    """

    def __init__(self, summary: str, detail: str | None = None):
        super().__init__(detail if detail is not None else summary)
        self.summary = " ".join(summary.split())  # one line, whatever the compiler wrote


def compiler_available() -> bool:
    """True when the real cuTile package (and so its compiler) is installed."""
    try:
        import cuda.tile.compilation  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class CompiledKernel:
    """What came out of one compilation."""

    kernel_name: str
    target: str
    symbol: str            # the mangled name of the kernel inside the cubin
    cubin: bytes
    seconds: float         # wall time of the compilation
    registers: int | None  # registers per thread, as recorded in the cubin
    shared_bytes: int      # static shared memory per block
    local_bytes: int = 0   # stack frame per thread: local memory, where registers spill
    threads: int | None = None  # threads a block must have, as recorded in the cubin

    @property
    def size_bytes(self) -> int:
        return len(self.cubin)

    def save(self, path) -> None:
        with open(path, "wb") as f:
            f.write(self.cubin)

    def summary(self) -> str:
        regs = "?" if self.registers is None else str(self.registers)
        local = (f"{self.local_bytes} bytes/thread of local memory (spilled registers), "
                 if self.local_bytes else "")
        threads = "" if self.threads is None else f"{self.threads} threads/block, "
        return (f"{self.kernel_name} for {self.target}: "
                f"{self.size_bytes / 1024:.1f} KiB cubin, {threads}{regs} registers/thread, "
                f"{self.shared_bytes / 1024:.1f} KiB shared memory, {local}"
                f"compiled in {self.seconds:.2f} s")

    def __repr__(self) -> str:
        return f"<CompiledKernel {self.summary()}>"


def compile_kernel(kernel, args, target: str = "sm_90", *, use_cache: bool = False) -> CompiledKernel:
    """Compile `kernel` for GPU architecture `target` as if launched with `args`.

    `args` are the arguments you would pass to `launch(grid, kernel, args)`.
    With `use_cache=False` (the default) cuTile's on-disk cubin cache is bypassed,
    so the time reported is a real compilation and nothing is written to disk.
    """
    if not compiler_available():
        raise CompileError(NO_COMPILER, _NO_COMPILER_DETAIL)
    from cuda.tile._cext import default_tile_context
    from cuda.tile.compilation import CallingConvention, KernelSignature, export_kernel

    name = _kernel_name(kernel)
    if not (isinstance(target, str) and target.startswith("sm_") and target[3:].isdigit()):
        raise ValueError(f"target must look like 'sm_90', got {target!r}")
    constraints = _signature_constraints(kernel, tuple(args))
    signature = KernelSignature(constraints, CallingConvention.cutile_python_v2())
    signature = signature.with_mangled_symbol(name)

    config = default_tile_context.config
    saved_cache_dir = config.cache_dir
    if not use_cache:
        config.cache_dir = None
    out = io.BytesIO()
    start = time.perf_counter()
    try:
        export_kernel(kernel, [signature], out, gpu_code=target, output_format="cubin")
    except Exception as err:
        raise CompileError(_error_summary(err),
                           f"cuTile could not compile kernel '{name}' for {target}:\n"
                           f"{type(err).__name__}: {err}") from err
    finally:
        config.cache_dir = saved_cache_dir
    seconds = time.perf_counter() - start

    cubin = out.getvalue()
    registers, shared, local, threads = _resource_usage(cubin, signature.symbol)
    return CompiledKernel(name, target, signature.symbol, cubin, seconds, registers, shared,
                          local, threads)


def compilation_key(kernel, args) -> tuple:
    """What a compilation of `kernel` for `args` depends on: the kernel object (its hints
    included) and the signature cuTile specialises it for (dtypes, constants, which sizes and
    strides divide by 16, alignment), not the sizes themselves. Two launches with equal keys
    compile to the same cubin."""
    return kernel, repr(_signature_constraints(kernel, tuple(args)))


def _error_summary(err: Exception) -> str:
    """'TypeCheckingError at line 55: Expect shape ...': the compiler's first line, and where."""
    lines = [line for line in str(err).splitlines() if line.strip()]
    line = getattr(getattr(err, "loc", None), "line", None)  # cuTile's errors carry a source Loc
    where = f" at line {line}" if isinstance(line, int) else ""
    return f"{type(err).__name__}{where}" + (f": {lines[0]}" if lines else "")


def _kernel_name(kernel) -> str:
    annotated = getattr(kernel, "_annotated_function", None)
    if annotated is None:
        raise TypeError(f"{kernel!r} is not a cuTile kernel: decorate it with @ct.kernel "
                        "(from the real cuda.tile package)")
    return annotated.pyfunc.__name__


# --- the specialisation a launch would choose ---------------------------------------------

def _signature_constraints(kernel, args):
    annotated = kernel._annotated_function
    names = list(annotated.pysig.parameters)
    if len(args) != len(names):
        raise TypeError(f"kernel '{_kernel_name(kernel)}' takes {len(names)} arguments "
                        f"({', '.join(names)}), got {len(args)}")
    return [_constraint(arg, node, name)
            for arg, node, name in zip(args, annotated.parameter_annotations, names)]


def _constraint(value, node, name):
    from cuda.tile.compilation import ConstantConstraint, TupleConstraint

    if node.KIND != "leaf":  # a tuple parameter: one constraint per item
        items = node.items if node.KIND == "heterogeneous_tuple" else [node.each] * len(value)
        return TupleConstraint([_constraint(v, n, f"{name}[{i}]")
                                for i, (v, n) in enumerate(zip(value, items))])
    if node.constant:
        return ConstantConstraint(value)
    if isinstance(value, (bool, int, float)):
        return _scalar_constraint(value, node)
    if _is_numpy(value) or hasattr(value, "data_ptr"):  # a NumPy array or a torch tensor
        return _array_constraint(value, node, name)
    raise TypeError(f"argument '{name}': cannot compile for a {type(value).__name__}; "
                    "pass a NumPy array, a torch tensor, a Python number or a ct.Constant")


def _scalar_constraint(value, node):
    import cuda.tile as ct
    from cuda.tile.compilation import ScalarConstraint

    if isinstance(value, bool):
        return ScalarConstraint(ct.bool_)
    if isinstance(value, int):
        return ScalarConstraint(node.scalar.dtype if node.scalar else ct.int32)
    return ScalarConstraint(ct.float32)  # a launch passes Python floats as float32


def _is_numpy(value) -> bool:
    return type(value).__module__ == "numpy"


def _array_constraint(array, node, name):
    import cuda.tile as ct
    from cuda.tile.compilation import ArrayConstraint

    dtype_name = str(array.dtype).removeprefix("torch.")
    dtype = getattr(ct, "bool_" if dtype_name == "bool" else dtype_name, None)
    if dtype is None:
        raise TypeError(f"argument '{name}': cuTile has no dtype {dtype_name}")
    if _is_numpy(array):
        itemsize, address = array.itemsize, array.ctypes.data
        strides = [s // itemsize for s in array.strides]
    else:  # a torch tensor
        itemsize, address = array.element_size(), array.data_ptr()
        strides = list(array.stride())
    shape, ndim = list(array.shape), array.ndim

    annotation = node.array
    index_dtype = annotation.index_dtype if annotation else ct.int32
    if index_dtype == ct.int32 and max(shape + strides, default=0) > 2**31 - 1:
        raise ValueError(f"argument '{name}' is too large for 32-bit indexing; "
                         "annotate the parameter with ct.IndexedWithInt64")

    static_shape = set(d % ndim for d in annotation.static_shape_dims) if annotation else set()
    static_stride = set(d % ndim for d in annotation.static_stride_dims) if annotation else set()
    specialise = ndim <= _MAX_SPECIALISED_NDIM
    stride_constant, stride_div, shape_div = [], [], []
    for d in range(ndim):
        if static_stride:
            stride_constant.append(strides[d] if d in static_stride else None)
        else:
            stride_constant.append(1 if specialise and strides[d] == 1 else None)
        aligned = specialise and stride_constant[d] is None and (strides[d] * itemsize) % _ALIGN == 0
        stride_div.append(_ALIGN // itemsize if aligned and _ALIGN % itemsize == 0 else 1)
        shape_div.append(16 if specialise and d not in static_shape and shape[d] % 16 == 0 else 1)

    return ArrayConstraint(
        dtype, ndim,
        index_dtype=index_dtype,
        stride_lower_bound_incl=0,
        alias_groups=(),
        may_alias_internally=not _elements_disjoint(shape, strides),
        stride_constant=stride_constant,
        shape_constant=[shape[d] if d in static_shape else None for d in range(ndim)],
        stride_divisible_by=stride_div,
        shape_divisible_by=shape_div,
        base_addr_divisible_by=_ALIGN if address % _ALIGN == 0 else 1,
    )


def _elements_disjoint(shape, strides) -> bool:
    """No two in-bounds indices share memory (false e.g. for a broadcast, stride-0 view)."""
    dims = sorted(zip(strides, shape))
    if dims and dims[0][0] <= 0:
        return False
    return all(cur >= prev * size for (prev, size), (cur, _) in zip(dims, dims[1:]))


# --- reading resource usage out of the cubin (an ELF file) --------------------------------

_EIATTR_REGCOUNT = 0x2F
_EIATTR_FRAME_SIZE = 0x11   # the stack frame: local memory per thread (nvdisasm shows its STL/LDL)
# The block size the kernel was compiled for (x, y, z), which the compiler fixes from cuTile's
# warp hints: registers a thread times these threads is what one block takes of an SM's 64 K.
_EIATTR_REQNTID = 0x10
_EIFMT_SVAL = 4


def _resource_usage(cubin: bytes, symbol: str) -> tuple[int | None, int, int, int | None]:
    """(registers per thread, static shared bytes, stack frame bytes per thread, threads per
    block) of `symbol`, read from the ELF sections."""
    sections = _elf_sections(cubin)
    shared = sum(len_ for name, _, len_ in sections if name == f".nv.shared.{symbol}")
    registers, frame, threads = None, 0, None
    for name, offset, length in sections:
        if name not in (".nv.info", f".nv.info.{symbol}"):
            continue
        pos = offset
        while pos + 4 <= offset + length:  # records: format u8, attribute u8, size u16, payload
            fmt, attr, size = struct.unpack_from("<BBH", cubin, pos)
            if fmt != _EIFMT_SVAL:
                pos += 4
                continue
            if attr == _EIATTR_REGCOUNT:
                registers = struct.unpack_from("<II", cubin, pos + 4)[1]
            elif attr == _EIATTR_FRAME_SIZE:
                frame = struct.unpack_from("<II", cubin, pos + 4)[1]
            elif attr == _EIATTR_REQNTID:
                x, y, z = struct.unpack_from("<III", cubin, pos + 4)
                threads = x * y * z
            pos += 4 + size
    return registers, shared, frame, threads


def _elf_sections(elf: bytes) -> list[tuple[str, int, int]]:
    """(name, file offset, size) of every section of a 64-bit little-endian ELF file."""
    if elf[:4] != b"\x7fELF":
        return []
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    entsize, count, names_index = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * entsize) for i in range(count)]
    names_offset = headers[names_index][4]

    def name_at(i):
        start = names_offset + i
        return elf[start:elf.index(b"\0", start)].decode()

    return [(name_at(h[0]), h[4], h[5]) for h in headers]
