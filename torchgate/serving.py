"""A TLS server certificate that follows its files: the webhook's and the controller's HTTPS.

Both serve a certificate from a mounted Secret that ``torchgate certs`` renews. Reloading in
place, ``SSLContext.load_cert_chain`` on the live context changes what *new* handshakes present,
so a renewed Secret (the mounted files change) never drops a connection or needs a restart; a
half-written pair is ignored until it loads cleanly.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
from pathlib import Path

log = logging.getLogger("torchgate.serving")


class ReloadingTLS:
    """A server SSL context whose certificate follows the files on disk."""

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._digest = ""
        self.reload(initial=True)

    def _read_digest(self) -> str:
        digest = hashlib.sha256()
        digest.update(self.cert_file.read_bytes())
        digest.update(self.key_file.read_bytes())
        return digest.hexdigest()

    def reload(self, *, initial: bool = False) -> bool:
        """Load the files if they changed; return whether a new certificate is in use."""
        try:
            digest = self._read_digest()
            if digest == self._digest:
                return False
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            if initial:
                raise
            log.warning("keeping the current TLS certificate; could not load the new one: %s", exc)
            return False
        self._digest = digest
        if not initial:
            log.info("reloaded the TLS certificate from %s", self.cert_file)
        return True

    async def watch(self, interval: float) -> None:
        """Poll the files and reload on change."""
        while True:
            await asyncio.sleep(interval)
            self.reload()
