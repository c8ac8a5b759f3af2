"""The bridge core's own rules, with small foreign functions written in numpy (the C and Fortran adapters are
tested in test_bridge_clib.py).

The foreign function here is y = x**3 * c. Its pullback reads x from the residual that the forward returned,
never from its arguments, so the tests show that every pullback pairs with its own forward, also under vmap.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.func import grad, jacfwd, jacrev, vmap

from flowlearn.bridge import ForeignError, ForeignFunction, foreign_op


def _cube(pullback_result=None) -> ForeignFunction:
    def forward(args):
        x, c = args
        return x**3 * c, x.copy()

    def pullback(saved_x, args, cotangents):
        if pullback_result is not None:
            return pullback_result(args)
        (ybar,) = cotangents
        return [3 * saved_x**2 * args[1] * ybar, None]

    def pushforward(saved_x, args, tangents):
        return 3 * saved_x**2 * args[1] * tangents[0]

    return ForeignFunction("cube", forward, pullback, pushforward)


def test_vmapped_forward_pairs_each_sample_with_its_own_residual():
    op = foreign_op(_cube())
    x = torch.randn(5, 3, dtype=torch.float64)
    g = vmap(grad(lambda x: op(x, 2.0).sum()))(x)
    torch.testing.assert_close(g, 6 * x**2, rtol=1e-15, atol=0)
    # Nested: per-sample Jacobians (a vmap over cotangents inside a vmap over samples).
    j = vmap(jacrev(lambda x: op(x, 2.0)))(x)
    torch.testing.assert_close(j, torch.diag_embed(6 * x**2), rtol=1e-15, atol=0)
    j = vmap(jacfwd(lambda x: op(x, 2.0)))(x)
    torch.testing.assert_close(j, torch.diag_embed(6 * x**2), rtol=1e-15, atol=0)


def test_integer_tensors_pass_through_without_gradient():
    seen = {}

    def forward(args):
        x, index = args
        seen["index"] = index
        return x[index], None

    def pullback(_, args, cotangents):
        x, index = args
        g = np.zeros_like(x)
        np.add.at(g, index, cotangents[0])
        return [g, None]

    op = foreign_op(ForeignFunction("take", forward, pullback))
    x = torch.arange(4.0, requires_grad=True)
    index = torch.tensor([3, 3, 0])
    y = op(x, index)
    assert seen["index"].dtype == np.int64 and y.dtype == torch.float32
    y.sum().backward()
    assert x.grad.tolist() == [1.0, 0.0, 0.0, 2.0]


def test_a_gradient_of_the_wrong_shape_is_an_error():
    op = foreign_op(_cube(lambda args: [np.zeros(args[0].size + 1), None]))
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ForeignError, match=r"gradient of shape \(4,\) for argument 0 of shape \(3,\)"):
        op(x, 1.0).sum().backward()


def test_a_pullback_must_answer_every_argument():
    op = foreign_op(_cube(lambda args: [np.zeros(3)]))
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ForeignError, match="returned 1 gradients for 2 arguments"):
        op(x, 1.0).sum().backward()


def test_tensors_on_different_devices_are_refused():
    op = foreign_op(_cube())
    with pytest.raises(ValueError, match="must share one device"):
        op(torch.ones(2), torch.ones(2, device="meta"))


def test_the_foreign_side_gets_a_contiguous_float64_copy():
    seen = {}

    def forward(args):
        seen["x"] = args[0]
        return args[0].sum(), None

    op = foreign_op(ForeignFunction("sum", forward, lambda _, args, cot: [np.full_like(args[0], cot[0])]))
    x = torch.arange(6.0).reshape(2, 3).T  # a non-contiguous float32 view
    assert op(x).item() == 15.0
    assert seen["x"].dtype == np.float64 and seen["x"].flags.c_contiguous
    np.testing.assert_array_equal(seen["x"], x.numpy())
