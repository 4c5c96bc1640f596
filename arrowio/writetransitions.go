package arrowio

import (
	"bufio"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"

	"github.com/emsf/emsf/shard"
)

// TransitionSchema is the schema of transition files written by
// TransitionWriter: state, action, next_state (int32), count (float64),
// episode and step (int64).
var transitionFields = []arrow.Field{
	{Name: "state", Type: arrow.PrimitiveTypes.Int32},
	{Name: "action", Type: arrow.PrimitiveTypes.Int32},
	{Name: "next_state", Type: arrow.PrimitiveTypes.Int32},
	{Name: "count", Type: arrow.PrimitiveTypes.Float64},
	{Name: "episode", Type: arrow.PrimitiveTypes.Int64},
	{Name: "step", Type: arrow.PrimitiveTypes.Int64},
}

// transitionBatchRows is how many rows a TransitionWriter buffers per
// record batch (Arrow and Parquet).
const transitionBatchRows = 1 << 16

// TransitionWriter writes transitions to a CSV, Arrow IPC file or Parquet
// file. The file appears at its path only when Close succeeds; Abort (or a
// failed Close) removes the temporary file, so no half-written file is left.
type TransitionWriter struct {
	path   string
	f      *AtomicFile
	format string

	csv *bufio.Writer

	b    *array.RecordBuilder
	rows int
	ipcw *ipc.FileWriter
	pqw  *pqWriter

	// ids, when not nil, name the states and the actions: the columns are
	// then strings holding ids[k].ID(index).
	ids [2]*shard.Vocab
}

// FormatFromPath returns the format implied by a file name's extension:
// "csv", "arrow" or "parquet" ("" if unknown).
func FormatFromPath(path string) string {
	switch filepath.Ext(path) {
	case ".csv":
		return "csv"
	case ".arrow", ".feather", ".ipc":
		return "arrow"
	case ".parquet", ".pq":
		return "parquet"
	}
	return ""
}

// NewTransitionWriter starts writing path in format "csv", "arrow" or
// "parquet" ("" = from the extension).
func NewTransitionWriter(path, format string) (*TransitionWriter, error) {
	return NewTransitionWriterIDs(path, format, nil, nil)
}

// NewTransitionWriterIDs is NewTransitionWriter for states and actions
// named by ids: with a vocabulary, the state and next_state columns
// (actions: the action column) hold the id of each index written (CSV
// fields quoted where RFC 4180 needs it; Arrow and Parquet string
// columns). A nil vocabulary writes integers.
func NewTransitionWriterIDs(path, format string, states, actions *shard.Vocab) (*TransitionWriter, error) {
	if format == "" {
		format = FormatFromPath(path)
	}
	if format != "csv" && format != "arrow" && format != "parquet" {
		return nil, fmt.Errorf("arrowio: %s: unknown transitions format %q (want csv, arrow or parquet)", path, format)
	}
	f, err := CreateAtomic(path)
	if err != nil {
		return nil, err
	}
	w := &TransitionWriter{path: path, f: f, format: format, ids: [2]*shard.Vocab{states, actions}}
	fields := slices.Clone(transitionFields)
	for k, v := range []*shard.Vocab{states, actions, states} {
		if v != nil {
			fields[k].Type = arrow.BinaryTypes.String
		}
	}
	schema := arrow.NewSchema(fields, nil)
	mem := memory.NewGoAllocator()
	switch format {
	case "csv":
		w.csv = bufio.NewWriterSize(f, 1<<16)
		_, err = w.csv.WriteString("state,action,next_state,count,episode,step\n")
	case "arrow":
		w.b = array.NewRecordBuilder(mem, schema)
		w.ipcw, err = ipc.NewFileWriter(f, ipc.WithSchema(schema), ipc.WithAllocator(mem))
	case "parquet":
		w.b = array.NewRecordBuilder(mem, schema)
		w.pqw, err = newPQWriter(f, schema, parquet.NewWriterProperties(parquet.WithAllocator(mem)), false)
	}
	if err != nil {
		w.Abort()
		return nil, fmt.Errorf("arrowio: write %s: %w", path, err)
	}
	return w, nil
}

// Write appends one transition s --a--> s2 with weight c; episode and step
// identify its place in a trajectory (use -1 when unknown).
func (w *TransitionWriter) Write(s, a, s2 int, c float64, episode, step int64) error {
	if w.csv != nil {
		var buf [96]byte
		line := w.appendIndex(buf[:0], 0, s)
		line = append(line, ',')
		line = w.appendIndex(line, 1, a)
		line = append(line, ',')
		line = w.appendIndex(line, 0, s2)
		line = append(line, ',')
		line = strconv.AppendFloat(line, c, 'g', -1, 64)
		line = append(line, ',')
		line = strconv.AppendInt(line, episode, 10)
		line = append(line, ',')
		line = strconv.AppendInt(line, step, 10)
		line = append(line, '\n')
		if _, err := w.csv.Write(line); err != nil {
			return fmt.Errorf("arrowio: write %s: %w", w.path, err)
		}
		return nil
	}
	for k, x := range []int{s, a, s2} {
		if v := w.ids[k%2]; v != nil {
			w.b.Field(k).(*array.StringBuilder).BinaryBuilder.Append(v.ID(x))
		} else {
			w.b.Field(k).(*array.Int32Builder).Append(int32(x))
		}
	}
	w.b.Field(3).(*array.Float64Builder).Append(c)
	w.b.Field(4).(*array.Int64Builder).Append(episode)
	w.b.Field(5).(*array.Int64Builder).Append(step)
	w.rows++
	if w.rows >= transitionBatchRows {
		return w.flush()
	}
	return nil
}

// appendIndex appends index x of group g (0 states, 1 actions) as a CSV
// field: its id, quoted if need be, or the integer.
func (w *TransitionWriter) appendIndex(line []byte, g, x int) []byte {
	v := w.ids[g]
	if v == nil {
		return strconv.AppendInt(line, int64(x), 10)
	}
	return append(line, CSVField(string(v.ID(x)))...)
}

func (w *TransitionWriter) flush() error {
	if w.rows == 0 {
		return nil
	}
	rec := w.b.NewRecord()
	defer rec.Release()
	w.rows = 0
	var err error
	if w.ipcw != nil {
		err = w.ipcw.Write(rec)
	} else {
		err = w.pqw.WriteBuffered(rec)
	}
	if err != nil {
		return fmt.Errorf("arrowio: write %s: %w", w.path, err)
	}
	return nil
}

// Close finishes the file and moves it into place.
func (w *TransitionWriter) Close() error {
	if err := w.finish(); err != nil {
		w.f.Abort()
		return fmt.Errorf("arrowio: write %s: %w", w.path, err)
	}
	return w.f.Commit()
}

func (w *TransitionWriter) finish() error {
	if w.csv != nil {
		return w.csv.Flush()
	}
	defer w.b.Release()
	if err := w.flush(); err != nil {
		return err
	}
	if w.ipcw != nil {
		return w.ipcw.Close()
	}
	return w.pqw.Close()
}

// Abort discards everything written and removes the temporary file.
func (w *TransitionWriter) Abort() {
	if w.b != nil {
		w.b.Release()
		w.b = nil
	}
	w.f.Abort()
}
