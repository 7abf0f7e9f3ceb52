#!/bin/bash
# The device runs behind docs/PERFORMANCE.md's GPU, serving and corpus figures, for a GPU machine
# without Rust: build here, carry the binaries, run this there from the repository root.
#
#   cargo build --release -p glm5v && cargo test --release -p glm5v-gpu --no-run
#   mkdir -p gpu/bin && cp target/release/glm5v gpu/bin/ && cp target/release/deps/device-<hash> gpu/bin/device_test
#   strip gpu/bin/*            # then, on the GPU machine:
#   bash gpu/scripts/serving_session.sh tests gpu serve corpus
#
# Steps (any of them, in the order given):
#   tests          device tests (invariance, both attention paths, graphs, the queue) and
#                  `glm5v conformance --backend gpu --suite tower`
#   gpu            `bench gpu`: four cases against upstream, then the batcher's clients
#   serve          `bench serve` at concurrency 32, upstream taking turns
#   corpus         `bench corpus` against upstream's loop
#   corpus-ab      320 photos of six sizes, planning before/after (alternating), with cuDNN's
#                  plan log and the queue's phases
#   corpus-output  640 photos: f32 rows, bf16 rows, one safetensors file (what bounds a run)
#   corpus-long    the 640 photos listed 4 times (bf16 and f32 rows, with the queue's phases)
#                  and 16 times (bf16 rows): how busy the GPU is over a long run
#   cpu-amx        the CPU bf16 default on the host's AMX, pinned to 2 cores, against upstream
# Logs go to $OUT (default /tmp/glm5v-session).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/glm5v-session}
mkdir -p "$OUT"
B=${GLM5V:-$PWD/gpu/bin/glm5v}
T=${DEVICE_TEST:-$PWD/gpu/bin/device_test}
MODEL=${MODEL:-/tmp/glm5v-full}
if python3 -c 'import nvidia.cudnn' 2>/dev/null; then
    export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.cudnn as m; print(m.__path__[0])')/lib:${LD_LIBRARY_PATH:-}
fi
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null
[ -d "$MODEL" ] || "$B" synth --preset full --seed 0 --out "$MODEL" | tail -1

photos() { # N photos of six sizes and four formats, cut from a fixture photo
    python3 - "$1" <<'PY'
import os, sys
from PIL import Image
n = int(sys.argv[1])
big = Image.open('fixtures/prep/images/large_3264x2448.jpg').convert('RGB')
sizes = [(448, 448), (640, 480), (336, 448), (224, 224), (1024, 768), (448, 336)]
fmts = [('png', 'PNG'), ('jpg', 'JPEG'), ('webp', 'WEBP'), ('bmp', 'BMP')]
d = f'/tmp/glm5v-photos-{n}'
os.makedirs(d, exist_ok=True)
for i in range(n):
    w, h = sizes[i % 6]; x = (i * 97) % (big.width - w); y = (i * 61) % (big.height - h)
    ext, f = fmts[i % 4]
    big.crop((x, y, x + w, y + h)).save(f'{d}/photo_{i:04}_{w}x{h}.{ext}', f,
                                        **({'lossless': True} if f == 'WEBP' else {}))
print(d)
PY
}

for step in "$@"; do
    echo "=== $step"
    case $step in
    tests)
        (cd gpu && timeout 300 "$T" --nocapture --test-threads=1 > "$OUT/device_test.log" 2>&1; echo "rc $?")
        grep -E "^test |test result|attention:|bit-identical|same bits|worst" "$OUT/device_test.log"
        timeout 200 "$B" conformance --backend gpu --suite tower > "$OUT/conformance.log" 2>&1; echo "rc $?"
        tail -6 "$OUT/conformance.log" ;;
    gpu)
        timeout 580 "$B" bench gpu --model "$MODEL" --cases 112,16x448,1008,2016x3024 --reps 10 \
            --clients 8,32 --count 192 > "$OUT/bench_gpu.log" 2>&1; echo "rc $?"
        tail -22 "$OUT/bench_gpu.log" ;;
    serve)
        timeout 300 "$B" bench serve --model "$MODEL" --backend gpu --concurrency 32 --duration 10 \
            --turns 2 > "$OUT/serve.log" 2>&1; echo "rc $?"
        grep -E "^\| |^glm5v serve, turn|busy .* after" "$OUT/serve.log" ;;
    corpus)
        timeout 400 "$B" bench corpus --model "$MODEL" --backend gpu --count 320 --turns 2 \
            > "$OUT/bench_corpus.log" 2>&1; echo "rc $?"
        tail -8 "$OUT/bench_corpus.log" ;;
    corpus-ab)
        d=$(photos 320)
        for m in before after before after; do
            if [ $m = before ]; then e="GLM5V_GPU_CUDNN_MIN_LEN=1 GLM5V_CUDNN_FINALIZE_ALL=1"; else e=""; fi
            rm -rf /tmp/glm5v-x.parquet
            env $e GLM5V_CUDNN_LOG=1 GLM5V_GPU_QUEUE_LOG=1 timeout 60 "$B" embed --model "$MODEL" \
                --backend gpu "$d" --out /tmp/glm5v-x.parquet --batch-tokens 16384 --quiet \
                > "$OUT/corpus_$m.log" 2>&1
            grep -E "input\(s\)|cuDNN plan" "$OUT/corpus_$m.log" | sed "s/^/$m: /"
        done ;;
    corpus-output)
        d=$(photos 640)
        for o in f32 bf16 st f32 bf16 st; do
            if [ $o = st ]; then a="--out /tmp/glm5v-y.safetensors"; else a="--out /tmp/glm5v-y.parquet --out-dtype $o"; fi
            timeout 60 "$B" embed --model "$MODEL" --backend gpu "$d" $a --batch-tokens 16384 --quiet 2>&1 \
                | tail -1 | sed "s/^/$o: /"
            rm -rf /tmp/glm5v-y.parquet /tmp/glm5v-y.safetensors
        done ;;
    corpus-long)
        d=$(photos 640)
        for k in 4 16; do for i in $(seq $k); do ls -d "$d"/*; done > "/tmp/glm5v-list-$k.txt"; done
        for o in bf16 f32; do
            rm -rf /tmp/glm5v-y.parquet
            GLM5V_GPU_QUEUE_LOG=1 timeout 120 "$B" embed --model "$MODEL" --backend gpu @/tmp/glm5v-list-4.txt \
                --out /tmp/glm5v-y.parquet --out-dtype $o --batch-tokens 16384 --quiet > "$OUT/corpus_long_$o.log" 2>&1
            tail -1 "$OUT/corpus_long_$o.log" | sed "s/^/2560 $o: /"
        done
        rm -rf /tmp/glm5v-y.parquet
        timeout 200 "$B" embed --model "$MODEL" --backend gpu @/tmp/glm5v-list-16.txt --out /tmp/glm5v-y.parquet \
            --out-dtype bf16 --batch-tokens 16384 --quiet 2>&1 | tail -1 | sed "s/^/10240 bf16: /"
        rm -rf /tmp/glm5v-y.parquet ;;
    cpu-amx)
        timeout 150 taskset -c 2,3 env RAYON_NUM_THREADS=2 "$B" conformance --suite tower \
            > "$OUT/conf_cpu.log" 2>&1; echo "rc $?"
        grep -E "cpu-bf16|checks:" "$OUT/conf_cpu.log" | tail -3
        timeout 330 taskset -c 2,3 env RAYON_NUM_THREADS=2 OMP_NUM_THREADS=2 "$B" bench cpu \
            --python python3 --model "$MODEL" --precision bf16 --grids 8,32 --reps 3 \
            > "$OUT/bench_cpu.log" 2>&1; echo "rc $?"
        tail -8 "$OUT/bench_cpu.log" ;;
    *) echo "unknown step $step (tests gpu serve corpus corpus-ab corpus-output corpus-long cpu-amx)"; exit 2 ;;
    esac
done
