// Package factor is the mathematics of emsf: stochastic factorizations
// P^a ≈ D^a K^a of the transition matrices of a Markov decision process,
// fitted from sparse transition counts by EMSF (expectation-maximization
// stochastic factorization).
//
// The package is pure: no I/O, no logging, no networking, and it imports
// nothing else of this project. Everything that runs the math on real data
// (files, shards, NATS workers) adapts the types defined here.
//
// # The iteration
//
// One EM iteration (incremental-emsf eqs. 6, 7 and 13; the same as the
// multiplicative updates of KL-NMF on the counts) visits every nonzero
// (i, j, c) of the count matrix C^a once:
//
//	g   = Σ_l D[i,l]·KT[j,l]                 (D K)_ij
//	w_l = (c/g)·D[i,l]·KT[j,l]               posterior of hidden state l, times c
//	Dh[i,:] += w;  x[i] += c
//	KhT[j,:] += w; y += w
//	loglik += c·log g                        of the model before the update
//
// and Commit(α) replaces each row of D by (1-α)·D + α·Dh/x and each row of K
// by (1-α)·K + α·KhT/y. Rows without data keep their values, and entries that
// start at zero stay zero, so a zero pattern in the initial model acts as a
// sparsity mask.
//
// # Related methods
//
// Beside EMSF the package has the methods of three related papers
// (../shared/specs/related-methods.md):
//
//   - MU (multiplicative-stochastic_002): multiplicative updates kept
//     stochastic by normalization (norm), reparametrization (repa) or
//     closed-form Lagrange multipliers (rela), on EMSF's loss (LossWKL),
//     KLM's (LossKL) or the paper's Frobenius losses (LossFrob,
//     LossWFrob). MUVector is the rule on one stochastic vector.
//   - OnlineEM (online-em-nmf_003): online EM as a commit rule of the
//     incremental fit, averaging sufficient statistics instead of
//     parameters; BinaryNMFOnlineEM is the paper's exact finite-state
//     recursion for its own Poisson NMF model.
//   - FitEPCA (epca_004): exponential-family PCA with the exponential link,
//     a log-linear baseline (an Estimate, not a stochastic factorization).
//
// Which MU variants run on a cluster's shards and partials: under
// LossWKL every rule needs exactly the statistics of an EMSF pass, the
// Partials of the shards merged in the canonical order (Dh, X, KhT), plus
// q_l = Σ_i x_i D_il, which the committer sums from the D it holds and
// the data's row totals; so mu-norm, mu-repa and mu-rela under wkl are
// another commit of the same reduce. MUCommit is that commit as a rule of
// Loop (FitOptions.Commit; coordinator.Options.Commit), MUFinish ends the
// fit as MU does, and emsf fit --algorithm mu-* --loss wkl --nats or
// --embedded runs them so, bitwise equal to MU with the same GroupNNZ
// (the workers are unchanged: they compute EMSF's partials). Under LossKL
// the shards would have to carry P̂ (pseudo-counts C_ij/x_i, and n
// entries for each unseen row) instead of the counts: the same reduce on
// other shards, not wired (emsf fit refuses --loss kl on a cluster). The
// Frobenius losses need other statistics (R Kᵀ per row, Dᵀ R per column,
// the m×m Gram matrices KKᵀ and Dᵀdiag(ω)D) that Partial does not carry;
// they run in one process only.
//
// # Determinism
//
// Statistics are computed per Block (a shard of one action's nonzeros in
// CSR form) into a Partial, and a pass folds the partials into an
// Accumulator in a canonical order, never in arrival order: ReducePlan
// ("tree-v1") cuts each K block's blocks into 2^k reduction groups by
// nonzeros (GroupNNZ), left-folds each group and combines the groups by a
// fixed balanced binary tree (TreeFold; DyadicPieces says which subtrees a
// node holding a range of groups sends). The order depends on the data and
// GroupNNZ only, so the committed model is bitwise identical for any
// number of goroutines or cluster workers, on any machine: the kernels
// write float64(x*y) + z where a fused multiply-add would change rounding.
//
// # Memory
//
// A Reducer folds each partial as soon as its turn comes, so a pass holds
// at most 2·workers partials, the accumulator, and log2 G dense n×m
// buffers of K̂ for the pending subtrees of a tree of G groups (none for
// G = 1). DefaultGroupNNZ keeps G = 1 up to 33M nonzeros per K block: the
// local fit's peak stays within 1.5× its arrays (docs/benchmarks.md).
//
// # The DRAM regime
//
// At n = 10^6 every row of K and K̂ a pass touches is a DRAM miss. Within
// one process a pass therefore never writes a partial's K̂ rows to merge
// them later: on one goroutine each block's K̂ rows go straight into the
// reduction's current group, and on W ≥ 2 goroutines (one group per tree)
// the pass is a pipeline whose stage w owns the K̂ rows of the column
// range [w·n/W, (w+1)·n/W) (Passer.pipeline; since the column loop moved
// to assembly this is also the faster way in cache, so it runs at every
// size); the sums are bitwise those of computing and merging partials,
// which is what remote workers still do. A block's columns run in one
// assembly loop (runColsAVX2: no Go call per column), which prefetches
// the rows of K and K̂ eight columns ahead; within a column the kernel
// computes the terms' g four at a time (independent chains of additions,
// paired lanes, one vector division) before it scatters them, with
// AVX-512 where the CPU has it (kernel_amd64.s). Where a block touches
// at most a quarter of the rows of a K beyond the caches, about once each
// (n = 10^6, 20 nonzeros per row: 12 % of the rows, 1.07 terms each),
// visiting columns saves nothing on K and makes the block's rows of D and
// D̂ the misses; such a fused pass runs row by row instead (runRows,
// rowpass.go: a row of D read once, its row of D̂ summed in place, the
// next row's rows of K and K̂ prefetched), with the same sums: 1.26–1.45×
// faster at n = 10^6. D, K^T, D̂ and K̂^T are allocated on transparent
// huge pages where Linux allows (bigFloats).
//
// # Single precision
//
// A model with Precision Float32 keeps D and K rounded to float32 values
// (each commit rounds the rows it writes) and a float32 copy of K^T from
// which the pass gathers its rows of K, widened exactly to float64; all
// statistics are float64 in the float64 order. A float32 pass is so
// bitwise a float64 pass on the rounded model: reproducible for any
// number of goroutines and workers, and a cluster worker may compute in
// float64 on the rounded model it fetches (see Precision for the design,
// its accuracy and what it costs).
//
// # The loop
//
// Loop is the one EM loop (iterations, Σx check, commit, convergence) of
// Fit and of the cluster coordinator; a Stepper computes the passes
// (goroutines here, an executor over NATS workers there) and LoopHooks
// carry what the coordinator adds (checkpoints, reports, resume).
package factor
