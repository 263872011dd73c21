"""A TCP proxy in front of the database that can lose the server's replies: a real network
fault (the request arrives and commits; the answer never does), made on cue rather than by luck.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo


def _upstream(url: str) -> tuple[int, Any]:
    params = conninfo_to_dict(url)
    host = str(params.get("host") or "/var/run/postgresql")
    port = int(params.get("port") or 5432)
    if host.startswith("/"):
        return socket.AF_UNIX, f"{host}/.s.PGSQL.{port}"
    return socket.AF_INET, (host, port)


class ReplyLosingProxy:
    def __init__(self, url: str) -> None:
        self.url = url
        self.family, self.address = _upstream(url)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.swallow = threading.Event()  # set: the server's bytes are dropped, not forwarded
        self.swallowed = 0
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def dsn(self) -> str:
        params = conninfo_to_dict(self.url)
        params.update(host="127.0.0.1", port=str(self.port))
        return make_conninfo(**params)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.socket(self.family, socket.SOCK_STREAM)
            server.connect(self.address)
            with self._lock:
                self._pairs.append((client, server))
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, from_server: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if from_server and self.swallow.is_set():
                    self.swallowed += len(data)
                    continue
                target.sendall(data)
        for s in (source, target):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def drop_all(self) -> None:
        """Reset every connection through the proxy (the client sees it broken)."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def close(self) -> None:
        self.listener.close()
        self.drop_all()
