"""Debian's chromium, headless, driven over the Chrome DevTools Protocol: a small client over
aiohttp's websockets (no Selenium or Playwright: the protocol is JSON messages with ids).

`Chromium.start` launches the browser with a throwaway profile and `--remote-debugging-port=0`;
the port it picked is in the profile's DevToolsActivePort file. `Page` sends commands to one tab
and reads their answers; events it does not wait for are dropped.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from support.waiting import wait_for_async, wait_until


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class PageError(AssertionError):
    """A DevTools command failed, or page script threw."""


class Page:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        msg_id = next(self._ids)
        await self._ws.send_json({"id": msg_id, "method": method, "params": params or {}})
        async for msg in self._ws:
            data = json.loads(msg.data)
            if data.get("id") != msg_id:
                continue  # an event, or the answer to nothing we wait for
            if "error" in data:
                raise PageError(f"{method}: {data['error']}")
            result: dict[str, Any] = data.get("result") or {}
            return result
        raise PageError(f"{method}: the browser closed the connection")

    async def navigate(self, url: str) -> None:
        await self.send("Page.navigate", {"url": url})

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (awaited if it is a promise)."""
        result = await self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise PageError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, what: str, timeout_s: float = 60.0) -> Any:
        """The first truthy value of `expression`, polled (a hang guard, not a speed claim)."""

        async def check() -> Any:
            return await self.evaluate(expression)

        try:
            return await wait_for_async(check, timeout_s, what)
        except AssertionError as err:
            shown = await self.evaluate(
                "location.href + '\\n' + (document.body?.innerText ?? '').slice(0, 3000)"
            )
            raise AssertionError(f"{err}; the page at that point:\n{shown}") from None

    async def screenshot(self, path: Path) -> Path:
        shot = await self.send(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


class Chromium:
    def __init__(self, process: subprocess.Popen[bytes], port: int, profile: Path) -> None:
        self.process = process
        self.port = port
        self.profile = profile

    @classmethod
    def start(cls, binary: str, profile: Path, log: Path) -> Chromium:
        profile.mkdir(parents=True, exist_ok=True)
        active = profile / "DevToolsActivePort"
        active.unlink(missing_ok=True)  # a reused profile's file names a browser long gone
        argv = [
            binary,
            "--headless=new",
            "--no-sandbox",  # tests run as root in a container; the sandbox needs user namespaces
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--window-size=1400,1000",
            f"--user-data-dir={profile}",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "about:blank",
        ]
        env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
        with log.open("wb") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)

        def port() -> int | None:
            if process.poll() is not None:
                raise AssertionError(f"chromium exited ({process.returncode}); see {log}")
            lines = active.read_text().splitlines() if active.exists() else []
            return int(lines[0]) if lines and lines[0].isdigit() else None

        return cls(process, wait_until(port, 60, f"chromium's DevTools port ({log})"), profile)

    @contextlib.asynccontextmanager
    async def page(self) -> AsyncIterator[Page]:
        """The browser's first tab."""
        async with aiohttp.ClientSession(trust_env=False) as session:
            async with session.get(f"http://127.0.0.1:{self.port}/json/list") as resp:
                targets = await resp.json()
            url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            async with session.ws_connect(url, max_msg_size=64 * 1024 * 1024) as ws:
                page = Page(ws)
                await page.send("Page.enable")
                await page.send("Runtime.enable")
                yield page

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
