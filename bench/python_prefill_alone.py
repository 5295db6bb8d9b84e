"""session.eval of 512 ids in a fresh Python process, alone and after an m.generate: the prefill rate without
python_overhead.py's rounds around it (random GPT-2 124M, F32, 2 threads). Prints one rate per eval.

    PYTHONPATH=build/python .venv/bin/python bench/python_prefill_alone.py
"""
import time, sys, numpy as np, minigpt, tempfile, pathlib, importlib.util
spec = importlib.util.spec_from_file_location("po", "bench/python_overhead.py"); po = importlib.util.module_from_spec(spec); spec.loader.exec_module(po)
d = pathlib.Path(tempfile.mkdtemp()); po.write_model(d)
m = minigpt.Model(str(d), threads=2)
ids = np.random.default_rng(5).integers(0, 50257, 512).astype(np.int32)
s = m.session()
for i in range(6):
    s.reset(); t0=time.perf_counter(); s.eval(ids); print("py eval", round(512/(time.perf_counter()-t0),1))
print(d, file=sys.stderr)
m.generate("ROMEO:", 128, temperature=0, ignore_eos=True)
s2 = m.session()
for i in range(4):
    s2.reset(); t0=time.perf_counter(); s2.eval(ids); print("after generate, new session eval", round(512/(time.perf_counter()-t0),1))
for i in range(3):
    s.reset(); t0=time.perf_counter(); s.eval(ids); print("after generate, old session eval", round(512/(time.perf_counter()-t0),1))
