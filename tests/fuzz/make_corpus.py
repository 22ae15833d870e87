#!/usr/bin/env python3
"""Writes the small seed corpus of the libFuzzer harnesses (tests/fuzz/corpus/).

Every seed is made here from scratch (no third-party data): minimal valid
inputs of each format, so the fuzzers start from inputs that pass the first
checks. The corpus is checked in; re-run this only to change it:
    python3 tests/fuzz/make_corpus.py [MAGI2_BINARY]
With the magi2 binary given, the tiny model's configs and tokenizer are added
(from `magi2 make-tiny`), and a JPEG from ffmpeg when it is installed.
"""
import io
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tempfile
import types
import zipfile
import zlib
from collections import OrderedDict

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")


def put(name, filename, data):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, filename), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---------------------------------------------------------------- safetensors
def safetensors(tensors, metadata=None):
    header, blob = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(header).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + blob


put("safetensors", "two_tensors", safetensors({
    "a": ("F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
    "b": ("BF16", [3], b"\x80\x3f\x00\x40\x40\x40"),
}, {"format": "pt"}))
put("safetensors", "empty_and_int", safetensors({"e": ("F32", [0, 4], b""), "i": ("I64", [1], struct.pack("<q", 7))}))


# ------------------------------------------------------- torch.save zip files
# A stand-in for torch's globals, so Python's own pickler writes the records
# torch.save writes (_rebuild_tensor_v2 over persistent 'storage' ids).
torch_mod = types.ModuleType("torch")
utils_mod = types.ModuleType("torch._utils")
sys.modules["torch"], sys.modules["torch._utils"] = torch_mod, utils_mod


def _rebuild_tensor_v2(*args):
    raise RuntimeError("never called")


_rebuild_tensor_v2.__module__ = "torch._utils"
utils_mod._rebuild_tensor_v2 = _rebuild_tensor_v2


class FloatStorage:
    pass


FloatStorage.__module__ = "torch"
torch_mod.FloatStorage = FloatStorage


class Storage:
    def __init__(self, key, numel):
        self.key, self.numel = key, numel


class Tensor:
    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, size, stride, False, OrderedDict())

    def __reduce__(self):
        return (_rebuild_tensor_v2, self.args)


class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", FloatStorage, obj.key, "cpu", obj.numel)
        return None


def torch_zip(obj, storages, archive="archive"):
    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump(obj)
    pkl = buf.getvalue()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr(archive + "/data.pkl", pkl)
        z.writestr(archive + "/byteorder", "little")
        for key, raw in storages.items():
            z.writestr(archive + "/data/" + key, raw)
        z.writestr(archive + "/version", "3\n")
    return pkl, out.getvalue()


s0 = Storage("0", 6)
sd = OrderedDict([("conv.weight", Tensor(s0, 0, (2, 3), (3, 1))), ("conv.bias", Tensor(s0, 1, (2,), (3,)))])
pkl, z = torch_zip({"ema_state_dict": sd, "step": 3}, {"0": struct.pack("<6f", *range(6))})
put("torch_zip", "state_dict_zip", b"\x00" + z)  # even first byte: the whole file
put("torch_zip", "state_dict_pkl", b"\x01" + pkl)  # odd first byte: data.pkl alone
pkl2, z2 = torch_zip(OrderedDict([("w", Tensor(Storage("0", 4), 0, (4,), (1,)))]), {"0": b"\0" * 16})
put("torch_zip", "plain_dict_zip", b"\x00" + z2)
put("torch_zip", "plain_dict_pkl", b"\x01" + pkl2)


# ---------------------------------------------------------------------- images
def png(w, h, color, depth, rows):
    def chunk(t, data):
        return struct.pack(">I", len(data)) + t + data + struct.pack(">I", zlib.crc32(t + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


put("image", "rgb_4x3.png", png(4, 3, 2, 8, [bytes(range(r * 12, r * 12 + 12)) for r in range(3)]))
put("image", "gray16_2x2.png", png(2, 2, 0, 16, [b"\x01\x00\x00\x10", b"\xff\xff\x00\x00"]))
put("image", "rgba_2x1.png", png(2, 1, 6, 8, [b"\x10\x20\x30\x40\x50\x60\x70\x80"]))

# -------------------------------------------------------------------- prompts
put("prompt_json", "plain", "A red fox trots through fresh snow at dawn.")
put("prompt_json", "enhanced", json.dumps({
    "global_layer": {"style": "cinematic", "scene": "a snowy forest at dawn", "camera": ["slow dolly"]},
    "timeline": [{"time": "0-5s", "video": "the fox walks", "audio": "crunching snow"},
                 {"time": "5-10s", "video": "it looks up", "audio": ["wind", "a bird"]}],
    "reference_layer": ["The first frame refers to <Figure 1>"]}, ensure_ascii=False))
put("prompt_json", "unicode", json.dumps({"global_layer": {"scene": "狐狸在雪地里", "n": 1.5, "ok": True}},
                                         ensure_ascii=False))
put("prompt_json", "array", "[1, 2.5, \"x\", null, {\"a\": []}]")

# ------------------------------------------------------ tiny model files (CLI)
binary = sys.argv[1] if len(sys.argv) > 1 else None
if binary:
    tmp = tempfile.mkdtemp()
    subprocess.run([binary, "make-tiny", tmp + "/m"], check=True, stdout=subprocess.DEVNULL)
    m = tmp + "/m"
    for name, rel in [("dit", "config.json"), ("text", "text_encoder/config.json")]:
        with open(os.path.join(m, rel), "rb") as f:
            put("config", name + ".json", f.read())
    for d, _, files in os.walk(m):
        for fn in files:
            p = os.path.join(d, fn)
            if fn.endswith(".json") and ("turbo" in p or "stable-audio" in p) and os.path.getsize(p) < 20000:
                with open(p, "rb") as f:
                    put("config", os.path.basename(d) + "_" + fn, f.read())
    with open(os.path.join(m, "text_encoder", "tokenizer.json"), "rb") as f:
        tok = f.read()
    if len(tok) < 200000:
        put("tokenizer", "tokenizer_json", b"\x01" + tok)
    shutil.rmtree(tmp)
    if shutil.which("ffmpeg"):
        jpg = tempfile.mktemp(suffix=".jpg")
        subprocess.run(["ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=16x8", "-frames:v", "1",
                        jpg], check=True)
        with open(jpg, "rb") as f:
            put("image", "testsrc_16x8.jpg", f.read())
        os.remove(jpg)
put("tokenizer", "text_ascii", b"\x00A red fox trots through fresh snow at dawn. 123 <Figure 1>")
put("tokenizer", "text_cjk", "\x00狐狸在雪地里奔跑，黎明。\tTabs\n and  spaces!".encode())
put("config", "minimal.json", "{\"arch_config\": {}}")
