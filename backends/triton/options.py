"""Build options of the Triton backend that change the generated source.

Precision follows torch's: an f32 `tl.dot` runs on TF32 tensor cores exactly when torch would run the
same product in TF32. Matmuls (and the matmuls of attention) follow
`torch.backends.cuda.matmul.allow_tf32` (what `torch.set_float32_matmul_precision("high")` sets),
convolutions `torch.backends.cudnn.allow_tf32`; otherwise they are IEEE f32. The flags are read once,
when the module is generated (`TritonOptions.from_torch`), and become fields of the options, so the
source is a deterministic function of the Program and its options. Without torch imported, torch's
defaults hold: IEEE matmuls, TF32 convolutions.

`channels_last` (on by default; the option, or `TILEGRAPH_CHANNELS_LAST=0`, turns it off) stores the activations
that convolutions read and write with their channels innermost (`channels_last.py`), as Inductor lays out a
convolutional network on a GPU: compiled for sm_90, ResNet-50's dot kernels then load their inputs in 16-byte
vectors (`benchmarks/results/triton_sm90_nchw.md` has the NCHW build). Not yet timed on a GPU.
"""
from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass, replace

from tilegraph.ir import TilegraphError

# torch's defaults (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
TORCH_DEFAULT_MATMUL_TF32 = False
TORCH_DEFAULT_CONV_TF32 = True
CHANNELS_LAST = "TILEGRAPH_CHANNELS_LAST"


@dataclass(frozen=True)
class TritonOptions:
    """What the generated source depends on besides the Program.

    `matmul_tf32` / `conv_tf32`: f32 matmuls (batched, attention's) / convolutions use
    `tl.dot(..., input_precision="tf32")`; else "ieee". `channels_last`: convolutions' activations stored NHWC."""

    matmul_tf32: bool = TORCH_DEFAULT_MATMUL_TF32
    conv_tf32: bool = TORCH_DEFAULT_CONV_TF32
    channels_last: bool = True

    @staticmethod
    def from_torch(device: str | None = None) -> TritonOptions:
        """The precision torch would use now for products on `device` (None: a CUDA device). Off
        CUDA (the Triton interpreter's CPU tensors) torch never uses TF32: IEEE. Without torch
        imported, its defaults (reading the flags never imports torch). `channels_last` from
        $TILEGRAPH_CHANNELS_LAST."""
        layout = os.environ.get(CHANNELS_LAST, "1").strip().lower() not in ("0", "off", "false", "no")
        if device is not None and not str(device).startswith("cuda"):
            return TritonOptions(matmul_tf32=False, conv_tf32=False, channels_last=layout)
        torch = sys.modules.get("torch")
        if torch is None or not hasattr(torch, "backends"):
            return TritonOptions(channels_last=layout)
        with warnings.catch_warnings():  # newer torch deprecates the allow_tf32 spellings
            warnings.simplefilter("ignore")
            return TritonOptions(matmul_tf32=bool(torch.backends.cuda.matmul.allow_tf32),
                                 conv_tf32=bool(torch.backends.cudnn.allow_tf32), channels_last=layout)

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
            unknown = set(fields) - {"matmul_tf32", "conv_tf32", "channels_last"}
            if unknown:
                raise TilegraphError(f"unknown Triton build option(s) {sorted(unknown)}: known are tf32, "
                                     "matmul_tf32, conv_tf32, channels_last")
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
        layout = "channels-last" if self.channels_last else "NCHW"
        return f"f32 matmul {self.precision('matmul')}, f32 conv {self.precision('conv2d')}, {layout} activations"


__all__ = ["TritonOptions", "TORCH_DEFAULT_MATMUL_TF32", "TORCH_DEFAULT_CONV_TF32", "CHANNELS_LAST"]
