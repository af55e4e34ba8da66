"""What the console shows, also kept in the run directory: `RUN_DIR/console.log`.

`ConsoleTranscript.install()` puts a tee in front of `sys.stdout` and `sys.stderr` before
anything prints (Hydra's log handlers, created later, write through it too); `attach(path)` opens
the file once the run directory is known and writes what was printed until then, `detach()`
closes it. The file holds lines as a terminal leaves them: a progress bar redrawn in place
(`\r`) is kept as its last state only, so the file has one line per step line, log record and
summary line, never one per bar refresh. Ray prints the actors' lines through this process's
`sys.stdout` (with `logger.library_logs=console`), so they are kept too; what a library writes to
the file descriptors directly, from C, is not.
"""

from __future__ import annotations

import io
import sys
import threading
from pathlib import Path
from typing import IO, Any

CONSOLE_FILE = "console.log"
# Lines printed before the run directory is known (validation, Hydra's start) are held at most
# this many characters; a run that never gets a directory writes nothing.
_MAX_BUFFERED_CHARS = 1 << 20


class ConsoleTranscript:
    """A tee of this process's `sys.stdout` and `sys.stderr` into one file (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._held: list[str] = []
        self._held_chars = 0
        self._streams: list[_TeeStream] = []

    @classmethod
    def install(cls) -> ConsoleTranscript:
        transcript = cls()
        sys.stdout = transcript._wrap(sys.stdout)
        sys.stderr = transcript._wrap(sys.stderr)
        return transcript

    def uninstall(self) -> None:
        """Put the original streams back (flushing partial lines into the file)."""
        for stream in self._streams:
            if sys.stdout is stream:
                sys.stdout = stream.stream
            if sys.stderr is stream:
                sys.stderr = stream.stream
        self.detach()

    def _wrap(self, stream: IO[str]) -> _TeeStream:
        tee = _TeeStream(stream, self)
        self._streams.append(tee)
        return tee

    def attach(self, path: Path) -> None:
        """Write into `path` from now on, starting with what was printed before."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._file = path.open("a", encoding="utf-8", buffering=1)
            self._file.writelines(self._held)
            self._held, self._held_chars = [], 0

    def detach(self) -> None:
        for stream in self._streams:
            stream.finish_line()
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
            self._held, self._held_chars = [], 0

    def record(self, line: str) -> None:
        """One finished console line (its newline included)."""
        with self._lock:
            if self._file is not None:
                self._file.write(line)
            elif self._held_chars + len(line) <= _MAX_BUFFERED_CHARS:
                self._held.append(line)
                self._held_chars += len(line)


class _TeeStream(io.TextIOBase):
    """Writes through to `stream`; hands each finished line, as a terminal leaves it (the text
    after its last carriage return), to the transcript."""

    def __init__(self, stream: IO[str], transcript: ConsoleTranscript) -> None:
        super().__init__()
        self.stream = stream
        self._transcript = transcript
        self._partial = ""

    def write(self, text: str) -> int:
        written = self.stream.write(text)
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        if "\r" in self._partial:  # a bar redrawn in place: only its last state can be kept
            self._partial = self._partial.rsplit("\r", 1)[1]
        for line in lines:
            self._transcript.record(line.rsplit("\r", 1)[-1] + "\n")
        return written

    def finish_line(self) -> None:
        if self._partial.strip():
            self._transcript.record(self._partial + "\n")
        self._partial = ""

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", "utf-8")

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.stream, "errors", None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)
