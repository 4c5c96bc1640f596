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
// # The loop
//
// Loop is the one EM loop (iterations, Σx check, commit, convergence) of
// Fit and of the cluster coordinator; a Stepper computes the passes
// (goroutines here, an executor over NATS workers there) and LoopHooks
// carry what the coordinator adds (checkpoints, reports, resume).
package factor
