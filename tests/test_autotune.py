"""The autotuner without a GPU: its cache key and file, its off switch, and its search logic with
the search function injected (cuTile's exhaustive_search needs a GPU)."""

import json
from types import SimpleNamespace

import pytest
import torch

from mamba2_tile import api, autotune
from mamba2_tile.kernels import DEFAULT_OPTIONS, ForwardOptions, KernelOptions


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(autotune.CACHE_DIR_ENV, str(tmp_path))
    autotune.clear_memory()
    yield tmp_path
    autotune.clear_memory()


def inputs(device="cpu", seqlen=300, dtype=torch.bfloat16, ngroups=1, nheads=4):
    x = torch.randn(1, seqlen, nheads, 64, dtype=dtype, device=device)
    dt = torch.rand(1, seqlen, nheads, device=device) * 0.1
    A = -torch.rand(nheads, device=device) - 0.5
    B = torch.randn(1, seqlen, ngroups, 64, dtype=dtype, device=device)
    return x, dt, A, B, B.clone()


class FakeSearch:
    """Records every search space; times a config by a made-up cost so the choice is known."""

    def __init__(self, cost):
        self.cost, self.spaces = cost, []

    def __call__(self, space, plan):
        self.spaces.append(list(space))
        for config in space:                      # every config must plan a launch
            launch = plan(config)
            assert launch.grid and launch.args
        best = min(space, key=self.cost)
        return SimpleNamespace(best=SimpleNamespace(config=best, mean_us=self.cost(best)))


def prefer(options):
    """Lower is better: swap and a latency hint win, and tile size 32 wins."""
    return (10.0 - 2 * options.swap_operands - (options.latency is not None)
            - (options.block_p == 32) - (options.occupancy == 2))


@pytest.mark.parametrize("value, on", [("1", True), ("on", True), ("0", False), ("", False),
                                       ("off", False)])
def test_the_switch(monkeypatch, value, on):
    monkeypatch.setenv(autotune.AUTOTUNE_ENV, value)
    assert autotune.enabled() is on


def test_off_by_default(monkeypatch):
    monkeypatch.delenv(autotune.AUTOTUNE_ENV, raising=False)
    assert not autotune.enabled()


def test_cache_dir_from_the_environment(isolated_cache):
    assert autotune.cache_path() == isolated_cache / "autotune.json"


def test_shape_class_and_key():
    x, _, _, B, _ = inputs(seqlen=3000, ngroups=1)
    shape = autotune.shape_class(x, B, 64)
    assert shape == autotune.ShapeClass(64, 64, 64, True, 4096, "bfloat16")
    short = autotune.shape_class(*inputs(seqlen=10)[::3], 64)
    assert short.seqlen_bucket == autotune.MIN_SEQLEN_BUCKET
    key = autotune.cache_key("NVIDIA H200", "compute_out", shape)
    assert key == "NVIDIA H200 | compute_out | c64-p64-n64-g1-l4096-bfloat16"
    x32 = x.float()
    shape32 = autotune.shape_class(x32, B, 64)
    assert autotune.cache_key("G", "k", shape32, ForwardOptions.uniform(tf32=True)).endswith(
        "float32-tf32")
    # TF32 means nothing for bfloat16: the same entry as without it.
    assert autotune.cache_key("G", "k", shape, ForwardOptions.uniform(tf32=True)) == \
        autotune.cache_key("G", "k", shape)


def test_search_spaces_are_small_and_valid():
    # The targets' shapes (64 heads, headdim 64, dstate 64): 26 compilations on the three-kernel
    # path, 5 on the fused one.
    x, _, _, B, _ = inputs(nheads=64, seqlen=10)
    sizes = {k: len(autotune.tile_space(k, x, B)) for k in autotune.KERNELS}
    assert sizes == {"chunk_cumsum": 2, "fwd_pass_state": 4, "compute_out": 4,
                     "fused_state_out": 3}
    three = sum(sizes[k] for k in autotune.THREE_KERNELS)
    assert three + 2 * 2 * len(autotune.switch_space(KernelOptions())) == 26
    assert sizes["fused_state_out"] + len(autotune.switch_space(KernelOptions(), swap=False)) == 5
    # 4 heads: block_h 4 only.
    x, _, _, B, _ = inputs(nheads=4, seqlen=10)
    assert len(autotune.tile_space("chunk_cumsum", x, B)) == 1
    switches = autotune.switch_space(KernelOptions(block_p=32))
    assert len(switches) == 4 and all(o.block_p == 32 for o in switches)
    # Tiles never exceed the (padded) problem: headdim 8 gives block_p 8 only.
    small_x = torch.zeros(1, 10, 2, 8)
    assert {o.block_p for o in autotune.tile_space("fwd_pass_state", small_x, B)} == {8}


def test_tune_picks_the_fastest_and_one_layout_for_both_stages():
    x, dt, A, B, C = inputs()
    search = FakeSearch(prefer)
    entries = autotune.tune(x, dt, A, B, C, 64, search=search)
    assert len(search.spaces) == 3 + 2 * 2      # tiles x3 kernels, switches x2 kernels x2 layouts
    state = KernelOptions(**entries["fwd_pass_state"]["options"])
    assert state.swap_operands and state.latency == autotune.LATENCY_HINT
    assert state.block_p == 32 and state.occupancy == 2
    assert entries["fwd_pass_state"]["transposed_layout"] == \
        entries["compute_out"]["transposed_layout"]
    options = autotune.options_from_entries(entries)
    assert options.fwd_pass_state == state and options.transposed_layout is False


def test_tune_on_the_fused_path_searches_one_kernel():
    x, dt, A, B, C = inputs()
    search = FakeSearch(prefer)
    fused = DEFAULT_OPTIONS.with_switches(fuse_state_passing=True)
    entries = autotune.tune(x, dt, A, B, C, 64, base=fused, search=search)
    assert list(entries) == ["fused_state_out"] and len(search.spaces) == 2
    assert not any(o.swap_operands for o in search.spaces[1])     # the fused kernel has no swap
    chosen = autotune.options_from_entries(entries, fused)
    assert chosen.fuse_state_passing is True
    assert chosen.fused_state_out == KernelOptions(occupancy=2, latency=autotune.LATENCY_HINT)


def test_the_path_follows_the_base_options():
    x, _, _, B, _ = inputs(nheads=4)                 # 4 blocks: too few to fill a GPU
    assert not autotune.uses_fused(x, B, DEFAULT_OPTIONS)
    assert autotune.uses_fused(x, B, DEFAULT_OPTIONS.with_switches(fuse_state_passing=True))
    x = torch.zeros(4, 8, 64, 64)                      # 256 blocks
    assert autotune.uses_fused(x, B, DEFAULT_OPTIONS)
    assert not autotune.uses_fused(x, B, ForwardOptions())


def test_tune_prefers_the_faster_layout():
    x, dt, A, B, C = inputs()
    search = FakeSearch(prefer)

    def by_layout(space, plan):
        # With a switch on, the bool STATES_TRANSPOSED is the second-to-last kernel argument.
        transposed = plan(space[0]).args[-2] is True
        return SimpleNamespace(best=SimpleNamespace(config=space[0],
                                                    mean_us=1.0 if transposed else 2.0))
    entries = autotune.tune(x, dt, A, B, C, 64, search=lambda space, plan: (
        by_layout(space, plan) if len(space) == 4 else search(space, plan)))
    assert entries["fwd_pass_state"]["transposed_layout"] is True
    assert autotune.options_from_entries(entries).transposed_layout is True


def test_cache_roundtrip(isolated_cache):
    entries = {"k1": {"options": {"block_p": 32}, "transposed_layout": True, "mean_us": 3.0}}
    autotune.save_cache(entries)
    autotune.save_cache({"k2": {"options": {}, "transposed_layout": False, "mean_us": 1.0}})
    assert autotune.load_cache() == {**entries, "k2": {"options": {}, "transposed_layout": False,
                                                       "mean_us": 1.0}}
    (isolated_cache / "autotune.json").write_text("{not json")
    assert autotune.load_cache() == {}


def test_tuned_options_tune_once_then_read_the_cache(isolated_cache, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")
    x, dt, A, B, C = inputs()
    search = FakeSearch(prefer)
    first = autotune.tuned_options(x, dt, A, B, C, 64, search=search)
    assert len(search.spaces) == 7
    stored = json.loads((isolated_cache / "autotune.json").read_text())
    assert sorted(stored) == sorted(autotune.cache_key("Fake GPU", k, autotune.shape_class(x, B, 64))
                                    for k in autotune.THREE_KERNELS)
    # A new process: the file, not a new search.
    autotune.clear_memory()
    never = FakeSearch(lambda o: pytest.fail("tuned a cached shape"))
    assert autotune.tuned_options(x, dt, A, B, C, 64, search=never) == first
    # Another seqlen in the same bucket: the same entry.
    x2, dt2, A2, B2, C2 = inputs(seqlen=900)
    assert autotune.tuned_options(x2, dt2, A2, B2, C2, 64, search=never) == first


def test_cpu_tensors_are_never_tuned(monkeypatch):
    monkeypatch.setenv(autotune.AUTOTUNE_ENV, "1")
    x, dt, A, B, C = inputs()
    never = FakeSearch(lambda o: pytest.fail("tuned on the CPU"))
    assert autotune.forward_options(x, dt, A, B, C, 64, search=never) is DEFAULT_OPTIONS


def test_off_switch_keeps_the_defaults_even_for_cuda_tensors(monkeypatch):
    monkeypatch.setenv(autotune.AUTOTUNE_ENV, "0")
    x = SimpleNamespace(is_cuda=True)
    never = FakeSearch(lambda o: pytest.fail("tuned while off"))
    assert autotune.forward_options(x, None, None, None, None, 64, search=never) is \
        DEFAULT_OPTIONS


def test_the_api_asks_the_autotuner(monkeypatch):
    asked = []

    def fake(x, dt, A, B, C, chunk_size):
        asked.append(chunk_size)
        return DEFAULT_OPTIONS
    monkeypatch.setattr(autotune, "forward_options", fake)
    x, dt, A, B, C = inputs(seqlen=70)
    api.mamba_chunk_scan_combined(x, dt, A, B, C, 64)
    assert asked == [64]
