package arrowio

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// NumPy's .npy format (NEP 1, numpy.lib.format, version 1.0): the magic
// "\x93NUMPY", the version bytes 1 0, a little-endian uint16 header
// length, an ASCII Python dict literal {'descr': …, 'fortran_order': …,
// 'shape': (…), } padded with spaces and ended by "\n" so that the data
// starts at a multiple of 64 bytes, then the raw data. .npz is a zip
// archive of NAME.npy members (np.savez: stored, not deflated). numpy
// reads both with np.load and nothing else.

// NPY is one array to write as .npy: float64 values (descr '<f8'), int32
// ('<i4'), int64 ('<i8'), uint8 bytes ('|u1') or strings ('<U' and the
// longest string's length in code points: numpy's fixed-width UTF-32,
// which np.load reads without pickle), exactly one of them set,
// of the given shape (C order: the last index fastest; FortranOrder: the
// first). Len of the values must be the product of the shape.
type NPY struct {
	Shape        []int
	FortranOrder bool
	F64          []float64
	I32          []int32
	I64          []int64
	U8           []byte
	Str          []string
}

func (a *NPY) descr() (string, int, error) {
	kinds := 0
	var d string
	var n int
	if a.F64 != nil {
		kinds, d, n = kinds+1, "<f8", len(a.F64)
	}
	if a.I32 != nil {
		kinds, d, n = kinds+1, "<i4", len(a.I32)
	}
	if a.I64 != nil {
		kinds, d, n = kinds+1, "<i8", len(a.I64)
	}
	if a.U8 != nil {
		kinds, d, n = kinds+1, "|u1", len(a.U8)
	}
	if a.Str != nil {
		kinds, d, n = kinds+1, fmt.Sprintf("<U%d", a.strLen()), len(a.Str)
	}
	if kinds != 1 {
		return "", 0, fmt.Errorf("npy: want exactly one kind of values, got %d", kinds)
	}
	size := 1
	for _, s := range a.Shape {
		size *= s
	}
	if size != n {
		return "", 0, fmt.Errorf("npy: %d values for shape %v", n, a.Shape)
	}
	return d, n, nil
}

// header returns the .npy header (magic to the ending newline).
func (a *NPY) header() ([]byte, error) {
	d, _, err := a.descr()
	if err != nil {
		return nil, err
	}
	dims := make([]string, len(a.Shape))
	for k, s := range a.Shape {
		dims[k] = strconv.Itoa(s)
	}
	shape := "(" + strings.Join(dims, ", ")
	if len(dims) == 1 {
		shape += ","
	}
	shape += ")"
	fortran := "False"
	if a.FortranOrder {
		fortran = "True"
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", d, fortran, shape)
	total := 10 + len(dict) + 1
	pad := (64 - total%64) % 64
	if total+pad-10 > math.MaxUint16 {
		return nil, fmt.Errorf("npy: header of %d bytes", total+pad-10)
	}
	h := make([]byte, 0, total+pad)
	h = append(h, "\x93NUMPY\x01\x00"...)
	h = binary.LittleEndian.AppendUint16(h, uint16(total+pad-10))
	h = append(h, dict...)
	h = append(h, bytes.Repeat([]byte(" "), pad)...)
	return append(h, '\n'), nil
}

// WriteTo writes a as .npy.
func (a *NPY) WriteTo(w io.Writer) (int64, error) {
	h, err := a.header()
	if err != nil {
		return 0, err
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	n, _ := bw.Write(h)
	total := int64(n)
	var buf [8]byte
	switch {
	case a.F64 != nil:
		for _, v := range a.F64 {
			binary.LittleEndian.PutUint64(buf[:], math.Float64bits(v))
			bw.Write(buf[:8])
		}
		total += 8 * int64(len(a.F64))
	case a.I32 != nil:
		for _, v := range a.I32 {
			binary.LittleEndian.PutUint32(buf[:], uint32(v))
			bw.Write(buf[:4])
		}
		total += 4 * int64(len(a.I32))
	case a.I64 != nil:
		for _, v := range a.I64 {
			binary.LittleEndian.PutUint64(buf[:], uint64(v))
			bw.Write(buf[:8])
		}
		total += 8 * int64(len(a.I64))
	case a.Str != nil:
		l := a.strLen()
		for _, str := range a.Str {
			k := 0
			for _, r := range str {
				binary.LittleEndian.PutUint32(buf[:], uint32(r))
				bw.Write(buf[:4])
				k++
			}
			for ; k < l; k++ {
				bw.Write([]byte{0, 0, 0, 0})
			}
		}
		total += 4 * int64(l) * int64(len(a.Str))
	default:
		bw.Write(a.U8)
		total += int64(len(a.U8))
	}
	return total, bw.Flush()
}

// strLen is the longest of Str in code points (at least 1: numpy has no
// '<U0').
func (a *NPY) strLen() int {
	l := 1
	for _, s := range a.Str {
		l = max(l, utf8.RuneCountInString(s))
	}
	return l
}

// WriteNPY writes a to path atomically.
func WriteNPY(path string, a *NPY) error {
	return writeAtomic(path, func(f *os.File) error {
		_, err := a.WriteTo(f)
		return err
	})
}

// WriteNPZ writes the named arrays (names without ".npy", in order) to
// path atomically as an uncompressed .npz (np.savez's layout; zip64 for
// members over 4 GiB, which archive/zip switches to by itself).
func WriteNPZ(path string, names []string, arrays []*NPY) error {
	return writeAtomic(path, func(f *os.File) error {
		zw := zip.NewWriter(f)
		for k, a := range arrays {
			w, err := zw.CreateHeader(&zip.FileHeader{Name: names[k] + ".npy", Method: zip.Store})
			if err != nil {
				return err
			}
			if _, err := a.WriteTo(w); err != nil {
				return err
			}
		}
		return zw.Close()
	})
}

var npyHeader = regexp.MustCompile(`^\{\s*'descr':\s*'([<|]?[fi][48])',\s*'fortran_order':\s*(False|True),\s*'shape':\s*\((\d+),?\s*\),?\s*\}\s*$`)

// ReadNPYVector reads a one-dimensional .npy array of float64 or float32
// ('<f8', '<f4'), as np.save writes a vector, into float64s.
func ReadNPYVector(path string) ([]float64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("arrowio: read %s: %w", path, err)
	}
	v, err := decodeNPYVector(data)
	if err != nil {
		return nil, fmt.Errorf("arrowio: read %s: %w", path, err)
	}
	return v, nil
}

func decodeNPYVector(data []byte) ([]float64, error) {
	if len(data) < 10 || string(data[:6]) != "\x93NUMPY" {
		return nil, fmt.Errorf("not a .npy file (no \\x93NUMPY magic)")
	}
	var hl, start int
	switch data[6] {
	case 1:
		hl, start = int(binary.LittleEndian.Uint16(data[8:10])), 10
	case 2, 3:
		if len(data) < 12 {
			return nil, fmt.Errorf("truncated .npy header")
		}
		hl, start = int(binary.LittleEndian.Uint32(data[8:12])), 12
	default:
		return nil, fmt.Errorf(".npy format version %d.%d", data[6], data[7])
	}
	if start+hl > len(data) {
		return nil, fmt.Errorf("truncated .npy header")
	}
	m := npyHeader.FindStringSubmatch(string(data[start : start+hl]))
	if m == nil {
		return nil, fmt.Errorf(".npy header %q: want a one-dimensional array of float64 or float32", strings.TrimSpace(string(data[start:start+hl])))
	}
	n, err := strconv.Atoi(m[3])
	if err != nil {
		return nil, fmt.Errorf(".npy shape %q", m[3])
	}
	body := data[start+hl:]
	width := 8
	if strings.HasSuffix(m[1], "4") {
		width = 4
	}
	if strings.Contains(m[1], "i") {
		return nil, fmt.Errorf(".npy of %s: want float64 or float32 values", m[1])
	}
	if len(body) != n*width {
		return nil, fmt.Errorf(".npy holds %d bytes of data, its shape (%d,) needs %d", len(body), n, n*width)
	}
	out := make([]float64, n)
	for i := range out {
		if width == 8 {
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(body[8*i:]))
		} else {
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(body[4*i:])))
		}
	}
	return out, nil
}
