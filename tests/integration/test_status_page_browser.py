"""The status page in a real headless Chromium (Debian's ``chromium``), driven
over the Chrome DevTools Protocol: log in through the form, see a space a test
agent created, watch the page update when another agent joins, disconnect
that agent with the page's button, and keep a screenshot in the run's output
directory (``test-output/``, or ``$TEST_OUTPUT_DIR``).

Under ``CI=true`` a missing Chromium is a failure (.ci/run installs it);
elsewhere the test is skipped when it is not installed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.conftest import IN_CI
from tests.support.browser import OUTPUT_DIR, Chromium, chromium_binary
from tests.support.wsclient import WsClient

TOKEN = "browser-admin-token-0123456789"
SPACE = "design-review"


@pytest.fixture
async def browser() -> AsyncIterator[Chromium]:
    binary = chromium_binary()
    if binary is None:
        if IN_CI:
            pytest.fail("chromium is not installed: CI must run the browser test (.ci/run)")
        pytest.skip("chromium is not installed")
    chromium = await Chromium.launch(binary)
    yield chromium
    await chromium.aclose()


def row(table: str, key: str, value: str) -> str:
    return f"document.querySelector('#{table} tr[data-{key}=\"{value}\"]')"


def cell_text(table: str, key: str, value: str, column: int) -> str:
    return f"{row(table, key, value)}?.children[{column}]?.textContent"


async def test_the_status_page_live_in_a_browser(hub, clients, browser):
    server = await hub(admin_token=TOKEN)
    creator = await clients(
        server, "creator", agent_type="planner", capabilities=["urn:agora:review", "chat"]
    )
    await creator.join(SPACE)
    page = await browser.new_page()

    await page.goto(server.http_url + "/admin")
    assert await page.evaluate("document.title") == "Agora Hub · log in"
    since = page.mark()
    await page.evaluate(
        f"document.querySelector('input[name=token]').value = {TOKEN!r};"
        "document.getElementById('login').submit(); true"
    )
    await page.loaded(since)
    assert await page.evaluate("document.title") == "Agora Hub · status"
    assert await page.evaluate("document.cookie") == ""  # HttpOnly: not for scripts

    # The space the test agent created, with its one member, and the agent.
    await page.wait_for(f"{cell_text('spaces', 'space', SPACE, 2)} === '1'")
    caps = await page.wait_for(cell_text("agents", "agent", "creator", 2))
    assert caps == "urn:agora:review, chat"
    assert await page.evaluate(cell_text("agents", "agent", "creator", 1)) == "planner"
    node = server.node.node_id
    await page.wait_for(f"{cell_text('nodes', 'node', node, 2)} === '1'")

    # Another agent joins: the page shows it without a reload.
    refreshes = int(await page.evaluate("document.body.dataset.refreshes || '0'"))
    joiner = await WsClient.connect(server.url.replace("/ws", "/ws") + "", "joiner", heartbeat=True)
    await joiner.join(SPACE)
    await page.wait_for(f"{cell_text('spaces', 'space', SPACE, 2)} === '2'")
    await page.wait_for(row("agents", "agent", "joiner"))
    assert int(await page.evaluate("document.body.dataset.refreshes")) > refreshes
    assert await page.evaluate("document.getElementById('status').textContent.startsWith('live')")

    shot = await page.screenshot(OUTPUT_DIR / "status-page.png")
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 10_000

    # The disconnect button: a first click arms it, the second disconnects.
    button = "document.querySelector('button[data-disconnect=\"joiner\"]')"
    await page.evaluate(f"{button}.click(); true")
    await page.wait_for(f"{button}?.textContent === 'Confirm disconnect'")
    await page.evaluate(f"{button}.click(); true")
    code, frames = await joiner.closed()
    assert code == 4403 and frames[-1]["code"] == "DISCONNECTED"
    await page.wait_for(f"!{row('agents', 'agent', 'joiner')}")
    await page.wait_for(f"{cell_text('spaces', 'space', SPACE, 2)} === '1'")

    # Everything the page loaded came from the hub itself: it works offline.
    urls = page.requested_urls()
    assert urls and all(u.startswith(server.http_url) or u.startswith("data:") for u in urls), urls
    assert page.errors() == []
