// Package experiment computes the papers' experiments (emsf-ijcai2015
// Fig. 2, incremental-emsf Figs. 2 and 3, the online blackjack of
// incremental-emsf Fig. 4) and those of the related methods
// (MUHMM: multiplicative-stochastic_002, OnlineEM: online-em-nmf_003,
// EPCA: epca_004): each is a set of independent jobs (a run at a sample
// size, a run of a setting), and a job returns its rows. It does no I/O
// and has no flags: emsf experiment parses the flags, runs the jobs in
// parallel (reporting progress, keeping finished rows on Ctrl-C), writes
// the CSV and draws the figure. Jobs are seeded by their index alone, so
// the rows do not depend on how many run at once.
package experiment
