"""Every exercise notebook, run as a learner runs it: in JupyterLab, in a real browser.

One JupyterLab server from this Python environment serves a temporary copy of ``notebooks/``
(the tracked files are never touched); headless Chromium, driven by Playwright, opens each
notebook, clicks Run → Run All Cells, waits for the kernel, saves, and the saved file is read back.

What passes is what ``pytest --nbval-lax notebooks`` accepts: no cell may end in an error unless it
is marked to raise (tag ``raises-exception`` or a ``# NBVAL_RAISES_EXCEPTION`` line). Only the
tag lets JupyterLab's Run All go on past the error; after a cell with just the comment, Run All
stops, as it does for a learner, and the test reports the cells that never ran. The
unfinished exercises do not raise when run: a stub only defines a function, and the check below
it prints "⏳ ... not implemented yet" (mamba2_tile/course/checks/feedback.py). On top of nbval,
every widget must have rendered in the page: no "Error displaying widget", no "Loading widget...".

Screenshots of each notebook (and of each widget) go to ``test-artifacts/browser/`` (git-ignored).

Chromium is Debian's (``apt-get install chromium``; Playwright's own download needs the
internet): the first of ``$CHROMIUM``, ``chromium``, ``chromium-browser`` that exists; without one
the test is skipped. ``BROWSER_NOTEBOOKS=03,05`` runs only the notebooks whose names start so.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

SERVER_START_S = 120
KERNEL_START_S = 120
RUN_ALL_S = 300        # the slowest notebook (09 compiles kernels) takes well under this
WIDGET_RENDER_S = 30
MAX_SCREENSHOT_PX = 16_000
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
WIDGET_FAILURES = ("Error displaying widget", "Loading widget...")


def chromium_executable():
    """Debian's Chromium: ``$CHROMIUM`` if set, else ``chromium`` or ``chromium-browser`` on PATH."""
    candidates = [os.environ.get("CHROMIUM"), "chromium", "chromium-browser"]
    for candidate in filter(None, candidates):
        found = shutil.which(candidate)
        if found:
            return found
    return None


def selected_notebooks():
    prefixes = [p for p in os.environ.get("BROWSER_NOTEBOOKS", "").split(",") if p]
    return [path for path in NOTEBOOKS
            if not prefixes or any(path.name.startswith(prefix) for prefix in prefixes)]


def source(cell):
    """A cell's source as one string (a saved file may hold it as a list of lines)."""
    return "".join(cell["source"])


def expected_to_raise(cell):
    """nbval's rule for a cell that may end in an error (also in --nbval-lax mode)."""
    return ("raises-exception" in cell.get("metadata", {}).get("tags", [])
            or any(line.strip().startswith("# NBVAL_RAISES_EXCEPTION")
                   for line in source(cell).splitlines()))


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_lab_settings(settings_dir):
    """User settings for this server only: every cell stays in the DOM (so each widget can be
    checked, not only those scrolled into view), and no news or update pop-ups over the page."""
    settings = {
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
            "fetchNews": "false", "checkForUpdates": False},
    }
    for name, values in settings.items():
        path = settings_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


@pytest.fixture(scope="module")
def chromium():
    executable = chromium_executable()
    if executable is None:
        pytest.skip("no Chromium found (looked for $CHROMIUM, `chromium`, `chromium-browser`): "
                    "install Debian's with `apt-get install chromium` to run the browser test")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="Playwright is not installed (pip install -e '.[dev]')")
    with sync_api.sync_playwright() as playwright:
        # Containers often give /dev/shm 64 MB, too little for Chromium's shared memory.
        browser = playwright.chromium.launch(executable_path=executable, headless=True,
                                             args=["--disable-dev-shm-usage"])
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server over a temporary copy of notebooks/; yields (base URL, token, root)."""
    home = tmp_path_factory.mktemp("lab")
    root = home / "root"
    shutil.copytree(ROOT / "notebooks", root)
    write_lab_settings(home / "settings")
    port, token = free_port(), uuid.uuid4().hex
    env = dict(
        os.environ,
        # The kernels import this checkout's package, whatever is installed in the environment.
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
    )
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.port={port}",
               "--ServerApp.port_retries=0", "--ServerApp.ip=127.0.0.1",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
               # window.jupyterapp: to see when the kernel is ready and the file saved
               # (the test acts through the menus, as a learner does)
               "--LabApp.expose_app_in_browser=True"]
    # Containers and CI run as root, which Jupyter refuses unless told.
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    log = (home / "server.log").open("w")
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_server(server, f"{base}/api/status?token={token}", home / "server.log")
        yield base, token, root
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def wait_for_server(server, url, log_path):
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"JupyterLab exited with code {server.returncode}:\n{log_path.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"JupyterLab did not answer within {SERVER_START_S} s:\n{log_path.read_text()}")


def click_menu(page, menu, item):
    page.locator(f".lm-MenuBar-itemLabel:text-is('{menu}')").click()
    page.locator(f".lm-Menu-itemLabel:text-is('{item}')").click()


def run_all_cells(page):
    """Run → Run All Cells, then wait until the kernel is idle with nothing left queued: every
    code cell has run, or Run All stopped at a cell that raised (it skips the cells after it)."""
    # Until the kernel has connected, Run All finds no kernel and quietly runs nothing.
    page.wait_for_function(
        """() => {
            const notebook = window.jupyterapp && window.jupyterapp.shell.currentWidget;
            const kernel = notebook && notebook.sessionContext
                && notebook.sessionContext.session && notebook.sessionContext.session.kernel;
            return kernel && kernel.connectionStatus === 'connected' && kernel.status === 'idle';
        }""", timeout=KERNEL_START_S * 1000, polling=500)
    click_menu(page, "Run", "Run All Cells")
    # Run All marks every cell [*] at once, so "some ran, none queued" holds only at the end.
    page.wait_for_function(
        """() => {
            const prompts = [...document.querySelectorAll(
                '.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')].map(p => p.textContent.trim());
            const indicator = document.querySelector('.jp-Notebook-ExecutionIndicator');
            return prompts.some(p => /^\\[\\d+\\]:$/.test(p)) && !prompts.includes('[*]:')
                && indicator && indicator.dataset.status === 'idle';
        }""", timeout=RUN_ALL_S * 1000, polling=500)


def save(page, path):
    """File → Save Notebook; read the file back once the tab is clean (JupyterLab clears the
    dirty mark when the server answers that the file is written)."""
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget.context.model.dirty")
    click_menu(page, "File", "Save Notebook")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty",
                           timeout=30_000)
    return json.loads(path.read_text(encoding="utf-8"))


def wait_for_widgets(page):
    """Give each widget view time to leave "Loading widget..."; return the failing texts left."""
    # A cell's own widget outputs, not the outputs nested inside a widget (an Output widget).
    outputs = page.locator(".jp-Cell-outputArea > .jp-OutputArea-child"
                           " > .jp-OutputArea-output:has(> .jupyter-widgets)")
    deadline = time.monotonic() + WIDGET_RENDER_S
    while True:
        text = page.locator(".jp-Notebook").inner_text()
        failures = [failure for failure in WIDGET_FAILURES if failure in text]
        if "Loading widget..." not in failures or time.monotonic() > deadline:
            return outputs, failures
        time.sleep(0.5)


def error_report(cells):
    """The cells (index, first line, error) that ended in an error without being marked to."""
    report = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "code" or expected_to_raise(cell):
            continue
        for output in cell.get("outputs", []):
            if output["output_type"] == "error":
                first_line = (source(cell).splitlines() or [""])[0]
                report.append(f"cell {index} ({first_line!r}): {output['ename']}: {output['evalue']}")
    return report


def run_in_lab(chromium, lab, name):
    """Open ``name`` in JupyterLab, Run All Cells, save; screenshot the page and each widget.

    Returns the saved notebook, the number of widgets shown in the page, the widget failure
    texts still in the page, and the browser console's errors."""
    base, token, root = lab
    stem = Path(name).stem
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    console_errors = []
    page.on("console", lambda message: message.type == "error" and console_errors.append(message.text))
    try:
        page.goto(f"{base}/lab/tree/{name}?reset&token={token}")
        try:
            run_all_cells(page)
        finally:
            page.screenshot(path=ARTIFACTS / f"{stem}.png")
        saved = save(page, root / name)
        widget_outputs, widget_failures = wait_for_widgets(page)
        screenshot_whole_notebook(page, ARTIFACTS / f"{stem}-all.png")
        shown_widgets = widget_outputs.count()
        for number in range(shown_widgets):
            widget = widget_outputs.nth(number)
            widget.scroll_into_view_if_needed()
            widget.screenshot(path=ARTIFACTS / f"{stem}-widget{number}.png")
    finally:
        page.close()
        shut_down_kernels(base, token)
    return saved, shown_widgets, widget_failures, console_errors


def screenshot_whole_notebook(page, path):
    """The notebook from top to bottom in one picture: a window as tall as the notebook's
    scrolled content (up to Chromium's largest screenshot), scrolled to the top."""
    height = page.evaluate("""() => {
        const panel = window.jupyterapp.shell.currentWidget.node;
        const scroller = [panel, ...panel.querySelectorAll('*')]
            .filter(e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowY))
            .reduce((a, b) => (b.scrollHeight > a.scrollHeight ? b : a));
        scroller.scrollTop = 0;
        return scroller.scrollHeight;
    }""")
    viewport = page.viewport_size
    page.set_viewport_size({"width": viewport["width"], "height": min(height + 200, MAX_SCREENSHOT_PX)})
    page.screenshot(path=path)
    page.set_viewport_size(viewport)


def shut_down_kernels(base, token):
    """End every session, so eleven notebooks' kernels do not pile up in memory."""
    headers = {"Authorization": f"token {token}"}
    with urllib.request.urlopen(urllib.request.Request(f"{base}/api/sessions", headers=headers)) as answer:
        sessions = json.load(answer)
    for session in sessions:
        request = urllib.request.Request(f"{base}/api/sessions/{session['id']}", headers=headers,
                                         method="DELETE")
        urllib.request.urlopen(request).close()


def saved_widget_count(notebook):
    return sum(WIDGET_MIME in output.get("data", {})
               for cell in notebook["cells"] if cell["cell_type"] == "code"
               for output in cell.get("outputs", []))


@pytest.mark.parametrize("notebook", selected_notebooks(), ids=lambda path: path.stem)
def test_run_all_cells_in_jupyterlab(notebook, chromium, lab):
    saved, shown_widgets, widget_failures, console_errors = run_in_lab(chromium, lab, notebook.name)
    errors = error_report(saved["cells"])
    assert not errors, f"{notebook.name}: cells ended in an error:\n" + "\n".join(errors)
    assert all(cell.get("execution_count") for cell in saved["cells"] if cell["cell_type"] == "code"), \
        f"{notebook.name}: the saved file has code cells that never ran"
    assert not widget_failures, (
        f"{notebook.name}: a widget did not render ({', '.join(widget_failures)}); "
        f"browser console errors:\n" + "\n".join(console_errors))
    assert shown_widgets == saved_widget_count(saved), (
        f"{notebook.name}: {saved_widget_count(saved)} widget outputs saved "
        f"but {shown_widgets} shown in the page")


def test_the_browser_check_sees_errors_and_broken_widgets(chromium, lab):
    """The checks above are not vacuous: a notebook with a cell marked to raise, a working
    widget, a widget whose model does not exist, and finally an unmarked error."""
    import nbformat

    cells = [
        nbformat.v4.new_code_cell("raise ValueError('expected')",
                                  metadata={"tags": ["raises-exception"]}),
        nbformat.v4.new_code_cell("import ipywidgets\nipywidgets.IntSlider(value=3)"),
        nbformat.v4.new_code_cell(
            "from IPython.display import display\n"
            f"display({{{WIDGET_MIME!r}: {{'model_id': 'no-such-model', "
            "'version_major': 2, 'version_minor': 0}}, raw=True)"),
        nbformat.v4.new_code_cell("1 / 0"),
        nbformat.v4.new_code_cell("'never runs: Run All stops at the error above'"),
    ]
    notebook = nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}})
    name = "zz_browser_selftest.ipynb"
    nbformat.write(notebook, lab[2] / name)

    saved, shown_widgets, widget_failures, _ = run_in_lab(chromium, lab, name)

    errors = error_report(saved["cells"])
    assert len(errors) == 1 and errors[0].startswith("cell 3 ('1 / 0'): ZeroDivisionError"), errors
    assert saved["cells"][4].get("execution_count") is None
    assert widget_failures == ["Error displaying widget"], widget_failures
    assert shown_widgets == 1 and saved_widget_count(saved) == 2
