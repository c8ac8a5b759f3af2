"""The bridge core, tested for real through the C-ABI adapter on libraries compiled here with gcc and gfortran.

Expected values come from the closed forms of the functions (derivatives written out below, independently of the
libraries' hand-written VJPs/JVPs) and from finite differences (gradcheck).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.func import hessian, jacfwd, jacrev, vmap

from flowlearn.bridge import CLibrary, ForeignDerivativeError, ForeignError

SOURCES = Path(__file__).parent / "bridge_src"


def _compile(tmp_path_factory: pytest.TempPathFactory, compiler: str, source: str, *flags: str) -> CLibrary:
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed (.ci/run installs it)")
    out = tmp_path_factory.mktemp(compiler) / f"lib{Path(source).stem}.so"
    # Run in the output folder: gfortran writes its module files to the working directory.
    command = [compiler, "-O2", "-shared", "-fPIC", "-o", out.name, str(SOURCES / source), *flags]
    subprocess.run(command, check=True, cwd=out.parent)
    return CLibrary(out)


@pytest.fixture(scope="module")
def clib(tmp_path_factory: pytest.TempPathFactory) -> CLibrary:
    return _compile(tmp_path_factory, "gcc", "nonlinear.c", "-lm")


@pytest.fixture(scope="module")
def flib(tmp_path_factory: pytest.TempPathFactory) -> CLibrary:
    return _compile(tmp_path_factory, "gfortran", "nonlinear.f90")


@pytest.fixture(scope="module")
def poly(clib: CLibrary):
    return clib.function("fl_poly", output_shapes=lambda x, w: [x, ()])


@pytest.fixture(scope="module")
def decay(flib: CLibrary):
    return flib.function("ff_decay", output_shapes=lambda x, k: [x])


def _poly_reference(x: torch.Tensor, w: torch.Tensor, a: float) -> tuple[torch.Tensor, torch.Tensor]:
    return a * torch.sin(x) * w + x**2, (torch.exp(x) * w).sum()


def _decay_reference(x: torch.Tensor, k: torch.Tensor, c: float) -> torch.Tensor:
    return x * torch.exp(-k * x) + c * x**3


def _inputs(*shape: int, dtype=torch.float64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=dtype), torch.rand(*shape, generator=g, dtype=dtype) + 0.5)


def test_forward_values_match_the_closed_forms(poly, decay):
    x, w = _inputs(3, 4)
    y, s = poly(x, w, 0.7)
    y_ref, s_ref = _poly_reference(x, w, 0.7)
    torch.testing.assert_close(y, y_ref, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(s, s_ref, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(decay(x, w, 0.3), _decay_reference(x, w, 0.3), rtol=1e-14, atol=1e-14)


def test_zero_dim_output_keeps_its_shape_and_gradient(poly):
    x, w = (t.requires_grad_() for t in _inputs(5))
    _, s = poly(x, w, 0.7)
    assert s.shape == ()
    s.backward()
    # ds/dx = exp(x) w, ds/dw = exp(x)
    torch.testing.assert_close(x.grad, torch.exp(x) * w, rtol=1e-14, atol=0)
    torch.testing.assert_close(w.grad, torch.exp(x.detach()), rtol=1e-14, atol=0)


@pytest.mark.parametrize("which", ["c", "fortran"])
def test_gradcheck_reverse_and_forward_mode(which, poly, decay):
    x, w = (t.requires_grad_() for t in _inputs(2, 3))
    if which == "c":
        assert torch.autograd.gradcheck(lambda x, w: poly(x, w, 0.7), (x, w), check_forward_ad=True)
    else:
        assert torch.autograd.gradcheck(lambda x, k: decay(x, k, 0.3), (x, w), check_forward_ad=True)


def test_jacobians_match_the_analytic_derivatives(poly, decay):
    x, w = _inputs(4)
    a, c = 0.7, 0.3
    jx, jw = jacrev(lambda x, w: poly(x, w, a)[0], argnums=(0, 1))(x, w)
    torch.testing.assert_close(jx, torch.diag(a * torch.cos(x) * w + 2 * x), rtol=1e-14, atol=0)
    torch.testing.assert_close(jw, torch.diag(a * torch.sin(x)), rtol=1e-14, atol=0)
    jx, jk = jacfwd(lambda x, k: decay(x, k, c), argnums=(0, 1))(x, w)
    e = torch.exp(-w * x)
    torch.testing.assert_close(jx, torch.diag(e * (1 - w * x) + 3 * c * x**2), rtol=1e-14, atol=0)
    torch.testing.assert_close(jk, torch.diag(-(x**2) * e), rtol=1e-14, atol=0)


@pytest.mark.parametrize("which", ["c", "fortran"])
def test_jacfwd_equals_jacrev(which, poly, decay):
    x, w = _inputs(2, 3, seed=1)

    def f(x, w):
        if which == "c":
            y, s = poly(x, w, 0.7)
            return y * s  # couples every element of both outputs
        return decay(x, w, 0.3)

    forward = jacfwd(f, argnums=(0, 1))(x, w)
    reverse = jacrev(f, argnums=(0, 1))(x, w)
    for jf, jr in zip(forward, reverse):
        assert jf.shape == (2, 3, 2, 3)
        torch.testing.assert_close(jf, jr, rtol=1e-13, atol=1e-13)


def test_vmap_and_per_sample_gradients(poly):
    x, w = _inputs(6, 4)
    y = vmap(lambda x, w: poly(x, w, 0.7)[0])(x, w)
    torch.testing.assert_close(y, _poly_reference(x, w, 0.7)[0], rtol=1e-14, atol=1e-14)
    # Per-sample gradient of s_b = sum(exp(x_b) w_b): exp(x_b) w_b.
    g = vmap(torch.func.grad(lambda x, w: poly(x, w, 0.7)[1]))(x, w)
    torch.testing.assert_close(g, torch.exp(x) * w, rtol=1e-14, atol=0)
    # Jacobians of a batch through an unbatched and a batched cotangent at once.
    j = vmap(jacrev(lambda x: poly(x, w[0], 0.7)[0]))(x)
    torch.testing.assert_close(j, torch.diag_embed(0.7 * torch.cos(x) * w[0] + 2 * x), rtol=1e-14, atol=0)


def test_float32_round_trip_computes_in_float64(poly):
    x, w = _inputs(1000, dtype=torch.float32, seed=2)
    x.requires_grad_()
    y, s = poly(x, w, 0.7)
    assert y.dtype == s.dtype == torch.float32
    exact_y, exact_s = _poly_reference(x.detach().double(), w.double(), 0.7)
    # Rounded once from float64, not computed in float32 ...
    assert torch.equal(y, exact_y.float()) and torch.equal(s, exact_s.float())
    # ... which is visible, since a float32 computation rounds differently somewhere.
    assert not torch.equal(_poly_reference(x.detach(), w, 0.7)[1], exact_s.float()) or not torch.equal(
        _poly_reference(x.detach(), w, 0.7)[0], exact_y.float()
    )
    y.sum().backward()
    assert x.grad.dtype == torch.float32


def test_mixed_dtypes_promote_and_gradients_keep_their_dtype(poly):
    x = _inputs(5, dtype=torch.float32)[0].requires_grad_()
    w = _inputs(5)[1].requires_grad_()
    y, s = poly(x, w, 0.7)
    assert y.dtype == s.dtype == torch.float64
    (y.sum() + s).backward()
    assert x.grad.dtype == torch.float32 and w.grad.dtype == torch.float64


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_round_trip(poly):
    x, w = (t.cuda().requires_grad_() for t in _inputs(3, 4))
    y, s = poly(x, w, 0.7)
    assert y.device == s.device == x.device
    (y.sum() + s).backward()
    assert x.grad.device == x.device
    y_ref, _ = _poly_reference(x.detach().cpu(), w.detach().cpu(), 0.7)
    torch.testing.assert_close(y.cpu(), y_ref, rtol=1e-14, atol=1e-14)


def test_missing_gradient_becomes_zeros_of_the_right_shape(clib):
    op = clib.function("fl_floor_scale", output_shapes=lambda x, z: [x])
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    z = (torch.rand(3, 4, dtype=torch.float64) * 6 - 3).requires_grad_()
    op(x, z).sum().backward()
    # The gradient buffers arrive filled with NaN: zeros here mean the NULL was honoured.
    assert z.grad.shape == (3, 4) and torch.equal(z.grad, torch.zeros(3, 4, dtype=torch.float64))
    torch.testing.assert_close(x.grad, 3 * x.detach() ** 2 * torch.floor(z.detach()), rtol=1e-14, atol=0)


def test_foreign_error_carries_the_foreign_message(clib, poly, decay):
    sqrt = clib.function("fl_sqrt", output_shapes=lambda x: [x])
    with pytest.raises(ForeignError, match=r"fl_sqrt.*status 7: negative input -1\.5 at index 2"):
        sqrt(torch.tensor([4.0, 1.0, -1.5]))
    with pytest.raises(ForeignError, match="status 2: inputs differ in size"):
        poly(torch.zeros(3), torch.zeros(4), 0.7)
    with pytest.raises(
        ForeignError, match=r"ff_decay.*status 5: ff_decay: exponent -k\*x above 700 overflows"
    ):
        decay(torch.tensor([1.0, -800.0]), torch.ones(2), 0.3)


def test_forward_mode_without_pushforward_says_so(clib):
    sqrt = clib.function("fl_sqrt", output_shapes=lambda x: [x])
    x = torch.tensor([1.0, 4.0], dtype=torch.float64)
    torch.testing.assert_close(jacrev(sqrt)(x), torch.diag(0.5 / torch.sqrt(x)), rtol=1e-15, atol=0)
    with pytest.raises(ForeignDerivativeError, match="needs a pushforward"):
        jacfwd(sqrt)(x)


def test_second_derivatives_raise_instead_of_returning_wrong_values(poly):
    x, w = _inputs(3)
    x.requires_grad_()
    (g,) = torch.autograd.grad(poly(x, w, 0.7)[1], x, create_graph=True)
    with pytest.raises(ForeignDerivativeError, match="first derivatives only"):
        g.sum().backward()
    with pytest.raises(ForeignDerivativeError, match="first derivatives only"):
        hessian(lambda x: poly(x, w, 0.7)[1])(x.detach())


def test_non_tensor_arguments(poly):
    x, w = _inputs(3)
    y1, _ = poly(x, w, 0.0)
    y2, _ = poly(x, w, 2)
    torch.testing.assert_close(y1, x**2, rtol=1e-15, atol=0)
    torch.testing.assert_close(y2, 2 * torch.sin(x) * w + x**2, rtol=1e-15, atol=1e-15)
    with pytest.raises(TypeError, match="must be real numbers"):
        poly(x, w, "0.7")


def test_missing_vjp_symbol_is_reported(clib):
    with pytest.raises(AttributeError, match="fl_poly_reverse"):
        clib.function("fl_poly", output_shapes=lambda x, w: [x, ()], vjp="fl_poly_reverse")


def _run_concurrently(call, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    barrier = threading.Barrier(len(inputs))
    results: list[torch.Tensor | None] = [None] * len(inputs)

    def work(i: int) -> None:
        barrier.wait()
        results[i] = call(inputs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_the_racy_function_does_race_when_called_without_the_lock(clib):
    # Control experiment for the next test: ctypes releases the GIL, so unserialised calls interleave.
    raw = clib._lib.fl_racy
    ptr = ctypes.POINTER(ctypes.c_double)

    def call(x: torch.Tensor) -> torch.Tensor:
        xa, y = x.numpy().copy(), np.zeros(x.numel())
        raw(
            (ptr * 1)(xa.ctypes.data_as(ptr)), (ctypes.c_int64 * 1)(xa.size), ctypes.c_int64(1),
            (ctypes.c_double * 1)(2.0), ctypes.c_int64(1),
            (ptr * 1)(y.ctypes.data_as(ptr)), (ctypes.c_int64 * 1)(y.size), ctypes.c_int64(1),
            ctypes.create_string_buffer(64), ctypes.c_int64(64),
        )  # fmt: skip
        return torch.from_numpy(y)

    inputs = [torch.full((16,), float(i), dtype=torch.float64) for i in range(8)]
    results = _run_concurrently(call, inputs)
    assert any(not torch.equal(r, 2 * x) for r, x in zip(results, inputs))


@pytest.mark.parametrize("handles", ["one", "two"])
def test_lock_serialises_concurrent_calls(clib, handles):
    # Two CLibrary objects of one file share the file's global state, so they must share its lock too.
    libraries = [clib, clib if handles == "one" else CLibrary(clib.path)]
    ops = [lib.function("fl_racy", output_shapes=lambda x: [x]) for lib in libraries]
    inputs = [torch.full((16,), float(i), dtype=torch.float64, requires_grad=True) for i in range(8)]

    def call(x: torch.Tensor) -> torch.Tensor:
        y = ops[int(x[0].item()) % 2](x, 2.0)
        (g,) = torch.autograd.grad(y.sum(), x)
        return torch.cat([y.detach(), g])

    for r, x in zip(_run_concurrently(call, inputs), inputs):
        torch.testing.assert_close(
            r, torch.cat([2 * x.detach(), torch.full((16,), 2.0, dtype=torch.float64)])
        )
