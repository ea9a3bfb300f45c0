"""Spills inside loops, read off SASS: on a small listing written here in nvdisasm's format, whose
answer is known by construction, and on a real kernel where nvdisasm is installed."""

import pytest

from mamba2_tile.compiler import compiler_available
from mamba2_tile.problem import Problem
from mamba2_tile.tools import resources
from mamba2_tile.tools.sass import find_nvdisasm, loop_spills

# A spill stored before the loops, an outer loop (.L_x_1 .. 0x0090) holding a nested one
# (.L_x_2 .. 0x0060), one spill load in each, a store in the outer one, a forward branch that is
# no loop, and a reload after both loops.
LISTING = """
        /*0000*/                   STL [R1+0x4], R2 (*"SpillRefill"*);
.L_x_1:
        /*0010*/                   LDL R3, [R1+0x4] (*"SpillRefill"*);
        /*0020*/              @!P0 BRA `(.L_x_3) ;
.L_x_2:
        /*0030*/                   HMMA.16816.F32 R4, R8, R12, R4 ;
        /*0040*/                   LDL.64 R6, [R1+0x8] (*"SpillRefill"*);
        /*0050*/                   ISETP.NE.AND P1, PT, R0, RZ, PT ;
        /*0060*/               @P1 BRA `(.L_x_2) ;
.L_x_3:
        /*0070*/                   STL [R1+0xc], R5 (*"SpillRefill"*);
        /*0080*/                   ULDC UR4, c[0x0][0x210] ;
        /*0090*/               @P0 BRA `(.L_x_1) ;
        /*00a0*/                   LDL R9, [R1+0xc] (*"SpillRefill"*);
        /*00b0*/                   EXIT ;
"""


def test_only_spills_inside_loops_count():
    assert loop_spills(LISTING) == (2, 1)


def test_a_listing_without_a_branch_back_has_no_loop():
    # Both branches now jump forward, to labels after them.
    straight = (LISTING.replace("`(.L_x_2)", "`(.L_x_3)").replace("`(.L_x_1)", "`(.L_x_4)")
                .replace("        /*00b0*/", ".L_x_4:\n        /*00b0*/"))
    assert loop_spills(straight) == (0, 0)


needs_nvdisasm = pytest.mark.skipif(not (compiler_available() and find_nvdisasm()),
                                    reason="needs cuda-tile and nvdisasm (nvidia-cuda-nvdisasm)")


@needs_nvdisasm
def test_the_float32_tf32_fused_kernel_reloads_few_spills_in_its_loops():
    # With the 16-bit hints it reloaded 157 spills in its loops and stored 92
    # (data/cpu_fused_float32_tiles.txt).
    rows = resources.resource_rows([Problem(8, 8192, 64, 64, 128, 1, 256, "float32")],
                                   tf32=True, progress=False, nvdisasm=find_nvdisasm())
    (row,) = [row for row in rows if row[1] == "fused_state_out_kernel"]
    loads, stores = map(int, row[-2].split("/"))   # the column before compile seconds
    assert loads <= 32 and stores <= 8, row
