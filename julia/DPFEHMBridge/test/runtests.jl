# Tests of DPFEHMBridge against references built here from the conventions alone (a dense finite-volume
# assembly that does not use DPFEHM), closed forms, and finite differences.
using DPFEHMBridge
using LinearAlgebra
using Test

# The image of a field is (H, W) or (D, H, W); node order is its Fortran (column-major) order, which is Julia's.
nodes(image) = vec(image)

# Dense reference: node i's equation is sum_e K_e aol_e (h_i - h_j) = Q_i, Dirichlet nodes eliminated.
function reference_heads(logK, mins, maxs, ns, thickness, dirichlet, values, sources)
    dim = length(ns)
    spacing = (maxs .- mins) ./ (ns .- 1)
    index = LinearIndices(Tuple(reverse(ns)))  # node of (x, y[, z]) is index[z, y, x]: last axis fastest
    node(c) = index[reverse(Tuple(c))...]
    n = prod(ns)
    A = zeros(n, n)
    for c in CartesianIndices(Tuple(ns)), d in 1:dim
        c[d] < ns[d] || continue
        other = c + CartesianIndex(ntuple(k -> k == d ? 1 : 0, dim))
        area = prod(spacing[k] for k in 1:dim if k != d) * (dim == 2 ? thickness : 1.0)
        a, b = node(c), node(other)
        t = exp((logK[a] + logK[b]) / 2) * area / spacing[d]
        A[a, a] += t; A[b, b] += t; A[a, b] -= t; A[b, a] -= t
    end
    free = .!dirichlet
    h = copy(values)
    h[free] = A[free, free] \ (sources[free] .- A[free, dirichlet] * values[dirichlet])
    h[dirichlet] = values[dirichlet]
    return h
end

# The fracture setup: head 2 on column 0 and 1 on the last column, no-flow top and bottom rows.
function fracture(H, W; dx=1e-4, dz=0.01, active=trues(H, W), kwargs...)
    dirichlet = falses(H, W); dirichlet[:, 1] .= true; dirichlet[:, W] .= true
    values = zeros(H, W); values[:, 1] .= 2.0; values[:, W] .= 1.0
    problem = Problem([0.0, 0.0], [W * dx, H * dx], [W, H], dz, nodes(dirichlet), nodes(values), zeros(H * W),
                      nodes(active); kwargs...)
    return problem, dirichlet, values
end

@testset "DPFEHMBridge" begin
    @testset "grid follows the node-order convention" begin
        H, W = 3, 4
        neighbors, aol = DPFEHMBridge.grid([0.0, 0.0], [3.0, 4.0], [W, H], 0.5)
        dx, dy = 3.0 / (W - 1), 4.0 / (H - 1)
        @test length(neighbors) == 2 * H * W - H - W
        # y fastest: node = c*H + r + 1, x-edges (n, n + H), y-edges (n, n + 1).
        expected = Dict{Pair{Int, Int}, Float64}()
        for c in 0:W-1, r in 0:H-1
            n = c * H + r + 1
            c < W - 1 && (expected[n => n + H] = dy * 0.5 / dx)
            r < H - 1 && (expected[n => n + 1] = dx * 0.5 / dy)
        end
        @test Set(neighbors) == Set(keys(expected))
        @test all(aol[i] ≈ expected[neighbors[i]] for i in eachindex(neighbors))
    end

    @testset "uniform K gives the linear head 2 - c/(W-1)" begin
        H, W = 6, 9
        problem, _, _ = fracture(H, W)
        h = reshape(pressure(zeros(H * W), problem), H, W)
        @test h ≈ repeat(2 .- (0:W-1)' ./ (W - 1), H, 1) atol = 1e-9
    end

    @testset "the head does not depend on a global scale of K" begin
        H, W = 5, 7
        problem, _, _ = fracture(H, W)
        logK = randn(H * W)
        @test pressure(logK, problem) ≈ pressure(logK .+ 3.7, problem) atol = 1e-9
    end

    @testset "2D with sources matches the dense reference" begin
        H, W = 7, 6
        mins, maxs, ns, dz = [0.0, 0.0], [2.0, 3.0], [W, H], 0.3
        dirichlet = falses(H, W); dirichlet[1, :] .= true; dirichlet[4, 6] = true
        values = 1.0 .+ rand(H, W)
        sources = zeros(H, W); sources[5, 2] = 0.7; sources[6, 5] = -0.2
        logK = randn(H * W)
        problem = Problem(mins, maxs, ns, dz, nodes(dirichlet), nodes(values), nodes(sources))
        reference = reference_heads(logK, mins, maxs, ns, dz, nodes(dirichlet), nodes(values), nodes(sources))
        @test pressure(logK, problem) ≈ reference rtol = 1e-9
    end

    @testset "3D matches the dense reference" begin
        D, H, W = 3, 4, 5
        mins, maxs, ns = [0.0, 0.0, 0.0], [1.0, 2.0, 0.5], [W, H, D]
        dirichlet = falses(D, H, W); dirichlet[:, :, 1] .= true; dirichlet[:, :, W] .= true
        values = zeros(D, H, W); values[:, :, 1] .= 1.0
        sources = zeros(D, H, W); sources[2, 3, 3] = 0.05
        logK = randn(D * H * W)
        problem = Problem(mins, maxs, ns, 1.0, nodes(dirichlet), nodes(values), nodes(sources))
        reference = reference_heads(logK, mins, maxs, ns, 1.0, nodes(dirichlet), nodes(values), nodes(sources))
        @test pressure(logK, problem) ≈ reference rtol = 1e-9
    end

    @testset "solve takes the heads and sources of each call" begin
        H, W = 7, 6
        mins, maxs, ns, dz = [0.0, 0.0], [2.0, 3.0], [W, H], 0.3
        dirichlet = falses(H, W); dirichlet[1, :] .= true; dirichlet[4, 6] = true
        values, other_values = 1.0 .+ rand(H, W), rand(H, W)
        sources, other_sources = zeros(H, W), randn(H, W)
        logK = randn(H * W)
        problem = Problem(mins, maxs, ns, dz, nodes(dirichlet), nodes(values), nodes(sources))
        @test solve(logK, nodes(values), nodes(sources), problem) ≈ pressure(logK, problem) rtol = 1e-12
        # The adjoint of flowlearn's rules: zero heads, arbitrary sources.
        reference = reference_heads(logK, mins, maxs, ns, dz, nodes(dirichlet), nodes(other_values),
                                    nodes(other_sources))
        @test solve(logK, nodes(other_values), nodes(other_sources), problem) ≈ reference rtol = 1e-9
        @test_throws DimensionMismatch solve(logK, zeros(3), nodes(sources), problem)
    end

    @testset "solve_edges with the geometric-mean edges is solve, and takes any edges" begin
        H, W = 7, 6
        mins, maxs, ns, dz = [0.0, 0.0], [2.0, 3.0], [W, H], 0.3
        dirichlet = falses(H, W); dirichlet[1, :] .= true; dirichlet[4, 6] = true
        values, sources = 1.0 .+ rand(H, W), zeros(H, W)
        sources[5, 2] = 0.7
        logK = randn(H * W)
        problem = Problem(mins, maxs, ns, dz, nodes(dirichlet), nodes(values), nodes(sources))
        neighbors, aol = DPFEHMBridge.grid(mins, maxs, ns, dz)
        ends_a, ends_b = first.(neighbors), last.(neighbors)
        Ts = exp.((logK[ends_a] .+ logK[ends_b]) ./ 2) .* aol
        @test solve_edges(Ts, ends_a, ends_b, nodes(values), nodes(sources), problem) ≈
              solve(logK, nodes(values), nodes(sources), problem) rtol = 1e-9
        # A diagonal edge of weight w is the dense reference's assembly with that edge added.
        diagonal_a, diagonal_b = 2, 2 + H + 1  # (r=2, c=1) to (r=3, c=2), 1-based node order
        with = solve_edges([Ts; 0.4], [ends_a; diagonal_a], [ends_b; diagonal_b], nodes(values), nodes(sources),
                           problem)
        A = zeros(H * W, H * W)
        for (a, b, t) in zip([ends_a; diagonal_a], [ends_b; diagonal_b], [Ts; 0.4])
            A[a, a] += t; A[b, b] += t; A[a, b] -= t; A[b, a] -= t
        end
        fixed, h = nodes(dirichlet), copy(nodes(values))
        h[.!fixed] = A[.!fixed, .!fixed] \ (nodes(sources)[.!fixed] .- A[.!fixed, fixed] * h[fixed])
        @test with ≈ h rtol = 1e-9
        @test_throws ArgumentError solve_edges(-Ts, ends_a, ends_b, nodes(values), nodes(sources), problem)
        @test_throws DimensionMismatch solve_edges(Ts[2:end], ends_a, ends_b, nodes(values), nodes(sources), problem)
    end

    @testset "gradient matches central differences" begin
        H, W = 6, 8
        problem, _, _ = fracture(H, W)
        logK, weights = randn(H * W), randn(H * W)
        loss(x) = dot(weights, pressure(x, problem))
        h, back = pressure_pullback(logK, problem)
        @test h ≈ pressure(logK, problem)
        gradient = back(weights)
        # A step large enough that the solves' own error (relative residual 1e-12) stays far below the quotient's.
        step = 1e-4
        for i in (1, 9, 20, 33, H * W)
            e = zeros(H * W); e[i] = step
            @test gradient[i] ≈ (loss(logK .+ e) - loss(logK .- e)) / (2 * step) rtol = 1e-4 atol = 1e-7
        end
    end

    @testset "inactive nodes are cut out of the graph" begin
        H, W = 5, 6
        active = trues(H, W); active[3, 3:4] .= false
        problem, dirichlet, values = fracture(H, W; active=active)
        logK = randn(H * W)
        logK[.!nodes(active)] .= -Inf  # never read
        h = pressure(logK, problem)
        # Reference: the same graph with the inactive nodes' conductivity effectively zero, i.e. no edges to them.
        cut = copy(logK); cut[.!nodes(active)] .= -1e3
        dirichlet_cut = nodes(dirichlet) .| .!nodes(active)
        reference = reference_heads(cut, [0.0, 0.0], [W * 1e-4, H * 1e-4], [W, H], 0.01, dirichlet_cut,
                                    nodes(values), zeros(H * W))
        @test h[nodes(active)] ≈ reference[nodes(active)] rtol = 1e-9
        _, back = pressure_pullback(logK, problem)
        @test all(iszero, back(ones(H * W))[.!nodes(active)])
    end

    @testset "an unconverged solve throws instead of returning" begin
        H, W = 16, 20
        problem, _, _ = fracture(H, W; reltol=1e-14, maxiter=1)
        @test_throws ErrorException pressure(randn(H * W), problem)
    end

    @testset "bad input" begin
        problem, _, _ = fracture(4, 5)
        @test_throws DimensionMismatch pressure(zeros(3), problem)
        @test_throws ArgumentError Problem([0.0], [1.0], [5], 1.0, trues(5), zeros(5), zeros(5))
        @test_throws ArgumentError Problem([0.0, 0.0], [1.0, 1.0], [3, 3], 1.0, falses(9), zeros(9), zeros(9))
    end
end
