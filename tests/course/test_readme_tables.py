"""The README's "Measured on an H200" tables agree with the data/ files they quote: each row is
found in its JSON file by the shape it names, and each printed number is that row's value at the
table's rounding. A table whose header changes fails here until this file learns it.
"""

import json
import re
from pathlib import Path

import pytest

from mamba2_tile.tools.results import DATA_DIR, load_models_results

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_table(first_header, indent=""):
    """The body rows (lists of cell texts, bold marks removed) of the README table whose header
    starts with ``| first_header |`` after ``indent`` (a table inside a list item)."""
    lines = README.read_text(encoding="utf-8").splitlines()
    starts = [index for index, line in enumerate(lines)
              if line.startswith(f"{indent}| {first_header} |")]
    assert len(starts) == 1, f"README: {len(starts)} tables start with {first_header!r}"
    rows = []
    for line in lines[starts[0] + 2:]:
        if not line.startswith(f"{indent}|"):
            break
        rows.append([cell.strip().replace("**", "") for cell in line.strip().strip("|").split("|")])
    assert rows, f"README: the {first_header!r} table has no rows"
    return rows


def data_rows(name):
    return json.loads((DATA_DIR / f"{name}.json").read_text())["rows"]


def one(rows, **fields):
    found = [row for row in rows if all(row.get(key) == value for key, value in fields.items())]
    assert len(found) == 1, f"{len(found)} rows with {fields}"
    return found[0]


def ms(value):
    return f"{value:.3f}"


def times(value):
    return f"{value:.2f}×"


def percent(fraction):
    return f"{fraction * 100:.0f}%"


def errors(*values, short=False):
    """Relative errors at two digits, ``2.3e-03`` (``2.3e-3`` with ``short``, as some tables)."""
    texts = [f"{value:.1e}" for value in values]
    if short:
        texts = [re.sub(r"e([-+])0(\d)$", r"e\1\2", text) for text in texts]
    return " / ".join(texts)


MODEL_SHAPE = re.compile(r"b(\d+) h(\d+) p(\d+) n(\d+) g(\d+) L(\d+) chunk (\d+)"
                         r"(?:, (float16|float32 exact|float32 TF32))?$")


def test_model_shapes_table():
    rows = load_models_results()["rows"]      # the float32 rows as re-measured
    table = readme_table("shape")
    assert len(table) == len(rows), "the README's models table shows every stored row"
    for cells in table:
        shape = MODEL_SHAPE.match(cells[0])
        assert shape, f"unreadable shape {cells[0]!r}"
        batch, nheads, headdim, dstate, ngroups, seqlen, chunk = map(int, shape.groups()[:7])
        kind = shape.group(8) or "bfloat16"
        row = one(rows, batch=batch, nheads=nheads, headdim=headdim, dstate=dstate,
                  ngroups=ngroups, seqlen=seqlen, chunk_size=chunk, dtype=kind.split()[0],
                  tf32=kind == "float32 TF32")
        names = ("mamba2_tile", "mamba_ssm", "fla")
        expected = [ms(row["ms"][name]) for name in names] + [
            times(row["vs_best_peer"]), percent(row["copy_fraction"]),
            errors(*(row["error"][name] for name in names))]
        assert cells[1:] == expected, cells[0]


def test_packed_sequences_table():
    rows = data_rows("h200_packing")
    for cells in readme_table("heads × (sequences × seqlen)"):
        nheads, sequences, seqlen = map(int, re.fullmatch(r"(\d+) × \((\d+) × (\d+)\)",
                                                         cells[0]).groups())
        shape = dict(nheads=nheads, sequences=sequences, seqlen=seqlen)
        batch, mixed = one(rows, layout="batch", **shape), one(rows, layout="packed_mixed", **shape)
        assert cells[1:] == [ms(batch["ms"]), ms(mixed["ms"]), ms(mixed["mamba_ssm_ms"])], cells[0]


def decode_ms(value):
    """The decode table's milliseconds: four decimals under 0.1 ms, three above."""
    return f"{value:.4f}" if value < 0.1 else f"{value:.3f}"


def test_decode_table():
    rows = data_rows("h200_decode")
    for cells in readme_table("state"):
        row = one(rows, state_dtype=cells[0], batch=int(cells[1]))
        expected = [decode_ms(row["mamba2_tile_ms"]), decode_ms(row["mamba_ssm_ms"]),
                    times(row["speedup"]),
                    f"{percent(row['mamba2_tile_copy_fraction'])} / "
                    f"{percent(row['mamba_ssm_copy_fraction'])}"]
        assert cells[2:] == expected, cells[:2]


def test_backward_table():
    rows = data_rows("h200_backward")
    table = readme_table("b8 h64 p64 bf16")
    assert len(table) == len(rows), "the README's training table shows every stored row"
    for cells in table:
        seqlen, dstate, chunk = map(int, re.fullmatch(r"L(\d+), dstate (\d+), chunk (\d+)",
                                                      cells[0]).groups())
        row = one(rows, batch=8, nheads=64, headdim=64, seqlen=seqlen, dtype="bfloat16",
                  dstate=dstate, chunk_size=chunk)
        ours, theirs = row["ms"]["mamba2_tile"], row["ms"]["mamba_ssm"]
        largest = [max(row["grad_error"][name].values()) for name in ("mamba2_tile", "mamba_ssm")]
        ratios = {key: row["grad_error"]["mamba2_tile"][key] / row["grad_error"]["mamba_ssm"][key]
                  for key in row["grad_error"]["mamba2_tile"]}
        worst = max(ratios, key=ratios.get)
        expected = [f"{ours:.2f}", f"{theirs:.2f}", times(theirs / ours),
                    f"{row['peak_mb']['mamba2_tile']:.0f} / {row['peak_mb']['mamba_ssm']:.0f}",
                    errors(*largest, short=True), f"{ratios[worst]:.3f} ({worst})"]
        assert cells[1:] == expected, cells[0]


@pytest.mark.parametrize("name, first_header", [
    # The 2048-token training rows of the split form's dB/dC change, then with the chunk states
    # kept by the forward, side by side on an H100.
    ("h100_backward_L2048_2026-12-07c", "b8 h64 p64 L2048 bf16, H100, 2026-12-07"),
    ("h100_backward_L2048_2026-12-07e", "b8 h64 p64 L2048 bf16, H100, 2026-12-07, states kept"),
])
def test_h100_backward_table(name, first_header):
    rows = data_rows(name)
    table = readme_table(first_header, indent="  ")
    assert len(table) == len(rows), "the README's table shows every stored row"
    for cells in table:
        dstate, chunk = map(int, re.fullmatch(r"dstate (\d+), chunk (\d+)", cells[0]).groups())
        row = one(rows, dstate=dstate, chunk_size=chunk)
        ours, theirs = row["ms"]["mamba2_tile"], row["ms"]["mamba_ssm"]
        errors_A = [row["grad_error"][name]["A"] for name in ("mamba2_tile", "mamba_ssm")]
        expected = [ms(ours), ms(theirs), times(theirs / ours),
                    f"{row['peak_mb']['mamba2_tile']:.0f} / {row['peak_mb']['mamba_ssm']:.0f}",
                    f"{errors_A[0] / errors_A[1]:.2f}"]
        assert cells[1:] == expected, cells[0]


def test_default_sweep_table():
    rows = data_rows("h200_default")
    for cells in readme_table("seqlen"):
        seqlen, dstate, ngroups, chunk = map(int, cells[:4])
        row = one(rows, seqlen=seqlen, dstate=dstate, ngroups=ngroups, chunk_size=chunk)
        expected = [ms(row["mamba2_tile_ms"]), ms(row["mamba_ssm_ms"]), times(row["speedup"]),
                    errors(row["rel_err"], row["mamba_ssm_rel_err"], short=True)]
        assert cells[4:] == expected, cells[:4]


def test_the_table_reader_strips_bold_and_stops_at_the_table_end():
    cells = readme_table("shape")
    assert all("**" not in cell for row in cells for cell in row)
    assert all(len(row) == 7 for row in cells)


@pytest.mark.parametrize("name", ["h200_models", "h200_packing", "h200_decode", "h200_backward",
                                  "h200_default"])
def test_the_readme_names_the_file_it_quotes(name):
    assert f"data/{name}." in README.read_text(encoding="utf-8")
