"""A loopback TCP proxy that drops connections on purpose.

MariaDB cannot be told to cut one client's socket in the middle of a result
set or a binlog stream; a proxy between the client and the server can. Once
armed, a connection that has carried more than `after_bytes` from the server
is shut down in both directions, so the client sees the server go away
mid-read (pymysql error 2013, "Lost connection to MySQL server during query").
"""

from __future__ import annotations

import socket
import threading


class FaultProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1"):
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._after_bytes: int | None = None
        self._cuts_left = 0
        self.cuts = 0
        """Connections cut so far."""
        self._stopped = False

    def cut(self, after_bytes: int, times: int) -> None:
        """Cut the next `times` connections that carry more than `after_bytes` from the server."""
        with self._lock:
            self._after_bytes, self._cuts_left = after_bytes, times

    def start(self) -> FaultProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_server: bool) -> None:
        carried = 0
        try:
            while chunk := src.recv(65536):
                carried += len(chunk)
                if from_server and self._should_cut(carried):
                    break
                dst.sendall(chunk)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _should_cut(self, carried: int) -> bool:
        with self._lock:
            if self._after_bytes is None or self._cuts_left <= 0 or carried <= self._after_bytes:
                return False
            self._cuts_left -= 1
            self.cuts += 1
            return True
