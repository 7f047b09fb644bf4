"""Torch models shared by the benchmarks that compare with torch (cpu.py, triton_gpu.py).

`WHOLE_MODELS` are the whole-model rows of issue 20: a ResNet-18 basic block and six transformers
architectures at their published sizes (ResNet-50, MobileNetV2, BERT-base, GPT-2 small, a Llama-style
decoder block, ViT-base), built from configs with random weights kept O(1) (`zoo_models.init_weights`,
batch norms calibrated on other images), so nothing is downloaded. Each also has a tiny variant for
dry runs through the Triton interpreter.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

TEXT_TOKENS = 128  # sequence length of the text models' rows
IMAGE_SIZE = 224


class BasicBlock(torch.nn.Module):
    """A ResNet-18 basic block: two 3x3 convolutions with batch norms, a residual add, ReLUs."""

    def __init__(self, c: int = 64) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(c)
        self.conv2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))


@dataclass(frozen=True)
class WholeModel:
    """A whole-model benchmark row: `build(batch, tiny, layers)` gives the eval-mode module (f32, CPU) and
    its example inputs. `layers` (transformers only) keeps that many of the model's layers at full width
    (a quick run's shortcut: per-call ratios hold, compiles are shorter); None keeps them all."""

    name: str
    build: Callable[[int, bool, int | None], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]
    small: bool  # cheap enough to run at every batch in a quick run
    layered: bool = False  # `layers` applies

    def build_in(self, dtype: str, batch: int, tiny: bool = False, layers: int | None = None):
        """`build`, in eval mode, its module and floating inputs in `dtype` ("f32" or "bf16")."""
        with torch.random.fork_rng(devices=[]):  # what `init_weights` leaves (ViT's class token and position
            torch.manual_seed(0)                 # embeddings) drawn the same on every build
            module, inputs = self.build(batch, tiny, layers if self.layered else None)
        module = module.eval()
        if dtype == "bf16":
            module = module.to(torch.bfloat16)
            inputs = tuple(x.to(torch.bfloat16) if x.is_floating_point() else x for x in inputs)
        return module, inputs

    def traced(self, dtype: str, batch: int, tiny: bool = False, layers: int | None = None):
        """`build_in`'s module traced (torch.fx, no autograd) to a tilegraph Graph."""
        from tilegraph.frontends.fx import from_module

        module, inputs = self.build_in(dtype, batch, tiny, layers)
        with torch.no_grad():
            return from_module(module, inputs)


def whole_model(name: str) -> WholeModel:
    """The `WHOLE_MODELS` row called `name`."""
    found = [m for m in WHOLE_MODELS if m.name == name]
    if not found:
        raise KeyError(f"no whole model {name!r}: known are {', '.join(m.name for m in WHOLE_MODELS)}")
    return found[0]


def _basic_block(batch: int, tiny: bool, layers: int | None):
    from zoo_models import init_weights

    c, hw = (8, 8) if tiny else (64, 56)
    return init_weights(BasicBlock(c)), (torch.randn(batch, c, hw, hw, generator=torch.Generator().manual_seed(2)),)


def _images(model, batch: int, size: int):
    from zoo_models import LastHidden, calibrate_batch_norms, image_inputs

    wrapped = LastHidden(model, ("pixel_values",))
    wrapped = calibrate_batch_norms(wrapped, image_inputs(size, batch=4, seed=5))
    return wrapped, image_inputs(size, batch=batch)


def _resnet50(batch: int, tiny: bool, layers: int | None):
    import transformers
    from zoo_models import init_weights

    config = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1]) \
        if tiny else transformers.ResNetConfig()
    return _images(init_weights(transformers.ResNetModel(config)), batch, 32 if tiny else IMAGE_SIZE)


def _mobilenetv2(batch: int, tiny: bool, layers: int | None):
    import transformers
    from zoo_models import init_weights

    config = transformers.MobileNetV2Config(depth_multiplier=0.35, image_size=16) if tiny \
        else transformers.MobileNetV2Config()
    return _images(init_weights(transformers.MobileNetV2Model(config)), batch, 16 if tiny else IMAGE_SIZE)


def _text(model_cls: str, config_cls: str, full: dict, small: dict, layer_key: str):
    def build(batch: int, tiny: bool, layers: int | None):
        import transformers
        from zoo_models import LastHidden, init_weights, text_inputs

        settings = dict(small if tiny else full)
        if layers is not None and not tiny:
            settings[layer_key] = layers
        config = getattr(transformers, config_cls)(**settings)
        model = init_weights(getattr(transformers, model_cls)(config))
        inputs = text_inputs(batch, 16 if tiny else TEXT_TOKENS)
        return LastHidden(model, ("input_ids", "attention_mask")), inputs
    return build


def _vit(batch: int, tiny: bool, layers: int | None):
    import transformers
    from zoo_models import LastHidden, image_inputs, init_weights

    if tiny:
        config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                        intermediate_size=64, image_size=32, patch_size=8)
    else:
        config = transformers.ViTConfig(**({} if layers is None else {"num_hidden_layers": layers}))
    model = init_weights(transformers.ViTModel(config, add_pooling_layer=False))
    return LastHidden(model, ("pixel_values",)), image_inputs(config.image_size, batch=batch)


_TINY_TEXT = dict(vocab_size=128, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                  max_position_embeddings=64)
# One Llama-2-7B decoder layer (4096 wide, 32 heads, SwiGLU 11008) with grouped-query attention
# (8 key/value heads), between an embedding and the final RMS norm.
_LLAMA = dict(vocab_size=1024, hidden_size=4096, intermediate_size=11008, num_hidden_layers=1, num_attention_heads=32,
              num_key_value_heads=8, max_position_embeddings=512, use_cache=False, pad_token_id=0,
              bos_token_id=1, eos_token_id=2)

WHOLE_MODELS: list[WholeModel] = [
    WholeModel("resnet18_basic_block", _basic_block, small=True),
    WholeModel("resnet50", _resnet50, small=False),
    WholeModel("mobilenetv2", _mobilenetv2, small=True),
    WholeModel("bert_base", _text("BertModel", "BertConfig", {}, _TINY_TEXT, "num_hidden_layers"), small=False,
               layered=True),
    WholeModel("gpt2_small", _text("GPT2Model", "GPT2Config", dict(use_cache=False),
                                   dict(vocab_size=128, n_embd=32, n_layer=1, n_head=2, n_positions=64,
                                        use_cache=False), "n_layer"), small=False, layered=True),
    WholeModel("llama_decoder_block", _text("LlamaModel", "LlamaConfig", _LLAMA,
                                            {**_TINY_TEXT, "num_key_value_heads": 1, "use_cache": False},
                                            "num_hidden_layers"), small=True),
    WholeModel("vit_base", _vit, small=False, layered=True),
]


__all__ = ["BasicBlock", "WholeModel", "WHOLE_MODELS", "whole_model", "TEXT_TOKENS", "IMAGE_SIZE"]
