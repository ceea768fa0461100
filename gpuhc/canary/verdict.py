"""Judge a canary run: one result per GPU (pure; the data come from :mod:`gpuhc.canary.work`).

- ``fail`` (drain + hardware ticket): a case off its known answer, and off again when retested
  at once on the same GPU. Silent data corruption that repeats is a part to replace, not to
  reset: the admin side drains it RETIRED (docs/canary.md, "Verdicts").
- ``warn``: a case off its known answer once, clean on the retest: intermittent faults are
  common, so one is not yet proof; the GPU's cadence is shortened.
- ``pass``: every case matched its known answer, or (no known answer yet) was stable.
A run made with the test harness's injected flip says so in every message and never drains.
"""

from __future__ import annotations

from typing import Any

from gpuhc.active.rates import gpu_order
from gpuhc.canary.cases import describe_bits
from gpuhc.model.result import Action, Result, Status

CHECK = "canary"
FROM = {"exact": "the exact CPU answer", "fleet": "the fleet's answer", "siblings": "its sibling GPUs' answer",
        None: "its own first iteration"}


def judge(data: dict[str, Any]) -> list[Result]:
    out = []
    for subj in sorted(data.get("gpus") or {}, key=gpu_order):
        out.append(judge_gpu(subj, data["gpus"][subj], memory_of(data, subj)))
    for text in data.get("conflicts") or []:
        out.append(Result(CHECK, Status.WARN, text))
    return out


def memory_of(data: dict[str, Any], subj: str) -> dict[str, Any] | None:
    """The pattern pass's data for one GPU, in the memtest check's shape (or None: not run)."""
    m = data.get("memtest")
    if not m or subj not in (m.get("gpus") or {}):
        return None
    return {"patterns": m.get("patterns"), "gpus": {subj: m["gpus"][subj]}}


def judge_gpu(subj: str, g: dict[str, Any], memory: dict[str, Any] | None = None) -> Result:
    """``memory``: the pattern pass (see :func:`memory_of`); a wrong word past ECC is a part to
    replace like a wrong product, judged by the memtest check's own rule."""
    confirmed, once, unknown = [], [], []
    injected = False
    for name, c in (g.get("cases") or {}).items():
        injected |= bool(c.get("injected"))
        m = c.get("mismatch")
        if m is None:
            if c.get("ref") is None:
                unknown.append(name)
            continue
        (confirmed if m.get("confirmed") else once).append(mismatch_text(name, c))
    value = {name: {k: c.get(k) for k in ("digest", "ref", "ref_from", "tflops", "seconds")}
             for name, c in (g.get("cases") or {}).items()}
    if memory is not None:
        from gpuhc.active import memtest

        r = memtest.judge(memory, {"max_bad_words": 0})[0]
        if r.status is Status.FAIL:
            confirmed.append("HBM pattern pass: " + r.message.split(": ", 1)[1])
        only = next(iter(memory["gpus"].values()))  # memory_of keeps the one GPU's entry
        value["hbm"] = {k: only.get(k) for k in ("bytes", "seconds", "gbps", "bad_words")}
    tag = "TEST (injected bit flip, never drains): " if injected else ""
    if confirmed:
        return Result(CHECK, Status.FAIL, f"{tag}{subj}: silent data corruption confirmed on retest: "
                      + "; ".join(confirmed + once), subj, value, None,
                      Action.NONE if injected else Action.DRAIN_TICKET)
    if once:
        return Result(CHECK, Status.WARN, f"{tag}{subj}: one unconfirmed mismatch (clean on retest): " + "; ".join(once),
                      subj, value)
    n = len(g.get("cases") or {})
    tail = f"; {len(unknown)} with no known answer yet (stable; counted as votes)" if unknown else ""
    return Result(CHECK, Status.PASS, f"{tag}{subj}: {n - len(unknown)} of {n} products bit-exact{tail}", subj, value)


def mismatch_text(name: str, c: dict[str, Any]) -> str:
    m = c["mismatch"]
    return (f"{c.get('precision')} {c.get('shape')} ({name}) off {FROM.get(c.get('ref_from'))} in {m['first_run_off']} of "
            f"{c.get('iterations')} iterations, retest {m['retest_off']} of {c.get('iterations')}; "
            f"{describe_bits(m.get('bits'))}")


def gpu_summary(g: dict[str, Any], memory: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the fleet keeps of one GPU's run: its digests (votes) and the worst finding."""
    r = judge_gpu("gpu", g, memory)
    return {"status": r.status.value, "message": r.message.split(": ", 1)[-1],
            "digests": {n: c["digest"] for n, c in (g.get("cases") or {}).items() if c.get("stable")},
            "injected": any(c.get("injected") for c in (g.get("cases") or {}).values())}
