"""Stub of magi_compiler.config (imported by inference/model/magi2_refiner.py for a type annotation
and the offload ratio its config_patch sets). CompileConfig is a plain attribute bag; nothing reads it
because the magi_compile stub never compiles."""


class _OffloadConfig:
    gpu_resident_weight_ratio = 1.0


class CompileConfig:
    def __init__(self, *args, **kwargs):
        self.offload_config = _OffloadConfig()


__all__ = ["CompileConfig"]
