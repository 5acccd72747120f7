"""20 LeNet-5 NITI steps over the FastRPC transport (a stand-in libcdsprpc.so forwarding
to the emulated DSP, tests/backend/fastrpc_stub) end with the same weights as `cpu`."""

import dsptrain
import numpy as np
from dsptrain import data as datasets

STEPS = 20


def _train(run, backend, out):
    trainer = dsptrain.Trainer(run, backend=backend, out_dir=out, progress=False)
    stats = []
    try:
        for step, (images, labels) in enumerate(datasets.batches(trainer.train_data, 32, seed=1)):
            if step == STEPS:
                break
            stats.append(trainer.step(images, labels))
        transport = trainer.backends["dsp"].transport.name if "dsp" in trainer.backends else None
    finally:
        trainer.close()
    return trainer.state, stats, transport


def test_lenet_over_fastrpc_matches_cpu(small_run, tmp_path, fastrpc_stub, monkeypatch):
    run = small_run("niti", train_limit=STEPS * 32)
    cpu, _, _ = _train(run, "cpu", tmp_path / "cpu")
    for key, value in fastrpc_stub.items():
        monkeypatch.setenv(key, value)
    dsp, stats, transport = _train(run, "dsp", tmp_path / "dsp")
    assert transport == "fastrpc"
    assert all(s.ops_on.get("dsp", 0) >= 10 and not s.fallbacks for s in stats)
    assert all(s.dsp_model_s is not None and s.dsp_model_s > 0 for s in stats)
    assert cpu.keys() == dsp.keys()
    for name in cpu:
        np.testing.assert_array_equal(cpu[name].q, dsp[name].q, err_msg=name)
        assert cpu[name].e == dsp[name].e, name
