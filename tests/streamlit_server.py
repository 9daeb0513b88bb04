"""A real `streamlit run app/Home.py` server for the tests: started, waited for, stopped. No tests here."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

HOME = Path(__file__).resolve().parents[1] / "app" / "Home.py"
STARTUP_SECONDS = 90   # a deadline for a slow machine, not a measurement


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def streamlit_server(cwd: Path, log_path: Path, *flags: str, env: dict | None = None):
    """Start the app with `python -m streamlit run <repo>/app/Home.py --server.port PORT FLAGS` from
    `cwd`, in this environment updated by `env` (None unsets) and without STREAMLIT_* variables; yield
    (url, port) once its health check answers on 127.0.0.1; stop it on exit."""
    port = free_port()
    environment = {name: value for name, value in {**os.environ, **(env or {})}.items()
                   if value is not None and not name.startswith("STREAMLIT_")}
    with open(log_path, "w+") as log:
        process = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(HOME), "--server.port", str(port),
                                    *flags], cwd=cwd, env=environment, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + STARTUP_SECONDS
            while not _healthy(url):
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"streamlit did not start:\n{log.read()[-3000:]}")
                time.sleep(0.3)
            yield url, port
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def listening_addresses(port: int) -> set[str]:
    """The local addresses of the sockets listening on `port` (Linux: /proc/net/tcp and tcp6)."""
    addresses = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        if not os.path.exists(table):
            continue
        with open(table, encoding="ascii") as rows:
            next(rows)
            for row in rows:
                local, state = row.split()[1], row.split()[3]
                address, port_hex = local.split(":")
                if state == "0A" and int(port_hex, 16) == port:   # 0A: LISTEN
                    addresses.add(_address(address, width))
    return addresses


def _address(hex_address: str, width: int) -> str:
    raw = bytes.fromhex(hex_address)
    if width == 8:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    # /proc/net/tcp6 writes the address as four 32-bit words in host (little-endian) order
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)
