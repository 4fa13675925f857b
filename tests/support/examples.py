"""The runnable examples of the docs (``examples/``), as their tests use them.

An example is loaded as a module to call its pure functions, and run the way
the docs run it: a hub process with the example's config, the example agent
as a subprocess (:func:`running_agent`), and ``curl`` (:func:`post`).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from tests.support.servers import ROOT

EXAMPLES = ROOT / "examples"


def load_example(name: str, module_name: str | None = None) -> ModuleType:
    """``examples/{name}.py`` as a module (not on ``sys.path``)."""
    spec = importlib.util.spec_from_file_location(module_name or name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def running_agent(name: str, hub_url: str, ready: str) -> Iterator[subprocess.Popen[str]]:
    """``examples/{name}.py --url hub_url``, once its first line (printed when
    it has joined) holds ``ready``; stopped afterwards."""
    agent = subprocess.Popen(
        [sys.executable, str(EXAMPLES / f"{name}.py"), "--url", hub_url],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert agent.stdout is not None
        line = agent.stdout.readline()  # blocks until the agent has joined (or died)
        assert ready in line, line + agent.stdout.read()
        yield agent
    finally:
        agent.terminate()
        try:
            agent.wait(10)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()


def post(url: str, body: str | None = None, *, content_type: str | None = None) -> Any:
    """What the docs do with curl (or urllib where there is no curl): the
    JSON answer. Without ``body`` a GET; without ``content_type`` curl's own."""
    headers = {} if content_type is None else {"Content-Type": content_type}
    curl = shutil.which("curl")
    if curl is not None:
        args = [curl, "-s", "--max-time", "20", url]
        for name, value in headers.items():
            args += ["-H", f"{name}: {value}"]
        if body is not None:
            args += ["-d", body]
        out = subprocess.run(args, capture_output=True, text=True, timeout=30, check=True)
        return json.loads(out.stdout)
    data = None if body is None else body.encode()
    request = urllib.request.Request(url, data=data, headers=headers)
    with urllib.request.urlopen(request, timeout=20) as resp:
        return json.loads(resp.read())
