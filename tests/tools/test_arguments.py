"""The argument types the command lines share: what each takes and what it refuses."""

import argparse

import pytest

from mamba2_tile.api import CHUNK_SIZES
from mamba2_tile.tools import arguments


@pytest.mark.parametrize("kind, text, value", [
    (arguments.positive_int, "1", 1), (arguments.positive_int, " 4096", 4096),
    (arguments.chunk_size, "128", 128),
    (arguments.positive_float, "2000", 2000.0), (arguments.positive_float, "1e-3", 1e-3),
    (arguments.file_stem, "h200_scaling", "h200_scaling"),
    (arguments.file_stem, "bench_quick.v2", "bench_quick.v2"),
])
def test_good_values(kind, text, value):
    assert kind(text) == value


@pytest.mark.parametrize("kind, text", [
    *[(arguments.positive_int, t) for t in ("0", "-3", "1.5", "1e3", "", "ten")],
    *[(arguments.chunk_size, t) for t in ("63", "16", "32", "512", "64.0", "0", "x")],
    *[(arguments.positive_float, t) for t in ("nan", "inf", "-inf", "0", "-1", "x", "")],
    *[(arguments.file_stem, t) for t in ("", "a/b", "../x", ".hidden", "-rf", "a b")],
])
def test_bad_values_say_what_was_expected(kind, text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected") as info:
        kind(text)
    assert repr(text) in str(info.value)


def test_every_kernel_chunk_size_is_taken():
    assert [arguments.chunk_size(str(c)) for c in CHUNK_SIZES] == list(CHUNK_SIZES)


def parser_with(*options):
    parser = argparse.ArgumentParser(prog="tool")
    for option in options:
        parser.add_argument(option, nargs="*")
    return parser


def test_repeats_and_unused_options_are_usage_errors(capsys):
    parser = parser_with("--seqlen")
    arguments.refuse_repeats(parser, parser.parse_args(["--seqlen", "1", "2"]), "seqlen")
    with pytest.raises(SystemExit):
        arguments.refuse_repeats(parser, parser.parse_args(["--seqlen", "1", "2", "1"]),
                                 "seqlen")
    assert "--seqlen: 1 given more than once" in capsys.readouterr().err
    arguments.refuse_unused(parser, {"--name": "x"}, False, "with --no-save")
    arguments.refuse_unused(parser, {"--name": None}, True, "with --no-save")
    with pytest.raises(SystemExit):
        arguments.refuse_unused(parser, {"--name": "x", "--data-dir": "d"}, True,
                                "with --no-save")
    assert "--name, --data-dir do not apply with --no-save" in capsys.readouterr().err
