"""TLS for both ports, with a certificate that can be replaced while serving.

Both listening sockets (WebSocket and HTTP) are given one *front* context,
built once. Its SNI callback, which OpenSSL runs on every ClientHello (with or
without a server name), hands the handshake to the *current* context: the one
made from the certificate and key files when the hub started, or at the last
successful :meth:`ServerTls.prepare_reload`. A reload builds a complete new
context first — a missing file, a key that does not match the certificate,
anything — fails before anything changes; committing it is one assignment.
Connections already open keep the session they negotiated; only new
handshakes see the new certificate.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path

from hub.config.checks import FILES, check_file
from hub.errors import ConfigError


def _context(certfile: Path, keyfile: Path) -> ssl.SSLContext:
    check_file(certfile, "tls_certfile", FILES["tls_certfile"])
    check_file(keyfile, "tls_keyfile", FILES["tls_keyfile"])
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(certfile, keyfile)
    except ssl.SSLError as exc:
        raise ConfigError(
            f"tls_certfile {certfile} / tls_keyfile {keyfile}: not a PEM certificate chain "
            f"and its matching private key ({exc.reason or exc})"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"cannot read tls_certfile {certfile} / tls_keyfile {keyfile}: {exc.strerror or exc}"
        ) from None
    return ctx


class ServerTls:
    """The certificate both ports serve; :meth:`prepare_reload` swaps it atomically."""

    def __init__(self, certfile: Path, keyfile: Path):
        self.certfile = certfile
        self.keyfile = keyfile
        self._current = _context(certfile, keyfile)
        # The front context also holds the certificate, so a handshake is
        # served even if a TLS library ever skipped the callback.
        self.context = _context(certfile, keyfile)
        self.context.sni_callback = self._select

    def _select(
        self, conn: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, front: ssl.SSLContext
    ) -> None:
        conn.context = self._current

    def prepare_reload(self) -> Callable[[], None]:
        """Read the files again; the returned function puts the new certificate in
        service. ConfigError (nothing changed) when they are unusable."""
        fresh = _context(self.certfile, self.keyfile)

        def commit() -> None:
            self._current = fresh

        return commit
