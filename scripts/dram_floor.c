/*
 * dram_floor.c: the memory floor of emsf's DRAM-regime pass on this
 * machine, now. scripts/bench_goals.sh runs it beside `emsf bench` at
 * n = 10^6, so that a figure of emsf's can be read against what the
 * machine gave the same access pattern in the same minute (the host's
 * memory system moves both by up to 2x from minute to minute).
 *
 * It is the row pass's access pattern and nothing else: for every
 * nonzero (i, j) of a random n x n matrix with a fixed number of columns
 * per row, g = <D_i, K_j>, then D^_i += (c/g) D_i.K_j and K^_j +=
 * (c/g) D_i.K_j (m = 32 float64 per row: 4 cache lines of K_j read and 4
 * of K^_j read and written per nonzero, at random). The next row's rows
 * of K and K^ are prefetched before a row runs, as runRows does; the
 * factors lie on huge pages (MADV_HUGEPAGE). With two threads each takes
 * half of the columns over every row, as the pipeline's two stages do,
 * but both run at once, each into its own D^, and neither keeps an order
 * of additions; nothing
 * is checked, no g kept, no statistics folded, no commit: emsf's whole
 * iteration cannot be faster than this.
 *
 *   cc -O2 -mavx2 -mfma -pthread scripts/dram_floor.c -o dram_floor
 *   ./dram_floor [n] [per-row] [rounds]   (defaults 1000000 20 5)
 *
 * Prints, for 1 and 2 threads, the median over the rounds of the wall
 * nanoseconds per nonzero of one pass (the rounds alternate 1 and 2).
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define M 32 /* hidden states: 8 AVX2 vectors of 4 float64 */

static long n, perRow, nnz;
static double *K, *Kh, *D, *Dh[2], *V;
static int32_t *cols;

static void *huge(size_t bytes) {
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("dram_floor: mmap");
		exit(1);
	}
	madvise(p, bytes, MADV_HUGEPAGE); /* a hint: an error changes nothing */
	memset(p, 0, bytes);
	return p;
}

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* xorshift64*: the data only need to look random. */
static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 2685821657736338717ull;
}

struct span {
	int32_t lo, hi; /* the thread's columns [lo, hi) */
	double *dh;     /* the thread's D^ (the threads keep no common order) */
};

static void *pass(void *arg) {
	const struct span *s = arg;
	for (long i = 0; i < n; i++) {
		if (i + 1 < n) {
			for (long q = (i + 1) * perRow; q < (i + 2) * perRow; q++) {
				int32_t j = cols[q];
				if (j < s->lo || j >= s->hi)
					continue;
				for (int o = 0; o < M * 8; o += 64) {
					_mm_prefetch((const char *)(K + (long)j * M) + o, _MM_HINT_T0);
					__builtin_prefetch((const char *)(Kh + (long)j * M) + o, 1, 3);
				}
			}
		}
		const double *d = D + i * M;
		double *dh = s->dh + i * M;
		__m256d dv[8], h[8];
		for (int l = 0; l < 8; l++) {
			dv[l] = _mm256_loadu_pd(d + 4 * l);
			h[l] = _mm256_setzero_pd();
		}
		for (long q = i * perRow; q < (i + 1) * perRow; q++) {
			int32_t j = cols[q];
			if (j < s->lo || j >= s->hi)
				continue;
			const double *k = K + (long)j * M;
			double *kh = Kh + (long)j * M;
			__m256d t[8], sum = _mm256_setzero_pd();
			for (int l = 0; l < 8; l++) {
				t[l] = _mm256_mul_pd(dv[l], _mm256_loadu_pd(k + 4 * l));
				sum = _mm256_add_pd(sum, t[l]);
			}
			double g = sum[0] + sum[1] + sum[2] + sum[3];
			__m256d c = _mm256_set1_pd(V[q] / g);
			for (int l = 0; l < 8; l++) {
				__m256d w = _mm256_mul_pd(c, t[l]);
				h[l] = _mm256_add_pd(h[l], w);
				_mm256_storeu_pd(kh + 4 * l, _mm256_add_pd(_mm256_loadu_pd(kh + 4 * l), w));
			}
		}
		for (int l = 0; l < 8; l++)
			_mm256_storeu_pd(dh + 4 * l, _mm256_add_pd(_mm256_loadu_pd(dh + 4 * l), h[l]));
	}
	return NULL;
}

/* run times one pass on threads threads, in ns per nonzero. */
static double run(int threads) {
	pthread_t t[2];
	struct span s[2];
	double t0 = now();
	for (int w = 0; w < threads; w++) {
		s[w].lo = (int32_t)(n * w / threads);
		s[w].hi = (int32_t)(n * (w + 1) / threads);
		s[w].dh = Dh[w];
		if (pthread_create(&t[w], NULL, pass, &s[w]) != 0) {
			fprintf(stderr, "dram_floor: pthread_create failed\n");
			exit(1);
		}
	}
	for (int w = 0; w < threads; w++)
		pthread_join(t[w], NULL);
	return (now() - t0) * 1e9 / (double)nnz;
}

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv) {
	n = argc > 1 ? atol(argv[1]) : 1000000;
	perRow = argc > 2 ? atol(argv[2]) : 20;
	int rounds = argc > 3 ? atoi(argv[3]) : 5;
	if (n < 2 || n > INT32_MAX || perRow < 1 || perRow > n || rounds < 1 || rounds > 99) {
		fprintf(stderr, "dram_floor: want n in [2, 2^31), per-row in [1, n], rounds in [1, 99]; got %s %s %s\n",
			argc > 1 ? argv[1] : "-", argc > 2 ? argv[2] : "-", argc > 3 ? argv[3] : "-");
		return 2;
	}
	nnz = n * perRow;
	size_t f = (size_t)n * M * sizeof(double);
	K = huge(f), Kh = huge(f), D = huge(f), Dh[0] = huge(f), Dh[1] = huge(f);
	V = huge((size_t)nnz * sizeof(double));
	cols = huge((size_t)nnz * sizeof(int32_t));
	for (long x = 0; x < n * M; x++) {
		K[x] = 1 + (double)(next() % 1000);
		D[x] = 1 + (double)(next() % 1000);
	}
	/* perRow distinct random columns per row, ascending (as a CSR). */
	for (long i = 0; i < n; i++) {
		int32_t *c = cols + i * perRow;
		for (long e = 0; e < perRow; e++) {
			int32_t j;
			int dup;
			do {
				j = (int32_t)(next() % (uint64_t)n);
				dup = 0;
				for (long k = 0; k < e; k++)
					dup |= c[k] == j;
			} while (dup);
			long k = e;
			for (; k > 0 && c[k - 1] > j; k--)
				c[k] = c[k - 1];
			c[k] = j;
		}
	}
	for (long q = 0; q < nnz; q++)
		V[q] = 1 + (double)(next() % 4);

	double one[99], two[99];
	for (int r = 0; r < rounds; r++) {
		one[r] = run(1);
		two[r] = run(2);
	}
	qsort(one, rounds, sizeof(double), cmp);
	qsort(two, rounds, sizeof(double), cmp);
	printf("dram_floor: n=%ld per-row=%ld m=%d rounds=%d\n", n, perRow, M, rounds);
	printf("floor, 1 thread: %.1f ns/nonzero\n", one[rounds / 2]);
	printf("floor, 2 threads: %.1f ns/nonzero\n", two[rounds / 2]);
	return 0;
}
