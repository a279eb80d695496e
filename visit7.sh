#!/bin/bash
REAL_OUT=$OUT; export OUT=/tmp/visit-out; mkdir -p $OUT
export LD_LIBRARY_PATH=$PWD/.gpu/lib:$LD_LIBRARY_PATH
step() { local name=$1; shift; echo "== $name $(date +%T)"; ( "$@" ) > $OUT/$name.log 2>&1; echo "rc $? $(date +%T)"; grep -E "^\| [0-9]|^==|PASS|FAIL|TIME" $OUT/$name.log | tail -n 30; }
pack() { tar czf $REAL_OUT/all.tgz -C $OUT .; }
DL="python3 python/bench/decode_lengths.py"
step ab_w0 timeout 40 tools/gpu.sh ab --rounds 1 w0 -- $DL 64 512 1024 4096
pack
step ab_async timeout 40 tools/gpu.sh ab --rounds 1 async -- $DL 512 1024 4096
pack
mkdir -p $OUT/t1 $OUT/t2
step test_default env OUT=$OUT/t1 TEST_TIMEOUT=70 tools/gpu.sh test gqa_decode
pack
step test_async env OUT=$OUT/t2 TEST_TIMEOUT=70 tools/gpu.sh test --variant async gqa_decode
pack
