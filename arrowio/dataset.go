package arrowio

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/emsf/emsf/shard"
)

// DataFile is one file of a dataset of transitions: a file on storage
// that every reader sees at the same path, or an object of the Object
// Store.
type DataFile struct {
	// Name is the file's path (or the object's URL): what errors name.
	Name string `json:"name"`
	// Size is its size in bytes; ModTime its modification time (Unix
	// nanoseconds, 0 when unknown); Digest an object's digest ("" for a
	// file). A reader checks them against what it opens: a change
	// between two reads is an error naming the file.
	Size    int64  `json:"size"`
	ModTime int64  `json:"mtime,omitempty"`
	Digest  string `json:"digest,omitempty"`
	// Format is the format it is read in (a Format constant).
	Format string `json:"format"`
	// Stream marks an input read only from its start (an object): it is
	// never cut into splits.
	Stream bool `json:"stream,omitempty"`
}

// IsPattern reports whether input is a glob pattern (it holds *, ? or
// [) rather than a file or directory that exists under that name.
func IsPattern(input string) bool {
	if !strings.ContainsAny(input, "*?[") {
		return false
	}
	_, err := os.Stat(input)
	return err != nil
}

// ListDataset lists the files of a dataset of transitions: input is a
// file, a directory (its regular files, not its subdirectories, names
// beginning with "." or "_" left out as Hadoop and Spark leave out
// _SUCCESS and .crc files), or a glob pattern (filepath.Match syntax).
// The files come sorted by path bytes: the order their rows arrive in,
// in every reader. format ("" to detect each file's: DetectFormat) is
// the format of every file. A dataset with no file, an unreadable file
// or a bad pattern is an *InputError naming input.
func ListDataset(input, format string) ([]DataFile, error) {
	format, err := NormalizeFormat(format)
	if err != nil {
		return nil, err
	}
	if input == StdinPath {
		return []DataFile{{Name: StdinPath, Format: format, Stream: true}}, nil
	}
	var paths []string
	switch st, err := os.Stat(input); {
	case err == nil && st.IsDir():
		ents, err := os.ReadDir(input)
		if err != nil {
			return nil, &InputError{File: input, Reason: "cannot list the directory", Err: err}
		}
		for _, e := range ents {
			if name := e.Name(); !e.IsDir() && !strings.HasPrefix(name, ".") && !strings.HasPrefix(name, "_") {
				paths = append(paths, filepath.Join(input, name))
			}
		}
		if len(paths) == 0 {
			return nil, &InputError{File: input, Reason: "the directory holds no data files"}
		}
	case err == nil:
		paths = []string{input}
	case IsPattern(input):
		if paths, err = filepath.Glob(input); err != nil {
			return nil, &InputError{File: input, Reason: "bad glob pattern", Err: err}
		}
		paths = slices.DeleteFunc(paths, func(p string) bool {
			st, err := os.Stat(p)
			return err == nil && st.IsDir()
		})
		if len(paths) == 0 {
			return nil, &InputError{File: input, Reason: "no file matches the pattern"}
		}
	default:
		return nil, &InputError{File: input, Reason: "cannot open", Err: err}
	}
	slices.Sort(paths) // by bytes
	files := make([]DataFile, len(paths))
	for k, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, &InputError{File: p, Reason: "cannot stat", Err: err}
		}
		if !st.Mode().IsRegular() {
			return nil, &InputError{File: p, Reason: fmt.Sprintf("is not a regular file (%s)", st.Mode().Type())}
		}
		// gzip data is read from its start, never cut into splits.
		f := DataFile{Name: p, Size: st.Size(), ModTime: st.ModTime().UnixNano(), Format: format, Stream: IsGzipFile(p)}
		if f.Format == "" {
			if f.Format, _, err = DetectFormat(p); err != nil {
				return nil, err
			}
		}
		files[k] = f
	}
	return files, nil
}

// CheckFile returns an error naming f when the file at f.Name is no
// longer the one listed: another size or modification time.
func CheckFile(f DataFile) error {
	st, err := os.Stat(f.Name)
	if err != nil {
		return &InputError{File: f.Name, Reason: "cannot stat", Err: err}
	}
	if st.Size() != f.Size || (f.ModTime != 0 && st.ModTime().UnixNano() != f.ModTime) {
		return &InputError{File: f.Name, Reason: fmt.Sprintf("changed while the dataset was read: %d bytes modified at %s, listed with %d bytes",
			st.Size(), st.ModTime().UTC().Format(time.RFC3339Nano), f.Size), Err: shard.ErrInputChanged}
	}
	return nil
}
