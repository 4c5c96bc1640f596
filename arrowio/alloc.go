package arrowio

import (
	"fmt"

	"github.com/apache/arrow/go/v15/arrow"

	"github.com/apache/arrow/go/v15/arrow/memory"
)

// Option configures the encoders and decoders of shards, partials and
// models.
type Option func(*config)

type config struct {
	mem memory.Allocator
	// batchBytes bounds the values of a model file's record batches
	// (0: modelBatchBytes); tests set it to cut small models into many
	// batches.
	batchBytes int
}

func (c *config) modelBatchBytes() int {
	if c.batchBytes > 0 {
		return c.batchBytes
	}
	return modelBatchBytes
}

// WithAllocator sets the allocator for Arrow buffers (default
// memory.NewGoAllocator()).
func WithAllocator(mem memory.Allocator) Option {
	return func(c *config) { c.mem = mem }
}

func newConfig(opts []Option) *config {
	c := &config{}
	for _, o := range opts {
		o(c)
	}
	if c.mem == nil {
		c.mem = memory.NewGoAllocator()
	}
	return c
}

// Bounds on what a reader allocates for one buffer, so that a corrupt size
// field fails cleanly instead of asking the runtime for terabytes (which it
// cannot recover from).
const (
	minBufferCap = 16 << 20 // smallest per-buffer cap, whatever the input size
	maxBufferCap = 1 << 30  // largest per-buffer cap, and the cap for inputs of unknown size
	// bufferExpansion is how much larger than the input one decompressed
	// buffer may be.
	bufferExpansion = 256
)

// bufferCap returns the largest single allocation a reader of an input of
// size bytes (-1: unknown) may make.
func bufferCap(size int64) int {
	if size < 0 || size > maxBufferCap/bufferExpansion {
		return maxBufferCap
	}
	return int(max(size*bufferExpansion, minBufferCap))
}

// allocTooLarge is the panic value of cappedAllocator; the Arrow readers
// and catch turn it into an error.
type allocTooLarge struct{ size, limit int }

func (e allocTooLarge) Error() string {
	return fmt.Sprintf("buffer of %d bytes exceeds the limit of %d bytes (corrupt size field?)", e.size, e.limit)
}

// cappedAllocator refuses any single allocation above limit bytes.
type cappedAllocator struct {
	memory.Allocator
	limit int
}

func capAllocator(mem memory.Allocator, size int64) memory.Allocator {
	return cappedAllocator{Allocator: mem, limit: bufferCap(size)}
}

func (c cappedAllocator) Allocate(n int) []byte {
	if n < 0 || n > c.limit {
		panic(allocTooLarge{n, c.limit})
	}
	return c.Allocator.Allocate(n)
}

func (c cappedAllocator) Reallocate(n int, b []byte) []byte {
	if n < 0 || n > c.limit {
		panic(allocTooLarge{n, c.limit})
	}
	return c.Allocator.Reallocate(n, b)
}

// catch turns a panic inside a third-party decoder (Arrow and Parquet
// readers index into buffers whose sizes come from the input) into an error
// stored in *err. Use it only around decoding, never around user callbacks.
func catch(err *error) {
	if r := recover(); r != nil {
		if e, ok := r.(error); ok {
			*err = fmt.Errorf("corrupt input: %w", e)
			return
		}
		*err = fmt.Errorf("corrupt input: %v", r)
	}
}

// catchDecode is catch for code that reads decoded arrays (whose buffers
// came from the input): a panic becomes a *decodeError.
func catchDecode(err *error) {
	if r := recover(); r != nil {
		*err = &decodeError{fmt.Errorf("corrupt input: %v", r)}
	}
}

// guard runs fn, which reads a decoded record, under catchDecode.
func guard(fn func(arrow.Record) error) func(arrow.Record) error {
	return func(rec arrow.Record) (err error) {
		defer catchDecode(&err)
		return fn(rec)
	}
}
