"""Where the Slurm flows' decisions are written: stderr, syslog and ``slurm.log_file``."""

from __future__ import annotations

import os
import stat
import sys
import time

from gpuhc.errors import GpuhcError


class Log:
    """Lines go to stderr (slurmd keeps the prolog's, an admin running by hand sees them), to
    syslog (the health check's output is discarded by slurmd), and to ``slurm.log_file``.

    The file is appended to as root, so it gets the post-mortem directory's care: as root its
    directory must be root's alone (:func:`gpuhc.postmortem.check_root_dir`), the file is
    opened with ``O_NOFOLLOW`` and must be a regular file with one link. A refusal is said once,
    loudly, on stderr and syslog; the run goes on without the file."""

    def __init__(self, prefix: str, log_file: str | None = None, use_syslog: bool = True, echo: bool = True):
        self.prefix, self.log_file, self.use_syslog, self.echo = prefix, log_file, use_syslog, echo
        self.lines: list[str] = []
        self._file_ok: bool | None = None  # None: not checked yet

    def __call__(self, text: str, loud: bool = False) -> None:
        line = f"{self.prefix}: {' '.join(str(text).split())}"
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
        try:
            if self._file_ok is None:
                from gpuhc.postmortem import check_root_dir

                check_root_dir(os.path.dirname(os.path.abspath(path)), "slurm.log_file's directory")
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            fd = os.open(path, flags, 0o640)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or (os.geteuid() == 0 and st.st_nlink != 1):
                    raise GpuhcError(f"{path} is not a plain file with one link")
                os.write(fd, text.encode("utf-8", "replace"))
            finally:
                os.close(fd)
        except (OSError, GpuhcError) as e:
            self._file_ok = False
            return f"{path}: {getattr(e, 'strerror', None) or e}"
        self._file_ok = True
        return None
