package arrowio

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// FileMode is the mode of every file emsf writes (models, transitions,
// CSV, figures): readable by all, like a file made by os.Create under the
// usual umask. os.CreateTemp's 0600 is for secrets, and these are results.
const FileMode = 0o644

// AtomicFile is a file written atomically: through a temporary file in
// the same directory that Commit syncs, closes, renames over the path and
// makes durable (directory fsync). Until then the path holds its old
// content (or nothing); Abort, or a failed Commit, removes the temporary
// file, so a failure never leaves a half-written file. It is the one
// atomic write of emsf: WriteFileAtomic, WriteModel and TransitionWriter
// use it.
type AtomicFile struct {
	*os.File
	path, dir, tmp string
}

// CreateAtomic starts writing path atomically. Its error names path and
// its directory, never the temporary file.
func CreateAtomic(path string) (*AtomicFile, error) {
	dir, base := filepath.Dir(path), filepath.Base(path)
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("arrowio: write %s: %w", path, tempErr(dir, err))
	}
	if err := f.Chmod(FileMode); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("arrowio: write %s: %w", path, err)
	}
	return &AtomicFile{File: f, path: path, dir: dir, tmp: f.Name()}, nil
}

// Commit moves the written file into place. A writer that closed the file
// itself (the Parquet writer does) is fine: the close is then not repeated.
func (a *AtomicFile) Commit() error {
	err := a.File.Sync()
	if errors.Is(err, os.ErrClosed) {
		err = nil
	}
	if cerr := a.File.Close(); err == nil && cerr != nil && !errors.Is(cerr, os.ErrClosed) {
		err = cerr
	}
	if err == nil {
		err = os.Rename(a.tmp, a.path)
	}
	if err != nil {
		os.Remove(a.tmp)
		return fmt.Errorf("arrowio: write %s: %w", a.path, err)
	}
	// Make the rename durable. This is best effort: the data is synced
	// already, the file is in place, and some file systems cannot fsync a
	// directory.
	if d, err := os.Open(a.dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Abort discards what was written.
func (a *AtomicFile) Abort() {
	a.File.Close()
	os.Remove(a.tmp)
}

// WriteFileAtomic writes data to path atomically (see AtomicFile).
func WriteFileAtomic(path string, data []byte) error {
	return writeAtomic(path, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// writeAtomic writes path atomically with write (see AtomicFile).
func writeAtomic(path string, write func(f *os.File) error) error {
	a, err := CreateAtomic(path)
	if err != nil {
		return err
	}
	if err := write(a.File); err != nil {
		a.Abort()
		return fmt.Errorf("arrowio: write %s: %w", path, err)
	}
	return a.Commit()
}

// tempErr rewords an error creating a temporary file in dir so that it
// names dir, not the temporary file's internal name.
func tempErr(dir string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("directory %s: %w", dir, pe.Err)
	}
	return err
}

// CheckWritable returns an error unless a file can be written atomically
// at path: its directory exists and accepts a new file, and path is not a
// directory. Commands call it before long work, so that a bad --out is
// found at once, not after an hour's fit.
func CheckWritable(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("arrowio: write %s: is a directory", path)
	}
	a, err := CreateAtomic(path)
	if err != nil {
		return err
	}
	a.Abort()
	return nil
}
