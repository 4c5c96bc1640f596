package arrowio

import (
	"fmt"
	"os"
	"path/filepath"
)

// writeAtomic writes a file through a temporary file in the same directory:
// write, fsync, close, rename over path, fsync the directory. On any error
// the temporary file is removed, so path holds either its old content or
// the complete new one, never a half-written file.
func writeAtomic(path string, write func(f *os.File) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("arrowio: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := write(f); err != nil {
		return fmt.Errorf("arrowio: write %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("arrowio: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("arrowio: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("arrowio: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("arrowio: write %s: %w", path, err)
	}
	// Make the rename durable. This is best effort: the data is synced
	// already, the file is in place, and some file systems cannot fsync a
	// directory.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
