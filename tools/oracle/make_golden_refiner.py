#!/usr/bin/env python3
"""Golden-fixture generator for the MAGI-2 1080p refiner (tiny random configuration).

Runs the OFFICIAL SandAI MAGI-2-preview refiner code (inference/model/magi2_refiner.py, the
Magi2RefinerDataProxy of inference/pipeline/refiner_data_proxy.py and the refiner stage
Magi2InferenceEngine.evaluate_magi2_refiner_with_latent) on a tiny random config and writes
tests/fixtures/refiner_tiny/. This file contains no official code; it imports the official package
from --official and stub packages (flash_attn, magi_attention, MagiCompiler, ...) from --stubs.

The run is on the CPU (fp32 activations where the official code says fp32, bf16 where it says
bf16): the window layers take the official Hopper branch (MagiAttention flex_flash_attn_func, here
the exact torch stub in stubs/magi_attention), selected by forcing the module's HAS_MAGI_ATTENTION /
is_hopper_arch switches, because that is what the release runs on an H200.

Example:
  /work/.torch-venv/bin/python tools/oracle/make_golden_refiner.py \
      --official .oracle/official --stubs tools/oracle/stubs --out tests/fixtures/refiner_tiny
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import types

SEED = 0
# Tiny refiner architecture: every structural feature of configs/magi2_refiner.json
# magi2_refiner_arch_config (multi-modality layers at both ends, window attention in every layer,
# attention gating, SwiGLU7, no post-norm layers), scaled down.
TINY_ARCH = {
    "num_layers": 4,
    "hidden_size": 128,
    "head_dim": 32,
    "num_query_groups": 2,
    "video_in_channels": 48,
    "audio_in_channels": 64,
    "text_in_channels": 64,
    "checkpoint_qk_layernorm_rope": False,
    "params_dtype": "bfloat16",
    "mm_layers": [0, 3],
    "local_attn_layers": [0, 1, 2, 3],
    "enable_attn_gating": True,
    "post_norm_layers": [],
    "activation_type": "swiglu7",
}
# evaluation_config refiner keys: the release values, except smaller blocks and radius so that the
# tiny clip (5 x 7 x 9 latent) has several blocks per axis, partial edge blocks and a sparse mask.
TINY_EVAL = {
    "use_magi2_refiner": True,
    "magi2_refiner_model_name": "magi2_refiner",
    "magi2_refiner_model_path": "refiner",
    "magi2_refiner_video_txt_guidance_scale": 2.0,
    "magi2_refiner_audio_txt_guidance_scale": 5.0,
    "magi2_refiner_noise_value": 220,
    "magi2_refiner_vae_stride": [4, 16, 16],
    "magi2_refiner_patch_size": [1, 1, 1],
    "magi2_refiner_audio_noise_scale": -1.0,
    "magi2_refiner_data_proxy_config": {
        "t_patch_size": 1,
        "patch_size": 1,
        "frame_receptive_field": 11,
        "spatial_rope_interpolation": "extra",
        "coords_style": "v1",
        "text_offset": 0,
        "magi2_refiner_condition_input": "none",
        "attn_config": {
            "mode": "window",
            "block_t_size": 2,
            "block_size": 2,
            "window": {
                "level": "block",
                "block_mode": "grid",
                "block_t_radius": 1,
                "block_h_radius": 1,
                "block_w_radius": 1,
                "win_size": 384,
                "frame_receptive_field": -1,
                "auto_range_merge": True,
                "sparse_load": False,
                "full_attn_layers": [],
            },
        },
    },
    "magi2_refiner_num_inference_steps": 5,
    "magi2_refiner_shift": 5.0,
    "use_cfg_trick": False,
    "cfg_trick_start_frame": 13,
    "cfg_trick_value": 2.0,
}
PREVIEW_THW = (3, 4, 5)   # preview latent frames, height, width
REFINER_PX = (144, 112)   # refiner width, height in pixels -> latent 9 x 7 (stride 16)
TXT_LEN, NULL_TXT_LEN, AUDIO_LEN = 7, 4, 6


def log(*a):
    print("[golden-refiner]", *a, flush=True)


def setup(official, stubs):
    for p in (os.path.abspath(stubs), os.path.abspath(official)):
        if p not in sys.path:
            sys.path.insert(0, p)
    import torch

    torch.Tensor.cuda = lambda self, *a, **k: self  # the data proxy moves its varlen handler to CUDA
    torch.cuda.reset_peak_memory_stats = lambda *a, **k: None
    import inference.model.magi2_refiner as M

    M.HAS_MAGI_ATTENTION = True  # the Hopper branch: MagiAttention's flex_flash_attn_func (stub)
    M.is_hopper_arch = lambda: True
    # The MagiCompiler stub does not register torch custom ops; the refiner calls two through torch.ops.
    for name in ("flex_flash_attn_func", "flash_attn_func"):
        setattr(torch.ops.magi2, name, getattr(M, name))
    return torch, M


def init_random_weights(torch, model):
    """Seeded random values for every parameter (own rule per tensor kind), cast to its dtype."""
    g = torch.Generator().manual_seed(1000 + SEED)
    gains = {"linear_qkv": 1.0, "linear_g": 1.0, "linear_proj": 2.0, "up_gate_proj": 2.5, "down_proj": 0.4}
    with torch.no_grad():
        for name, p in model.named_parameters():
            parts = name.split(".")
            leaf, owner = parts[-1], parts[-2]
            shape = tuple(p.shape)
            if owner in gains and leaf == "weight":
                val = torch.randn(shape, generator=g) * (gains[owner] / math.sqrt(shape[1]))
            elif owner.endswith("_embedder"):
                std = 1.0 / math.sqrt(shape[1]) if leaf == "weight" else 0.2
                val = torch.randn(shape, generator=g) * std
            elif owner.startswith("final_linear"):
                val = torch.randn(shape, generator=g) / math.sqrt(shape[1])
            elif owner in ("q_norm", "k_norm"):
                val = torch.randn(shape, generator=g) * 0.15 + 0.5
            elif "norm" in owner:
                val = torch.randn(shape, generator=g) * 0.15
            else:
                raise RuntimeError(f"init: no rule for {name} {shape}")
            p.copy_(val.to(p.dtype))


def save_checkpoint(model, ckpt_dir):
    """Official refiner layout: safetensors shards + model.safetensors.index.json (2 shards here)."""
    from safetensors.torch import save_file

    os.makedirs(ckpt_dir, exist_ok=True)
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}  # rope.bands is a persistent buffer
    half = TINY_ARCH["num_layers"] // 2
    shards = {1: {}, 2: {}}
    for k, v in sd.items():
        second = k.startswith("block.layers.") and int(k.split(".")[2]) >= half
        shards[2 if second else 1][k] = v
    weight_map, total = {}, 0
    for i in (1, 2):
        fname = f"model-{i:05d}-of-00002.safetensors"
        save_file(shards[i], os.path.join(ckpt_dir, fname), metadata={"format": "pt"})
        for k, v in shards[i].items():
            weight_map[k] = fname
            total += v.numel() * v.element_size()
    with open(os.path.join(ckpt_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)


class Capture:
    """Forward hooks: named intermediates in the model's input token order (block order)."""

    def __init__(self, model):
        self.model, self.store, self.handles, self.inv = model, {}, [], None

    def install(self):
        m = self.model

        def block_pre(mod, args, kwargs):
            self.inv = kwargs["inv_permute_mapping"]
            self.store["block_in"] = args[0][self.inv].float().clone()
            self.store["rope"] = args[1].float().clone()

        self.handles.append(m.block.register_forward_pre_hook(block_pre, with_kwargs=True))

        def pre_adapter(mod, args, out):
            self.store["pre_adapter_x"] = out[0].float().clone()

        self.handles.append(m.pre_adapter.register_forward_hook(pre_adapter))
        for i, layer in enumerate(m.block.layers):
            def attn_hook(mod, args, out, i=i):
                self.store[f"l{i}_attn_out"] = out[self.inv].float().clone()

            def layer_hook(mod, args, out, i=i):
                self.store[f"l{i}_out"] = out[self.inv].float().clone()

            self.handles.append(layer.attention.register_forward_hook(attn_hook))
            self.handles.append(layer.register_forward_hook(layer_hook))

    def remove(self):
        for h in self.handles:
            h.remove()


def fp32_reference(torch, model, io, prefix):
    """Re-runs the recorded forward `prefix` with fp32 parameters and every bf16 cast mapped to fp32
    (as make_golden.py's cpuref stage): {prefix}{name}_fp32 for the output and the intermediates. The
    distance between the bf16 and the fp32 runs is the bf16 floor a reimplementation is held to."""
    handler = types.SimpleNamespace(
        q_ranges=io[prefix + "q_ranges"], k_ranges=io[prefix + "k_ranges"],
        attn_type_map=torch.zeros(io[prefix + "q_ranges"].shape[0], dtype=torch.int32), max_seqlen_q=0,
        auto_range_merge=False, sparse_load=False)
    m32 = copy.deepcopy(model).float()
    orig_to = torch.Tensor.to

    def to32(self, *a, **k):
        a = tuple(torch.float32 if x is torch.bfloat16 else x for x in a)
        if k.get("dtype", None) is torch.bfloat16:
            k["dtype"] = torch.float32
        return orig_to(self, *a, **k)

    cap = Capture(m32)
    cap.install()
    torch.Tensor.to = to32
    try:
        with torch.inference_mode():
            y = m32(io[prefix + "x"], io[prefix + "coords"], io[prefix + "modality"].long(), None, handler)
    finally:
        torch.Tensor.to = orig_to
        cap.remove()
    out = {f"{prefix}{k}_fp32": v for k, v in cap.store.items() if k not in ("rope",)}
    out[f"{prefix}out_fp32"] = y.float()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--official", default=os.environ.get("MAGI2_OFFICIAL_DIR", ".oracle/official"))
    ap.add_argument("--stubs", default=os.environ.get("MAGI2_STUBS_DIR", "tools/oracle/stubs"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch, M = setup(args.official, args.stubs)
    from safetensors.torch import save_file

    from inference.common.magi2_config import Magi2RefinerDataProxyConfig, Magi2RefinerModelConfig
    from inference.pipeline import inference_engine as IE
    from inference.pipeline.refiner_data_proxy import Magi2RefinerDataProxy

    torch.manual_seed(SEED)
    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)

    arch = Magi2RefinerModelConfig(**copy.deepcopy(TINY_ARCH))
    arch.num_heads_q = arch.hidden_size // arch.head_dim
    arch.num_heads_kv = arch.num_query_groups
    model = M.Transformer(arch).eval()
    init_random_weights(torch, model)
    save_checkpoint(model, os.path.join(out_dir, "refiner"))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump({"magi2_refiner_arch_config": TINY_ARCH, "evaluation_config": TINY_EVAL}, f, indent=2)

    eval_cfg = types.SimpleNamespace(**copy.deepcopy(TINY_EVAL))
    eval_cfg.magi2_refiner_data_proxy_config = Magi2RefinerDataProxyConfig(**TINY_EVAL["magi2_refiner_data_proxy_config"])
    proxy = Magi2RefinerDataProxy(eval_cfg.magi2_refiner_data_proxy_config)

    g = torch.Generator().manual_seed(2000 + SEED)
    T, H, W = PREVIEW_THW
    io = {
        "preview_latent": torch.randn(1, 48, T, H, W, generator=g),
        "preview_audio_latent": torch.randn(1, AUDIO_LEN, 64, generator=g),
        "txt_feat": torch.randn(1, TXT_LEN, TINY_ARCH["text_in_channels"], generator=g).to(torch.bfloat16),
        "null_txt_feat": torch.randn(1, NULL_TXT_LEN, TINY_ARCH["text_in_channels"], generator=g).to(torch.bfloat16),
    }

    # ---- the official refiner stage, with its forwards and scheduler steps recorded ----
    rec = {"forwards": [], "steps": [], "noise": None}
    cap_first = {"done": False}

    def forward_rec(self, latent_video, latent_audio, txt_feat, ref_audio_feat):
        capture = None
        if not cap_first["done"]:
            capture = Capture(self.magi2_refiner)
            capture.install()
        orig_pi = proxy.process_input
        seen = {}

        def pi(eval_input):
            r = orig_pi(eval_input)
            seen["x"], seen["coords"], seen["mod"], _, seen["h"] = r
            return r

        proxy.process_input = pi
        orig_model = self.magi2_refiner
        outs = {}

        def model_call(*a):
            y = orig_model(*a)
            outs["y"] = y
            return y

        self.magi2_refiner = model_call
        try:
            xv, xa = IE.Magi2InferenceEngine._forward_magi2_refiner(self, latent_video, latent_audio, txt_feat,
                                                                    ref_audio_feat)
        finally:
            self.magi2_refiner = orig_model
            proxy.process_input = orig_pi
            if capture is not None:
                capture.remove()
        if capture is not None:
            cap_first["done"] = True
            rec["first"] = dict(capture.store, x=seen["x"].float(), coords=seen["coords"].float(),
                                modality=seen["mod"].to(torch.int32), out=outs["y"].float(),
                                q_ranges=seen["h"].q_ranges, k_ranges=seen["h"].k_ranges,
                                token_order=proxy._build_block_order(
                                    patch_nums=tuple(latent_video.shape[2:]),
                                    block_sizes=(2, 2, 2), valid_token_num=int(seen["x"].shape[0]),
                                    device=torch.device("cpu"))[0])
        rec["forwards"].append((latent_video.clone(), xv.clone()))
        return xv, xa

    orig_randn_like = torch.randn_like

    def randn_like_rec(t, *a, **k):
        n = orig_randn_like(t, *a, **k)
        if rec["noise"] is None:
            rec["noise"] = n.clone()
            rec["interp"] = t.clone()
        return n

    orig_step = IE.FlowUniPCMultistepScheduler.step
    step_calls = {"n": 0}

    def step_rec(sched, model_output, timestep, sample, *a, **k):
        r = orig_step(sched, model_output, timestep, sample, *a, **k)
        if model_output.shape[1] == 48:  # the video scheduler (audio is never stepped at noise scale -1)
            rec["steps"].append((float(timestep), sample.clone(), model_output.clone(), r[0].clone()))
        step_calls["n"] += 1
        return r

    engine = types.SimpleNamespace(
        config=eval_cfg, magi2_refiner=model, magi2_refiner_data_proxy=proxy, device="cpu",
        audio_latent_dim=64, shift=7.0, _refiner_mode=IE.OffloadMode.GPU,
        magi2_refiner_sigmas=IE.ZeroSNRDDPMDiscretization()(1000, do_append_zero=False, flip=True))
    engine._forward_magi2_refiner = types.MethodType(forward_rec, engine)
    IE.FlowUniPCMultistepScheduler.step = step_rec
    torch.randn_like = randn_like_rec
    IE.print_mem_info_rank_0 = lambda *a, **k: None
    try:
        with torch.inference_mode():
            final, _ = IE.Magi2InferenceEngine.evaluate_magi2_refiner_with_latent(
                engine, context=io["txt_feat"], context_null=io["null_txt_feat"], latent_video=io["preview_latent"],
                latent_audio=io["preview_audio_latent"], refiner_width=REFINER_PX[0], refiner_height=REFINER_PX[1],
                magi2_refiner_num_inference_steps=TINY_EVAL["magi2_refiner_num_inference_steps"])
    finally:
        IE.FlowUniPCMultistepScheduler.step = orig_step
        torch.randn_like = orig_randn_like

    first = rec.pop("first")
    for k, v in first.items():
        io[f"fwd_{k}"] = v.contiguous()
    io["sigmas"] = engine.magi2_refiner_sigmas.float()
    io["renoise_noise"] = rec["noise"]
    io["interp_latent"] = rec["interp"]
    n_steps = TINY_EVAL["magi2_refiner_num_inference_steps"]
    assert len(rec["forwards"]) == 2 * n_steps and len(rec["steps"]) == n_steps, (len(rec["forwards"]), len(rec["steps"]))
    ts = []
    for s in range(n_steps):
        (lat_c, cond), (_, uncond) = rec["forwards"][2 * s], rec["forwards"][2 * s + 1]
        t, sample, v, out = rec["steps"][s]
        ts.append(t)
        io[f"loop_s{s}_latent_in"] = lat_c
        io[f"loop_s{s}_cond_video"] = cond
        io[f"loop_s{s}_uncond_video"] = uncond
        io[f"loop_s{s}_v_cfg"] = v
        io[f"loop_s{s}_latent_out"] = out
    io["loop_timesteps"] = torch.tensor(ts, dtype=torch.float32)
    io["loop_final_latent"] = final.float()

    # ---- one extra forward with audio tokens (the release sends none; covers the audio rows) ----
    from inference.pipeline.inference_engine import EvalInput

    lat = io["interp_latent"]
    ev = EvalInput(x_t=lat, audio_x_t=io["preview_audio_latent"], audio_feat_len=torch.tensor([AUDIO_LEN]),
                   txt_feat=io["txt_feat"].float(), txt_feat_len=torch.tensor([TXT_LEN]),
                   ref_audio_feat=torch.zeros(1, 0, 64), ref_audio_feat_len=torch.tensor([0]),
                   ref_video_feat=torch.empty_like(lat), ref_video_feat_len=torch.tensor([0]))
    with torch.inference_mode():
        mi = proxy.process_input(ev)
        y = model(*mi)
    io["audio_fwd_x"], io["audio_fwd_coords"] = mi[0].float(), mi[1].float()
    io["audio_fwd_modality"] = mi[2].to(torch.int32)
    io["audio_fwd_out"] = y.float()

    # ---- error scale: the same first forward with every bf16 cast mapped to fp32 ----
    io.update(fp32_reference(torch, model, io, "fwd_"))

    io = {k: v.detach().contiguous() for k, v in io.items()}
    save_file(io, os.path.join(out_dir, "refiner_io.safetensors"))
    meta = {
        "produced_on": "CPU (torch %s), official MAGI-2-preview f68a0f9, stubs of tools/oracle/stubs" % torch.__version__,
        "seed": SEED,
        "preview_latent_thw": list(PREVIEW_THW),
        "refiner_px_wh": list(REFINER_PX),
        "txt_len": TXT_LEN, "null_txt_len": NULL_TXT_LEN, "audio_len": AUDIO_LEN,
        "steps": n_steps,
        "timesteps": ts,
        "sigma_at_noise_value": float(io["sigmas"][TINY_EVAL["magi2_refiner_noise_value"]]),
        "tensors": {k: [list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in sorted(io.items())},
    }
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
    log("done:", out_dir, "tokens", int(io["fwd_x"].shape[0]), "timesteps", ts)


if __name__ == "__main__":
    main()
