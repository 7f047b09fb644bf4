"""The PyTorch frontend against torch eager: real models converted, verified, and run on the reference
backend must give torch's numbers (max abs error below 1e-4 in f32)."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs the optional torch extra")
nn = torch.nn
F = torch.nn.functional

from tilegraph.backends.reference import run  # noqa: E402
from tilegraph.frontends.fx import from_exported_program, from_graph_module, from_module  # noqa: E402
from tilegraph.ir.verifier import verify  # noqa: E402

TOLERANCE = 1e-4


def check(model, *inputs, tolerance=TOLERANCE, capture="auto"):
    """Convert, verify, run on the reference backend and compare every output with torch eager.
    capture="export" converts the torch.export ATen graph instead of the default capture."""
    model.eval()
    if capture == "export":
        graph = from_exported_program(torch.export.export(model, inputs, strict=False), inputs)
    else:
        graph = from_module(model, inputs)
    verify(graph)
    with torch.no_grad():
        expected = model(*inputs)
    expected = [t for t in torch.utils._pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]
    got = run(graph, [t.numpy() for t in inputs])
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == tuple(e.shape)
        error = np.abs(g.astype(np.float64) - e.numpy().astype(np.float64)).max() if g.size else 0.0
        assert error < tolerance, f"max abs error {error}"
    return graph


def randomize_batch_norms(model, seed=0):
    """Non-trivial running statistics and affine parameters, so eval-mode batch norm is tested."""
    generator = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=generator) * 0.1)
            m.running_var.copy_(torch.rand(c, generator=generator) + 0.5)
            with torch.no_grad():
                m.weight.copy_(torch.rand(c, generator=generator) + 0.5)
                m.bias.copy_(torch.randn(c, generator=generator) * 0.1)
    return model


def ops_of(graph):
    return {n.op for n in graph.nodes}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ----- MLP ------------------------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 10)
        self.drop = nn.Dropout(0.2)

    def forward(self, x):
        x = self.drop(F.relu(self.fc1(x)))
        x = torch.tanh(self.fc2(x))
        return F.log_softmax(self.fc3(x), dim=-1)


def test_mlp_matches_eager():
    graph = check(MLP(), torch.randn(4, 16))
    assert [p.name for p in graph.params] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight",
                                              "fc3.bias"]
    assert graph.inputs[0].name == "x" and graph.inputs[0].type.shape == (4, 16)


def test_parameters_carry_the_module_values():
    model = MLP().eval()
    graph = from_module(model, (torch.randn(2, 16),))
    for value in graph.params:
        assert np.array_equal(value.data, model.state_dict()[value.name].numpy())


# ----- ResNet-18 ------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet18(nn.Module):
    def __init__(self, num_classes=10, width=16):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        layers, inplanes = [], width
        for i, blocks in enumerate((2, 2, 2, 2)):
            planes = width * 2 ** i
            stage = []
            for j in range(blocks):
                stage.append(BasicBlock(inplanes, planes, stride=2 if (i > 0 and j == 0) else 1))
                inplanes = planes
            layers.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(inplanes, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


@pytest.mark.parametrize("capture", ["auto", "export"])
def test_resnet18_matches_eager(capture):
    model = randomize_batch_norms(ResNet18())
    graph = check(model, torch.randn(1, 3, 32, 32), capture=capture)
    assert {"conv2d", "batch_norm", "max_pool2d", "relu", "matmul"} <= ops_of(graph)
    assert sum(n.op == "conv2d" for n in graph.nodes) == 20


# ----- MobileNet-style depthwise separable blocks ---------------------------------------------
class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.use_residual = stride == 1 and cin == cout
        self.block = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, hidden, 3, stride=stride, padding=1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.block(x)
        return x + y if self.use_residual else y


class MobileNetish(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8),
                                  nn.Hardswish())
        self.blocks = nn.Sequential(InvertedResidual(8, 8, 1, 4), InvertedResidual(8, 16, 2, 4),
                                    InvertedResidual(16, 16, 1, 3))
        self.dilated = nn.Conv2d(16, 16, 3, padding=2, dilation=2, groups=4)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(16, 5))

    def forward(self, x):
        x = self.dilated(self.blocks(self.stem(x)))
        return self.head(self.pool(F.silu(x)))


@pytest.mark.parametrize("capture", ["auto", "export"])
def test_mobilenet_depthwise_block_matches_eager(capture):
    model = randomize_batch_norms(MobileNetish())
    graph = check(model, torch.randn(2, 3, 32, 32), capture=capture)
    groups = sorted({n.attrs["groups"] for n in graph.nodes if n.op == "conv2d"})
    assert groups == [1, 4, 32, 48]


class Pools(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 6, (3, 5), stride=(2, 1), padding=(1, 2))
        self.avg = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)
        self.max = nn.MaxPool2d(2)
        self.adaptive = nn.AdaptiveAvgPool2d((3, 2))
        self.norm = nn.BatchNorm2d(6)

    def forward(self, x):
        y = self.norm(self.conv(x))
        a = self.adaptive(self.avg(y))  # 5x10 -> 3x2 (uneven windows)
        b = F.avg_pool2d(self.max(y), 2) + F.adaptive_max_pool2d(y, (1, 1)).mean()
        return a, b, F.conv2d(x, self.conv.weight[:, :, :3, :3], padding="same")


@pytest.mark.parametrize("capture", ["auto", "export"])
def test_pooling_variants_match_eager(capture):
    check(randomize_batch_norms(Pools()), torch.randn(1, 4, 20, 11), capture=capture)


# ----- transformer encoder layer --------------------------------------------------------------
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder_layer_matches_eager(batch_first, norm_first):
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.1, activation="gelu",
                                       batch_first=batch_first, norm_first=norm_first)
    x = torch.randn(2, 5, 32) if batch_first else torch.randn(5, 2, 32)
    graph = check(layer, x)
    assert "attention" in ops_of(graph) and "layer_norm" in ops_of(graph)


def test_transformer_encoder_with_two_layers_matches_eager():
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True)
    check(nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False), torch.randn(3, 4, 16))


class AttentionWithMask(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x, mask):
        y, _ = self.attn(x, x, x, attn_mask=mask, need_weights=False)
        return y


def test_multihead_attention_module_with_a_mask():
    mask = torch.triu(torch.full((6, 6), float("-inf")), diagonal=1)
    check(AttentionWithMask(), torch.randn(2, 6, 16), mask)


# ----- GPT-2 (transformers) -------------------------------------------------------------------
def test_gpt2_matches_eager():
    transformers = pytest.importorskip("transformers", reason="the GPT-2 test needs the transformers package")
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=97, n_positions=32, use_cache=False,
                                     bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2Model(config).eval()  # randomly initialised: nothing is downloaded
    ids = torch.randint(0, config.vocab_size, (2, 12))
    graph = check(model, ids)
    assert graph.inputs[0].type.dtype.value == "i64"
    assert "attention" in ops_of(graph) and "gather" in ops_of(graph)


# ----- scaled_dot_product_attention and the tensor functions around it -------------------------
class CausalSelfAttention(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln = nn.LayerNorm(dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, -1).permute(0, 2, 1, 3)
        v = v.reshape(b, t, self.heads, c // self.heads).transpose(1, 2).contiguous()
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return x + self.proj(y)


class MaskedAttention(nn.Module):
    """Hand-written attention next to sdpa with a bool mask, an additive mask and a given scale."""

    def forward(self, q, k, v):
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        manual = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1) @ v
        bias = torch.zeros(q.shape[-2], k.shape[-2]).masked_fill(~keep, -1e9)
        return (manual,
                F.scaled_dot_product_attention(q, k, v, attn_mask=keep),
                F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3))


def test_scaled_dot_product_attention_models_match_eager():
    graph = check(CausalSelfAttention(), torch.randn(2, 8, 32))
    assert [n.attrs["causal"] for n in graph.nodes if n.op == "attention"] == [True]
    check(MaskedAttention(), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8))


def test_grouped_query_attention_matches_eager():
    class GQA(nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    check(GQA(), torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8))


class TensorFunctions(nn.Module):
    """The torch functions and tensor methods models use, in one place."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        self.scale = nn.Parameter(torch.rand(8) + 0.5)
        self.register_buffer("offset", torch.linspace(-1, 1, 8))

    def forward(self, ids, x):
        e = self.emb(ids)  # [2, 6, 8]
        a, b = e.chunk(2, dim=-1)
        c = torch.cat([b, a], dim=-1) * self.scale - self.offset
        rms = c * torch.rsqrt(c.pow(2).mean(-1, keepdim=True) + 1e-6)
        s = rms.sum(dim=(0, 2)) / 3 - rms.amax(dim=-1).mean(0)
        parts = torch.split(x, [1, 3], dim=1)
        bm = torch.bmm(parts[1], parts[1].transpose(1, 2))
        z = 2.0 - x.flatten(1).unsqueeze(0).squeeze(0) ** 2
        n = F.layer_norm(z, (z.shape[-1],), eps=1e-3)
        g = F.gelu(n, approximate="tanh") + F.gelu(n) + F.silu(n) + torch.sigmoid(n) + F.relu6(n * 4)
        h = torch.stack([x[:, 0], x[:, -1]], dim=1)
        return s, bm.max(dim=-1)[0], g, h[..., 1:3], x[:, None, 1, 2:], torch.matmul(x.mean(1), torch.ones(5, 2))


@pytest.mark.parametrize("capture", ["auto", "export"])
def test_tensor_functions_match_eager(capture):
    ids = torch.randint(0, 11, (2, 6))
    check(TensorFunctions(), ids, torch.randn(2, 4, 5), capture=capture)


class Elementwise(nn.Module):
    def forward(self, x, y):
        big = torch.where(x > 0, x, y)
        clipped = x.clamp(-0.5, 0.5) + torch.clamp(y, min=0.0) + torch.maximum(x, y) - torch.minimum(x, 0.2 * y)
        mixed = (x - y) / (y.abs() + 1) + 3 * x - 1 / (2 + x.exp()) + (-x).neg() * (y * y).sqrt()
        ints = (x > y).long().sum(-1, keepdim=True) + torch.arange(x.shape[-1])  # i64
        return big, clipped, mixed, ints, F.leaky_relu(x, 0.1), x.var(-1), F.softmax(x, 0)


@pytest.mark.parametrize("capture", ["auto", "export"])
def test_elementwise_and_promotion_match_eager(capture):
    check(Elementwise(), torch.randn(3, 4), torch.randn(3, 4), capture=capture)


class MoreLayers(nn.Module):
    """conv1d, RMSNorm, affine-free LayerNorm, more activations, indexing, logic, addmm/baddbmm, a
    sequence-first MultiheadAttention with a key padding mask, expand, adaptive max pooling."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 6, 3, padding=1, groups=2)
        self.rms = nn.RMSNorm(6)
        self.ln = nn.LayerNorm(6, elementwise_affine=False)
        self.act = nn.LeakyReLU(0.2)
        self.hs = nn.Hardsigmoid()
        self.mha = nn.MultiheadAttention(6, 2)
        self.table = nn.Parameter(torch.randn(10, 6))

    def forward(self, x, ids, padding):
        y = self.conv(x).transpose(1, 2)  # [2, 5, 6]
        y = self.act(self.rms(y)) + self.hs(self.ln(y))
        e = F.embedding(ids, self.table) + self.table.index_select(0, ids[0])
        g = y[:, torch.tensor([0, 2, 4])] + y[:, [1, 1, 3]]
        t = torch.tril(y[0] @ y[0].T, diagonal=-1)
        w = y.where(y > 0, -y).masked_fill(y < -0.5, 0.0)
        u = torch.stack(torch.unbind(y, 1)[1:3], 0).narrow(2, 1, 3).select(0, 1)
        logic = ((y > 0) & (y < 1)) | ~(y > -0.1)
        mm = torch.addmm(self.table[0, :5], y[0], self.table.T[:, :5]) + torch.baddbmm(
            y.new_zeros(2, 5, 5), y, y.transpose(1, 2), alpha=0.5)
        s = y.transpose(0, 1)
        a, _ = self.mha(s, s, s, key_padding_mask=padding, need_weights=False)
        ex = y[:, :1].expand(-1, 5, -1) * x.mean().clamp(min=torch.tensor(0.1))
        return (y, e, g, t, y.var(dim=1, keepdim=True), w, u, logic.float(), mm, a, ex,
                F.adaptive_max_pool2d(x.unsqueeze(0), (2, 3)))


@pytest.mark.parametrize("capture", ["auto", "export"])
def test_more_layers_match_eager(capture):
    padding = torch.tensor([[False] * 4 + [True], [False] * 5])
    check(MoreLayers(), torch.randn(2, 4, 5), torch.randint(0, 10, (2, 5)), padding, capture=capture)


class Copies(nn.Module):
    def forward(self, x):
        padded = F.pad(x, (1, 2, 0, 1), value=-1.0) + F.pad(x, (-1, 1)).sum()
        return padded, x.repeat(2, 1, 3), x.repeat_interleave(2, dim=1), F.normalize(x, dim=-1)


@pytest.mark.parametrize("capture", ["auto", "export"])
def test_padding_and_repeats_match_eager(capture):
    check(Copies(), torch.randn(2, 3, 4), capture=capture)


def test_from_graph_module_converts_a_traced_module():
    gm = torch.fx.symbolic_trace(MLP().eval())
    graph = from_graph_module(gm, (torch.randn(3, 16),))
    verify(graph)
    assert graph.inputs[0].type.shape == (3, 16)


def test_constants_are_folded_and_in_place_updates_are_followed():
    class Model(nn.Module):
        def forward(self, x):
            positions = torch.arange(x.size(1)).float().unsqueeze(0)  # no input data: folded
            y = x.clone()
            y += positions
            y.mul_(2)
            return torch.relu_(y) - x

    model = Model()
    graph = check(model, torch.randn(2, 5))
    assert not {"iota", "cast"} & ops_of(graph)
