"""Where the Slurm flows' decisions are written: stderr, syslog and ``slurm.log_file``."""

from __future__ import annotations

import os
import sys
import time

from gpuhc.text.logtext import escape


class Log:
    """Lines go to stderr (slurmd keeps the prolog's, an admin running by hand sees them), to
    syslog (the health check's output is discarded by slurmd), and to ``slurm.log_file``.

    Every line is one printable line (:func:`gpuhc.text.logtext.escape`): node names, reasons and
    messages quote text others wrote. The file is appended to as root the way every such file is
    (:func:`gpuhc.files.fsutil.open_append`: its directory, made 0755 when missing, and every one above
    must be root's; never through a link; a regular file with one link). A refusal is said once,
    loudly, on stderr and syslog; the run goes on without the file."""

    def __init__(self, prefix: str, log_file: str | None = None, use_syslog: bool = True, echo: bool = True):
        self.prefix, self.log_file, self.use_syslog, self.echo = prefix, log_file, use_syslog, echo
        self.lines: list[str] = []
        self._file_ok: bool | None = None  # None: not checked yet

    def __call__(self, text: str, loud: bool = False) -> None:
        line = escape(f"{self.prefix}: {' '.join(str(text).split())}")
        self.lines.append(line)
        self._emit(line, loud)
        if self.log_file:
            problem = self._append(time.strftime("%Y-%m-%dT%H:%M:%S ") + line + "\n")
            if problem:
                said = f"{self.prefix}: not writing slurm.log_file: {problem}"
                self.lines.append(said)
                self._emit(said, loud=True)

    def _emit(self, line: str, loud: bool) -> None:
        if self.echo:
            print(line, file=sys.stderr, flush=True)
        if self.use_syslog:
            try:
                import syslog

                syslog.openlog("gpuhc", 0, syslog.LOG_DAEMON)
                syslog.syslog(syslog.LOG_WARNING if loud else syslog.LOG_INFO, line)
            except Exception:  # no syslog on this host: stderr and the file still have it
                pass

    def _append(self, text: str) -> str | None:
        """Append to the log file; the reason it was refused, the first time only."""
        if self._file_ok is False:
            return None
        path = str(self.log_file)
        from gpuhc.files.fsutil import UnsafePath, open_append

        try:
            fd = open_append(path, "slurm.log_file", 0o640, 0o755)
            try:
                os.write(fd, text.encode("utf-8", "replace"))
            finally:
                os.close(fd)
        except (OSError, UnsafePath) as e:
            self._file_ok = False
            return f"{path}: {getattr(e, 'strerror', None) or e}"
        self._file_ok = True
        return None
