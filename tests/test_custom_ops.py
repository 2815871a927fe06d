"""The extension's entry points as custom ops: each op checked by torch.library.opcheck and against a reference on
fresh random inputs (on a CPU, its reference implementation), and the sparse twins of VGG16, BERT and LSTM-NMT traced
whole: one graph and no break under dynamo, torch.compile(fullgraph=True) equal to eager, torch.export round trips."""

from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F
from random_masks import random_nm_mask, random_tw_mask
from sparse_twins import PATTERNS, model_inputs, output_tensor, sparse_twin
from torch._dynamo.testing import CompileCounter

from sparseprune.export.formats import nm
from sparseprune.export.formats.nm import pack_nm
from sparseprune.export.formats.tw import ACTIVATIONS, pack_tw

OPS = torch.ops.sparseprune


def _tw_args(generator: torch.Generator, k: int, n: int, residual: bool) -> tuple[tuple, torch.Tensor]:
    """(the packed arguments of sparseprune::tw_matmul after x, B dense) for a random TW(E) weight."""
    keep = random_tw_mask(k, n, 32, 0.75, (0.2, 0.9), generator)
    b = torch.randn(k, n, generator=generator)
    res = (~keep) & (torch.rand(k, n, generator=generator) < 0.05) if residual else None
    dense = b * (keep | res) if residual else b * keep
    packed = pack_tw(dense, keep, 32, res)
    tensors = (packed.values, packed.rows, packed.tile_ptr, packed.cols, packed.col_pos, packed.pruned_cols)
    return (*tensors, torch.randn(n, generator=generator), packed.res_ptr, packed.res_rows, packed.res_vals,
            k, n, 32, packed.max_tile_k), dense  # fmt: skip


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize(("x_feature_major", "y_feature_major"), [(False, False), (True, True), (False, True)])
def test_tw_matmul_op(residual: bool, x_feature_major: bool, y_feature_major: bool) -> None:
    generator = torch.Generator().manual_seed(11 + residual)
    args, dense = _tw_args(generator, 64, 96, residual)
    x = torch.randn(10, 64, generator=generator)
    rest = (ACTIVATIONS["relu"], x_feature_major, y_feature_major, 0)
    y = OPS.tw_matmul(x.t().contiguous() if x_feature_major else x, *args, *rest)
    expected = torch.relu(x.double() @ dense.double() + args[6].double())
    torch.testing.assert_close((y.t() if y_feature_major else y).double(), expected, rtol=1e-5, atol=1e-5)
    torch.library.opcheck(OPS.tw_matmul, (x.t().contiguous() if x_feature_major else x, *args, *rest))


@pytest.mark.parametrize(("kept", "m", "vector"), [(2, 8, 1), (2, 4, 1), (1, 4, 16)])
@pytest.mark.parametrize("route", ["auto", "reference", "tw"])
def test_nm_matmul_op(kept: int, m: int, vector: int, route: str) -> None:
    """Every route reaches the reference on a CPU, in either layout of x and y (the TW route's feature-major call)."""
    generator = torch.Generator().manual_seed(kept * m + vector)
    k, n = 64, 48
    mask = random_nm_mask(k, n, kept, m, vector, generator)
    b = torch.randn(k, n, generator=generator) * mask
    packed, x, bias = pack_nm(b, mask, m, vector), torch.randn(9, k, generator=generator), torch.randn(n)
    expected = F.gelu(x.double() @ b.double() + bias.double())
    head = (packed.values, packed.idx, bias, k, n, m, kept, vector, ACTIVATIONS["gelu"], route, "auto")
    for x_feature_major, y_feature_major in [(False, False), (True, True)] if route == "tw" else [(False, False)]:
        args = (x.t().contiguous() if x_feature_major else x, *head, x_feature_major, y_feature_major)
        y = OPS.nm_matmul(*args)
        torch.testing.assert_close((y.t() if y_feature_major else y).double(), expected, rtol=1e-5, atol=1e-5)
        torch.library.opcheck(OPS.nm_matmul, args)


@pytest.mark.parametrize(
    ("batch", "kernel_size", "dilation", "padding", "stride"),
    [(2, (3, 3), (1, 1), (1, 1), (1, 1)), (3, (3, 2), (2, 1), (0, 2), (2, 3)), (1, (1, 1), (1, 1), (0, 0), (1, 1))],
)
def test_im2col_op(batch: int, kernel_size, dilation, padding, stride) -> None:
    """F.unfold's matrix in a fresh tensor, also where it could be a view of x (one image, 1 x 1, no padding)."""
    x = torch.randn(batch, 5, 9, 10, generator=torch.Generator().manual_seed(batch))
    args = (x, *kernel_size, *dilation, *padding, *stride)
    columns = OPS.im2col_feature_major(*args)
    unfolded = F.unfold(x, kernel_size, dilation, padding, stride)
    assert torch.equal(columns, unfolded.transpose(0, 1).reshape(unfolded.shape[1], -1))
    assert columns.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    torch.library.opcheck(OPS.im2col_feature_major, args)


def test_layer_norm_and_transpose_ops() -> None:
    generator = torch.Generator().manual_seed(3)
    x, residual = torch.randn(2, 128, 12, generator=generator)
    weight, bias = torch.randn(2, 128, generator=generator)
    norm = F.layer_norm((x + residual).t(), (128,), weight, bias, 1e-12).t()
    torch.testing.assert_close(OPS.add_layer_norm_feature_major(x, residual, weight, bias, 1e-12), norm)
    torch.library.opcheck(OPS.add_layer_norm_feature_major, (x, residual, weight, bias, 1e-12))
    for shape in [(12, 7), (12, 1), (1, 7)]:  # the last two: x.t() is contiguous itself, the op still copies
        rows = torch.randn(shape, generator=generator)
        assert torch.equal(OPS.transpose(rows), rows.t())
        assert OPS.transpose(rows).untyped_storage().data_ptr() != rows.untyped_storage().data_ptr()
        torch.library.opcheck(OPS.transpose, (rows,))


# (model, pattern, feature-major BERT encoder): each pattern's layers on the op its family routes to.
TWINS = [
    *[("vgg16", pattern, False) for pattern in PATTERNS],
    *[("bert", pattern, False) for pattern in PATTERNS],
    *[("bert", pattern, True) for pattern in ("tw", "tew", "nm-2:8-v16")],
    *[("lstm_nmt", pattern, False) for pattern in PATTERNS],
]


@pytest.mark.parametrize(("model", "pattern", "streamed"), TWINS)
def test_twin_traces_as_one_graph(model: str, pattern: str, streamed: bool) -> None:
    """No graph break and one compilation, however many layers of however many packed sizes."""
    twin = sparse_twin(model, pattern, streamed)
    with torch.no_grad():
        explained = torch._dynamo.explain(twin)(*model_inputs(model, 0))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    assert any(str(node.target).startswith("sparseprune.") for node in explained.graphs[0].graph.nodes)


@pytest.mark.parametrize("model", ["vgg16", "bert", "lstm_nmt"])
def test_fresh_inputs_reuse_the_compilation(model: str) -> None:
    """fullgraph compiled once, then run again on fresh inputs of the same shapes: no recompilation, eager's values."""
    twin, counter = sparse_twin(model, "tew"), CompileCounter()
    compiled = torch.compile(twin, backend=counter, fullgraph=True)
    with torch.no_grad():
        for seed in (1, 2):
            fresh = model_inputs(model, seed)
            torch.testing.assert_close(output_tensor(compiled(*fresh)), output_tensor(twin(*fresh)))
    assert counter.frame_count == 1


@pytest.mark.parametrize("model", ["vgg16", "bert"])
def test_feature_major_nm_traces_as_one_graph(model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Vector-wise N:M where auto takes the TW kernels (a GPU's route, stood in for here): the layers compute
    feature-major through sparseprune::nm_matmul, still one graph, and the same values as the row-major twin."""
    twin, inputs = sparse_twin(model, "nm-2:8-v16"), model_inputs(model, 0)
    with torch.no_grad():
        expected = output_tensor(twin(*inputs))
        monkeypatch.setattr(nm, "auto_route", lambda like, packed, rows=None: "tw")
        explained = torch._dynamo.explain(twin)(*inputs)
        assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
        assert any(node.target is OPS.nm_matmul and node.args[-1] for node in explained.graphs[0].graph.nodes)
        torch.testing.assert_close(output_tensor(twin(*inputs)), expected)


@pytest.mark.parametrize(("model", "pattern", "streamed"), [("vgg16", "tew", False), ("bert", "tw", True)])
def test_inductor_compiles_the_whole_twin(model: str, pattern: str, streamed: bool) -> None:
    """torch.compile's default backend, fullgraph, on a CPU: inductor's kernels around the reference ops (the
    slowest test here, some 10-30 s of C++ builds)."""
    twin, inputs = sparse_twin(model, pattern, streamed), model_inputs(model, 0)
    with torch.no_grad():
        compiled = torch.compile(twin, fullgraph=True)
        torch.testing.assert_close(output_tensor(compiled(*inputs)), output_tensor(twin(*inputs)))


@pytest.mark.parametrize(
    ("model", "pattern", "streamed"), [("vgg16", "tw", False), ("bert", "tew", True), ("lstm_nmt", "nm-2:4", False)]
)
def test_export_round_trip(model: str, pattern: str, streamed: bool) -> None:
    """torch.export of the twin, saved and loaded: the loaded program's output equals the twin's on fresh inputs."""
    twin = sparse_twin(model, pattern, streamed)
    with torch.no_grad():
        exported = torch.export.export(twin, model_inputs(model, 0))
        buffer = io.BytesIO()
        torch.export.save(exported, buffer)
        buffer.seek(0)
        loaded = torch.export.load(buffer).module()
        fresh = model_inputs(model, 7)
        torch.testing.assert_close(output_tensor(loaded(*fresh)), output_tensor(twin(*fresh)), rtol=0, atol=0)
    op_names = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    assert any(name.startswith("sparseprune.") for name in op_names), op_names
