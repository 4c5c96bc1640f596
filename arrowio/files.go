package arrowio

import "os"

// WriteFileAtomic writes data to path through a temporary file and a
// rename, so path never holds a partial write.
func WriteFileAtomic(path string, data []byte) error {
	return writeAtomic(path, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}
