"""julia2pytorch and the DPFEHM backend.

Everything around Julia runs everywhere: lazy import, fn_name validation, the start-up error without Julia. The
tests marked ``julia`` call Julia and are skipped unless juliacall is installed and a Julia is present (a ``julia``
executable on PATH, or FLOWLEARN_TEST_JULIA=1 once juliacall has installed its own); the skip check itself never
imports juliacall, so it never triggers a Julia download.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.func import jacfwd, jacrev

from flowlearn.bridge import ForeignDerivativeError, ForeignError, julia2pytorch
from flowlearn.bridge.julia import julia_installed, validate_fn_name
from flowlearn.engines.dpfehm import BRIDGE_PACKAGE

JULIA = julia_installed() and (
    shutil.which("julia") is not None or os.environ.get("FLOWLEARN_TEST_JULIA") == "1"
)
needs_julia = [
    pytest.mark.julia,
    pytest.mark.skipif(not JULIA, reason="needs juliacall and Julia (pip install -e '.[julia]')"),
]
EXAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "example_fracture.mat"


def _run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )


# An import hook, installed before flowlearn is imported, that fails any attempt to import juliacall or juliapkg
# (whether or not they are installed).
_FORBID_JULIA_IMPORT = """
    import sys

    class Forbid:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("juliacall", "juliapkg"):
                raise AssertionError(f"{name} was imported")
            return None

    sys.meta_path.insert(0, Forbid())
"""


def test_importing_flowlearn_never_imports_juliacall():
    result = _run_python(
        _FORBID_JULIA_IMPORT
        + """
    import flowlearn
    import flowlearn.bridge
    from flowlearn.bridge import julia
    from flowlearn.engines import dpfehm
    print("imported")
    """
    )
    assert result.returncode == 0, result.stderr
    assert "imported" in result.stdout


@pytest.mark.parametrize(
    "name",
    ["", "f(x)", "1f", "f; run(`ls`)", "a..b", "f.", ".f", "Main.eval(:x)", "f g", "f'", 3, None],
)
def test_invalid_fn_names_are_rejected_before_julia_starts(name):
    # Raised even here, where Julia may be missing: validation comes first.
    with pytest.raises(ValueError, match="fn_name must be the name of a Julia function"):
        julia2pytorch(name, "")


@pytest.mark.parametrize("name", ["f", "solve!", "_helper2", "DPFEHMBridge.pressure", "A.B.c!", "σ"])
def test_julia_names_are_accepted(name):
    assert validate_fn_name(name) == name


def test_without_juliacall_construction_fails_with_install_instructions():
    # juliacall made unimportable (a None entry in sys.modules), whether or not it is installed.
    result = _run_python(
        """
    import sys
    sys.modules["juliacall"] = None
    from flowlearn.bridge import JuliaUnavailableError, julia2pytorch
    from flowlearn.engines.dpfehm import DPFEHMEngine

    for build in (DPFEHMEngine, lambda: julia2pytorch("f", "f(x) = x")):
        try:
            build()
        except JuliaUnavailableError as error:
            assert isinstance(error, RuntimeError)
            print("ERROR:", error)
        else:
            raise SystemExit("no error")
    """
    )
    assert result.returncode == 0, result.stderr
    solver_message, j2p_message = result.stdout.strip().split("\n")
    assert solver_message.startswith("ERROR: solver=julia needs Julia")
    assert j2p_message.startswith("ERROR: julia2pytorch needs Julia")
    for message in (solver_message, j2p_message):
        assert "pip install -e '.[julia]'" in message
        assert "JULIA_DEPOT_PATH" in message and "PYTHON_JULIAPKG_OFFLINE" in message


def test_without_a_julia_construction_fails_before_juliacall_is_imported(tmp_path):
    # A stand-in juliacall that fails when imported: the real one downloads a Julia where it finds none (after a
    # warning about torch), which a run with solver=julia had printed before its own error line.
    (tmp_path / "juliacall").mkdir()
    (tmp_path / "juliacall" / "__init__.py").write_text("raise AssertionError('juliacall was imported')\n")
    empty = tmp_path / "bin"
    empty.mkdir()
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith(("PYTHON_JULIA", "JULIA"))
    }
    environment |= {"PYTHONPATH": f"{tmp_path}{os.pathsep}{Path(__file__).parents[1]}", "PATH": str(empty)}
    environment["HOME"] = str(tmp_path)
    code = """
    from flowlearn.bridge import JuliaUnavailableError
    from flowlearn.engines.dpfehm import DPFEHMEngine
    try:
        DPFEHMEngine()
    except JuliaUnavailableError as error:
        print("ERROR:", error)
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        "ERROR: solver=julia needs Julia, and none is installed where juliacall looks (PYTHON_JULIAPKG_EXE, "
        "juliapkg's own, juliaup, julia on PATH): download it once with python -c 'import juliacall'"
    )


def test_a_julia_on_path_or_configured_is_found(tmp_path, monkeypatch):
    from flowlearn.bridge.julia import julia_executable

    julia = tmp_path / "julia"
    julia.write_text("#!/bin/sh\n")
    julia.chmod(0o755)
    for key in [key for key in os.environ if key.startswith(("PYTHON_JULIA", "JULIA"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert julia_executable() == str(julia)
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert julia_executable() is None
    monkeypatch.setenv("PYTHON_JULIAPKG_EXE", "/opt/julia/bin/julia")
    assert julia_executable() == "/opt/julia/bin/julia"


@pytest.mark.skipif(
    not julia_installed(), reason="needs juliacall installed (its start-up is what fails here)"
)
def test_julia_that_cannot_start_fails_at_construction(tmp_path):
    # Offline, with no Julia at the configured path: juliacall's own start-up fails, and says so.
    result = _run_python(
        """
    from flowlearn.bridge import JuliaUnavailableError
    from flowlearn.engines.dpfehm import DPFEHMEngine
    try:
        DPFEHMEngine()
    except JuliaUnavailableError as error:
        print("ERROR:", error)
    else:
        raise SystemExit("no error")
    """,
        PYTHON_JULIAPKG_OFFLINE="yes",
        PYTHON_JULIAPKG_EXE=str(tmp_path / "no-julia-here"),
        PYTHON_JULIAPKG_PROJECT=str(tmp_path / "project"),
    )
    assert result.returncode == 0, result.stderr
    # juliapkg logs to stdout as well.
    assert "ERROR: solver=julia needs Julia, but starting it failed" in result.stdout


def test_juliapkg_json_declares_the_bridge_package_and_its_dependencies():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    declared = json.loads((BRIDGE_PACKAGE.parents[1] / "flowlearn" / "bridge" / "juliapkg.json").read_text())
    project = tomllib.loads((BRIDGE_PACKAGE / "Project.toml").read_text())
    packages = declared["packages"]
    bridge = packages[project["name"]]
    assert bridge["uuid"] == project["uuid"] and bridge["dev"] is True
    assert (Path(__file__).parents[1] / "flowlearn" / "bridge" / bridge["path"]).resolve() == BRIDGE_PACKAGE
    standard_library = {"LinearAlgebra"}
    for name, uuid in project["deps"].items():
        if name not in standard_library:
            assert packages[name]["uuid"] == uuid, name
    # The glue of julia2pytorch imports these.
    assert {"Zygote", "DifferentiationInterface", "ADTypes"} <= packages.keys()


# ---- With Julia ---------------------------------------------------------------------------------------------------

SIMPLE = """
import Zygote
const A = [1 2; 3 4]
f(x, y) = A * x + y
f(x) = A * x
"""


class TestWithJulia:
    pytestmark = needs_julia

    def test_the_original_simple_example(self):
        f = julia2pytorch("f", SIMPLE)
        x = torch.zeros(2, requires_grad=True)
        y = torch.zeros(2, requires_grad=True)
        (gx,) = torch.autograd.grad(f(x).sum(), [x])
        assert gx.tolist() == [4.0, 6.0]
        gx, gy = torch.autograd.grad(f(x, y).sum(), [x, y])
        assert gx.tolist() == [4.0, 6.0] and gy.tolist() == [1.0, 1.0]

    def test_values_dtype_round_trip_and_gradcheck(self):
        f = julia2pytorch("f", SIMPLE)
        x = torch.tensor([0.5, -1.0], dtype=torch.float32)
        y = f(x)
        assert y.dtype == torch.float32 and y.tolist() == [-1.5, -2.5]
        x64 = torch.randn(2, dtype=torch.float64, requires_grad=True)
        y64 = torch.randn(2, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(f, (x64, y64))

    def test_tuple_and_zero_dim_outputs(self):
        g = julia2pytorch("g", "g(x) = (sum(abs2, x), 2 .* x)")
        x = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64, requires_grad=True)
        s, y = g(x)
        assert s.shape == () and s.item() == 14.0 and torch.equal(y, 2 * x.detach())
        (s + y.sum()).backward()
        torch.testing.assert_close(x.grad, 2 * x.detach() + 2)

    def test_nothing_gradient_becomes_zeros(self):
        h = julia2pytorch("h", "h(x, unused) = x .^ 2")
        x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
        unused = torch.ones(3, 4, dtype=torch.float64, requires_grad=True)
        h(x, unused).sum().backward()
        assert torch.equal(unused.grad, torch.zeros(3, 4, dtype=torch.float64))
        torch.testing.assert_close(x.grad, 2 * x.detach())

    def test_non_tensor_arguments(self):
        scale = julia2pytorch("scale", "scale(x, c, label::String) = c .* x")
        x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
        y = scale(x, 2.5, "anything")
        y.sum().backward()
        assert y.tolist() == [2.5, 5.0] and x.grad.tolist() == [2.5, 2.5]

    def test_julia_errors_carry_the_julia_message(self):
        bad = julia2pytorch("bad", 'bad(x) = any(<(0), x) ? error("negative values are not allowed") : x')
        with pytest.raises(ForeignError, match="negative values are not allowed"):
            bad(torch.tensor([1.0, -1.0]))
        with pytest.raises(ForeignError, match="setup failed"):
            julia2pytorch("nothere", "x = 1")

    def test_concurrent_calls(self):
        f = julia2pytorch("f", SIMPLE)
        inputs = [torch.full((2,), float(i), dtype=torch.float64) for i in range(8)]
        results: list[torch.Tensor | None] = [None] * len(inputs)

        def work(i: int) -> None:
            results[i] = f(inputs[i])

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        a = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
        for x, y in zip(inputs, results):
            torch.testing.assert_close(y, a @ x)

    def test_forward_mode_through_differentiation_interface(self):
        f = julia2pytorch("f", "import ForwardDiff\nf(x) = sin.(x) .* x", ad_backend="AutoForwardDiff()")
        x = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)
        expected = torch.diag(torch.cos(x) * x + torch.sin(x))
        torch.testing.assert_close(jacfwd(f)(x), expected)
        torch.testing.assert_close(jacrev(f)(x), expected)

    def test_zygote_gives_no_forward_mode(self):
        f = julia2pytorch("f", SIMPLE)
        with pytest.raises(ForeignDerivativeError, match="needs a pushforward"):
            jacfwd(f)(torch.zeros(2, dtype=torch.float64))


class TestDPFEHMAgainstNative:
    pytestmark = needs_julia

    @pytest.fixture(scope="class")
    def solver(self):
        from flowlearn.engines.dpfehm import DPFEHMEngine

        return DPFEHMEngine()

    def _compare(self, solver, log_k: torch.Tensor, problem) -> None:
        # The same op through DPFEHM's solves and through the native ones: pressures, and gradients with respect
        # to log K, the Dirichlet values and the sources (DPFEHM's multigrid stops at a relative residual of 1e-12).
        from flowlearn.darcy.solve import solve_pressure

        weights = torch.randn(
            problem.grid.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
        )
        conditions = [torch.from_numpy(problem.dirichlet_values), torch.from_numpy(problem.sources)]
        results = []
        for engine in ("superlu", solver):
            x, heads, sources = (t.clone().requires_grad_() for t in (log_k, *conditions))
            p = solve_pressure(x, problem, heads, sources, solver=engine)
            grads = torch.autograd.grad((torch.nan_to_num(p) * weights).sum(), (x, heads, sources))
            results.append((p.detach(), *grads))
        for julia, native in zip(*results):
            scale = float(torch.nan_to_num(native).abs().max())
            torch.testing.assert_close(julia, native, rtol=0, atol=1e-6 * max(scale, 1.0), equal_nan=True)

    def test_random_32_by_40_field(self, solver):
        from flowlearn.darcy.problem import DarcyProblem

        log_k = torch.randn(1, 32, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        self._compare(solver, log_k, DarcyProblem.fracture((32, 40)))

    @pytest.mark.parametrize("channels", [2, 3], ids=["per_axis", "tensor"])
    def test_per_axis_and_tensor_conductivities_reach_dpfehm_edge_by_edge(self, solver, channels):
        from flowlearn.darcy.problem import DarcyProblem

        field = torch.randn(
            1, channels, 24, 30, dtype=torch.float64, generator=torch.Generator().manual_seed(3)
        )
        if channels == 3:  # the correlation of a positive-definite tensor, of both signs
            field[:, 2] = 0.4 * torch.tanh(field[:, 2])
        self._compare(solver, field, DarcyProblem.fracture((24, 30)))

    def test_3d_with_sources_and_inactive_nodes(self, solver):
        from flowlearn.darcy.grid import Grid
        from flowlearn.darcy.problem import DarcyProblem

        rng = np.random.default_rng(2)
        shape = (4, 6, 7)
        dirichlet = np.zeros(shape, dtype=bool)
        dirichlet[..., 0] = dirichlet[..., -1] = True
        active = rng.random(shape) > 0.1
        active[..., 0] = active[..., -1] = True
        values = np.where(dirichlet, rng.random(shape), 0.0)
        sources = np.where(rng.random(shape) > 0.9, rng.normal(size=shape) * 1e-3, 0.0)
        problem = DarcyProblem(
            Grid.from_image(shape, spacing=0.5), dirichlet, values, sources=sources, active=active,
            drop_unconnected=True,
        )  # fmt: skip
        log_k = torch.from_numpy(rng.normal(size=(2, *shape)))
        self._compare(solver, log_k, problem)

    @pytest.mark.skipif(not EXAMPLE.is_file(), reason=f"needs {EXAMPLE}")
    def test_example_fracture(self, solver):
        import h5py

        from flowlearn.darcy.problem import DarcyProblem

        with h5py.File(EXAMPLE, "r") as f:
            aperture = np.asarray(f["fracture_1"]["aperture_field"], dtype=np.float64)[0, 0]
        # The original law at its initial w = 0.5: K = Ap.
        log_k = torch.from_numpy(np.log(aperture))[None]
        self._compare(solver, log_k, DarcyProblem.fracture(aperture.shape))
