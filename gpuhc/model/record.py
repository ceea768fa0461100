"""The one ``==``, ``repr`` and ``hash`` every record of gpuhc.model shares."""

class Record:
    """``==`` and ``repr`` exactly as ``@dataclass`` writes them (fields in order; ``compare`` and
    ``repr`` flags honoured), written once here instead of generated and compiled for every class
    on every run: this module is imported by every health check, and generating them was about a
    third of its import time. The classes stay dataclasses (``fields``, ``replace``, ``asdict``)."""

    __slots__ = ()

    def _values(self) -> tuple:
        return tuple(getattr(self, f.name) for f in self.__dataclass_fields__.values() if f.compare)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()
        return NotImplemented

    def __repr__(self) -> str:
        inner = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in self.__dataclass_fields__.values() if f.repr)
        return f"{self.__class__.__qualname__}({inner})"


class FrozenRecord(Record):
    """Frozen records are hashable, as a frozen dataclass with ``eq`` is."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(self._values())
