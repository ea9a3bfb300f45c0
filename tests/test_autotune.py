"""The autotuner without a GPU: its cache key and file, its off switch, and its search logic with
the search function injected (cuTile's exhaustive_search needs a GPU)."""

import json
import multiprocessing
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from mamba2_tile import api, autotune
from mamba2_tile.kernels import (DEFAULT_OPTIONS, ForwardOptions, FusedStateOutOptions,
                                 FwdPassStateOptions)
from mamba2_tile.kernels import plan as planning
from mamba2_tile.kernels.options import OPTION_TYPES
from mamba2_tile.kernels.plan import plan, plan_for


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
    """Lower is better: swap and a latency hint win, and tile size 32 and 8 worker warps win (for
    the kernels that have these options)."""
    return (10.0 - 2 * getattr(options, "swap_operands", False)
            - (getattr(options, "latency", None) is not None)
            - (getattr(options, "block_p", None) == 32) - (options.occupancy == 2)
            - (getattr(options, "worker_warps", None) == 8))


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
    # The exact form matters: the stored cache (data/h200_autotune_cache.json) is keyed by it.
    key = autotune.cache_key("NVIDIA H200", "compute_out", shape)
    assert key == "NVIDIA H200 | compute_out | c64-p64-n64-g1-l4096-bfloat16"
    x32 = x.float()
    shape32 = autotune.shape_class(x32, B, 64)
    assert autotune.cache_key("G", "k", shape32, ForwardOptions.uniform(tf32=True)).endswith(
        "float32-tf32")
    # Stage 1 has no TF32 option; it is keyed with its pass, as the stored cache was.
    assert autotune.cache_key("G", "chunk_cumsum", shape32,
                              ForwardOptions.uniform(tf32=True)).endswith("float32-tf32")
    # TF32 means nothing for bfloat16: the same entry as without it.
    assert autotune.cache_key("G", "k", shape, ForwardOptions.uniform(tf32=True)) == \
        autotune.cache_key("G", "k", shape)


def test_search_spaces_are_small_and_valid():
    # The targets' shapes (64 heads, headdim 64, dstate 64): 26 compilations on the three-kernel
    # path, 8 on the fused one (occupancy x worker warps, then the latency hint).
    x, _, _, B, _ = inputs(nheads=64, seqlen=10)
    sizes = {k: len(autotune.tile_space(k, x, B)) for k in autotune.KERNELS}
    assert sizes == {"chunk_cumsum": 2, "fwd_pass_state": 4, "compute_out": 4,
                     "fused_state_out": 6}
    three = sum(sizes[k] for k in autotune.THREE_KERNELS)
    assert three + 2 * 2 * len(autotune.switch_space(FwdPassStateOptions())) == 26
    assert sizes["fused_state_out"] + len(autotune.switch_space(FusedStateOutOptions())) == 8
    assert {(o.occupancy, o.worker_warps) for o in autotune.tile_space("fused_state_out", x, B)} \
        == {(o, w) for o in autotune.FUSED_OCCUPANCIES for w in (4, 8)}
    # 4 heads: block_h 4 only.
    x, _, _, B, _ = inputs(nheads=4, seqlen=10)
    assert len(autotune.tile_space("chunk_cumsum", x, B)) == 1
    switches = autotune.switch_space(FwdPassStateOptions(block_p=32))
    assert len(switches) == 4 and all(o.block_p == 32 for o in switches)
    # Tiles never exceed the (padded) problem: headdim 8 gives block_p 8 only.
    small_x = torch.zeros(1, 10, 2, 8)
    assert {o.block_p for o in autotune.tile_space("fwd_pass_state", small_x, B)} == {8}


def test_tune_picks_the_fastest_and_one_layout_for_both_stages():
    x, dt, A, B, C = inputs()
    search = FakeSearch(prefer)
    three = DEFAULT_OPTIONS.with_switches(fuse_state_passing=False)
    entries = autotune.tune(x, dt, A, B, C, 64, base=three, search=search)
    assert len(search.spaces) == 3 + 2 * 2      # tiles x3 kernels, switches x2 kernels x2 layouts
    state = FwdPassStateOptions(**entries["fwd_pass_state"]["options"])
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
    assert all(type(o) is FusedStateOutOptions for space in search.spaces for o in space)
    assert len(search.spaces[1]) == 2               # latency only: the fused kernel has no swap
    chosen = autotune.options_from_entries(entries, fused)
    assert chosen.fuse_state_passing is True
    assert chosen.fused_state_out == FusedStateOutOptions(occupancy=2, worker_warps=8,
                                                          latency=autotune.LATENCY_HINT)


def test_the_path_is_the_plans():
    # 4 blocks: too few to fill a GPU, so the plan cuts the sequence into segments, still the
    # fused kernel, which is what the tuner tunes; forced off, the three kernels.
    x, dt, A, B, C = inputs(nheads=4)
    search = FakeSearch(prefer)
    assert set(autotune.tune(x, dt, A, B, C, 64, base=DEFAULT_OPTIONS, search=search)) == \
        {"fused_state_out"}
    three = DEFAULT_OPTIONS.with_switches(fuse_state_passing=False)
    assert set(autotune.tune(x, dt, A, B, C, 64, base=three, search=search)) == \
        set(autotune.THREE_KERNELS)


def test_tune_prefers_the_faster_layout():
    x, dt, A, B, C = inputs()
    search = FakeSearch(prefer)

    def by_layout(space, plan):
        # Every switch off, stage 2 launches the kernel without the layout switch: natural.
        transposed = plan(space[0]).named_args().get("STATES_TRANSPOSED", False) is True
        return SimpleNamespace(best=SimpleNamespace(config=space[0],
                                                    mean_us=1.0 if transposed else 2.0))
    three = DEFAULT_OPTIONS.with_switches(fuse_state_passing=False)
    entries = autotune.tune(x, dt, A, B, C, 64, base=three, search=lambda space, plan: (
        by_layout(space, plan) if len(space) == 4 else search(space, plan)))
    assert entries["fwd_pass_state"]["transposed_layout"] is True
    assert autotune.options_from_entries(entries, three).transposed_layout is True


def entry(block_p=32, layout=True, mean_us=3.0):
    return {"options": {"block_p": block_p}, "transposed_layout": layout, "mean_us": mean_us}


def key(n, kernel="fwd_pass_state"):
    return f"GPU | {kernel} | shape{n}"


def test_cache_roundtrip(isolated_cache):
    entries = {key(1): entry()}
    autotune.save_cache(entries)
    autotune.save_cache({key(2, "chunk_cumsum"): {"options": {}, "transposed_layout": False,
                                                   "mean_us": 1.0}})
    assert autotune.load_cache() == {**entries, key(2, "chunk_cumsum"): {
        "options": {}, "transposed_layout": False, "mean_us": 1.0}}
    # Nothing left beside the file but the lock.
    assert sorted(p.name for p in isolated_cache.iterdir()) == ["autotune.json",
                                                                  "autotune.json.lock"]


def write_binary(path):
    path.write_bytes(bytes(range(256)) * 4)


CORRUPT = {
    "binary": write_binary,
    "not json": lambda path: path.write_text("{not json"),
    "a list": lambda path: path.write_text("[1, 2, 3]"),
    "a number": lambda path: path.write_text("42"),
    "a directory": lambda path: path.mkdir(),
}


def one_cache_warning(record, path):
    warned = [w for w in record if issubclass(w.category, autotune.CacheWarning)]
    assert len(warned) == 1, [str(w.message) for w in warned]
    assert str(path) in str(warned[0].message)
    return str(warned[0].message)


@pytest.mark.parametrize("corrupt", list(CORRUPT))
def test_an_unreadable_cache_is_empty_with_one_warning(isolated_cache, corrupt):
    path = isolated_cache / "autotune.json"
    CORRUPT[corrupt](path)
    with pytest.warns(autotune.CacheWarning) as record:
        assert autotune.load_cache() == {}
    one_cache_warning(record, path)


@pytest.mark.parametrize("bad, why", [
    ({"options": {"no_such_option": 3}, "transposed_layout": False}, "no_such_option"),
    ({"options": {"block_p": 32}}, "transposed_layout"),
    ({"transposed_layout": False}, "options"),
    ("not an entry", "options"),
])
def test_entries_this_version_cannot_use_are_left_out_with_one_warning(isolated_cache, bad, why):
    path = isolated_cache / "autotune.json"
    path.write_text(json.dumps({key(1): entry(), key(2): bad, key(3): bad}))
    with pytest.warns(autotune.CacheWarning) as record:
        assert autotune.load_cache() == {key(1): entry()}
    message = one_cache_warning(record, path)
    assert "2 of 3" in message and why in message


def test_an_unknown_kernel_in_a_key_is_left_out(isolated_cache):
    path = isolated_cache / "autotune.json"
    path.write_text(json.dumps({key(1, "no_such_kernel"): entry(), "no bars": entry()}))
    with pytest.warns(autotune.CacheWarning) as record:
        assert autotune.load_cache() == {}
    assert "no_such_kernel" in one_cache_warning(record, path)


def test_saving_merges_and_keeps_what_it_cannot_use(isolated_cache):
    path = isolated_cache / "autotune.json"
    newer = {"options": {"an_option_of_a_later_version": 1}, "transposed_layout": False}
    path.write_text(json.dumps({key(1): entry(), key(9): newer}))
    autotune.save_cache({key(2): entry(64, False)})
    assert json.loads(path.read_text()) == {key(1): entry(), key(9): newer,
                                            key(2): entry(64, False)}


@pytest.mark.parametrize("corrupt", ["binary", "a list"])
def test_saving_replaces_a_file_that_is_not_an_object(isolated_cache, corrupt):
    path = isolated_cache / "autotune.json"
    CORRUPT[corrupt](path)
    autotune.save_cache({key(1): entry()})
    assert autotune.load_cache() == {key(1): entry()}


def _hammer(directory, worker, count):
    for n in range(count):
        autotune.save_cache({key(f"{worker}-{n}"): entry(mean_us=n)},
                            path=Path(directory) / "autotune.json")


def test_two_processes_saving_at_once_lose_nothing(isolated_cache):
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    count = 150
    workers = [context.Process(target=_hammer, args=(str(isolated_cache), worker, count))
               for worker in range(2)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(timeout=300)
    assert [process.exitcode for process in workers] == [0, 0]
    stored = autotune.load_cache()
    assert len(stored) == 2 * count
    assert stored == {key(f"{worker}-{n}"): entry(mean_us=n) for worker in range(2) for n in range(count)}
    assert not list(isolated_cache.glob("*.tmp"))


def test_the_stored_h200_cache_reads_back():
    # Written when every kernel listed every option: each entry still gives its kernel's options,
    # with the values it stored.
    stored = json.loads((Path(__file__).parent.parent / "data" / "h200_autotune_cache.json")
                        .read_text())
    by_shape = {}
    for key, entry in stored.items():
        gpu, kernel, shape = key.split(" | ")
        by_shape.setdefault((gpu, shape), {})[kernel] = entry
    assert len(by_shape) >= 3
    with warnings.catch_warnings():
        warnings.simplefilter("error", autotune.CacheWarning)
        assert autotune.load_cache(Path(__file__).parent.parent / "data" /
                                   "h200_autotune_cache.json") == stored
    for entries in by_shape.values():
        chosen = autotune.options_from_entries(entries)
        for kernel, entry in entries.items():
            values = {k: v for k, v in entry["options"].items() if v not in (None, False)}
            assert {k: v for k, v in vars(getattr(chosen, kernel)).items()
                    if v not in (None, False)} == values


def test_tuned_options_tune_once_then_read_the_cache(isolated_cache, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")
    x, dt, A, B, C = inputs()
    search = FakeSearch(prefer)
    three = DEFAULT_OPTIONS.with_switches(fuse_state_passing=False)
    first = autotune.tuned_options(x, dt, A, B, C, 64, base=three, search=search)
    assert len(search.spaces) == 7
    stored = json.loads((isolated_cache / "autotune.json").read_text())
    assert sorted(stored) == sorted(autotune.cache_key("Fake GPU", k, autotune.shape_class(x, B, 64))
                                    for k in autotune.THREE_KERNELS)
    # A new process: the file, not a new search.
    autotune.clear_memory()
    never = FakeSearch(lambda o: pytest.fail("tuned a cached shape"))
    assert autotune.tuned_options(x, dt, A, B, C, 64, base=three, search=never) == first
    # Another seqlen in the same bucket: the same entry.
    x2, dt2, A2, B2, C2 = inputs(seqlen=900)
    assert autotune.tuned_options(x2, dt2, A2, B2, C2, 64, base=three, search=never) == first


def test_cpu_tensors_are_never_tuned(monkeypatch):
    monkeypatch.setenv(autotune.AUTOTUNE_ENV, "1")
    monkeypatch.setattr(autotune, "tuned_options", lambda *a, **k: pytest.fail("tuned on the CPU"))
    x, dt, A, B, C = inputs()
    assert api.forward_options(x, dt, A, B, C, 64) == plan_for(x, B, 64)
    api.mamba_chunk_scan_combined(x, dt, A, B, C, 64)


class FakeCuda(SimpleNamespace):
    """Just enough of a CUDA tensor for the API's options: a shape, a dtype, a device."""

    is_cuda = True
    device = torch.device("cuda", 0)


@pytest.mark.parametrize("tuning", [False, True])
def test_the_api_hands_the_planned_options_to_the_tuner_only_when_on(monkeypatch, tuning):
    monkeypatch.setenv(autotune.AUTOTUNE_ENV, "1" if tuning else "0")
    monkeypatch.setattr(planning, "_cuda_sm_count", lambda index: 132)
    handed = []
    tuned = DEFAULT_OPTIONS.with_switches(latency=7)
    monkeypatch.setattr(autotune, "tuned_options", lambda x, dt, A, B, C, chunk_size, base:
                        handed.append(base) or tuned)
    x = FakeCuda(shape=(8, 1024, 64, 64), dtype=torch.bfloat16)
    B = FakeCuda(shape=(8, 1024, 1, 128), dtype=torch.bfloat16)
    options = api.forward_options(x, None, None, B, B, 64)
    planned = plan(8, 1024, 64, 64, 1, 128, 64, torch.bfloat16, 132)
    assert planned.fuse_state_passing is True
    assert handed == ([planned] if tuning else [])
    assert options == (tuned if tuning else planned)


def tune_with(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")
    x, dt, A, B, C = inputs()
    three = DEFAULT_OPTIONS.with_switches(fuse_state_passing=False)
    return lambda: autotune.tuned_options(x, dt, A, B, C, 64, base=three,
                                          search=FakeSearch(prefer))


@pytest.mark.parametrize("corrupt", ["binary", "a list"])
def test_a_corrupt_cache_costs_a_tuning_and_one_warning(isolated_cache, monkeypatch, corrupt):
    path = isolated_cache / "autotune.json"
    CORRUPT[corrupt](path)
    tuned = tune_with(monkeypatch)
    with pytest.warns(autotune.CacheWarning) as record:
        options = tuned()
    one_cache_warning(record, path)
    autotune.clear_memory()               # the next process reads the file the first wrote
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuned() == options
    assert len(json.loads(path.read_text())) == 3


@pytest.mark.parametrize("where", ["under a file", "a directory at the path"])
def test_an_unwritable_cache_warns_instead_of_failing_the_call(tmp_path, monkeypatch, where):
    if where == "under a file":
        (tmp_path / "file").write_text("")
        directory = tmp_path / "file" / "cache"          # mkdir fails, even for root
    else:
        directory = tmp_path
        (tmp_path / "autotune.json").mkdir()
    monkeypatch.setenv(autotune.CACHE_DIR_ENV, str(directory))
    tuned = tune_with(monkeypatch)
    with pytest.warns(autotune.CacheWarning) as record:
        options = tuned()
    messages = [str(w.message) for w in record if issubclass(w.category, autotune.CacheWarning)]
    assert any("could not save" in m and str(directory / "autotune.json") in m for m in messages)
    # Tuned once: the process remembers the choice.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuned() == options
