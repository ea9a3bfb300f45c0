"""A compiled kernel's machine code (SASS), read for the spills inside its loops.

    from mamba2_tile.tools.sass import find_nvdisasm, disassemble, loop_spills
    loads, stores = loop_spills(disassemble(compiled.cubin, find_nvdisasm()))

A cubin's local-memory size (:class:`mamba2_tile.compiler.CompiledKernel`, ``local_bytes``)
says *that* a kernel spills, not *where*. A spill stored once before the main loop and reloaded
once after it costs nothing measurable; one reloaded on every trip through the loop over row
blocks costs a memory round trip each time. So the count that matters is of the spill loads
(``LDL``) and stores (``STL``) inside loops.

``nvdisasm`` (NVIDIA's disassembler: the ``nvidia-cuda-nvdisasm`` wheel, or any CUDA toolkit)
prints the SASS, one instruction a line with its address, ``/*0aa0*/``, and a label, ``.L_x_7:``,
before each branch target. A loop is a branch back: an instruction ``BRA `(.L_x_2)`` whose label
comes at a lower address. Everything from the label to the branch is the loop's body (nested
loops lie inside their outer loop's range), and an ``LDL`` or ``STL`` in any such range counts.
"""

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(.*)$")
_BRANCH = re.compile(r"\bBRA\b[^;]*`\((\.L_x_\d+)\)")
_SPILL_LOAD = re.compile(r"\bLDL(\.\S+)?\s")
_SPILL_STORE = re.compile(r"\bSTL(\.\S+)?\s")


def find_nvdisasm():
    """The path of ``nvdisasm``: on ``PATH``, else in an installed ``nvidia-cuda-nvdisasm``
    wheel; ``None`` when neither has it."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    try:
        import nvidia
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for candidate in sorted(Path(root).glob("cu*/bin/nvdisasm")):
            return str(candidate)
    return None


def disassemble(cubin, nvdisasm):
    """The SASS of ``cubin`` (bytes) as ``nvdisasm -c`` prints it (code sections only)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        return subprocess.run([nvdisasm, "-c", file.name], capture_output=True, text=True,
                              check=True).stdout


def loop_spills(sass):
    """``(loads, stores)``: the spill loads (``LDL``) and stores (``STL``) inside loops of
    ``sass``, the text :func:`disassemble` returns (see the module doc for what a loop is)."""
    labels, pending, instructions = {}, [], []
    for line in sass.splitlines():
        label = _LABEL.match(line)
        if label:
            pending.append(label.group(1))
            continue
        instruction = _INSTRUCTION.match(line)
        if instruction:
            address = int(instruction.group(1), 16)
            labels.update((name, address) for name in pending)
            pending = []
            instructions.append((address, instruction.group(2)))
    loops = []
    for address, text in instructions:
        branch = _BRANCH.search(text)
        if branch and labels.get(branch.group(1), address) < address:
            loops.append((labels[branch.group(1)], address))

    def in_loop(address):
        return any(start <= address <= end for start, end in loops)
    loads = sum(1 for address, text in instructions
                if _SPILL_LOAD.search(text) and in_loop(address))
    stores = sum(1 for address, text in instructions
                 if _SPILL_STORE.search(text) and in_loop(address))
    return loads, stores
