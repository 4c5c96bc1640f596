package factor_test

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportsNothingOfTheProject: factor and its subpackages import
// nothing of emsf outside factor (DESIGN §3: the arrows end here), so
// that the math can be read and tested alone.
func TestImportsNothingOfTheProject(t *testing.T) {
	err := filepath.WalkDir(".", func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		pkg, err := build.ImportDir(dir, 0)
		if _, none := err.(*build.NoGoError); none {
			return nil
		}
		if err != nil {
			return err
		}
		for _, imp := range pkg.Imports {
			if strings.HasPrefix(imp, "github.com/emsf/emsf/") && !strings.HasPrefix(imp, "github.com/emsf/emsf/factor") {
				t.Errorf("package %s imports %s", pkg.Name, imp)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
