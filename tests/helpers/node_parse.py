"""parse_lines with :class:`gpuhc.sources.node_reports.NodeReports` fed every kernel message,
as the kernel-log reader is to feed it (the hook: one call at the top of the parser's
``_message``, after the record rules). Until the reader makes that call itself this helper
makes it, through the reader's own line and record handling, so that the fixtures are read
exactly as the reader reads them; once it does, this is ``parse_lines``."""

from __future__ import annotations

from typing import Iterable

from gpuhc.model.kernel import KernelLog
from gpuhc.sources import kernel_log_parse as P
from gpuhc.sources.node_reports import NodeReports


class _Parser(P._Parser):
    def __init__(self, boot_time, year):
        super().__init__(boot_time, year)
        self.node = NodeReports()

    def _message(self, text: str, t, seq) -> None:
        found = self.node.feed(text.strip(), t, seq, self.idx + 1)
        if found is not None:
            self.found.append(found)
        super()._message(text, t, seq)


def parse(lines: Iterable[str], boot_time: float | None = None, year: int | None = None) -> KernelLog:
    if getattr(P._Parser, "node", None) is not None or "NodeReports" in P.__dict__:
        return P.parse_lines(lines, boot_time=boot_time, year=year)  # the reader feeds it itself
    parser = _Parser(boot_time, year)
    for line in lines:
        parser.feed(line)
    return parser.finish()
