"""The notebook 00 checks pass the right byte counts and fail the usual slips."""

from mamba2_tile.course.checks.welcome import check_kv_cache_bytes, check_ssm_state_bytes
from mamba2_tile.cost import (
    crossover_seqlen, format_bytes, kv_cache_bytes, ssm_state_bytes,
)


def not_implemented(*args, **kwargs):
    raise NotImplementedError("Exercise: write your code here")


def kv_without_values(seqlen, nlayers, nheads, headdim, bytes_per_value):
    return seqlen * nlayers * nheads * headdim * bytes_per_value


def state_with_key_and_value(nlayers, nheads, headdim, dstate, bytes_per_value):
    return 2 * nlayers * nheads * headdim * dstate * bytes_per_value


def test_reference_formulas_at_realistic_sizes():
    # Pythia-2.8B: 32 layers x 32 heads x 80 -> 320 KiB per token in fp16.
    assert kv_cache_bytes(1, 32, 32, 80, 2) == 320 * 1024
    # Mamba-2 2.7B: 64 layers x 80 heads x (64 x 128) -> 80 MiB in fp16, whatever the length.
    assert ssm_state_bytes(64, 80, 64, 128, 2) == 80 * 2 ** 20
    assert crossover_seqlen() == 256
    assert [format_bytes(n) for n in (512, 1536, 80 * 2 ** 20)] == ["512 B", "1.5 KiB",
                                                                    "80.0 MiB"]


def test_kv_cache_check_passes_the_right_answer(capsys):
    assert check_kv_cache_bytes(kv_cache_bytes)
    assert "✅ kv_cache_bytes" in capsys.readouterr().out


def test_kv_cache_check_fails_without_the_values_and_names_the_call(capsys):
    assert not check_kv_cache_bytes(kv_without_values)
    out = capsys.readouterr().out
    assert "❌ kv_cache_bytes" in out
    assert "   at [0]: got" in out
    assert "Call [0] was kv_cache_bytes(seqlen=4096, nlayers=32" in out
    assert "a key and a value" in out


def test_state_check_passes_the_right_answer(capsys):
    assert check_ssm_state_bytes(ssm_state_bytes)
    assert "✅ ssm_state_bytes" in capsys.readouterr().out


def test_state_check_fails_a_doubled_state(capsys):
    assert not check_ssm_state_bytes(state_with_key_and_value)
    out = capsys.readouterr().out
    assert "❌ ssm_state_bytes" in out and "   at [0]: got" in out


def test_checks_wait_for_unfinished_exercises(capsys):
    assert check_kv_cache_bytes(not_implemented) is False
    assert check_ssm_state_bytes(not_implemented) is False
    out = capsys.readouterr().out
    assert "⏳ kv_cache_bytes is not implemented yet" in out
    assert "⏳ ssm_state_bytes is not implemented yet" in out
    assert "❌" not in out


def test_a_missing_return_is_reported(capsys):
    assert not check_kv_cache_bytes(lambda **sizes: None)
    assert "forget to `return`" in capsys.readouterr().out


def test_memory_plots_draw_from_the_package_formulas():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mamba2_tile.course.plots import sequence_memory as plots

    assert plots.kv_cache_bytes is kv_cache_bytes and plots.ssm_state_bytes is ssm_state_bytes
    for fig in (plots.plot_kv_cache_vs_state(), plots.plot_layer_memory()):
        assert len(fig.axes) == 1
        plt.close(fig)
    fig = plots.plot_decode_memory([1024] * 12, nheads=4, headdim=8, prompt_len=8,
                                   bytes_per_value=4)
    kv, state = fig.axes[0].lines[:2]
    assert list(kv.get_ydata()) == [kv_cache_bytes(t, 1, 4, 8, 4) for t in range(1, 13)]
    assert list(state.get_ydata()) == [1024] * 12
    plt.close(fig)
