"""The canary's measuring logic on the fake GPU (tests/helpers/canary_fake.py): known answers,
the immediate retest, the bits named, and the verdict each case gets. In-process: the backend is
the hardware boundary; the worker process around it is tested in test_run.py."""

from __future__ import annotations

import numpy as np
import pytest

from gpuhc.canary import cases, verdict, work
from gpuhc.model.result import Action, Status
from tests.helpers.canary_fake import FakeBackend, hello

CASES = ["bf16-exact-48", "bf16-random-48", "fp16-random-32", "tf32-random-32", "fp32-random-32", "fp64-random-32"]


def measure(spec: dict, cases_=CASES, known=None, inject=None, repeats=3) -> dict:
    devices = hello(spec)["devices"]
    params = {"cases": cases_, "seed": 7, "repeats": repeats, "known": known or {}, "inject": inject}
    return work.measure(params, devices, FakeBackend(spec))


def by_subject(results):
    return {r.subject: r for r in results}


def test_healthy_gpus_match_the_exact_answer_and_each_other():
    data = measure({"gpus": 3})
    res = by_subject(verdict.judge(data))
    assert [r.status for r in res.values()] == [Status.PASS] * 3
    g0 = data["gpus"]["gpu0"]["cases"]
    assert g0["bf16-exact-48"]["ref_from"] == "exact" and g0["bf16-exact-48"]["match"] is True
    assert all(g0[c]["ref_from"] == "siblings" and g0[c]["match"] for c in CASES[1:])
    # identical GPUs, identical digests; the digest is the exact product's
    exact = cases.exact_product(cases.parse("bf16-exact-48"), 7)
    assert g0["bf16-exact-48"]["digest"] == cases.hexdigest(cases.digest_words(exact))
    assert {data["gpus"][s]["cases"]["fp64-random-32"]["digest"] for s in res} == {g0["fp64-random-32"]["digest"]}


def test_a_sticky_flip_is_confirmed_and_named_gpu_precision_shape_bits():
    data = measure({"gpus": 3, "sick": {"gpu2": {"case": "fp16-random-32", "word": 70, "bit": 12, "mode": "sticky"}}})
    r = by_subject(verdict.judge(data))["gpu2"]
    assert r.status is Status.FAIL and r.action is Action.DRAIN_TICKET
    m = data["gpus"]["gpu2"]["cases"]["fp16-random-32"]["mismatch"]
    assert m["confirmed"] and m["first_run_off"] == 3 and m["retest_off"] == 3
    e = m["bits"]["elements"][0]
    assert m["bits"]["count"] == 1 and (e["row"], e["col"], e["bits"], e["fields"]) == (2, 6, [12], ["mantissa"])
    assert m["bits_against"] == "gpu0's product"
    assert "gpu2" in r.message and "fp16 32x32x32" in r.message and "C[2,6] bit 12 (mantissa)" in r.message
    assert by_subject(verdict.judge(data))["gpu0"].status is Status.PASS


def test_a_flip_that_does_not_come_back_is_one_unconfirmed_warning():
    data = measure({"gpus": 2, "sick": {"gpu1": {"case": "bf16-exact-48", "word": 3, "bit": 30, "mode": "once"}}})
    r = by_subject(verdict.judge(data))["gpu1"]
    assert r.status is Status.WARN and r.action is Action.NONE
    assert "unconfirmed" in r.message and "C[0,3] bit 30 (exponent)" in r.message
    assert data["gpus"]["gpu1"]["cases"]["bf16-exact-48"]["mismatch"]["confirmed"] is False


def test_a_whole_model_wrong_is_caught_by_the_exact_case_and_by_the_fleets_answer():
    spec = {"gpus": 2, "sick": {g: {"case": c, "word": 1, "bit": 2, "mode": "model"}
                                for g in ("gpu0", "gpu1") for c in ("bf16-exact-48",)}}
    res = verdict.judge(measure(spec, ["bf16-exact-48"]))
    assert [r.status for r in res] == [Status.FAIL, Status.FAIL]  # siblings agree; the CPU does not
    # on a random case siblings agree on the wrong answer: only the fleet's answer can tell
    healthy = measure({"gpus": 2}, ["bf16-random-48"])
    key = healthy["gpus"]["gpu0"]["key"]
    known = {key: {"bf16-random-48": healthy["gpus"]["gpu0"]["cases"]["bf16-random-48"]["digest"]}}
    spec = {"gpus": 2, "sick": {g: {"case": "bf16-random-48", "word": 1, "bit": 2, "mode": "model"} for g in ("gpu0", "gpu1")}}
    assert [r.status for r in verdict.judge(measure(spec, ["bf16-random-48"]))] == [Status.PASS, Status.PASS]
    data = measure(spec, ["bf16-random-48"], known=known)
    assert [r.status for r in verdict.judge(data)] == [Status.FAIL, Status.FAIL]
    assert data["gpus"]["gpu0"]["cases"]["bf16-random-48"]["ref_from"] == "fleet"


def test_a_fleet_answer_that_contradicts_the_exact_answer_is_reported():
    healthy = measure({"gpus": 1}, ["bf16-exact-48"])
    key = healthy["gpus"]["gpu0"]["key"]
    data = measure({"gpus": 1}, ["bf16-exact-48"], known={key: {"bf16-exact-48": "00000000deadbeef"}})
    res = verdict.judge(data)
    assert res[0].status is Status.PASS and res[1].status is Status.WARN and "not the exact CPU answer" in res[1].message


def test_the_harness_injection_is_caught_named_and_never_drains():
    data = measure({"gpus": 2}, ["bf16-random-48"], inject={"subject": "gpu1", "case": "bf16-random-48", "word": 100,
                                                             "bit": 5, "sticky": True})
    r = by_subject(verdict.judge(data))["gpu1"]
    assert r.status is Status.FAIL and r.action is Action.NONE and r.message.startswith("TEST (injected")
    assert "C[2,4] bit 5" in r.message


def test_a_lone_gpu_without_a_known_answer_checks_stability_only_and_votes():
    data = measure({"gpus": 1}, ["fp32-random-32"])
    c = data["gpus"]["gpu0"]["cases"]["fp32-random-32"]
    assert c["ref"] is None and c["match"] is None and c["stable"]
    r = verdict.judge(data)[0]
    assert r.status is Status.PASS and "no known answer yet" in r.message
    assert verdict.gpu_summary(data["gpus"]["gpu0"])["digests"] == {"fp32-random-32": c["digest"]}


def test_two_disagreeing_gpus_have_no_majority_and_a_stable_one_still_differs_from_the_fleet():
    data = measure({"gpus": 2, "sick": {"gpu1": {"case": "fp32-random-32", "word": 0, "bit": 0}}}, ["fp32-random-32"])
    assert [c["cases"]["fp32-random-32"]["ref"] for c in data["gpus"].values()] == [None, None]
    assert data["gpus"]["gpu0"]["cases"]["fp32-random-32"]["digest"] != data["gpus"]["gpu1"]["cases"]["fp32-random-32"]["digest"]


@pytest.mark.parametrize("out_bytes,dtype", [(4, np.float32), (8, np.float64)])
def test_every_single_bit_flip_changes_the_digest(out_bytes, dtype):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(64).astype(dtype)
    base = cases.digest_words(a)
    words = a.view(np.uint32)
    for w in range(words.size):
        for b in range(32):
            x = a.copy()
            x.view(np.uint32)[w] ^= np.uint32(1 << b)
            assert cases.digest_words(x) != base, (w, b)


def test_exact_cases_are_exact_integers_that_fit_fp32():
    c = cases.parse("bf16-exact-96")
    p = cases.exact_product(c, 3)
    assert p.dtype == np.float32 and np.all(p == np.rint(p)) and np.abs(p).max() < 2 ** 24
    a = cases.exact_values(cases.uniform_f32(96 * 96, cases.input_seeds(3)[0]))
    assert set(np.unique(a).tolist()) <= set(range(-4, 5))


def test_the_generator_is_the_burn_in_kernels():
    # kernels.py fill_uniform_f32 for seed 1, element 0, computed by hand from splitmix64
    x = (1 ^ 0) + 0x9E3779B97F4A7C15
    x &= (1 << 64) - 1
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & ((1 << 64) - 1)
    x ^= x >> 31
    assert cases.uniform_f32(1, 1)[0] == np.float32(((x >> 40) - (1 << 23)) / float(1 << 23))


def test_bad_case_names_are_refused():
    with pytest.raises(ValueError, match="not a canary case"):
        cases.parse("int8-random-64")


def test_wrong_words_in_the_hbm_pattern_pass_fail_the_gpu_by_the_memtest_rule():
    devices = hello({"gpus": 2})["devices"]
    params = {"cases": ["fp32-random-32"], "seed": 7, "repeats": 2, "known": {},
              "memtest": {"fraction": 0.5, "max_gib": 4, "seed": 7}}
    data = work.measure(params, devices, FakeBackend({"gpus": 2, "bad_memory": {"gpu1": {"words": 3}}}))
    res = by_subject(verdict.judge(data))
    assert res["gpu0"].status is Status.PASS and res["gpu0"].value["hbm"]["bytes"] == 2 << 30
    assert res["gpu1"].status is Status.FAIL and res["gpu1"].action is Action.DRAIN_TICKET
    assert "HBM pattern pass: 3 wrong words in 2.0 GiB" in res["gpu1"].message and "walking-ones" in res["gpu1"].message
    assert verdict.gpu_summary(data["gpus"]["gpu1"], verdict.memory_of(data, "gpu1"))["status"] == "fail"
