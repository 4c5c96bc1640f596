package arrowio

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// Export formats (ExportModel).
const (
	ExportNPY = "npy" // one .npy file per array
	ExportNPZ = "npz" // all arrays in model.npz
	ExportCSV = "csv" // one CSV file per table
)

// ExportModel writes a model's factors, its reduced chains and its
// vocabularies into dir (created; it must not exist or be empty) in the
// given formats, for tools that read neither Arrow nor Parquet (numpy
// alone, a spreadsheet). Files (docs/formats.md, "Exports"):
//
//	model.json               n, m, u, tie, and which action each block is for
//	D_<b>.npy, K_<b>.npy     block b of D (n×m, '<f8') and of K (m×n: the
//	                         stored K^T written in Fortran order, so numpy
//	                         reads K itself without a copy)
//	reduced.npy              the reduced chains K^a D^a, u×m×m
//	states.npy, actions.npy  the ids ('<U…'), when the model has them
//	model.npz                all of the above arrays in one archive
//	D.csv, K.csv             action,state,h0…h(m-1) (K: action,next_state,…;
//	                         the action is the block's action id, or * for a
//	                         factor shared by all actions)
//	reduced.csv              action,from,to,p
//	states.csv, actions.csv  index,id
//
// Floats are written bitwise (.npy) or as shortest round-trip decimals
// (CSV). The directory appears whole or not at all: the files are
// written in a temporary directory beside it, renamed into place last.
func ExportModel(dir string, mf *ModelFile, formats []string) error {
	md := mf.Model
	want := map[string]bool{}
	for _, f := range formats {
		switch f {
		case ExportNPY, ExportNPZ, ExportCSV:
			want[f] = true
		default:
			return fmt.Errorf("arrowio: export: unknown format %q (want npy, npz or csv)", f)
		}
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return fmt.Errorf("arrowio: export: %s exists and is not empty", dir)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(dir)), ".export-")
	if err != nil {
		return fmt.Errorf("arrowio: export: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("arrowio: export: %w", err)
	}
	x := exporter{dir: tmp, mf: mf}
	names, arrays := x.arrays()
	if want[ExportNPY] {
		for k, a := range arrays {
			if err := WriteNPY(filepath.Join(tmp, names[k]+".npy"), a); err != nil {
				return fmt.Errorf("arrowio: export %s: %w", names[k], err)
			}
		}
	}
	if want[ExportNPZ] {
		if err := WriteNPZ(filepath.Join(tmp, "model.npz"), names, arrays); err != nil {
			return fmt.Errorf("arrowio: export model.npz: %w", err)
		}
	}
	if want[ExportCSV] {
		if err := x.csv(); err != nil {
			return fmt.Errorf("arrowio: export: %w", err)
		}
	}
	meta := map[string]any{"n": md.N, "m": md.M, "u": md.U, "tie": md.Tie.String(),
		"d_blocks": x.blockActions(len(md.D), md.Tie == factor.TieSharedD),
		"k_blocks": x.blockActions(len(md.KT), md.Tie == factor.TieSharedK),
		"ids":      mf.States != nil || mf.Actions != nil, "formats": formats}
	js, _ := json.MarshalIndent(meta, "", "  ")
	if err := WriteFileAtomic(filepath.Join(tmp, "model.json"), append(js, '\n')); err != nil {
		return fmt.Errorf("arrowio: export: %w", err)
	}
	_ = os.Remove(dir) // an empty directory gives way
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("arrowio: export: %w", err)
	}
	return nil
}

type exporter struct {
	dir string
	mf  *ModelFile
}

// blockActions names the action of each block: its id (or index), or "*"
// for a block shared by all actions.
func (x *exporter) blockActions(blocks int, shared bool) []string {
	out := make([]string, blocks)
	for b := range out {
		out[b] = "*"
		if !shared {
			out[b] = x.action(b)
		}
	}
	return out
}

func (x *exporter) action(a int) string { return idName(x.mf.Actions, a) }

func idName(v *shard.Vocab, i int) string {
	if v == nil {
		return strconv.Itoa(i)
	}
	return v.String(i)
}

// arrays returns the arrays of the export, by name.
func (x *exporter) arrays() ([]string, []*NPY) {
	md := x.mf.Model
	n, m := md.N, md.M
	var names []string
	var arrays []*NPY
	for b, d := range md.D {
		names, arrays = append(names, fmt.Sprintf("D_%d", b)), append(arrays, &NPY{Shape: []int{n, m}, F64: d})
	}
	for b, kt := range md.KT {
		names, arrays = append(names, fmt.Sprintf("K_%d", b)), append(arrays, &NPY{Shape: []int{m, n}, FortranOrder: true, F64: kt})
	}
	red := make([]float64, 0, md.U*m*m)
	for _, r := range factor.Reduced(md) {
		red = append(red, r.RawMatrix().Data...)
	}
	names, arrays = append(names, "reduced"), append(arrays, &NPY{Shape: []int{md.U, m, m}, F64: red})
	if v := x.mf.States; v != nil {
		names, arrays = append(names, "states"), append(arrays, &NPY{Shape: []int{v.Len()}, Str: v.Strings()})
	}
	if v := x.mf.Actions; v != nil {
		names, arrays = append(names, "actions"), append(arrays, &NPY{Shape: []int{v.Len()}, Str: v.Strings()})
	}
	return names, arrays
}

// csv writes the CSV tables.
func (x *exporter) csv() error {
	md := x.mf.Model
	n, m := md.N, md.M
	head := func(first, second string) string {
		var b strings.Builder
		b.WriteString(first + "," + second)
		for l := range m {
			fmt.Fprintf(&b, ",h%d", l)
		}
		return b.String() + "\n"
	}
	table := func(name, first, second string, blocks [][]float64, shared bool) error {
		var b strings.Builder
		b.WriteString(head(first, second))
		acts := x.blockActions(len(blocks), shared)
		for k, vals := range blocks {
			for i := range n {
				b.WriteString(CSVField(acts[k]))
				b.WriteByte(',')
				b.WriteString(CSVField(idName(x.mf.States, i)))
				for _, v := range vals[i*m : (i+1)*m] {
					b.WriteByte(',')
					b.WriteString(fmtFloat(v))
				}
				b.WriteByte('\n')
			}
		}
		return WriteFileAtomic(filepath.Join(x.dir, name), []byte(b.String()))
	}
	if err := table("D.csv", "action", "state", md.D, md.Tie == factor.TieSharedD); err != nil {
		return err
	}
	if err := table("K.csv", "action", "next_state", md.KT, md.Tie == factor.TieSharedK); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("action,from,to,p\n")
	for a, r := range factor.Reduced(md) {
		for l := range m {
			for k := range m {
				fmt.Fprintf(&b, "%s,%d,%d,%s\n", CSVField(x.action(a)), l, k, fmtFloat(r.At(l, k)))
			}
		}
	}
	if err := WriteFileAtomic(filepath.Join(x.dir, "reduced.csv"), []byte(b.String())); err != nil {
		return err
	}
	for name, v := range map[string]*shard.Vocab{"states.csv": x.mf.States, "actions.csv": x.mf.Actions} {
		if v == nil {
			continue
		}
		var b strings.Builder
		b.WriteString("index,id\n")
		for i := range v.Len() {
			fmt.Fprintf(&b, "%d,%s\n", i, CSVField(v.String(i)))
		}
		if err := WriteFileAtomic(filepath.Join(x.dir, name), []byte(b.String())); err != nil {
			return err
		}
	}
	return nil
}

// csvQuote quotes a CSV field when RFC 4180 needs it.
func CSVField(f string) string {
	if f == "" || strings.ContainsAny(f, ",\"\r\n") || f[0] == ' ' || f[len(f)-1] == ' ' {
		return `"` + strings.ReplaceAll(f, `"`, `""`) + `"`
	}
	return f
}
