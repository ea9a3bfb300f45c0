"""The environment probe never crashes, and its verdict follows the dispatcher's rule."""

import subprocess
import sys

import pytest

from mamba2_tile import dispatch
from mamba2_tile.compiler import NO_COMPILER
from mamba2_tile.course import environment
from mamba2_tile.course.environment import GPU_PATH, INTERPRETER_PATH, Environment, detect_environment


def make(**changes):
    facts = dict(torch_version="2.13.0", gpu_name="NVIDIA H200", compute_capability=(9, 0),
                 cutile_version="1.7.0", cutile_problem=None,
                 tileiras_path="/opt/cuda/bin/tileiras", tileiras_version="13.4.92")
    return Environment(**{**facts, **changes})


def test_detects_this_machine_and_agrees_with_the_dispatcher():
    env = detect_environment()
    assert env.runs_on_gpu == (dispatch.default_device() == "cuda")
    text = str(env)
    verdicts = [line for line in text.splitlines() if line.startswith("=> ")]
    assert len(verdicts) == 1 and env.path in verdicts[0]


def test_importing_the_module_probes_nothing():
    code = ("import sys, mamba2_tile.course.environment; "
            "print('cuda.tile' in sys.modules, 'torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.split() == ["False", "False"]


def test_gpu_with_cutile_takes_the_gpu_path():
    env = make()
    assert env.runs_on_gpu and env.path == GPU_PATH
    assert "NVIDIA H200 (sm_90)" in str(env)
    assert "found 13.4.92 at /opt/cuda/bin/tileiras" in str(env)


def test_cpu_only_takes_the_interpreter_path():
    env = make(gpu_name=None, compute_capability=None)
    assert not env.runs_on_gpu
    assert "none (CPU only)" in str(env)
    assert str(env).endswith(f"=> {INTERPRETER_PATH} (no GPU)")


def test_a_gpu_older_than_ampere_takes_the_interpreter_path():
    env = make(gpu_name="Tesla T4", compute_capability=(7, 5))   # Colab's free GPU
    assert not env.runs_on_gpu and env.path == INTERPRETER_PATH
    assert str(env).endswith(f"=> {INTERPRETER_PATH} (cuTile needs sm_80 or newer)")


def test_the_dispatcher_sends_an_old_gpu_to_the_interpreter(monkeypatch):
    torch = pytest.importorskip("torch")
    pytest.importorskip("cuda.tile")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *device: (7, 5))
    dispatch.gpu_available.cache_clear()
    try:
        assert not dispatch.gpu_available()
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *device: (8, 0))
        dispatch.gpu_available.cache_clear()
        assert dispatch.gpu_available()
    finally:
        dispatch.gpu_available.cache_clear()


def test_gpu_without_cutile_takes_the_interpreter_path():
    env = make(cutile_version=None, cutile_problem="ModuleNotFoundError: No module named 'cuda'",
               tileiras_path=None, tileiras_version=None)
    assert env.path == INTERPRETER_PATH
    assert "not importable (ModuleNotFoundError" in str(env)
    assert "(cuTile is not installed)" in str(env)


def test_without_cutile_the_summary_says_once_what_is_skipped_and_why():
    text = str(make(gpu_name=None, compute_capability=None, cutile_version=None,
                    cutile_problem="ModuleNotFoundError: No module named 'cuda'",
                    tileiras_path=None, tileiras_version=None))
    assert text.count(NO_COMPILER) == 1
    assert "cubins" in text and "registers" in text                # what is skipped
    assert "wheels for Linux and Windows only" in text             # why
    assert "same results" in text


def test_with_cutile_nothing_is_said_to_be_skipped():
    for env in (make(), make(gpu_name=None, compute_capability=None)):
        assert "Skipped" not in str(env) and NO_COMPILER not in str(env)


def test_forcing_the_interpreter_is_reported():
    env = make(interpret_forced=True)
    assert env.path == INTERPRETER_PATH and dispatch.FORCE_ENV in str(env)


def test_gpu_without_tileiras_warns():
    text = str(make(tileiras_path=None, tileiras_version=None))
    assert "tileiras: not found" in text and "Warning" in text


def test_no_torch_and_no_cutile_do_not_crash(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)       # makes `import torch` fail
    monkeypatch.setitem(sys.modules, "cuda.tile", None)
    env = detect_environment()
    assert env.torch_version is None and env.gpu_name is None
    assert env.cutile_version is None and env.tileiras_path is None
    assert "torch:    not installed" in str(env)
    assert env.path == INTERPRETER_PATH


def test_a_broken_cuda_driver_counts_as_no_gpu(monkeypatch):
    torch = pytest.importorskip("torch")

    def broken():
        raise RuntimeError("CUDA driver initialization failed")
    monkeypatch.setattr(torch.cuda, "is_available", broken)
    assert detect_environment().gpu_name is None


def test_missing_tileiras_is_reported(monkeypatch):
    monkeypatch.setattr(environment, "_find_tileiras", lambda: None)
    monkeypatch.setattr(environment, "_probe_cutile", lambda: ("1.7.0", None))
    env = detect_environment()
    assert env.tileiras_path is None and "tileiras: not found" in str(env)


def test_tileiras_is_found_where_cutile_finds_it():
    compile_module = pytest.importorskip("cuda.tile._compile")
    try:
        expected = compile_module._find_compiler_bin().path
    except FileNotFoundError:
        expected = None
    assert environment._find_tileiras() == expected


def test_a_version_is_none_when_the_compiler_cannot_run(tmp_path):
    assert environment._tileiras_version(str(tmp_path / "no-such-tileiras")) is None
