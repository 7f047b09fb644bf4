"""The model zoo: transformers architectures built from small configs with random weights.

Shared by `benchmarks/model_zoo.py` (the table) and `tests/frontends/test_model_zoo.py` (the fast
subset). Nothing is downloaded: every model comes from a config. `init_weights` and
`calibrate_batch_norms` keep activations O(1) (Kaiming conv weights, LeCun linear weights, batch-norm
statistics from the data, as in a trained network), so a matching output proves something.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn

VOCAB = 128
TEXT_LEN = 16


@dataclass(frozen=True)
class ZooModel:
    """One architecture: how to build it (module, example inputs) and which set it belongs to."""

    name: str
    family: str  # decoder, encoder, encoder-decoder, vision, speech
    build: Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]
    fast: bool = False  # in the fast subset (the test suite, `model_zoo.py --fast`)


# ----- weights and inputs -------------------------------------------------------------------------------
def init_weights(model: nn.Module, seed: int = 0) -> nn.Module:
    """Re-initialise so that activations stay O(1): Kaiming conv weights, LeCun linear weights,
    unit-scale embeddings, and batch-norm statistics and affine terms near (0, 1)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            _init_module(module, generator)
    return model.eval()


def _init_module(module: nn.Module, g: torch.Generator) -> None:
    if isinstance(module, (nn.Conv1d, nn.Conv2d)):
        fan_in = module.weight[0].numel()
        module.weight.copy_(torch.randn(module.weight.shape, generator=g) * math.sqrt(2.0 / fan_in))
        if module.bias is not None:
            module.bias.copy_(torch.randn(module.bias.shape, generator=g) * 0.1)
    elif isinstance(module, nn.Linear):
        module.weight.copy_(torch.randn(module.weight.shape, generator=g) / math.sqrt(module.in_features))
        if module.bias is not None:
            module.bias.copy_(torch.randn(module.bias.shape, generator=g) * 0.1)
    elif isinstance(module, nn.Embedding):
        module.weight.copy_(torch.randn(module.weight.shape, generator=g) * 0.5)
    elif isinstance(module, nn.modules.batchnorm._BatchNorm):
        channels = module.num_features
        module.running_mean.copy_(torch.rand(channels, generator=g) * 0.2 - 0.1)
        module.running_var.copy_(torch.rand(channels, generator=g) * 0.5 + 0.75)
        if module.weight is not None:
            module.weight.copy_(torch.rand(channels, generator=g) * 0.5 + 0.75)
            module.bias.copy_(torch.rand(channels, generator=g) * 0.2 - 0.1)
    elif isinstance(module, (nn.LayerNorm, nn.GroupNorm)) and module.weight is not None:
        module.weight.copy_(1.0 + 0.1 * torch.randn(module.weight.shape, generator=g))
        if module.bias is not None:
            module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=g))


def calibrate_batch_norms(model: nn.Module, inputs: tuple[torch.Tensor, ...], seed: int = 0) -> nn.Module:
    """Running statistics from one pass over a calibration batch (`inputs`, other images), then
    scaled by a random factor in [0.8, 1.25]: as in a trained network, eval-mode batch norm keeps
    activations O(1) however deep the stack, and they are not the example's own batch statistics."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return model
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.momentum = 1.0
        m.train()
    with torch.no_grad():
        model(*inputs)
    g = torch.Generator().manual_seed(seed)
    for m, momentum in zip(norms, momenta):
        m.momentum = momentum
        m.running_var.mul_(torch.rand(m.running_var.shape, generator=g) * 0.45 + 0.8)
    return model.eval()


def text_inputs(batch: int = 2, length: int = TEXT_LEN, mask: bool = True) -> tuple[torch.Tensor, ...]:
    """Token ids, and an attention mask whose second row ends in three padding tokens."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (batch, length), generator=g)
    if not mask:
        return (ids,)
    attention = torch.ones(batch, length, dtype=torch.long)
    attention[-1, -3:] = 0
    return ids, attention


def image_inputs(size: int = 32, channels: int = 3, batch: int = 1, seed: int = 2) -> tuple[torch.Tensor]:
    return (torch.randn(batch, channels, size, size, generator=torch.Generator().manual_seed(seed)),)


class LastHidden(nn.Module):
    """The model's first output (last hidden state), called with positional inputs."""

    def __init__(self, model: nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *inputs):
        return self.model(**dict(zip(self.names, inputs)))[0]


def _text(model_cls, config, *, mask: bool = True):
    def build():
        import transformers

        cfg = getattr(transformers, config[0])(**config[1])
        model = init_weights(getattr(transformers, model_cls)(cfg))
        inputs = text_inputs(mask=mask)
        return LastHidden(model, ("input_ids", "attention_mask")[:len(inputs)]), inputs
    return build


def _vision(model_cls, config, size: int = 32, channels: int = 3):
    def build():
        import transformers

        cfg = getattr(transformers, config[0])(**config[1])
        model = init_weights(getattr(transformers, model_cls)(cfg))
        wrapped, inputs = LastHidden(model, ("pixel_values",)), image_inputs(size, channels)
        calibration = image_inputs(size, channels, batch=8, seed=5)
        return calibrate_batch_norms(wrapped, calibration), inputs
    return build


# ----- configs ---------------------------------------------------------------------------------------------
DECODER = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
               max_position_embeddings=64, use_cache=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
ENCODER = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
               max_position_embeddings=64, pad_token_id=0)


def _with(base: dict, **changes) -> dict:
    return {**base, **changes}


def _t5_encoder():
    import transformers

    cfg = transformers.T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                                relative_attention_num_buckets=8, relative_attention_max_distance=16,
                                feed_forward_proj="gated-gelu", use_cache=False)
    model = init_weights(transformers.T5EncoderModel(cfg))
    return LastHidden(model, ("input_ids", "attention_mask")), text_inputs()


def _bart_encoder():
    import transformers

    cfg = transformers.BartConfig(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
                                  encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                                  decoder_ffn_dim=128, max_position_embeddings=64, use_cache=False)
    encoder = init_weights(transformers.BartModel(cfg)).get_encoder()
    return LastHidden(encoder, ("input_ids", "attention_mask")), text_inputs()


def _whisper_encoder():
    import transformers

    cfg = transformers.WhisperConfig(vocab_size=VOCAB, num_mel_bins=16, d_model=64, encoder_layers=2,
                                     decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                                     encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=16,
                                     max_target_positions=16, use_cache=False, pad_token_id=0,
                                     bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    encoder = init_weights(transformers.WhisperModel(cfg)).get_encoder()
    features = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(3))
    return LastHidden(encoder, ("input_features",)), (features,)


def _wav2vec2():
    import transformers

    cfg = transformers.Wav2Vec2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=128, conv_dim=(32, 32, 32), conv_stride=(5, 2, 2),
                                      conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
                                      num_conv_pos_embedding_groups=4, apply_spec_augment=False)
    model = init_weights(transformers.Wav2Vec2Model(cfg))
    audio = torch.randn(1, 1600, generator=torch.Generator().manual_seed(4))
    return LastHidden(model, ("input_values",)), (audio,)


MODELS: list[ZooModel] = [
    # decoders
    ZooModel("GPT-2", "decoder", _text("GPT2Model", ("GPT2Config", dict(
        vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64, use_cache=False, bos_token_id=1,
        eos_token_id=2))), fast=True),
    ZooModel("Llama", "decoder", _text("LlamaModel", ("LlamaConfig", _with(DECODER, num_key_value_heads=2))),
             fast=True),
    ZooModel("Mistral", "decoder", _text("MistralModel", ("MistralConfig", _with(DECODER, num_key_value_heads=2,
                                                                               sliding_window=8)))),
    ZooModel("Qwen2", "decoder", _text("Qwen2Model", ("Qwen2Config", _with(DECODER, num_key_value_heads=2))),
             fast=True),
    ZooModel("Qwen3", "decoder", _text("Qwen3Model", ("Qwen3Config", _with(DECODER, num_key_value_heads=2,
                                                                         head_dim=16)))),
    ZooModel("Phi", "decoder", _text("PhiModel", ("PhiConfig", _with(DECODER, partial_rotary_factor=0.5)))),
    ZooModel("Phi-3", "decoder", _text("Phi3Model", ("Phi3Config", _with(DECODER, num_key_value_heads=2)))),
    ZooModel("Gemma", "decoder", _text("GemmaModel", ("GemmaConfig", _with(DECODER, num_key_value_heads=2,
                                                                         head_dim=16)))),
    ZooModel("Gemma-2", "decoder", _text("Gemma2Model", ("Gemma2Config", _with(DECODER, num_key_value_heads=2,
                                                                             head_dim=16, sliding_window=8)))),
    ZooModel("OPT", "decoder", _text("OPTModel", ("OPTConfig", dict(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128,
        word_embed_proj_dim=64, max_position_embeddings=64, use_cache=False, pad_token_id=0)))),
    ZooModel("Falcon", "decoder", _text("FalconModel", ("FalconConfig", dict(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, use_cache=False,
        new_decoder_architecture=False, multi_query=True, parallel_attn=True, bias=False, alibi=False)))),
    ZooModel("GPT-NeoX", "decoder", _text("GPTNeoXModel", ("GPTNeoXConfig", _with(DECODER, rotary_pct=0.25)))),
    ZooModel("GPT-J", "decoder", _text("GPTJModel", ("GPTJConfig", dict(
        vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=64, use_cache=False)))),
    ZooModel("BLOOM", "decoder", _text("BloomModel", ("BloomConfig", dict(
        vocab_size=VOCAB, hidden_size=64, n_layer=2, n_head=4, use_cache=False)))),
    ZooModel("StableLM", "decoder", _text("StableLmModel", ("StableLmConfig", _with(DECODER,
                                                                                 num_key_value_heads=2)))),
    ZooModel("Starcoder2", "decoder", _text("Starcoder2Model", ("Starcoder2Config", _with(
        DECODER, num_key_value_heads=2, sliding_window=8)))),
    # encoders
    ZooModel("BERT", "encoder", _text("BertModel", ("BertConfig", ENCODER)), fast=True),
    ZooModel("RoBERTa", "encoder", _text("RobertaModel", ("RobertaConfig", _with(ENCODER, pad_token_id=1)))),
    ZooModel("DistilBERT", "encoder", _text("DistilBertModel", ("DistilBertConfig", dict(
        vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=64)))),
    ZooModel("ALBERT", "encoder", _text("AlbertModel", ("AlbertConfig", _with(ENCODER, embedding_size=32)))),
    ZooModel("DeBERTa-v2", "encoder", _text("DebertaV2Model", ("DebertaV2Config", _with(
        ENCODER, relative_attention=True, position_buckets=8, max_relative_positions=16,
        pos_att_type=["p2c", "c2p"], position_biased_input=False))), fast=True),
    ZooModel("ELECTRA", "encoder", _text("ElectraModel", ("ElectraConfig", _with(ENCODER, embedding_size=32)))),
    ZooModel("XLM-RoBERTa", "encoder", _text("XLMRobertaModel", ("XLMRobertaConfig", _with(ENCODER,
                                                                                          pad_token_id=1)))),
    ZooModel("MPNet", "encoder", _text("MPNetModel", ("MPNetConfig", _with(ENCODER, pad_token_id=1)))),
    ZooModel("XLNet", "encoder", _text("XLNetModel", ("XLNetConfig", dict(  # attention written as einsum
        vocab_size=VOCAB, d_model=64, n_layer=2, n_head=4, d_inner=128, pad_token_id=0)))),
    ZooModel("Funnel", "encoder", _text("FunnelModel", ("FunnelConfig", dict(  # einsum, pooled blocks
        vocab_size=VOCAB, d_model=64, n_head=4, d_head=16, d_inner=128, block_sizes=[1, 1], pad_token_id=0)))),
    ZooModel("ConvBERT", "encoder", _text("ConvBertModel", ("ConvBertConfig", _with(  # F.unfold spans
        ENCODER, embedding_size=64)))),
    ZooModel("T5 encoder", "encoder-decoder", _t5_encoder, fast=True),
    ZooModel("BART encoder", "encoder-decoder", _bart_encoder),
    # vision
    ZooModel("ViT", "vision", _vision("ViTModel", ("ViTConfig", dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32,
        patch_size=8))), fast=True),
    ZooModel("DeiT", "vision", _vision("DeiTModel", ("DeiTConfig", dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32,
        patch_size=8)))),
    ZooModel("BEiT", "vision", _vision("BeitModel", ("BeitConfig", dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32,
        patch_size=8, use_relative_position_bias=True)))),
    ZooModel("DINOv2", "vision", _vision("Dinov2Model", ("Dinov2Config", dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2, image_size=32, patch_size=8)))),
    ZooModel("ConvNeXt", "vision", _vision("ConvNextModel", ("ConvNextConfig", dict(
        hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1], layer_scale_init_value=1.0))), fast=True),
    ZooModel("ResNet", "vision", _vision("ResNetModel", ("ResNetConfig", dict(
        embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], layer_type="bottleneck")), 64),
             fast=True),
    ZooModel("MobileNetV2", "vision", _vision("MobileNetV2Model", ("MobileNetV2Config", dict(
        depth_multiplier=0.35, image_size=64)), 64)),
    ZooModel("Swin", "vision", _vision("SwinModel", ("SwinConfig", dict(
        image_size=32, patch_size=2, embed_dim=16, depths=[1, 2], num_heads=[2, 4], window_size=4)))),
    ZooModel("EfficientNet", "vision", _vision("EfficientNetModel", ("EfficientNetConfig", dict(
        image_size=64, width_coefficient=0.25, depth_coefficient=0.3, hidden_dim=320)), 64)),
    ZooModel("RegNet", "vision", _vision("RegNetModel", ("RegNetConfig", dict(
        embedding_size=16, hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1], groups_width=8)), 64)),
    ZooModel("SegFormer", "vision", _vision("SegformerModel", ("SegformerConfig", dict(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3],
        strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2])), 64)),
    # speech
    ZooModel("Whisper encoder", "speech", _whisper_encoder, fast=True),
    ZooModel("Wav2Vec2", "speech", _wav2vec2),
]


def by_name(name: str) -> ZooModel:
    for model in MODELS:
        if model.name.lower() == name.lower():
            return model
    raise KeyError(f"no zoo model {name!r} (models: {', '.join(m.name for m in MODELS)})")
