"""The errors of the control-plane harness."""

from __future__ import annotations

import subprocess


class ControlPlaneError(RuntimeError):
    """The control plane could not be started, reached, or read back; the message says where."""


class KubectlError(subprocess.CalledProcessError):
    """``kubectl`` exited non-zero; ``cmd`` is ``["kubectl", *args]``, ``str()`` adds stderr."""

    def __str__(self) -> str:
        command = " ".join(str(part) for part in self.cmd)
        stderr = (self.stderr or "").strip()
        return f"{command} exited with {self.returncode}: {stderr or '(no stderr)'}"
