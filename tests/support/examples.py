"""The runnable examples of the docs (``examples/``), as their tests use them, and
the code blocks of the documents themselves (:func:`snippets`).

An example is loaded as a module to call its pure functions, and run the way
the docs run it: a hub process with the example's config, the example agent
as a subprocess (:func:`running_agent`), and ``curl`` (:func:`post`).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
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


# ── the code blocks of the documents ────────────────────────────────────────

#: Every document whose code blocks are checked: README.md, docs/*.md and the JS
#: client's README.
DOCUMENTS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "clients" / "js" / "README.md",
]
#: ``<!-- doc-test: KIND [name=value …] -->`` on the line before a fence: what the
#: documentation tests do with the block (see tests/integration/test_docs_examples.py).
MARKER = re.compile(r"<!--\s*doc-test:\s*(?P<kind>[\w-]+)(?P<options>(?:\s+[\w-]+=\S+)*)\s*-->")
KINDS = frozenset({"program", "fragment"})
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)\s*$")
CODE_LANGS = {"python": "python", "js": "js", "javascript": "js", "mjs": "js", "html": "html"}


@dataclass(frozen=True)
class Snippet:
    """One fenced code block of a document, and its doc-test marker (if any)."""

    document: Path
    line: int  # of the opening fence, 1-based
    lang: str  # "python", "js", "html", or the fence's own word
    code: str
    kind: str | None
    options: dict[str, str]

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"

    def looks_runnable(self) -> bool:
        """Would a reader take it for a whole program to run?"""
        if self.lang == "python":
            return re.search(r"^(asyncio\.)?run\(", self.code, re.M) is not None
        if self.lang == "js":
            uses_client = 'from "agora-hub-client"' in self.code
            return uses_client and re.search(r"\.connect\(\)|\brun\(", self.code) is not None
        if self.lang == "html":
            return "<script" in self.code
        return False


def snippets(documents: list[Path] = DOCUMENTS) -> list[Snippet]:
    """Every fenced block of ``documents``, in order."""
    found: list[Snippet] = []
    for document in documents:
        lines = document.read_text().splitlines()
        i = 0
        while i < len(lines):
            fence = FENCE.match(lines[i])
            if fence is None:
                i += 1
                continue
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
            assert end is not None, f"{document}:{i + 1}: a code block that never ends"
            before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            marker = MARKER.search(before)
            options = dict(o.split("=", 1) for o in marker["options"].split()) if marker else {}
            lang = CODE_LANGS.get(fence["lang"], fence["lang"])
            code = "\n".join(lines[i + 1 : end]) + "\n"
            kind = marker["kind"] if marker else None
            found.append(Snippet(document, i + 1, lang, code, kind, options))
            i = end + 1
    return found
