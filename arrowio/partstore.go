package arrowio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// PartSink receives the files of a model dataset: its parts and, last, its
// manifest. DirParts writes into a directory; worker/wire.ObjectParts into
// an Object Store bucket.
type PartSink interface {
	// Create starts writing file name (a slash-separated relative path).
	// Nothing is visible under name before the PartFile's Commit, and an
	// Abort leaves nothing.
	Create(ctx context.Context, name string) (PartFile, error)
	// Remove deletes file name (a part of a failed attempt); a missing
	// file is no error.
	Remove(ctx context.Context, name string) error
	fmt.Stringer // the location, for messages: a directory, nats-obj://BUCKET/PREFIX
}

// PartFile is a file being written into a PartSink. Its owner calls
// Commit or Abort exactly once.
type PartFile interface {
	io.Writer
	Commit() error
	Abort()
}

// PartSource reads the files of a model dataset back.
type PartSource interface {
	// Open opens file name for reading; a missing file is an error that
	// names it.
	Open(ctx context.Context, name string) (PartReader, error)
	fmt.Stringer // the location, as PartSink's
}

// PartReader is an open file of a PartSource.
type PartReader interface {
	io.ReaderAt
	Size() int64
	Close() error
}

// DirParts is a model dataset in a directory (on a disk or a shared file
// system): a PartSink and a PartSource. Files are written atomically
// (temporary file, fsync, rename: CreateAtomic).
type DirParts struct{ Dir string }

func (d DirParts) String() string { return d.Dir }

func (d DirParts) file(name string) (string, error) {
	if !fs.ValidPath(name) || name == "." {
		return "", fmt.Errorf("file name %q is not a relative slash-separated path inside the dataset", name)
	}
	return filepath.Join(d.Dir, filepath.FromSlash(name)), nil
}

// Create implements PartSink; the directory (and those of name) are made
// as needed.
func (d DirParts) Create(ctx context.Context, name string) (PartFile, error) {
	p, err := d.file(name)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, fmt.Errorf("arrowio: write %s: %w", p, err)
	}
	return CreateAtomic(p)
}

// Remove implements PartSink.
func (d DirParts) Remove(ctx context.Context, name string) error {
	p, err := d.file(name)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Open implements PartSource.
func (d DirParts) Open(ctx context.Context, name string) (PartReader, error) {
	p, err := d.file(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	return &filePart{File: f, size: st.Size()}, nil
}

type filePart struct {
	*os.File
	size int64
}

func (f *filePart) Size() int64 { return f.size }
