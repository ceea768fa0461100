"""PCI bus ids in the one form every source writes and every check compares."""

import re


_PCI_RE = re.compile(
    r"(?:(?P<dom>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})(?:\.(?P<fn>[0-7]))?"
)


def norm_pci(text: str) -> str:
    """Normalise a PCI address to ``dddd:bb:dd.f`` (lower case, 4-digit domain).

    Accepts NVML's ``00000000:B3:00.0``, the kernel's ``0000:b3:00`` or ``PCI:0000:b3:00``, and a
    bare ``b3:00.0``. Unparseable text is returned lower-cased and stripped, so that comparison
    stays deterministic instead of raising.
    """
    s = text.strip()
    if s.upper().startswith("PCI:"):
        s = s[4:]
    m = _PCI_RE.fullmatch(s)
    if not m:
        return s.lower()
    dom = int(m.group("dom") or "0", 16)
    return f"{dom:04x}:{m.group('bus').lower()}:{m.group('dev').lower()}.{m.group('fn') or '0'}"
