"""Notebook 04, Exercise 4 (the causal tiled product, out = tril(s) @ v): each plausible wrong
kernel, written the way a learner would, goes through the check the notebook calls and must get
its own diagnosis, with the blocks (row tiles) whose rows are wrong named; the right kernel
passes. The kernels share one body with a flag per mistake; they sit at module level because
the interpreter reads their source.
"""

import pytest

from mamba2_tile.course.checks.primer import CAUSAL_MISTAKES, check_causal_matmul
from mamba2_tile.tile import ct

ZERO = ct.PaddingMode.ZERO


# The mask a learner compares rows and columns with (MASK), and how many tiles of s the loop
# visits (LOOP); the first of each is the notebook's solution.
MASK_GLOBAL, MASK_NONE, MASK_STRICT, MASK_REVERSED, MASK_IN_TILE = 0, 1, 2, 3, 4
LOOP_TO_DIAGONAL, LOOP_EVERY_TILE, LOOP_BEFORE_DIAGONAL = 0, 1, 2


@ct.function
def causal_body(s, v, out, TM, TN, MASK, LOOP, ACCUMULATE, PAD_V, STORE):
    """One row tile of out = tril(s) @ v; a flag other than the solution's is one mistake:
    ``ACCUMULATE=False`` restarts the accumulator at every tile, ``PAD_V=False`` loads v's
    ragged last tile without padding, ``STORE=False`` never writes ``out``."""
    i = ct.bid(0)
    acc = ct.zeros((TM, TN), dtype=ct.float32)
    if LOOP == LOOP_TO_DIAGONAL:
        ntiles = i + 1
    elif LOOP == LOOP_EVERY_TILE:
        ntiles = ct.num_tiles(s, axis=1, shape=(TM, TM))
    else:
        ntiles = i
    for k in range(ntiles):
        s_tile = ct.load(s, index=(i, k), shape=(TM, TM), padding_mode=ZERO)
        if PAD_V:
            v_tile = ct.load(v, index=(k, 0), shape=(TM, TN), padding_mode=ZERO)
        else:
            v_tile = ct.load(v, index=(k, 0), shape=(TM, TN))
        if MASK == MASK_IN_TILE:
            rows = ct.reshape(ct.arange(TM, dtype=ct.int32), (TM, 1))
            cols = ct.reshape(ct.arange(TM, dtype=ct.int32), (1, TM))
        else:
            rows = ct.reshape(i * TM + ct.arange(TM, dtype=ct.int32), (TM, 1))
            cols = ct.reshape(k * TM + ct.arange(TM, dtype=ct.int32), (1, TM))
        if MASK == MASK_NONE:
            masked = s_tile
        elif MASK == MASK_STRICT:
            masked = ct.where(rows > cols, s_tile, 0.0)
        elif MASK == MASK_REVERSED:
            masked = ct.where(rows <= cols, s_tile, 0.0)
        else:
            masked = ct.where(rows >= cols, s_tile, 0.0)
        if ACCUMULATE:
            acc = ct.mma(masked, v_tile, acc)
        else:
            acc = ct.mma(masked, v_tile, ct.zeros((TM, TN), dtype=ct.float32))
    if STORE:
        ct.store(out, index=(i, 0), tile=acc.astype(out.dtype))


@ct.kernel
def causal_correct(s, v, out, TM: ct.Constant[int], TN: ct.Constant[int]):
    causal_body(s, v, out, TM, TN, MASK_GLOBAL, LOOP_TO_DIAGONAL, True, True, True)


@ct.kernel
def causal_diagonal_unmasked(s, v, out, TM: ct.Constant[int], TN: ct.Constant[int]):
    causal_body(s, v, out, TM, TN, MASK_NONE, LOOP_TO_DIAGONAL, True, True, True)


@ct.kernel
def causal_every_tile(s, v, out, TM: ct.Constant[int], TN: ct.Constant[int]):
    causal_body(s, v, out, TM, TN, MASK_NONE, LOOP_EVERY_TILE, True, True, True)


@ct.kernel
def causal_strict_mask(s, v, out, TM: ct.Constant[int], TN: ct.Constant[int]):
    causal_body(s, v, out, TM, TN, MASK_STRICT, LOOP_TO_DIAGONAL, True, True, True)


@ct.kernel
def causal_mask_reversed(s, v, out, TM: ct.Constant[int], TN: ct.Constant[int]):
    causal_body(s, v, out, TM, TN, MASK_REVERSED, LOOP_TO_DIAGONAL, True, True, True)


@ct.kernel
def causal_loop_stops_early(s, v, out, TM: ct.Constant[int], TN: ct.Constant[int]):
    causal_body(s, v, out, TM, TN, MASK_GLOBAL, LOOP_BEFORE_DIAGONAL, True, True, True)


@ct.kernel
def causal_mask_in_tile_coordinates(s, v, out, TM: ct.Constant[int], TN: ct.Constant[int]):
    causal_body(s, v, out, TM, TN, MASK_IN_TILE, LOOP_TO_DIAGONAL, True, True, True)


@ct.kernel
def causal_accumulator_overwritten(s, v, out, TM: ct.Constant[int], TN: ct.Constant[int]):
    causal_body(s, v, out, TM, TN, MASK_GLOBAL, LOOP_TO_DIAGONAL, False, True, True)


@ct.kernel
def causal_v_without_padding(s, v, out, TM: ct.Constant[int], TN: ct.Constant[int]):
    causal_body(s, v, out, TM, TN, MASK_GLOBAL, LOOP_TO_DIAGONAL, True, False, True)


@ct.kernel
def causal_never_stored(s, v, out, TM: ct.Constant[int], TN: ct.Constant[int]):
    causal_body(s, v, out, TM, TN, MASK_NONE, LOOP_TO_DIAGONAL, True, True, False)


@ct.kernel
def causal_stub(s, v, out, TM: ct.Constant[int], TN: ct.Constant[int]):
    raise NotImplementedError("Exercise: write your code here")


def test_correct_kernel_passes(capsys):
    assert check_causal_matmul(causal_correct)
    assert "✅ causal_matmul_kernel matches" in capsys.readouterr().out


def test_unwritten_kernel_is_not_implemented_yet(capsys):
    assert not check_causal_matmul(causal_stub)
    assert "not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize("kernel, entry, wrong_blocks", [
    (causal_diagonal_unmasked, 0, "0 (rows 0-15), 1 (rows 16-31), 2 (rows 32-44)"),
    (causal_every_tile, 1, "0 (rows 0-15), 1 (rows 16-31), 2 (rows 32-44)"),
    (causal_strict_mask, 2, "0 (rows 0-15), 1 (rows 16-31), 2 (rows 32-44)"),
    (causal_mask_reversed, 3, "0 (rows 0-15), 1 (rows 16-31), 2 (rows 32-44)"),
    (causal_loop_stops_early, 4, "0 (rows 0-15), 1 (rows 16-31), 2 (rows 32-44)"),
    (causal_mask_in_tile_coordinates, 5, "1 (rows 16-31), 2 (rows 32-44)."),
    (causal_accumulator_overwritten, 6, "1 (rows 16-31), 2 (rows 32-44)."),
], ids=["diagonal_unmasked", "every_tile", "strict_mask", "mask_reversed", "loop_stops_early",
        "mask_in_tile_coordinates", "accumulator_overwritten"])
def test_each_mistake_gets_its_own_diagnosis_and_the_wrong_blocks(capsys, kernel, entry,
                                                                  wrong_blocks):
    assert not check_causal_matmul(kernel)
    out = capsys.readouterr().out
    assert f"Hint: {CAUSAL_MISTAKES[entry][1]}" in out
    assert f"with wrong rows: {wrong_blocks}" in out
    assert "at [row " in out


def test_every_catalogue_entry_has_a_test():
    tested = test_each_mistake_gets_its_own_diagnosis_and_the_wrong_blocks.pytestmark[0].args[1]
    assert sorted(entry for _, entry, _ in tested) == list(range(len(CAUSAL_MISTAKES)))


def test_unpadded_v_is_named_as_missing_padding(capsys):
    assert not check_causal_matmul(causal_v_without_padding)
    assert "padding_mode=ct.PaddingMode.ZERO" in capsys.readouterr().out


def test_a_kernel_that_never_stores_is_told_to_store(capsys):
    assert not check_causal_matmul(causal_never_stored)
    assert "`out` is still all zeros" in capsys.readouterr().out
