"""The trust boundary's message reader: JSON lines from a process that runs code under test.

A worker, a zygote or a trial writes JSON lines on a socket the bot made and handed it; nothing
it sends is trusted to be well formed or bounded (docs/SECURITY.md).
"""

from __future__ import annotations

import json
import socket
from typing import Any

MAX_MESSAGE = 64 << 20  # bytes of one message; a peer that sends more without a line end is cut off


class Lines:
    """Buffered JSON-line reading from a non-blocking socket. What the peer sends is data, never
    trusted to be well formed: a line that is not a JSON object is dropped (and counted), one
    longer than MAX_MESSAGE ends the stream."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer, self.closed, self.bad = sock, b"", False, 0

    def read(self) -> list[dict[str, Any]]:
        """Every complete message available now; sets `closed` at end of stream."""
        try:
            data = self.sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:
            data = b""
        if not data:
            self.closed = True
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        if len(self.buffer) > MAX_MESSAGE:
            self.buffer, self.closed = b"", True
        out = []
        for line in lines:
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                msg = None
            if isinstance(msg, dict):
                out.append(msg)
            else:
                self.bad += 1
        return out

    def drain(self) -> list[dict[str, Any]]:
        """Every message the peer has sent so far (read until the socket has no more now)."""
        out: list[dict[str, Any]] = []
        for _ in range(2 * MAX_MESSAGE >> 20):  # a peer that never stops sending is read this far
            if self.closed:
                break
            try:
                self.sock.setblocking(False)
                peek = self.sock.recv(1, socket.MSG_PEEK)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                peek = b""
            if not peek:
                out += self.read()  # the end of the stream: `closed`
                break
            out += self.read()
        return out
