"""Every emulated recipe runs whole on the native backend, bit for bit as on ref (FP32
within float32 rounding: its GEMM sums in its own order); MLS, FP8 and FP32 give the same
bits at 1 and 2 threads; BLAS does not compete with the native pool.

LeNet-5 on Fashion-MNIST, a few steps of 32 images.
"""

import dsptrain
import numpy as np
import pytest
from dsptrain import data as datasets

STEPS = 4
EMULATED = ("octo", "wageubn", "afp", "mls", "fp8")


def train(run, backend, tmp_path, steps=STEPS, on_step=None):
    trainer = dsptrain.Trainer(run, backend=backend, out_dir=tmp_path / backend, progress=False)
    stats = []
    try:
        for step, (images, labels) in enumerate(datasets.batches(trainer.train_data, 32, seed=1)):
            if step == steps:
                break
            stats.append(trainer.step(images, labels))
            if on_step:
                on_step(trainer)
    finally:
        trainer.close()
    return trainer.state, stats


def values(v):
    return np.asarray(v.q if hasattr(v, "q") else v)


def assert_same_state(a, b):
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(values(a[name]), values(b[name]), err_msg=name)


# FP32's products sum in the native GEMM's order, not OpenBLAS's (cpu_ops/gemm_f32.h), and its
# loss gradient is within a float32 ulp of NumPy's: four SGD steps later every tensor agrees
# to 1e-5 of its largest value (an element near zero can differ more relative to itself)
FP32_RTOL = 1e-5


def assert_close_state(a, b):
    assert a.keys() == b.keys()
    for name in a:
        x, y = values(a[name]), values(b[name])
        np.testing.assert_allclose(x, y, rtol=FP32_RTOL, atol=FP32_RTOL * float(np.abs(x).max()), err_msg=name)


@pytest.mark.parametrize("recipe", EMULATED + ("fp32",))
def test_cpu_trains_to_the_bits_of_ref_with_every_op_placed_honestly(small_run, tmp_path, recipe):
    run = small_run(recipe, train_limit=STEPS * 32)
    reference, _ = train(run, "ref", tmp_path)
    native, stats = train(run, "cpu", tmp_path)
    (assert_close_state if recipe == "fp32" else assert_same_state)(reference, native)
    ops_on = stats[-1].ops_on
    # every op native, the float loss gradient included (softmax_xent_grad_f32)
    assert "ref" not in ops_on and ops_on["cpu"] >= (20 if recipe == "fp32" else 40), ops_on


@pytest.mark.parametrize("recipe", ["mls", "fp8", "fp32"])
def test_mls_and_fp8_are_identical_at_one_and_two_threads(small_run, tmp_path, recipe):
    from dsptrain import _cpu_ops as native

    run = small_run(recipe, train_limit=STEPS * 32)
    threads, threshold = native.threads(), native.serial_below_macs()
    try:
        native.set_threads(1)
        one, _ = train(run, "cpu", tmp_path / "one")
        native.set_threads(2)
        native.set_serial_below_macs(0.0)  # thread every product, however small
        two, _ = train(run, "cpu", tmp_path / "two")
    finally:
        native.set_threads(threads)
        native.set_serial_below_macs(threshold)
    assert_same_state(one, two)


def test_blas_runs_one_thread_inside_a_training_step(small_run, tmp_path, monkeypatch):
    from dsptrain.algorithms import fp32
    from threadpoolctl import threadpool_info, threadpool_limits

    seen = []
    original = fp32.OPS["fp32.linear_fwd"]

    def spy(be, op, env, ctx):
        seen.append(max(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"))
        return original(be, op, env, ctx)

    monkeypatch.setitem(fp32.OPS, "fp32.linear_fwd", spy)
    with threadpool_limits(limits=2, user_api="blas"):  # as a process that started with two BLAS threads
        train(small_run("fp32", train_limit=64), "cpu", tmp_path, steps=1)
    assert seen and set(seen) == {1}, seen
