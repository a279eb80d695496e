"""calls_for_valgrind.py N: N memo-hit calls of each kind through the binding on the cpu (NumPy),
for run_valgrind_test.sh, which compares what valgrind finds lost after 100 and 10,000."""
import sys

import numpy as np

import tilerun
from producer import Producer  # beside this file: the __dlpack__ route

n = int(sys.argv[1])
add = tilerun.op("AddFwdOp")
rms = tilerun.op("RMSNormFwdOp", normalized_shape=(64,), eps=1e-6)
a, b, c = (np.ones((4, 64), np.float32) for _ in range(3))
w = np.ones(64, np.float32)
pa = Producer(a)
refs = [sys.getrefcount(o) for o in (a, b, c, w, pa)]
for i in range(n):
    add.call_into((a, b), c)
    rms.call_into([a, w], [c])
    y = add(a, b)
    t = add(pa, pa)
    if i % 16 == 0:  # the error path too
        try:
            add.call_into((a, b), w)
        except tilerun.SignatureShapeError:
            pass
assert np.array_equal(y, a + b) and np.array_equal(np.asarray(t), a + a)
assert [sys.getrefcount(o) for o in (a, b, c, w, pa)] == refs, "a reference was kept"
del y, t
print("calls_for_valgrind: %d rounds done" % n)
