"""Build options of the Triton backend that change the generated source.

Precision follows torch's: an f32 `tl.dot` runs on TF32 tensor cores exactly when torch would run the
same product in TF32. Matmuls (and the matmuls of attention) follow
`torch.backends.cuda.matmul.allow_tf32` (what `torch.set_float32_matmul_precision("high")` sets),
convolutions `torch.backends.cudnn.allow_tf32`; otherwise they are IEEE f32. The flags are read once,
when the module is generated (`TritonOptions.from_torch`), and become fields of the options, so the
source is a deterministic function of the Program and its options. Without torch imported, torch's
defaults hold: IEEE matmuls, TF32 convolutions.

Where activations are stored channels-last is the Program's decision (the layout pass, `Program.layouts`),
not a build option: the backend stores and addresses every tensor as the Program says.
"""
from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, replace

from tilegraph.ir import TilegraphError

# torch's defaults (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
TORCH_DEFAULT_MATMUL_TF32 = False
TORCH_DEFAULT_CONV_TF32 = True


@dataclass(frozen=True)
class TritonOptions:
    """What the generated source depends on besides the Program.

    `matmul_tf32` / `conv_tf32`: f32 matmuls (batched, attention's) / convolutions use
    `tl.dot(..., input_precision="tf32")`; else "ieee"."""

    matmul_tf32: bool = TORCH_DEFAULT_MATMUL_TF32
    conv_tf32: bool = TORCH_DEFAULT_CONV_TF32

    @staticmethod
    def from_torch(device: str | None = None) -> TritonOptions:
        """The precision torch would use now for products on `device` (None: a CUDA device). Off
        CUDA (the Triton interpreter's CPU tensors) torch never uses TF32: IEEE. Without torch
        imported, its defaults (reading the flags never imports torch)."""
        if device is not None and not str(device).startswith("cuda"):
            return TritonOptions(matmul_tf32=False, conv_tf32=False)
        torch = sys.modules.get("torch")
        if torch is None or not hasattr(torch, "backends"):
            return TritonOptions()
        with warnings.catch_warnings():  # newer torch deprecates the allow_tf32 spellings
            warnings.simplefilter("ignore")
            return TritonOptions(matmul_tf32=bool(torch.backends.cuda.matmul.allow_tf32),
                                 conv_tf32=bool(torch.backends.cudnn.allow_tf32))

    @staticmethod
    def resolve(tf32: bool | None = None, options: TritonOptions | dict | None = None,
                device: str | None = None) -> TritonOptions:
        """Options for a build: `options` as given (a TritonOptions, or a dict of its fields and/or
        "tf32"), `tf32` for both kinds of product, else what torch would do now on `device`."""
        if isinstance(options, TritonOptions):
            base = options
        else:
            fields = dict(options or {})
            if "tf32" in fields:
                tf32 = fields.pop("tf32") if tf32 is None else tf32
            if "channels_last" in fields:
                raise TilegraphError("channels_last is the layout pass's option, not a build option: compile with "
                                     "pipeline=driver.default_pipeline(target, channels_last=False), or set "
                                     "TILEGRAPH_CHANNELS_LAST=0")
            unknown = set(fields) - {"matmul_tf32", "conv_tf32"}
            if unknown:
                raise TilegraphError(f"unknown Triton build option(s) {sorted(unknown)}: known are tf32, "
                                     "matmul_tf32, conv_tf32")
            wrong = {name: value for name, value in fields.items() if not isinstance(value, bool)}
            if wrong:
                raise TilegraphError(f"the Triton options take True or False, got {wrong}")
            base = TritonOptions(**{**TritonOptions.from_torch(device).__dict__, **fields})
        if tf32 is not None:
            if not isinstance(tf32, bool):
                raise TilegraphError(f"the Triton option tf32 takes True or False, got {tf32!r}")
            base = replace(base, matmul_tf32=tf32, conv_tf32=tf32)
        return base

    def precision(self, op: str) -> str:
        """`input_precision` of an f32 tl.dot computing `op` (conv2d: the convolution flag)."""
        tf32 = self.conv_tf32 if op.startswith("conv") else self.matmul_tf32
        return "tf32" if tf32 else "ieee"

    def describe(self) -> str:
        return f"f32 matmul {self.precision('matmul')}, f32 conv {self.precision('conv2d')}"


__all__ = ["TritonOptions", "TORCH_DEFAULT_MATMUL_TF32", "TORCH_DEFAULT_CONV_TF32"]
