"""Reference digests for tests/media/test_media.cpp's resize cases.

Runs the official MAGI-2 resize formula (inference/pipeline/pipeline.py
_resize_video: u8 -> f32 / 255, torch bilinear with align_corners=False,
clamp, x255, .byte()) and the rounding variant (torch.round before the u8
cast) on the same synthetic frames as media_fixture.h gradient_frames(), and
prints the SHA-256 of each output array (C order). Needs torch + numpy.
Usage: python3 tests/media/make_resize_reference.py [OUT_DIR]
"""
import hashlib
import os
import sys

import numpy as np
import torch


def gradient_frames(t, h, w):
    i = np.arange(t)[:, None, None]
    y = np.arange(h)[None, :, None]
    x = np.arange(w)[None, None, :]
    f = np.zeros((t, h, w, 3), np.uint8)
    f[..., 0] = (x * 255 // max(w - 1, 1) + 4 * i) & 255
    f[..., 1] = np.broadcast_to(y * 255 // max(h - 1, 1), (t, h, w))
    f[..., 2] = ((x + y) // 2 + 256 - (3 * i) % 256) & 255
    return f


def resize(video, width, height, rounding):
    frames = torch.from_numpy(video).float() / 255.0
    frames = frames.permute(3, 0, 1, 2)
    frames = torch.nn.functional.interpolate(frames, size=(height, width), mode="bilinear",
                                             align_corners=False)
    v = frames.permute(1, 2, 3, 0).clamp(0, 1) * 255
    if rounding == "nearest":
        v = torch.round(v)
    return v.byte().numpy()


CASES = [  # (t, h, w) -> (out_w, out_h)
    ((3, 17, 23), (40, 9)),
    ((3, 17, 23), (11, 30)),
    ((2, 256, 448), (224, 128)),
    ((2, 64, 112), (160, 96)),
    ((2, 64, 112), (301, 77)),
]

out_dir = sys.argv[1] if len(sys.argv) > 1 else None
for (t, h, w), (ow, oh) in CASES:
    src = gradient_frames(t, h, w)
    for rounding in ("truncate", "nearest"):
        out = np.ascontiguousarray(resize(src, ow, oh, rounding))
        digest = hashlib.sha256(out.tobytes()).hexdigest()
        print(f"{{{t}, {h}, {w}, {ow}, {oh}, \"{rounding}\", \"{digest}\"}},")
        if out_dir:
            os.makedirs(out_dir, exist_ok=True)
            out.tofile(os.path.join(out_dir, f"resize_{t}x{h}x{w}_{ow}x{oh}_{rounding}.u8"))
