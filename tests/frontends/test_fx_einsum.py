"""torch.einsum converts to transposes around matmul / batch_matmul (`frontends/fx/ops_einsum.py`): the
equations real models write (XLNet, Funnel, attention in four dimensions), "..." and implicit outputs, three
operands, and random equations drawn by hypothesis, each against torch eager on the reference backend."""
import string

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs the optional torch extra")

from tilegraph.backends.reference import run  # noqa: E402
from tilegraph.frontends.fx import UnsupportedOpsError, from_module  # noqa: E402
from fx_captures import dynamo_graph  # noqa: E402
from tilegraph.frontends.fx.ops_einsum import parse_equation  # noqa: E402
from tilegraph.ir.verifier import verify  # noqa: E402


class Einsum(torch.nn.Module):
    def __init__(self, equation: str) -> None:
        super().__init__()
        self.equation = equation

    def forward(self, *xs):
        return torch.einsum(self.equation, *xs)


def check(equation: str, *shapes, capture: str = "trace"):
    inputs = tuple(torch.randn(*shape) for shape in shapes)
    model = Einsum(equation)
    graph = from_module(model, inputs) if capture == "trace" else dynamo_graph(model, inputs)
    verify(graph)
    (got,) = run(graph, [x.numpy() for x in inputs])
    want = torch.einsum(equation, *inputs).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return graph


MODELS = {  # equation: operand shapes
    "ibnd,jbnd->bnij": [(5, 2, 3, 4), (6, 2, 3, 4)],  # XLNet's content scores
    "ibnd,hnd->ibh": [(5, 2, 3, 4), (8, 3, 4)],  # XLNet's output projection
    "bnij,jbnd->ibnd": [(2, 3, 5, 6), (6, 2, 3, 4)],  # XLNet's attention vector
    "bind,bjnd->bnij": [(2, 5, 3, 4), (2, 6, 3, 4)],  # Funnel's scores
    "bhqd,bhkd->bhqk": [(2, 3, 5, 4), (2, 3, 6, 4)],
    "bld,dh->blh": [(2, 5, 4), (4, 8)],  # a linear layer
    "ij,jk->ik": [(3, 4), (4, 5)],
    "...ij,...jk->...ik": [(2, 3, 4), (2, 4, 5)],
    "...d,d->...": [(2, 3, 4), (4,)],
    "ij,jk": [(3, 4), (4, 5)],  # implicit output
    "i,j->ij": [(3,), (4,)],
    "i,i->": [(7,), (7,)],
    "ij->ji": [(3, 4)],
    "ijk->": [(2, 3, 4)],
    "ijk->ki": [(2, 3, 4)],
    "ij,jk,kl->il": [(3, 4), (4, 5), (5, 2)],
    "ijk,jl->il": [(2, 3, 4), (3, 5)],  # k summed before the product
}


@pytest.mark.parametrize("capture", ["trace", "dynamo"])
@pytest.mark.parametrize("equation", sorted(MODELS))
def test_equations_models_write_match_torch(equation, capture):
    graph = check(equation, *MODELS[equation], capture=capture)
    if "," in equation:
        assert {n.op for n in graph.nodes} & {"matmul", "batch_matmul"}


def test_a_pair_without_batch_indices_is_one_2d_matmul():
    graph = check("bld,dh->blh", (2, 5, 4), (4, 8))
    assert [n.op for n in graph.nodes if n.op in ("matmul", "batch_matmul")] == ["matmul"]


def test_ellipsis_is_spelled_out_from_the_right():
    terms, out = parse_equation("...ij,j->...i", [4, 1])
    assert terms == ["YZij", "j"] and out == "YZi"
    assert parse_equation("ba,ac", [2, 2]) == (["ba", "ac"], "bc")


def test_a_diagonal_is_reported_as_unsupported():
    with pytest.raises(UnsupportedOpsError, match="repeated index in one operand"):
        from_module(Einsum("ii->i"), (torch.randn(3, 3),))


@st.composite
def equations(draw):
    """Two operands over up to five indices, each index in one or both, an output of some of them."""
    letters = draw(st.lists(st.sampled_from(string.ascii_lowercase[:6]), min_size=1, max_size=5, unique=True))
    sizes = {c: draw(st.integers(1, 4)) for c in letters}
    a = draw(st.permutations(draw(st.lists(st.sampled_from(letters), min_size=1, unique=True))))
    b = draw(st.permutations(draw(st.lists(st.sampled_from(letters), min_size=1, unique=True))))
    used = sorted(set(a) | set(b))
    out = draw(st.permutations(draw(st.lists(st.sampled_from(used), unique=True))))
    equation = f"{''.join(a)},{''.join(b)}->{''.join(out)}"
    return equation, [tuple(sizes[c] for c in a), tuple(sizes[c] for c in b)]


@given(equations())
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_random_equations_match_torch(case):
    equation, shapes = case
    check(equation, *shapes)
