"""The primer's checks pass a correct kernel, catch wrong ones with a useful hint, and treat an
unwritten exercise as "not implemented yet" instead of a traceback."""

import pytest

from mamba2_tile.course.checks import primer
from mamba2_tile.dispatch import default_device
from mamba2_tile.tile import ct

ZERO = ct.PaddingMode.ZERO


@ct.kernel
def row_sum_right(x, out, TILE_R: ct.Constant[int], TILE_C: ct.Constant[int]):
    rows = ct.load(x, index=(ct.bid(0), 0), shape=(TILE_R, TILE_C), padding_mode=ZERO)
    ct.store(out, index=(ct.bid(0),), tile=ct.sum(rows, axis=1))


@ct.kernel
def row_sum_max_instead(x, out, TILE_R: ct.Constant[int], TILE_C: ct.Constant[int]):
    rows = ct.load(x, index=(ct.bid(0), 0), shape=(TILE_R, TILE_C), padding_mode=ZERO)
    ct.store(out, index=(ct.bid(0),), tile=ct.max(rows, axis=1))


@ct.kernel
def row_sum_without_padding(x, out, TILE_R: ct.Constant[int], TILE_C: ct.Constant[int]):
    rows = ct.load(x, index=(ct.bid(0), 0), shape=(TILE_R, TILE_C))
    ct.store(out, index=(ct.bid(0),), tile=ct.sum(rows, axis=1))


@ct.kernel
def row_sum_stub(x, out, TILE_R: ct.Constant[int], TILE_C: ct.Constant[int]):
    raise NotImplementedError("write the row sum")


@ct.kernel
def cumsum_right(x, out, CHUNK: ct.Constant[int]):
    chunk = ct.load(x, index=(ct.bid(0),), shape=(CHUNK,), padding_mode=ZERO)
    ct.store(out, index=(ct.bid(0),), tile=ct.cumsum(chunk, axis=0))


@ct.kernel
def cumsum_exclusive(x, out, CHUNK: ct.Constant[int]):
    chunk = ct.load(x, index=(ct.bid(0),), shape=(CHUNK,), padding_mode=ZERO)
    ct.store(out, index=(ct.bid(0),), tile=ct.cumsum(chunk, axis=0) - chunk)


@ct.kernel
def matmul_right(a, b, c, TM: ct.Constant[int], TN: ct.Constant[int], TK: ct.Constant[int]):
    i, j = ct.bid(0), ct.bid(1)
    acc = ct.zeros((TM, TN), dtype=ct.float32)
    for k in range(ct.num_tiles(a, axis=1, shape=(TM, TK))):
        a_tile = ct.load(a, index=(i, k), shape=(TM, TK), padding_mode=ZERO)
        b_tile = ct.load(b, index=(k, j), shape=(TK, TN), padding_mode=ZERO)
        acc = ct.mma(a_tile, b_tile, acc)
    ct.store(c, index=(i, j), tile=acc)


@ct.kernel
def matmul_first_k_tile_only(a, b, c, TM: ct.Constant[int], TN: ct.Constant[int],
                             TK: ct.Constant[int]):
    i, j = ct.bid(0), ct.bid(1)
    a_tile = ct.load(a, index=(i, 0), shape=(TM, TK), padding_mode=ZERO)
    b_tile = ct.load(b, index=(0, j), shape=(TK, TN), padding_mode=ZERO)
    ct.store(c, index=(i, j), tile=ct.mma(a_tile, b_tile, ct.zeros((TM, TN), dtype=ct.float32)))


@pytest.mark.parametrize("check, kernel", [
    (primer.check_row_sum, row_sum_right),
    (primer.check_chunk_cumsum, cumsum_right),
    (primer.check_matmul, matmul_right),
])
def test_a_correct_kernel_passes(check, kernel, capsys):
    assert check(kernel) is True
    assert capsys.readouterr().out.startswith("✅")


@pytest.mark.parametrize("check, kernel, hint", [
    (primer.check_row_sum, row_sum_max_instead, "sum it along axis 1"),
    (primer.check_chunk_cumsum, cumsum_exclusive, "inclusive scan"),
    (primer.check_matmul, matmul_first_k_tile_only, "only the first k tile"),
])
def test_a_wrong_kernel_is_caught_with_a_hint(check, kernel, hint, capsys):
    assert check(kernel) is False
    out = capsys.readouterr().out
    assert out.startswith("❌") and "got" in out and "expected" in out
    assert hint in out


@pytest.mark.skipif(default_device() == "cuda",
                    reason="on a GPU, unpadded elements hold whatever is in memory, maybe zeros")
def test_a_missing_padding_mode_is_explained(capsys):
    # The interpreter fills unpadded out-of-bounds elements with NaN, so the mistake shows.
    assert primer.check_row_sum(row_sum_without_padding) is False
    assert "padding_mode=ct.PaddingMode.ZERO" in capsys.readouterr().out


def test_an_unwritten_exercise_is_reported_not_raised(capsys):
    assert primer.check_row_sum(row_sum_stub) is False
    out = capsys.readouterr().out
    assert out.startswith("⏳ row_sum_kernel is not implemented yet")
