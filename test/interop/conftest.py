import logging
import os
import sys
import uuid

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import petrel  # noqa: E402


# aiortc logs a warning per undecodable packet; a failing test's own message
# already says how many frames were decoded from how many packets.
logging.getLogger("aiortc.codecs").setLevel(logging.ERROR)


def pytest_configure(config):
    # Fail at once, with the reason, when not started by run.sh (no server).
    for name in ("PETREL_INTEROP_URL", "PETREL_BIN", "PETREL_API_SECRET"):
        petrel.env(name)


@pytest.fixture
def room(request):
    """A room of its own for each test, named after it (seen in the server log)."""
    name = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")
    return f"{name[:80]}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def server_log():
    """Reads the server's log lines written since the fixture was set up."""
    path = os.environ.get("PETREL_INTEROP_LOG")
    start = os.path.getsize(path) if path and os.path.exists(path) else 0

    def read():
        if not path:
            return []
        with open(path, encoding="utf-8", errors="replace") as f:
            f.seek(start)
            return f.read().splitlines()

    return read
