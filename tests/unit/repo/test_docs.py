"""The docs describe what the code does: every setting, error code and close code."""

from pathlib import Path

from hub.config.settings import FILE_ONLY, Settings
from protocol.errors import CloseCode, ErrorCode

DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_every_setting_is_in_the_configuration_table():
    text = (DOCS / "configuration.md").read_text()
    for name in Settings.model_fields:
        assert f"| `{name}` |" in text, name
        if name not in FILE_ONLY:
            assert f"AGORA_HUB_{name.upper()}" in text, name


def test_every_error_and_close_code_is_documented():
    text = (DOCS / "operations.md").read_text() + (DOCS / "protocol.md").read_text()
    for code in ErrorCode:
        assert f"`{code.value}`" in text, code
    for close in CloseCode:
        assert f"| {close.value} |" in text, close


def _documented_defaults(text: str) -> dict[str, str]:
    """``{setting: default}`` from the rows of a markdown settings table,
    including README rows that pair settings (``| `a` / `b` | `1` / `2` |``)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        names = [n.strip().strip("`") for n in cells[0].split(" / ")]
        values = [v.strip().strip("`") for v in cells[1].split(" / ")]
        if len(names) == len(values):
            found.update(zip(names, values, strict=True))
    return found


def test_documented_defaults_match_the_settings():
    readme = (DOCS.parent / "README.md").read_text()
    for text, least in (((DOCS / "configuration.md").read_text(), 30), (readme, 15)):
        documented = _documented_defaults(text)
        checked = 0
        for name, field in Settings.model_fields.items():
            default = field.get_default(call_default_factory=False)
            if (
                name not in documented
                or isinstance(default, bool)
                or not isinstance(default, int | float)
            ):
                continue
            shown = documented[name].replace(",", "")
            assert float(shown) == default, (name, documented[name], default)
            checked += 1
        assert checked >= least


def test_operations_says_invalid_utf8_closes_1007():
    """Issue 28: the limits section said bad input never closes a connection."""
    text = (DOCS / "operations.md").read_text()
    limits = text[text.index("## Limits and protection") :]
    assert "never closes a connection" not in limits
    assert "not valid UTF-8 (**1007**)" in limits
    assert "| 1007 |" in text and "| 1007 |" in (DOCS / "protocol.md").read_text()
