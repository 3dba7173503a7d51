"""The stand-in's S3 (for MinIO): moto's server on port 9000, keeping what it is sent.

moto holds objects in memory; its recorder (MOTO_ENABLE_RECORDING, MOTO_RECORDER_FILEPATH
on the service's volume) appends every request it serves to a file, and this replays that
file at start, so the bucket and its objects outlive a restart or `compose down` as
MinIO's volume does. The health check looks for READY, written once the replay is done.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

from moto.moto_api import recorder
from moto.moto_api._internal.recorder.models import Recorder
from moto.server import ThreadedMotoServer

READY = Path("/tmp/s3-ready")
PORT = 9000

# The server answers requests on threads, and the recorder appends each with two writes:
# one at a time, so no two requests' lines interleave.
_record = Recorder._record_request
_lock = threading.Lock()


def _record_one_at_a_time(self: Recorder, *args: object, **kwargs: object) -> None:
    with _lock:
        _record(self, *args, **kwargs)


Recorder._record_request = _record_one_at_a_time  # type: ignore[method-assign]


def main() -> None:
    # Blocked before any thread starts (they inherit the mask), then waited for: PID 1 of a
    # container gets no default action for SIGTERM, and `compose down` would wait its 10 s
    # timeout and kill it mid-write.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    READY.unlink(missing_ok=True)
    server = ThreadedMotoServer(ip_address="0.0.0.0", port=PORT)
    server.start()
    recording = Path(os.environ["MOTO_RECORDER_FILEPATH"])
    if recording.exists() and recording.stat().st_size:
        started = time.monotonic()
        recorder.replay_recording(target_host=f"http://127.0.0.1:{PORT}")
        took = time.monotonic() - started
        sys.stdout.write(f"stand-in s3: replayed {recording} in {took:.1f} s\n")
    READY.touch()
    sys.stdout.write(f"stand-in s3: serving on :{PORT}\n")
    sys.stdout.flush()
    signal.sigwait(stop_signals)
    with _lock:  # no request's line half written
        server.stop()


if __name__ == "__main__":
    main()
