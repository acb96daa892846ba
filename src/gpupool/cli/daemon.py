"""What every long-running gpupool command shares: log setup and stopping on SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: object) -> None:
    logging.basicConfig(level=getattr(logging, str(level).upper(), logging.INFO), format=LOG_FORMAT)
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # one line per API request otherwise


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM; call it inside the running event loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop
