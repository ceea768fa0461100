"""Read a saved Slurm node listing the way an admin pastes it: any format, several at once.

``gpuhc drain-report --from-file`` gets whatever an admin or a ticket has: ``scontrol show
node`` (plain or ``-o``), any of Slurm's JSON listings, or sinfo's tables (default, ``-N -l``,
``-R``, ``-O``), often several of them in one file with the shell prompts that ran them.
:func:`read_dump` splits the text into blocks, reads every block it recognises, and lists
every block it skipped (with its line and first words); it fails only when it recognises
nothing. Facts about one node from several blocks are merged, the most complete source
winning: ``scontrol``/JSON (whole reasons) over sinfo tables with reasons (cut at 20
characters by default) over tables without.

:func:`parse_nodes` is the strict reader for one whole document (a live ``scontrol`` answer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from gpuhc.slurm.read.nodes import MAX_NODES, UNAVAILABLE, Node, NodeParseError, node_fields, node_from_record, parse_show_node, \
    parse_state

MAX_WARNINGS = 50
_JSON_START = re.compile(r"\s*(?:\{|\[\s*[\{\]])")
# A shell prompt, or a bare command line: the commands that print node listings (and the
# usual wrappers around them), after a prompt ending in $, #, % or >.
_COMMAND = re.compile(r"^(?:.*?[$#%>]\s*)?(?:sudo\s+|time\s+|watch\s+\S*\s*)*"
                      r"(?:sinfo|scontrol|squeue|sacct|cat|jq|curl|ssh|srun)(?:\s|$)")
_DATE_LINE = re.compile(r"^\s*\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\s*$")  # `sinfo -l` first line

# How complete a source's reasons are: a later, richer source overrides a poorer one.
RANK_FULL, RANK_TABLE, RANK_NO_REASON = 3, 2, 1


@dataclass
class Dump:
    nodes: list[Node]
    formats: list[str] = field(default_factory=list)  # what was read, in file order
    warnings: list[str] = field(default_factory=list)  # each block skipped, and other caveats


def parse_nodes(text: str | bytes, warn: Callable[[str], None] | None = None) -> list[Node]:
    """One whole document in one format (``-o`` lines, multi-line blocks, or any JSON); a
    :class:`NodeParseError` says where it broke. With ``warn``, a ``NodeName=`` record that does
    not read is skipped and said there instead (the other nodes still count)."""
    if isinstance(text, bytes):
        if _JSON_START.match(text[:4096].decode("utf-8", "replace")):
            from gpuhc.slurm.read.nodes_json import parse_nodes_json

            return parse_nodes_json(text)
        text = text.decode("utf-8", "replace")
    if _JSON_START.match(text):
        from gpuhc.slurm.read.nodes_json import parse_nodes_json

        return parse_nodes_json(text)
    if "NodeName=" not in text:
        snippet = text.strip().splitlines()[0][:60] if text.strip() else ""
        raise NodeParseError("not a Slurm node listing: expected `scontrol show node [-o]` text (NodeName=...) or "
                             f"JSON from sinfo/scontrol --json or slurmrestd; starts with {snippet!r}")
    return parse_show_node(text, warn)


def read_dump(data: str | bytes) -> Dump:
    """Every node record the text holds, whatever mix of formats; see the module docstring."""
    if isinstance(data, bytes):
        if _JSON_START.match(data[:4096].decode("utf-8", "replace")):
            try:
                return Dump(parse_nodes(data), ["json"])
            except NodeParseError:
                pass  # maybe JSON followed by something else: read block by block
        data = data.decode("utf-8", "replace")
    elif _JSON_START.match(data):
        try:
            return Dump(parse_nodes(data), ["json"])
        except NodeParseError:
            pass
    reader = _Reader(data)
    reader.run()
    return reader.finish()


class _Reader:
    def __init__(self, text: str):
        self.text = text
        # Lines end at \n alone (and a \r\n of a Windows paste): a reason may hold a \r, a form
        # feed or U+2028, which str.splitlines would take for line ends (docs/slurm.md).
        ended = [line + "\n" for line in text.split("\n")]
        ended[-1] = ended[-1][:-1]
        if not ended[-1]:
            ended.pop()
        self.lines = [line.rstrip("\n").removesuffix("\r") for line in ended]
        self.offsets = [0]  # where each line starts in the text
        for line in ended:
            self.offsets.append(self.offsets[-1] + len(line))
        self.facts: dict[str, dict] = {}
        self.formats: list[str] = []
        self.warnings: list[str] = []
        self.skipped: list[tuple[int, str]] = []  # the open run of unrecognised lines
        self.named = 0  # node names the tables expanded to so far

    def run(self) -> None:
        from gpuhc.slurm.read.sinfo_text import header_of, read_table

        i = 0
        while i < len(self.lines):
            line = self.lines[i]
            stripped = line.strip()
            if stripped.startswith("NodeName="):
                self._close_skipped()
                i = self._scontrol(i)
            elif _JSON_START.match(line):
                self._close_skipped()
                i = self._json(i)
            elif (header := header_of(line)) is not None:
                self._close_skipped()
                table, end = read_table(self.lines, i, header)
                self._table(table)
                i = end
            elif not stripped or _COMMAND.match(stripped) or _DATE_LINE.match(line):
                self._close_skipped()
                i += 1
            else:
                self.skipped.append((i + 1, stripped))
                i += 1
        self._close_skipped()

    def _close_skipped(self) -> None:
        if self.skipped:
            first, text = self.skipped[0]
            last = self.skipped[-1][0]
            where = f"line {first}" if first == last else f"lines {first}-{last}"
            self.warn(f"{where}: skipped, not a node listing gpuhc reads: {text[:60]!r}")
            self.skipped = []

    def warn(self, text: str) -> None:
        self.warnings.append(text)

    # ------------------------------------------------------------------ blocks

    def _scontrol(self, i: int) -> int:
        """A ``NodeName=`` record: one line (``-o``) or a block with indented continuations."""
        start = i
        indent = len(self.lines[i]) - len(self.lines[i].lstrip())
        parts = [self.lines[i].strip()]
        i += 1
        # Continuations are indented more than the record's first line (a reason's later lines
        # too, even one saying `NodeName=`); 24.11 prints an indented blank line inside the
        # record (before Reason=), which continues it too.
        while i < len(self.lines) and len(self.lines[i]) - len(self.lines[i].lstrip()) > indent:
            if self.lines[i].strip():
                parts.append(self.lines[i].strip())
            i += 1
        try:
            node = node_from_record(node_fields(" ".join(parts)), f"line {start + 1}: ")
        except NodeParseError as e:
            self.warn(f"skipped: {e}")
            return i
        self._note("scontrol show node", RANK_FULL, node)
        return i

    def _json(self, i: int) -> int:
        import json

        from gpuhc.slurm.read.nodes_json import nodes_from_document

        from gpuhc.slurm.read.nodes_json import MAX_DEPTH
        from gpuhc.files.untrusted import json_depth

        at = self.offsets[i] + (len(self.lines[i]) - len(self.lines[i].lstrip()))
        try:
            if json_depth(self.text[at:]) > MAX_DEPTH:  # json recurses per level: bound it first
                raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
            doc, end = json.JSONDecoder().raw_decode(self.text, at)
            nodes = nodes_from_document(doc)
        except (ValueError, RecursionError, NodeParseError) as e:
            why = str(e).splitlines()[0][:120] if not isinstance(e, RecursionError) else "nested too deeply"
            self.warn(f"line {i + 1}: skipped a JSON block gpuhc cannot read: {why}")
            # Unknown end: skip to the next line that starts at the left margin with `}`/`]`.
            j = i + 1
            while j < len(self.lines) and not re.match(r"^[\]\}]\s*$", self.lines[j]):
                j += 1
            return j + 1
        for node in nodes:
            self._note("json", RANK_FULL if not node.reason_doubt else RANK_TABLE, node)
        import bisect

        # the line after the one the JSON ends on (anything after it on that line is dropped)
        return bisect.bisect_right(self.offsets, end - 1)

    def _table(self, table) -> None:
        what = "sinfo -R" if table.names[0] == "REASON" else "sinfo"
        rank = RANK_TABLE if table.has_reason else RANK_NO_REASON
        if not table.rows:
            self.formats.append(what)
            return
        if table.cut_width:
            self.warn(f"line {table.first_line}: {what} cuts reasons at {table.cut_width} characters; "
                      "`scontrol show node` has them whole")
        if "NODELIST" not in table.names:
            self.warn(f"line {table.first_line}: nodes named by HOSTNAMES (their host names), which may differ "
                      "from their Slurm names: `sinfo -O NodeList,...` names them as Slurm does")
        for row in table.rows:
            self.named += len(row.nodes)
            if self.named > MAX_NODES:  # hostlists expand: a small file could name billions
                self.warn(f"line {row.line}: more than {MAX_NODES:,} node names: the rest of this table is skipped")
                return
            if row.state is not None:
                state, flags = parse_state(row.state)
            elif table.names[0] == "REASON" or row.reason:
                # sinfo -R lists only nodes that are out; elsewhere a reason means out (Slurm
                # clears it on resume): down, drained or failing, the table does not say which.
                state, flags = UNAVAILABLE, frozenset()
            else:
                state, flags = "UNKNOWN", frozenset()
            doubt = "" if table.has_reason else "this listing (default sinfo) shows no reasons"
            for name in row.nodes:
                node = Node(name, state, flags, row.reason, row.user, row.time,
                            (row.partition,) if row.partition else (), row.state or "", doubt)
                self._note(what, rank, node, has_state=row.state is not None)

    def _note(self, what: str, rank: int, node: Node, has_state: bool = True) -> None:
        if not self.formats or self.formats[-1] != what:
            self.formats.append(what)
        f = self.facts.setdefault(node.name, {"name": node.name, "partitions": ()})
        f["partitions"] += tuple(p for p in node.partitions if p not in f["partitions"])
        if has_state and rank >= f.get("state_rank", 0):
            f.update(state=node.state, flags=node.flags, raw_state=node.raw_state, state_rank=rank)
        elif "state" not in f:
            f.update(state=node.state, flags=node.flags, raw_state=node.raw_state, state_rank=0)
        if rank >= f.get("reason_rank", 0):
            f.update(reason=node.reason, reason_user=node.reason_user, reason_time=node.reason_time,
                     reason_doubt=node.reason_doubt, reason_rank=rank)

    def finish(self) -> Dump:
        if not self.facts:
            first = self.warnings[0] if self.warnings else "the input is empty"
            raise NodeParseError("no Slurm node listing found (read: `scontrol show node [-o]`, sinfo/scontrol "
                                 f"--json, slurmrestd, and sinfo tables with a NODELIST column); {first}")
        nodes = [Node(f["name"], f["state"], f["flags"], f.get("reason"), f.get("reason_user"), f.get("reason_time"),
                      f["partitions"], f["raw_state"], f.get("reason_doubt", "")) for f in self.facts.values()]
        warnings = self.warnings[:MAX_WARNINGS]
        if len(self.warnings) > MAX_WARNINGS:
            warnings.append(f"... and {len(self.warnings) - MAX_WARNINGS} more skipped blocks")
        return Dump(nodes, self.formats, warnings)
