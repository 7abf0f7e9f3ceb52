"""Upstream served the way a user would: a stdlib ThreadingHTTPServer that runs
`Glm5NextImageProcessor` + `Glm5NextVisionModel` per request (one request per forward), for
`glm5v bench serve`. Same wire format as `glm5v serve`'s POST /v1/embeddings for what the bench
sends: {"input": [base64 image, ...], "encoding_format": "base64"} -> {"data": [{"embedding":
base64 little-endian f32 rows, "shape": [tokens, hidden]}, ...]}.

    python serve_upstream.py MODEL_DIR [--device cpu|cuda] [--port 0]

CPU: the model in f32 with eager attention (upstream's default path). CUDA: bf16 with SDPA, as
`from_pretrained(dtype=torch.bfloat16)` gives. Forwards are serialized by a lock (concurrent
forwards on one model only oversubscribe the cores). Prints `listening on http://HOST:PORT` on
stderr once the model is loaded and warmed up.
"""
import base64
import io
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    import argparse

    import torch
    from PIL import Image
    from transformers.models.glm5_next.image_processing_glm5_next import Glm5NextImageProcessor

    from bench_upstream import device_model

    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    model = device_model(a.model, a.device)
    proc = Glm5NextImageProcessor()
    lock = threading.Lock()

    def embed(images):
        inputs = proc(images=images, return_tensors="pt")
        px = inputs["pixel_values"].to(a.device)
        grid = inputs["image_grid_thw"].to(a.device)
        with lock, torch.no_grad():
            out = model(px, grid_thw=grid)
            out = getattr(out, "pooler_output", out)
            if isinstance(out, (tuple, list)):
                out = out[0]
            out = out.float().cpu()
        rows, k = [], 0
        for g in grid.tolist():
            n = g[0] * g[1] * g[2] // 4
            rows.append(out[k:k + n].contiguous())
            k += n
        return rows

    warm = Image.new("RGB", (56, 56), (120, 30, 200))
    embed([warm])

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            try:
                n = int(self.headers.get("content-length", 0))
                req = json.loads(self.rfile.read(n))
                inputs = req["input"] if isinstance(req["input"], list) else [req["input"]]
                images = [Image.open(io.BytesIO(base64.b64decode(s.split(",", 1)[-1]))).convert("RGB")
                          for s in inputs]
                rows = embed(images)
                data = [{"object": "embedding", "index": i, "shape": list(r.shape),
                         "embedding": base64.b64encode(r.numpy().astype("<f4").tobytes()).decode()}
                        for i, r in enumerate(rows)]
                body = json.dumps({"object": "list", "data": data}).encode()
                status = 200
            except Exception as e:  # a bad request answers 400, the server goes on
                body = json.dumps({"error": {"message": str(e), "type": "invalid_input", "code": 400}}).encode()
                status = 400
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    print(f"listening on http://127.0.0.1:{srv.server_address[1]}", file=sys.stderr, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
