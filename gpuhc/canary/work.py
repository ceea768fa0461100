"""The canary's measuring half, in the GPU worker: run every case on every GPU, find each
case's known answer, retest a mismatch at once on the same GPU and name the bits that differ.

It works through a backend (:class:`gpuhc.canary.cupy_backend.CupyBackend` on GPUs; the tests'
fake has the same methods), so everything but the GEMM itself runs in CI. It judges
nothing: the parent (:mod:`gpuhc.canary.verdict`) turns what comes back into results.

The known answer of a case on one GPU, strongest first (docs/canary.md, "Which answer is
right"): the CPU's exact product (exact cases); the fleet's answer for this GPU model and
software, handed in as ``params["known"]``; the answer a strict majority of this node's identical
GPUs gave. With none of these (a lone GPU of a model the fleet has not voted on) the run checks
only that every iteration gave the same digest, and its digest is a vote.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpuhc.canary import cases as C


def software_key(device: dict, software: dict) -> str:
    """GPUs with the same key must give bit-identical products: model, SM count, driver and
    cuBLAS (cuBLAS picks its kernels by architecture and SM count)."""
    return f"{device.get('name')}|sm{device.get('sm_count')}|driver {software.get('driver')}|cublas {software.get('cublas')}"


def measure(params: dict, devices: list[dict], backend: Any = None) -> dict[str, Any]:
    if backend is None:
        from gpuhc.canary.cupy_backend import CupyBackend

        backend = CupyBackend()
    sw = backend.software()
    keys = {d["subject"]: software_key(d, sw) for d in devices}
    out: dict[str, Any] = {"software": sw, "backend": backend.name, "gpus": {}, "conflicts": []}
    for d in devices:
        out["gpus"][d["subject"]] = {"key": keys[d["subject"]], "name": d.get("name"), "uuid": d.get("uuid"),
                                     "cases": {}}
    for name in params["cases"]:
        _run_case(C.parse(name), params, devices, keys, backend, out)
    if params.get("memtest"):  # after the products: the pattern pass takes the HBM they freed
        out["memtest"] = backend.memtest(params["memtest"], devices)
    return out


def _run_case(case: C.Case, params: dict, devices: list[dict], keys: dict, backend: Any, out: dict) -> None:
    seed, repeats = int(params["seed"]), int(params["repeats"])
    inject = params.get("inject") or {}
    handles = {d["subject"]: backend.prepare(d, case, seed, repeats) for d in devices}
    try:
        for s, h in handles.items():
            backend.start(h, _injection(inject, s, case, repeats, first=True))
        runs = {s: backend.finish(h) for s, h in handles.items()}
        exact = C.exact_product(case, seed) if case.kind == "exact" else None
        refs = _references(case, runs, keys, params.get("known") or {}, exact, out)
        for s, h in handles.items():
            digests, secs = runs[s]
            rec: dict[str, Any] = {
                "digest": C.hexdigest(digests[0]), "stable": len(set(digests)) == 1, "iterations": len(digests),
                "seconds": round(secs, 4), "tflops": round(len(digests) * case.flops / secs / 1e12, 2) if secs else None,
                "ref": refs[s][0], "ref_from": refs[s][1], "shape": case.shape, "precision": case.precision}
            if inject.get("subject") == s and inject.get("case") == case.name:
                rec["injected"] = True
            off = _off(digests, refs[s][0])
            rec["match"] = not off if refs[s][0] is not None else None
            if off:
                rec["mismatch"] = _retest(case, s, h, digests, off, refs, runs, handles, exact, inject, backend)
            out["gpus"][s]["cases"][case.name] = rec
    finally:
        for h in handles.values():
            backend.free(h)


def _injection(inject: dict, subject: str, case: C.Case, repeats: int, first: bool) -> dict | None:
    """The test harness's one flipped bit: in the last iteration of the first run; in the retest
    too when ``sticky`` (a fault that stays)."""
    if inject.get("subject") != subject or inject.get("case") != case.name or not (first or inject.get("sticky")):
        return None
    return {"iteration": repeats - 1, "word": int(inject.get("word", 0)), "bit": int(inject.get("bit", 0))}


def _references(case: C.Case, runs: dict, keys: dict, known: dict, exact, out: dict) -> dict[str, tuple]:
    """subject -> (known answer as hex or None, where it came from)."""
    exact_hex = C.hexdigest(C.digest_words(exact)) if exact is not None else None
    firsts = {s: C.hexdigest(d[0]) for s, (d, _) in runs.items()}  # the first iteration: before any heat builds up
    refs = {}
    for s in runs:
        fleet = (known.get(keys[s]) or {}).get(case.name)
        if exact_hex is not None:
            text = (f"{case.name}: the fleet's answer {fleet} for {keys[s]} is not the exact CPU answer "
                    f"{exact_hex}: every GPU of that model and software is wrong")
            if fleet is not None and fleet != exact_hex and text not in out["conflicts"]:
                out["conflicts"].append(text)  # once per model, not once per GPU
            refs[s] = (exact_hex, "exact")
            continue
        if fleet is not None:
            refs[s] = (fleet, "fleet")
            continue
        peers = [firsts[p] for p in runs if keys[p] == keys[s] and p in firsts]
        top = Counter(peers).most_common(1)
        refs[s] = (top[0][0], "siblings") if top and len(peers) >= 2 and top[0][1] * 2 > len(peers) else (None, None)
    return refs


def _off(digests: list[int], ref: str | None) -> list[int]:
    """Iterations whose digest is not the known answer (without one: not the first iteration's)."""
    want = ref if ref is not None else C.hexdigest(digests[0])
    return [i for i, d in enumerate(digests) if C.hexdigest(d) != want]


def _retest(case, s, h, digests, off, refs, runs, handles, exact, inject, backend) -> dict[str, Any]:
    """Run the case again at once on the same GPU; confirmed when the retest is off as well.
    The bits come from a bad output (the last iteration's, if it was off) against a good one:
    the exact CPU product, a sibling that gave the known answer, or this GPU's clean retest."""
    ref = refs[s][0]
    bad = backend.output(h) if off[-1] == len(digests) - 1 else None
    backend.start(h, _injection(inject, s, case, len(digests), first=False))
    again, _ = backend.finish(h)
    off2 = _off(again, ref if ref is not None else C.hexdigest(digests[0]))
    if bad is None and off2 and off2[-1] == len(again) - 1:
        bad = backend.output(h)
    good, good_from = None, None
    if exact is not None:
        good, good_from = exact, "the exact CPU product"
    elif ref is not None:
        for p, (d, _) in runs.items():
            if p != s and refs[p][0] == ref and not _off(d, ref):
                good, good_from = backend.output(handles[p]), f"{p}'s product"
                break
    if good is None and not off2:
        good, good_from = backend.output(h), "this GPU's clean retest"
    m: dict[str, Any] = {"first_run_off": len(off), "iterations_off": off[:8], "retest_off": len(off2),
                         "confirmed": bool(off2), "got": C.hexdigest(digests[off[0]])}
    if bad is not None and good is not None:
        m["bits"] = C.differing(bad, good, case)
        m["bits_against"] = good_from
    else:
        m["bits"] = {"count": None, "elements": [],
                     "why": "bits not captured: " + ("no good copy of the product on this node" if good is None
                                                     else "the wrong output was not the last one kept")}
    return m
