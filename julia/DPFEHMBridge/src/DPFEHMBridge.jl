"""
    DPFEHMBridge

DPFEHM.jl's steady groundwater solve, set up in flowlearn's conventions, as a function of node log-conductivity
that Zygote differentiates with DPFEHM's adjoint rule.

Conventions (flowlearn's DESIGN.md, which are DPFEHM's): vertex-centred regular grids from `DPFEHM.regulargrid2d`
/ `regulargrid3d` (node order: y fastest in 2D; z, then y, then x in 3D), edge conductivity the geometric mean
`exp((logK_a + logK_b) / 2)`, Dirichlet nodes eliminated, positive sources inject. flowlearn's Python side
(`flowlearn.engines.dpfehm`) builds a [`Problem`](@ref) once per problem and calls [`solve`](@ref) for each
forward, adjoint and tangent solve, with the heads and sources of that solve; flowlearn's own rules differentiate.
[`pressure`](@ref) solves with the problem's own heads and sources, and Zygote differentiates it through DPFEHM's
adjoint rule (the package tests compare the two).
"""
module DPFEHMBridge

import ChainRulesCore
import DPFEHM
import LinearAlgebra
import Zygote

export Problem, pressure, pressure_pullback, solve, solve_edges

# The forward solve must reach reltol; this margin absorbs rounding differences between the multigrid's own
# residual and the independent re-evaluation in `check_converged`.
const CONVERGENCE_MARGIN = 10.0

"""
    Problem(mins, maxs, ns, thickness, dirichlet, dirichletvalues, sources, active=trues(prod(ns));
            reltol=1e-12, maxiter=1000)

A steady groundwater problem on DPFEHM's regular grid, ready for [`pressure`](@ref).

- `mins`, `maxs`: lower and upper corner, (x, y) or (x, y, z), metres.
- `ns`: node counts (nx, ny) or (nx, ny, nz), each at least 2.
- `thickness`: out-of-plane dz of a 2D grid, metres (unused in 3D).
- `dirichlet`, `active`: Bool per node (node order); `dirichletvalues` (heads, metres) and `sources` (Q, m^3/s,
  positive = injection) per node.
- `reltol`, `maxiter`: for DPFEHM's algebraic multigrid, forward and adjoint.

Edges with an inactive end are dropped, and inactive nodes are pinned at head 0 so that they carry no equation;
their head is meaningless (flowlearn reports NaN there).
"""
struct Problem
    numnodes::Int
    neighbors::Vector{Pair{Int, Int}}
    areasoverlengths::Vector{Float64}
    ends_a::Vector{Int}
    ends_b::Vector{Int}
    fixed::Vector{Bool}  # active Dirichlet nodes
    free::Vector{Bool}  # active nodes whose head is solved for
    dirichletnodes::Vector{Int}  # DPFEHM's Dirichlet set: the fixed nodes and the inactive ones
    dirichleths::Vector{Float64}
    Qs::Vector{Float64}
    reltol::Float64
    maxiter::Int
end

function Problem(mins, maxs, ns, thickness, dirichlet, dirichletvalues, sources, active=trues(prod(ns));
                 reltol=1e-12, maxiter=1000)
    ns = collect(Int, ns)
    n = prod(ns)
    all(>=(2), ns) || throw(ArgumentError("DPFEHM's regular grids need at least 2 nodes per axis, got ns = $ns"))
    for (name, values) in (("dirichlet", dirichlet), ("dirichletvalues", dirichletvalues), ("sources", sources),
                           ("active", active))
        length(values) == n || throw(DimensionMismatch("$name has $(length(values)) entries for $n nodes"))
    end
    active = collect(Bool, active)
    fixed = collect(Bool, dirichlet) .& active
    any(fixed) || throw(ArgumentError("no active Dirichlet node: the head would only be defined up to a constant"))
    neighbors, areasoverlengths = grid(collect(Float64, mins), collect(Float64, maxs), ns, Float64(thickness))
    keep = [active[a] && active[b] for (a, b) in neighbors]
    neighbors, areasoverlengths = neighbors[keep], areasoverlengths[keep]
    free = active .& .!fixed
    dirichletnodes = findall(fixed .| .!active)
    dirichleths, Qs = conditions(fixed, free, dirichletvalues, sources)
    return Problem(n, neighbors, areasoverlengths, first.(neighbors), last.(neighbors), fixed, free, dirichletnodes,
                   dirichleths, Qs, Float64(reltol), Int(maxiter))
end

# DPFEHM's per-node Dirichlet heads and sources: heads at the fixed nodes (0 at the inactive ones, pinned), sources
# at the free nodes.
function conditions(fixed, free, heads, sources)
    return ifelse.(fixed, collect(Float64, heads), 0.0), ifelse.(free, collect(Float64, sources), 0.0)
end

"""
    grid(mins, maxs, ns, thickness) -> (neighbors, areasoverlengths)

Neighbour pairs and face area over node distance of DPFEHM's vertex-centred regular grid with 2 or 3 axes.
"""
function grid(mins, maxs, ns, thickness)
    if length(ns) == 2
        _, neighbors, areasoverlengths, _ = DPFEHM.regulargrid2d(mins, maxs, ns, thickness)
    elseif length(ns) == 3
        _, neighbors, areasoverlengths, _ = DPFEHM.regulargrid3d(mins, maxs, ns)
    else
        throw(ArgumentError("a grid has 2 or 3 axes, got ns = $ns"))
    end
    return neighbors, areasoverlengths
end

"""
    pressure(logK, problem) -> h

Head (metres) at every node, node order, for the node log-conductivity `logK` (natural log of K in m/s, node
order; values at inactive nodes are not used). Solved by `DPFEHM.groundwater_steadystate` to `problem.reltol`;
throws when the multigrid stops at `problem.maxiter` short of it. Zygote differentiates it through DPFEHM's adjoint.
"""
function pressure(logK::AbstractVector{<:Real}, problem::Problem)
    return steadystate(logK, problem.dirichleths, problem.Qs, problem)
end

"""
    solve(logK, heads, sources, problem) -> h

Head (metres) at every node, node order, for the node log-conductivity `logK`, Dirichlet `heads` (metres, used at
the problem's Dirichlet nodes) and `sources` (m^3/s, used at its free nodes), all per node in node order. Solved as
[`pressure`](@ref) is; flowlearn calls it for forward, adjoint and tangent solves alike.
"""
function solve(logK::AbstractVector{<:Real}, heads::AbstractVector{<:Real}, sources::AbstractVector{<:Real},
               problem::Problem)
    for (name, values) in (("heads", heads), ("sources", sources))
        length(values) == problem.numnodes ||
            throw(DimensionMismatch("$name has $(length(values)) entries for $(problem.numnodes) nodes"))
    end
    dirichleths, Qs = conditions(problem.fixed, problem.free, heads, sources)
    return steadystate(collect(Float64, logK), dirichleths, Qs, problem)
end

function steadystate(logK, dirichleths, Qs, problem::Problem)
    length(logK) == problem.numnodes ||
        throw(DimensionMismatch("logK has $(length(logK)) entries for $(problem.numnodes) nodes"))
    Ks = exp.((logK[problem.ends_a] .+ logK[problem.ends_b]) ./ 2)
    h = DPFEHM.groundwater_steadystate(Ks, problem.neighbors, problem.areasoverlengths, problem.dirichletnodes,
                                       dirichleths, Qs; reltol=problem.reltol, maxiter=problem.maxiter)
    check_converged(h, Ks, problem.neighbors, problem.areasoverlengths, dirichleths, Qs, problem)
    return h
end

"""
    solve_edges(Ts, ends_a, ends_b, heads, sources, problem) -> h

Head (metres) at every node, node order, for a system given edge by edge: edge `e` joins nodes `ends_a[e]` and
`ends_b[e]` (1-based, node order) with transmissibility `Ts[e] ≥ 0` (DPFEHM's `Ks[e] * areasoverlengths[e]`),
Dirichlet `heads` and `sources` as for [`solve`](@ref). This is how flowlearn hands DPFEHM a conductivity per node
and axis, or the 9-point edges of a full 2D transmissivity tensor, whose diagonal edges DPFEHM's regular grid does
not list: DPFEHM's per-edge conductivities with unit areas over lengths. Edges must join active nodes; the
problem's Dirichlet set and tolerance apply.
"""
function solve_edges(Ts::AbstractVector{<:Real}, ends_a::AbstractVector{<:Integer},
                     ends_b::AbstractVector{<:Integer}, heads::AbstractVector{<:Real},
                     sources::AbstractVector{<:Real}, problem::Problem)
    length(ends_a) == length(ends_b) == length(Ts) ||
        throw(DimensionMismatch("$(length(Ts)) transmissibilities for $(length(ends_a)) and $(length(ends_b)) ends"))
    for (name, values) in (("heads", heads), ("sources", sources))
        length(values) == problem.numnodes ||
            throw(DimensionMismatch("$name has $(length(values)) entries for $(problem.numnodes) nodes"))
    end
    all(t -> t >= 0, Ts) || throw(ArgumentError("edge transmissibilities must be >= 0"))
    dirichleths, Qs = conditions(problem.fixed, problem.free, heads, sources)
    neighbors = Pair{Int, Int}.(ends_a, ends_b)
    Ks = collect(Float64, Ts)
    unit = ones(length(Ks))
    h = DPFEHM.groundwater_steadystate(Ks, neighbors, unit, problem.dirichletnodes, dirichleths, Qs;
                                       reltol=problem.reltol, maxiter=problem.maxiter)
    check_converged(h, Ks, neighbors, unit, dirichleths, Qs, problem)
    return h
end

"""
    pressure_pullback(logK, problem) -> (h, back)

[`pressure`](@ref) and its pullback: `back(δh)` is the gradient of `δh ⋅ h` with respect to `logK`.
"""
function pressure_pullback(logK::AbstractVector{<:Real}, problem::Problem)
    h, back = Zygote.pullback(x -> pressure(x, problem), logK)
    return h, δh -> only(back(δh))
end

# DPFEHM's multigrid returns silently at its iteration limit; re-evaluate the residual of the free-node equations
# (the same equations DPFEHM assembles, with unit storage and volume) and refuse an unconverged head.
function check_converged(h, Ks, neighbors, areasoverlengths, dirichleths, Qs, problem::Problem)
    isfree, _, _ = DPFEHM.getfreenodes(problem.numnodes, problem.dirichletnodes)
    unit = ones(problem.numnodes)
    args = (Ks, neighbors, areasoverlengths, problem.dirichletnodes, dirichleths, Qs, unit, unit)
    residual = LinearAlgebra.norm(DPFEHM.groundwater_residuals(h[isfree], args...))
    initial = LinearAlgebra.norm(DPFEHM.groundwater_residuals(zeros(count(isfree)), args...))
    if !(residual <= CONVERGENCE_MARGIN * problem.reltol * initial)
        error("DPFEHM's multigrid did not converge: relative residual $(residual / initial) after at most " *
              "$(problem.maxiter) iterations, tolerance $(problem.reltol). Raise maxiter or loosen reltol.")
    end
    return nothing
end

ChainRulesCore.@non_differentiable check_converged(::Any, ::Any, ::Any, ::Any, ::Any, ::Any, ::Any)

end
