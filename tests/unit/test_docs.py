"""The docs describe what the code does: every setting, error code and close code."""

from pathlib import Path

from hub.settings import FILE_ONLY, Settings
from protocol.errors import CloseCode, ErrorCode

DOCS = Path(__file__).resolve().parents[2] / "docs"


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
