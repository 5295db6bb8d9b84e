#!/usr/bin/env python3
"""A fake Hugging Face hub for tests/download/test_download.sh (python3 stdlib only).

Serves /<owner>/<name>/resolve/<revision>/<file> for a few canned repositories, each with one behaviour
scripts/download-model.sh must handle; everything else is a 404, as the hub answers for a missing file.
Listens on 127.0.0.1 on a free port and writes that port to --port-file (or stdout), so that tests
running side by side never collide.

  good/model       config.json, vocab.json, merges.txt and a valid model.safetensors (tokenizer.json and
                   generation_config.json: 404, as in many real repos)
  redirect/model   as good/model, but model.safetensors answers 302 to /cdn/... as the hub does for
                   LFS files: the 302 carries its own Content-Length, the one to check is the last one
  cut/model        model.safetensors sends the full Content-Length, then half the bytes, then closes
  err500/model     model.safetensors answers 500 (must not be taken for "no single file, try shards")
  opt500/model     vocab.json (an optional file) answers 500
  badheader/model  model.safetensors is complete as HTTP says, but its header promises more data
  sharded/model    no model.safetensors: model.safetensors.index.json and 2 valid shards
  evilshard/model  the shard index names ../escape.safetensors (curl squashes the dots in the URL, so
                   any path ending in escape.safetensors is served a valid file)
"""
import argparse
import json
import struct
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def safetensors(tensors, declared_extra=0):
    """Builds a safetensors file: {name: (dtype, shape, raw bytes)}. declared_extra makes the header's
    last data_offsets end that many bytes past the data actually written (a truncated file)."""
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if declared_extra:
        last = list(tensors)[-1]
        header[last]["data_offsets"][1] += declared_extra
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the format pads the header to 8 bytes with spaces
    return struct.pack("<Q", len(text)) + text + data


def f32(values):
    return struct.pack("<%df" % len(values), *values)


CONFIG = json.dumps({"model_type": "gpt2", "n_embd": 4, "n_layer": 1, "n_head": 1, "n_positions": 8,
                     "vocab_size": 4}).encode()
VOCAB = json.dumps({"a": 0, "b": 1, "ab": 2, "<|endoftext|>": 3}).encode()
MERGES = b"#version: 0.2\na b\n"
GOOD = safetensors({"wte.weight": ("F32", [4, 4], f32([i / 16 for i in range(16)])),
                    "ln_f.bias": ("F32", [4], f32([0.0, 0.5, 1.0, 1.5]))})
# 64 bytes of data present, the header says 64 + 4096: the kind of file a cut upload or a bad mirror gives
BAD_HEADER = safetensors({"wte.weight": ("F32", [4, 4], f32([1.0] * 16))}, declared_extra=4096)
SHARD1 = safetensors({"wte.weight": ("F32", [4, 4], f32([2.0] * 16))})
SHARD2 = safetensors({"ln_f.bias": ("F32", [4], f32([3.0] * 4))})
SHARD_NAMES = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
INDEX = json.dumps({"metadata": {"total_size": 80},
                    "weight_map": {"wte.weight": SHARD_NAMES[0], "ln_f.bias": SHARD_NAMES[1]}}).encode()
EVIL_INDEX = json.dumps({"weight_map": {"wte.weight": "../escape.safetensors"}}).encode()

BASE = {"config.json": CONFIG, "vocab.json": VOCAB, "merges.txt": MERGES}
# A value is the body to serve with 200, or ("status", N), ("cut", body) or ("redirect", path).
REPOS = {
    "good/model": {**BASE, "model.safetensors": GOOD},
    "redirect/model": {**BASE, "model.safetensors": ("redirect", "/cdn/good.safetensors")},
    "cut/model": {**BASE, "model.safetensors": ("cut", GOOD)},
    "err500/model": {**BASE, "model.safetensors": ("status", 500)},
    "opt500/model": {**BASE, "vocab.json": ("status", 500), "model.safetensors": GOOD},
    "badheader/model": {**BASE, "model.safetensors": BAD_HEADER},
    "sharded/model": {**BASE, "model.safetensors.index.json": INDEX,
                      SHARD_NAMES[0]: SHARD1, SHARD_NAMES[1]: SHARD2},
    "evilshard/model": {**BASE, "model.safetensors.index.json": EVIL_INDEX},
}
CDN = {"/cdn/good.safetensors": GOOD}


def lookup(path):
    """The canned answer for a request path, or None for a 404."""
    if path in CDN:
        return CDN[path]
    if path.startswith("/evilshard/model/") and path.endswith("/escape.safetensors"):
        return GOOD  # wherever curl's squashing of "../" took it: a script that asks gets a file
    parts = path.lstrip("/").split("/")
    # owner/name/resolve/revision/file
    if len(parts) >= 5 and parts[2] == "resolve":
        return REPOS.get(parts[0] + "/" + parts[1], {}).get("/".join(parts[4:]))
    return None


class Hub(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # as the real hub: Content-Length matters, keep-alive is possible

    def send_body(self, status, body, extra_headers=()):
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra_headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        answer = lookup(self.path.split("?")[0])
        if answer is None:
            self.send_body(404, b"Entry not found", [("X-Error-Code", "EntryNotFound")])
        elif isinstance(answer, bytes):
            self.send_body(200, answer)
        elif answer[0] == "status":
            self.send_body(answer[1], b"Internal Error - We're working hard to fix this as soon as possible!")
        elif answer[0] == "redirect":
            self.send_body(302, b"Found. Redirecting to " + answer[1].encode(), [("Location", answer[1])])
        elif answer[0] == "cut":
            # Promise the whole file, send half, hang up: what a dropped connection looks like to curl.
            body = answer[1]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True

    def log_message(self, *args):  # the test prints its own lines; the server stays quiet
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port-file", help="write the port here (default: stdout)")
    args = ap.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    port = str(server.server_address[1])
    if args.port_file:
        # Written under another name and renamed, so a reader never sees half a number.
        with open(args.port_file + ".tmp", "w") as f:
            f.write(port + "\n")
        import os
        os.replace(args.port_file + ".tmp", args.port_file)
    else:
        print(port, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
