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
// # The predictive rule
//
// EM drives every transition it never saw to probability exactly 0 and
// overfits scarce data: on real data (docs/quality.md) plain EMSF scored
// 0.04–4.2 nats per held-out transition below counting smoothed as
// practitioners smooth it. A model therefore carries a predictive rule,
// Smoothing, which every consumer reads through one place, NextRow (a
// state's whole next-state distribution) and Prob (one entry):
//
//	P̃^a_ij = f_i·(c_ij − d_a)₊ + b_i·B^a_ij,
//	B^a_ij = (1 − λ_a)·(D^a K^a)_ij + λ_a·q^a_j,
//	f_i = (1 − μ_a)/(x_i + κ_a),   b_i = (1 − μ_a)·(κ_a + m_i)/(x_i + κ_a) + μ_a,
//	m_i = Σ_j min(c_ij, d_a),
//	q^a_j = (1 − ρ_a)·(N^a_j + δ_a)/(N^a + n·δ_a) + ρ_a·(T^a_j + δ_a)/(T^a + n·δ_a),
//
// and P̃ = B for a row without counts. It is the hierarchical
// Pitman–Yor / Dirichlet rule (Teh 2006; MacKay & Peto 1995) with the
// low-rank model, itself interpolated with the next-state frequencies,
// as the prior mean of each row: a row with many counts keeps its own
// frequencies (the only way to reach counting's quality on data that
// are not low rank, such as a random walk on a dependency graph), each
// count gives up d (absolute discounting, Ney, Essen & Kneser 1994) and
// the row κ pseudo-counts to the backoff, μ more of the row goes to the
// backoff (Jelinek–Mercer), a row never seen gets the backoff whole, and
// a next state never seen keeps a positive probability through q, whose
// weight ρ on the continuation frequencies T^a_j (the number of distinct
// states j follows) is Kneser–Ney's. The rule contains the counting
// baselines: κ = d = 0, λ = 1, ρ = 0 is Jelinek–Mercer counting with
// weight μ (JMRule), d = μ = 0, λ = 1, δ = +Inf add-β counting with
// β = κ/n (AddBetaRule), d = μ = 0 the Dirichlet rule of
// interpolation-v1 (predicting bitwise as before: Smoothing.weights
// keeps its arithmetic). Round 1 of issue 28 had only that Dirichlet
// rule (λ, κ, δ) and lost to tuned Jelinek–Mercer counting in 4 of 12
// rows of docs/quality.md (bigram data with 1–2 transitions per state,
// where a count-dependent weight x/(x+κ) backs off worse than a
// constant one); with d, μ and ρ the default fit beat it in every row,
// by 0.018–0.555 nats, but mostly through the counting part: in 10 of
// the 12 rows the held-out stopping rule kept the random start or
// stopped within 9 iterations (docs/quality.md, round 2). Round 3 added
// the counting part alone as a baseline, interpolated Kneser–Ney
// counting with d and δ tuned per action on the same validation split
// (KNRule, RuleCounting: emsf eval --train's kn): it is the best
// counting in every row, and the default fit beats it in 10 of 12 rows,
// by 0.0003–0.009 nats on the two one-action sets (what the factors add
// there) and 0.013–0.060 on the dependency graph; it is 0.0007 and
// 0.0008 below it at changelog 1 % and the dependency graph at 5 %,
// less than the spread over --seed of those rows.
//
// The parameters are chosen per action on a validation split of the
// training data, scored with the counts and q of the rest (Validation;
// TestValidationScoresTheStoredRule pins that its score is that of the
// model storing the rule): Tune starts from the best of the last choice
// and the counting baselines as special cases (JMRule over JMGrid,
// AddBetaRule over AddBetaGrid, KNRule over DiscountGrid × DeltaGrid),
// then climbs by coordinate ascent over LambdaGrid, DeltaGrid, RhoGrid,
// KappaGrid, DiscountGrid and MuGrid; so the choice scores at least as
// well on the validation split as those baselines tuned on the same
// split, and no choice sees the test data. While a fit runs, the
// held-out stopping rule tunes in full at its first score, then λ only
// at every score (TuneLambda: exact on the grid, the score being
// concave in λ) and every parameter by a local search (TuneLocal) at a
// score that λ alone does not make gain (see "Stopping and
// acceleration"); the fit's last model is tuned in full, and the rule
// stored with the counts and q of all the training data. A score is a
// pass over the validation nonzeros with a logarithm each, and a fit
// makes hundreds (a full Tune: about 120 candidates and 60 rules a
// round), so Validation computes each once and together, without
// changing a bit (TestValidationMatchesOracle keeps the code it
// replaced as the oracle): Tune's candidates and each of its scans along
// a grid are one call whose (rule, piece) tasks share one pool of
// workers (scores); a score is kept while the factors are (λ = 1: for
// the whole fit), q per (δ, ρ) for the whole fit (qCache, 64 MiB at
// most); the rule's arithmetic runs four nonzeros at a time with AVX2
// (ruleProbsAVX2), the factors' products four side by side (dot4) and
// the marginal π on every worker (docs/quality.md, round 6). κ = +Inf (no counts stored, --smooth
// background) keeps the rule a stochastic factorization of order m+1
// (Augmented), which the SF trick uses. Rows of D without training data
// are set to the data's hidden-state marginal π (SetUnseenRows): at a
// fixed point π K is the next-state distribution, so an unseen state's
// prediction does not depend on the seed. Inside EM, Prior adds
// Dirichlet pseudo-counts to the M-step (MAP-EM). Options the
// measurements turned down (λ learned by EM, tempered EM) are in
// ../shared/specs/quality-and-acceleration.md §1.
//
// Top k under the rule, for a consumer that searches the raw factors
// (an index of K's columns): for j outside row i's counted next states
// P̃_ij = [wf·D_i, wq] · [K^j, q_j], an inner product of D_i augmented by
// one coordinate with K^j augmented by q_j (RowWeights gives f, d,
// wf = b_i(1−λ) and wq = b_i·λ); the counted next states add
// f·(c_ij − d)₊ ≥ 0 to theirs. So the exact top k is among the top k of
// that inner-product search and the row's counted next states (the
// row's CNT nonzeros), rescored with Prob.
//
// # The start
//
// EM from NewRandom's start (every entry of D and K uniform, then
// normalized: emsf-ijcai2015 Alg. 1) spends its first tens of passes
// finding what the counts already say: which next states go together.
// NewSeeded starts from the data instead, as k-means++ seeds k-means
// from its points (without the distance weighting): the rows of K^a are
// m rows of action a's counts, drawn without replacement in proportion
// to their totals and smoothed by the default prior's 30 pseudo-counts
// spread as the next-state frequencies (with a 1 % seeded jitter so
// that rows drawn with the same counts stay apart), and row i of D^a is
// the posterior of row i's counts under those rows, tempered to one
// transition and mixed with the uniform distribution at weight 0.1. It
// is emsf fit's default (--start auto) where the fit holds the model
// and D is not shared; --plain keeps the random start, bit for bit. On
// the real data of docs/quality.md (round 7, seeds 1–3, the 12 rows), the
// held-out rule then kept iterates 3–163 passes in instead of 3–215
// (the dependency graph at 20 %: 51–127 against 138–174; at 100 %: 78–163
// against 168–215) and the mean test score rose in 10 rows, by 0.0002–0.041
// nats per transition (0.041 at the dependency graph's 20 %, 0.008 at its
// 100 %), and fell in 2, by 0.0028 (Go tokens 1 %, within its spread
// over the seeds) and 0.0003 (the dependency graph at 1 %).
//
// # Stopping and acceleration
//
// Training log-likelihood keeps rising long after held-out quality has
// peaked. FitOptions.EarlyStop scores every accepted iterate on the
// validation split (under the tuned rule), keeps the best and stops once
// Patience scores in a row have not gained (Prechelt), beside the
// Converger's relative-change rule.
//
// The rule chooses among the fit's iterates, never its start, and an
// iterate counts against the patience only when the whole rule,
// re-tuned, does not make it gain (EarlyStop.Confirm; emsf fit: Score
// re-tunes λ, Confirm every parameter by TuneLocal, a local search of a
// few scores per parameter). Round 2 scored SQUAREM's start too and
// re-tuned λ alone: it kept the random start in 5 of the 12 rows of
// docs/quality.md (13 of 36 fits over seeds 1–3), so the stored D·K was
// noise and the prediction a function of --seed (test scores spread up
// to 0.044 nats over the seeds, dependency graph 20 %), and where it ran
// it quit early: the first iterates, scored with κ, d and μ tuned to the
// random start, scored below it for the whole patience (changelog
// 100 %, seed 1, without the random start: kept after 6 passes with λ
// alone, test −3.2902; after 24 with the rule re-tuned, −3.2815, −3.2818
// once Tune started from the Kneser–Ney grid; the fit run to
// convergence, 228 passes, −3.2863: the optimum is early and real). Measured on the 12 rows with
// seeds 1–3 (docs/quality.md, round 3), the rule now keeps no start,
// stops after 3–361 passes, and its mean test score is higher than
// round 2's in 8 rows (by 0.0001–0.021), the same in 2 and lower in 2
// (by 0.0002 and 0.0003); the spread over the seeds shrank in 9 rows
// (dependency graph 20 %: 0.044 to 0.012). Where it stops within 6–9
// passes, running 30 or 100 passes instead scored no better on the
// test file (changelog 1 %, Go tokens 5 % and 100 %): held-out optima,
// not quits. Other designs measured (seeds 1 and 2, one run each, on
// the loaded machine): re-tuning in full (Tune) on confirmation chose
// the same iterates as TuneLocal at changelog 1 %, 5 % and 100 % and 3
// passes earlier at Go tokens 5 % (test −2.8066 against −2.8069), at
// 1.4–4 times the wall time; a longer patience (20, 40) with λ alone
// did not recover changelog 100 %'s early quit. The stored model still depends on --seed as EM does (the
// start and the validation split): most at 1 % (changelog 0.019 nats,
// dependency graph 0.020), where the validation split holds 400–4000
// transitions. emsf fit's --patience is 5 (it was 10): over seeds 1–3 on
// the 12 rows, 32 of 36 fits kept the same iterate, the others moved by
// −0.0018 to +0.0006 nats per test transition (every one still above
// Kneser–Ney counting), and a fit whose optimum is early stops up to 15
// passes sooner (docs/quality.md, round 4). A gain is a rise above
// EarlyStop.MinGain over the score of the last gain (emsf fit's
// --min-gain, 10^-4 nats per validation transition, a tenth of the
// 0.001 nats within which issue 28 counts two scores equal; it was 0, in
// effect): the rule stops once 5 scores in a row have added less than
// that, and still keeps the best iterate. Over seeds 1–3 on the 12 rows,
// 24 of the 36 fits are the same; 3 run 3 passes longer (the re-tuned
// rule, now asked more often, found a gain); the others stop up to 2.1
// times sooner (changelog 5 % 100 → 54 passes, 20 % 109 → 57 and
// 129 → 60, dependency graph 20 % 193 → 141 and 207 → 174, 100 %
// 201 → 168), their test scores moving by −0.0009 to +0.0008 nats per
// transition (docs/quality.md, round 5).
//
// FitOptions.Accel = AccelSquarem runs SQUAREM (Varadhan & Roland 2008,
// step length S3) in a parametrization that keeps rows on the simplex —
// the step in log space per row (a softmax), its length from
// probability-space norms — with a deferred safeguard: a cycle's result
// is kept only when its log-likelihood (with a prior, the penalized one)
// is at least that of the EM step F(x0) it replaced, else the fit goes
// on from x2 = F(F(x0)). Extrapolation is elementwise with sums over
// fixed pieces of rows folded in order, so a fit is bitwise the same for
// any number of workers, in float64 and float32 (proposals rounded
// once). With a prior the penalty of x0 and x1 takes the logarithm of
// every entry, and the extrapolation reuses those (penaltyLogs: taken in
// parallel, summed in the penalty's order, so bitwise as before); the
// penalty of a proposal is taken only when the fit ends on it. At the
// sizes of docs/quality.md (u·n·m up to 384 000 entries per factor,
// about 10 nonzeros per state or fewer) a cycle's O(u·n·m) logarithms
// and exponentials (three and one per entry) cost more than its three
// EM passes (O(nnz·m)) when taken one at a time: they are taken four at
// a time with AVX2 (logAll, expAll: the operations of math.Log's and
// math.Exp's amd64 assembly, lane by lane, so bitwise theirs and every
// fit the same bits; the validation score and the E-step's
// log-likelihood take theirs so too). The dependency graph at 20 %
// (--patience 5, one CPU profile each): 6.3 s of CPU with 2.6 s in
// math.Log and math.Exp before, 4.5 s with 0.7 s in the kernels after,
// the same model. The cycle copies no point: x0, x1, x2 and the held-out
// rule's best iterate are buffers that trade factors with the fit's model
// (swapFactors), each commit writing F(p) from the pass on p held in a
// buffer (Accumulator.commitFrom, mapCommit: the entries a commit keeps
// are carried from p), bitwise the loop that copied them
// (TestSquaremBuffersBitwise); and the extrapolation, the step length
// and the prior's logarithms run on every worker as tasks of spanRows
// rows of every block at once (at n = 1000–4546 a block is one piece of
// chunkRows and they ran on one goroutine), their sums still per piece
// and folded in order. BenchmarkSquaremCycle times the parts at the
// dependency graph's size; the depgraph 20 % default fit went from 3.03
// to 2.09 s wall on the shared 2-core machine (2.73 to 2.39 s at a
// higher load: the parallel part gains where a core is free), the same
// bits (docs/quality.md, round 5). What was
// left per cycle beside the passes: the commits' divisions (one per
// entry, scalar), the penalty's sums (one chain of additions per block,
// their order fixed), the accumulators' clearing. Round 7 (issue 28)
// took that work to AVX-512 where the CPU has it (kernel_amd64.s; the
// AVX2 and pure-Go paths stay, and each kernel is tested bitwise against
// the loop it replaces): logAll and expAll eight lanes at a time
// (logsAVX512, expsAVX512: 2x per value), the extrapolation's masked
// loops (combine, the maxima, subtraction, sums and divisions of rows of
// D and columns of K: eight entries an instruction, the row sums still
// one VADDSD after another), mapCommit's divisions (divRowAVX512,
// mapKAVX512), the penalty's logarithms and sum a block at a time, a row
// at a time, so that its chain of additions runs beside the logarithms
// (logRowSumAVX512), and squaremLength's two chains (lengthSumsAVX512).
// BenchmarkSquaremCycle on the shared 2-core Zen 5 machine (medians of
// 3, old and new interleaved, load 2.6): penalty 2.03 → 1.06 ms,
// commit 1.22 → 0.37, length 1.34 → 0.64, extrapolate 7.99 → 3.54,
// so 17.1 → 7.4 ms beside a cycle's three passes of about 4 ms each;
// the whole default fits (scripts/quality_walltime.py, repeats 3, load
// 1.5–4.8, two rounds): depgraph 20 % 1.51/2.03 → 1.13/1.53 s (ratio
// to plain EM 0.38/0.51 → 0.32/0.35), depgraph 100 % 2.57/2.96 →
// 2.34/2.52 s (0.34/0.36 → 0.33/0.33), changelog 100 % 0.41/0.46 →
// 0.36/0.71 s (0.31/0.33 → 0.26/0.26), every model the same bits
// (scripts/bitwise_fits.sh: 96 pairs, 0 differ). Both need a
// loop that holds the
// model: a local fit and the coordinator exchange. The owners exchange
// (whose owners hold the rows of D and columns of K) would need, per
// cycle: the owners to keep x0, x1 and x2 of their blocks, the
// coordinator to fold three global scalars (‖r‖², ‖v‖² over their
// blocks, the log-likelihood) and, for K, per hidden state the maximum and
// the sum of the exponentiated proposal over all columns (two m-vectors
// per K block, folded in column-block order) before the owners divide;
// then an accept/reject broadcast. AccelNone leaves Loop exactly as it
// was.
//
// A model without ties (TieNone) and several actions is several
// independent fits: the log-likelihood, the prior's penalty and the
// validation score are sums over the actions, and an action's EM step
// reads and writes its own D and K blocks only. SQUAREM runs one cycle
// per action on the same passes (squaremLoop's components): its own step
// length, its own safeguard and rejections, its own held-out rule
// (EarlyStop.ScoreOf: Validation.TuneLambdaOf and TuneLocalOf score and
// re-tune its validation transitions alone; a gain counts where it
// raises the fit's score by MinGain, i.e. its own gain over its share of
// the validation counts) and its own relative change (of its objective,
// between accepted points). An action that stopped keeps its best
// iterate and leaves the passes (ActionFilter: the local stepper
// computes only the other actions' blocks, Accumulator.reset leaves its
// sums; a cluster's coordinator hands out only the other actions'
// shards, ReducePlan.Only); the fit ends when every action with
// validation counts stopped, or at the converger's iteration or time
// limit. Each action's factors are bitwise those of the fit of its
// blocks alone as a one-action model (TestSquaremComponents), whatever
// the others do, so a stepper that computes every block gives the same
// fit: the accumulator keeps each K block's log-likelihood, Σx and
// nonzeros as the sums of its own reduction tree (Accumulator.KLogLik,
// KSumX, KNNZ). On one machine (`emsf fit --embedded --exchange
// coordinator`, the dependency graph at 20 %, --shard-nnz 5000) the
// cluster fit took 4.97 s against 6.71 s with every shard handed out and
// 6.87 s with one cycle, the model the local fit's byte for byte. One joint cycle took one step length for all actions and ran
// all of them until the last one's optimum: on the dependency graph at
// 20 % the actions' own optima came after 6, 60 and 125 passes (they
// stopped after 22, 61 and 138), where the joint fit ran 140 passes of
// all three: 221 action-passes against 420. The default fit's wall time
// there fell from 0.85 to 0.57–0.60 s (1/4.1 of plain EM's → 1/5.3 and
// 1/6.8, medians of 3 in two runs), and its test scores moved by −0.00006
// to +0.0004 nats per transition on the graph's four sizes
// (docs/quality.md, round 10). One-action models and tied models are one
// component, bitwise as before; plain EM's loop with the held-out rule
// (--accel none) stays joint.
//
// A resumed fit. What SQUAREM and the held-out rule carry between
// iterations beyond the committed model is a LoopState: each
// component's phase, step-length bound, pending check and rejections,
// the point its cycle goes back to or extrapolates from (x0 or x2), its
// best iterate and score, the patience spent, the smoothing rule's last
// choices (Validation.RuleState), the converger's last value. Loop hands
// it to LoopHooks.Committed (SaveState) and goes on from it
// (LoopHooks.Resume, with Start) bitwise: a fit resumed after any
// iteration ends where the uninterrupted one does, model, result and
// progress (TestLoopStateResume, every iteration of nine kinds of fit).
// The logarithms of x0 that the prior's penalty took for the
// extrapolation are taken again from x0 (the same function, the same
// values). A fit with acceleration or a held-out rule refuses Start > 1
// without its state.
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
