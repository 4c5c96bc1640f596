package arrowio

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// BenchmarkCSVParseChunk times the parsing of one chunk of 1 MiB of short
// lines (the rows of a few thousand states: "93,0,3"), into the columns of
// a chunk parsed before (reused: a large input's steady state) or into
// new ones (fresh: a small input, whose every chunk is new).
func BenchmarkCSVParseChunk(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	var text strings.Builder
	for text.Len() < csvChunkBytes {
		fmt.Fprintf(&text, "%d,%d,%d\n", rng.IntN(1000), rng.IntN(2), rng.IntN(1000))
	}
	data := []byte(text.String())
	s, err := newScan("bench.csv", ReadOptions{}, func(*TransitionBatch) error { return nil })
	if err != nil {
		b.Fatal(err)
	}
	p, _, err := s.csvHead(bufio.NewReader(strings.NewReader("state,action,next_state\n")))
	if err != nil {
		b.Fatal(err)
	}
	for _, fresh := range []bool{false, true} {
		b.Run(fmt.Sprintf("fresh=%v", fresh), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			c := &csvChunk{}
			for b.Loop() {
				if fresh {
					c = &csvChunk{}
				}
				*c = csvChunk{data: data, done: make(chan struct{}), state: c.state, action: c.action, next: c.next, count: c.count}
				p.parse(c)
				if c.err != nil || c.stop >= 0 {
					b.Fatal(c.err, c.stop)
				}
			}
		})
	}
}
