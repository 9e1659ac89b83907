"""gcp-storage-emulator that waits on each connection on its own thread, and handles one request at a time.

Its server is the standard library's single-threaded HTTPServer: while it waits on a connection
a client opened and has not used yet (pyarrow's GCS client does that), every other request waits
too, and an orphan run that lists with one client while it reads manifests with another hangs.
Its storage is not safe for concurrent requests (parallel resumable uploads lose their sessions),
so requests still run one at a time, under one lock. Arguments are the emulator's own.
"""

import http.server
import sys
import threading
from collections.abc import Callable
from typing import Any

from gcp_storage_emulator import server as emulator
from gcp_storage_emulator.__main__ import main

_ONE_AT_A_TIME = threading.Lock()


def _serialized(handle: Callable[[Any], None]) -> Callable[[Any], None]:
    def locked(self: Any) -> None:
        with _ONE_AT_A_TIME:
            handle(self)

    return locked


for _verb in ("do_GET", "do_POST", "do_PUT", "do_DELETE", "do_PATCH"):
    setattr(emulator.RequestHandler, _verb, _serialized(getattr(emulator.RequestHandler, _verb)))


class _Server(http.server.ThreadingHTTPServer):
    block_on_close = False  # stopping must not wait for connections a client left open


emulator.server.HTTPServer = _Server  # the emulator reads it when it starts

if __name__ == "__main__":
    sys.exit(main())
