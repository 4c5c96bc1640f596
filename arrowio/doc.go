// Package arrowio holds every file and wire format of emsf, and their
// schemas: transitions in (CSV, Arrow IPC file and stream, Parquet), shards,
// partial results (worker → coordinator) and models. Everything is Arrow,
// so any Arrow implementation reads it without this code; docs/formats.md
// has the same schemas with a pyarrow example. The package is a library:
// no logging, no global state. Buffers come from a memory.Allocator
// (WithAllocator, ReadOptions.Alloc; default memory.NewGoAllocator()).
//
// # Transitions
//
// ScanTransitions streams a file of logged transitions, batch by batch:
// columns state, action, next_state (any Arrow integer type, or floats that
// hold exact integers; CSV fields likewise) and an optional count (any
// numeric type, default 1); other columns such as episode and step are
// ignored. Names can be remapped (ReadOptions); a second read that needs
// only the indices skips the count column (ReadOptions.NoCount: Arrow and
// Parquet neither decode nor read it). The format is detected by
// extension, then by magic bytes. ScanTransitionsReader does the same for a
// payload (a NATS message of CSV or an Arrow IPC stream). ScanTransitions
// also reads standard input (path StdinPath, "-", from ReadOptions.Stdin)
// and gzip-compressed files or input, recognised by their first bytes
// whatever the name (source.go): they are read front to back once, CSV and
// IPC streams as the bytes arrive, an IPC file or Parquet through a
// temporary copy (ReadOptions.TempDir) removed after; damaged gzip data is
// an InputError that says gzip (the trailer is always checked). Payloads
// are never decompressed. A CSV header separated by ';', tabs or '|'
// fails with a hint that names the separator. Bad input stops
// the scan with one *InputError that names the file, the 1-based data row,
// the column and the value: a missing file or column, a non-integer,
// negative or out-of-range index, a null, a count that is not finite and
// > 0, no data rows, a ragged CSV row, a truncated or corrupt Arrow or
// Parquet file.
//
// The index columns may hold user ids instead of integers
// (ReadOptions.StateIDs, ActionIDs; ids.go): CSV text, Arrow string,
// binary or dictionary columns, Parquet byte arrays. The scan's goroutine
// checks each id and interns it into the vocabulary, in row order, and
// every batch carries views of the vocabularies (TransitionBatch.StateIDs,
// ActionIDs: snapshots that hold the ids of its rows, stamped in flush,
// where every reader hands its batches over), so that a consumer on
// another goroutine reads a row's ids while the scan goes on.
//
// Each format has one reader; all of them fill the same TransitionBatch,
// whole columns at a time, and share the checks of indices and counts.
// CSV is cut into chunks of whole lines that are parsed on every core
// (csvfast.go) and delivered in order: a row of plain digits (a count of
// digits, or digits "." digits) is converted by a digit parser whose
// values are bitwise strconv's; any other row goes through the reference
// row code (csvRow), which accepts "3.0" or " 3 " and words its errors;
// and from the first line holding a quote or a carriage return that is not
// part of a CRLF line end, the rest of the input is read by encoding/csv
// (csvSlow's loop). Rows, batch boundaries and errors (file, row, column,
// value; encoding/csv's line numbers) are the same as through encoding/csv
// alone, for any chunk size (TestCSVFastMatchesEncodingCSV). A chunk's
// columns are sized by its lines (counted at memory speed) and, where no
// ids are interned, go to the batch in runs (appendRows): a small input is
// a few chunks parsed once, whose allocations were most of its reading
// time when the columns grew by doubling and rows went to the batch one by
// one (docs/benchmarks.md, "Small inputs"). Arrow IPC and
// Parquet record batches are converted a column at a time from their typed
// value slices. An Arrow IPC record batch whose schema is flat (every
// column a fixed-width primitive, native byte order) and whose body is not
// compressed is decoded without copying: its arrays are slices of one
// message-body buffer that the next message reuses (ipcflat.go; the
// library's reader copies every buffer of every column), built as the
// library builds them, so rows and errors are the library's
// (TestFlatRecordMatchesLibrary); any other batch goes to the library.
// From an IPC file only the byte ranges of the converted columns' buffers
// are read (flatRanges).
//
// # Parquet without pqarrow
//
// Parquet is read and written over arrow-go's lower-level parquet/file
// (with parquet/schema and parquet/metadata), not its parquet/pqarrow:
// pqarrow links arrow/compute, arrow/flight, gRPC and protobuf, whose
// package initialisers ran in every emsf process, the fit's workers and
// every CLI call included. A program importing emsf's external packages
// started in 42 ms with pqarrow and 29 ms without, emsf --help took 39
// ms with it and 32 ms without (perf stat -r 30, medians of 3), and the
// binary shrank from 82 to 53 MB. The reader (pqschema.go, pqread.go)
// reads what emsf's files hold: top-level columns of integers (INT32,
// INT64 and their integer annotations), floats, strings and binary, with
// or without nulls, and the three-level LIST of DOUBLE of a model's
// values (read as list<float64>: the model readers check that each row
// holds m values), each column with parquet's record reader. Any other
// column is refused with its name and Parquet type; the Arrow schema a
// writer stored (ARROW:schema) is verified but not applied. pqwrite.go
// writes the layout that pqarrow's writer wrote: its Parquet schema,
// key-value metadata and stored Arrow schema (an IPC schema message from
// arrow/ipc, base64). pqarrow stays in the tests as the oracle: random
// files it writes read as the same values through both readers, or are
// refused by name where emsf does not read a column
// (TestParquetReaderMatchesPqarrow, TestParquetScanMatchesPqarrow,
// TestParquetCorruptScanMatchesPqarrow), and the files of the new
// writers read in pqarrow as the old writers' did
// (TestParquetWriterMatchesPqarrow, TestParquetTransitionWriterMatchesPqarrow).
//
// # Datasets and splits
//
// ListDataset lists a dataset: a file, a directory's data files or a
// glob's matches, in path order (DataFile: name, size, modification
// time, format). PlanSplits cuts it into splits from names and sizes
// only, and ScanSplit reads one split on its own (split.go has the rules:
// CSV byte ranges cut at line boundaries, Parquet row groups and Arrow IPC
// file record batches by midpoint, streams whole), numbering rows from
// the split's first; a split's bad row in CSV or an IPC file is a
// SplitRowError, exact once the rows of the file's earlier splits are
// added; anything else it cannot answer exactly is ErrReadWhole, and the
// file is read whole. CheckFile says when a listed file changed.
//
// Readers never trust a length read from the input: IPC metadata is
// verified before the Arrow library decodes it (flatverify.go), declared
// message and buffer sizes are checked against the input's size, and
// panics of the Arrow and Parquet decoders on corrupt data become errors.
// The fuzz tests (FuzzScanCSV, FuzzScanArrowStream, FuzzScanParquet,
// FuzzScanStdin) hold this line.
//
// # Shards
//
// A shard (EncodeShard, WriteShardFile) is an Arrow IPC file with columns
//
//	row int32, col int32, count float64     sorted by (row, col)
//
// and its manifest line in the schema metadata: emsf.format_version ("1"),
// emsf.kind ("shard"), emsf.id, emsf.action, emsf.row_lo, emsf.row_hi,
// emsf.col_lo, emsf.col_hi, emsf.nnz, emsf.sum (shortest decimal that
// parses back to the same float64) and emsf.checksum (shard.Checksum).
// DecodeShard builds the CSR block once and checks it (shard.Shard.Verify).
//
// # Partials
//
// A partial (EncodePartial) is an Arrow IPC stream of one schema
//
//	section int8, index int32, x float64, v fixed_size_list<float64>[m]
//
// in three record batches: section 0, the rows of D (index = state i, x =
// X[i], v = Dh row); section 1, the columns of K touched (index = next
// state j, x = 0, v = KhT row); section 2, one totals row (index = -1, x =
// SumX, v = Y). The schema metadata holds emsf.format_version, emsf.kind
// ("partial"), emsf.job, emsf.iteration, emsf.shard, emsf.worker,
// emsf.action, emsf.m, emsf.nnz, emsf.rows, emsf.cols, emsf.loglik (text)
// and emsf.loglik_bits (16 hex digits of the IEEE 754 bits, what
// DecodePartial reads, so that a NaN round-trips). Every float round-trips
// bitwise.
//
// # Models
//
// A model file (WriteModel, ReadModel; EncodeModel, DecodeModel for bytes)
// is one table, as an Arrow IPC file (default) or Parquet:
//
//	factor  utf8                          "D" or "K"
//	action  int32                         the block's action; -1 for a shared factor
//	state   int32                         D: the state i; K: the next state j (K is stored transposed)
//	values  fixed_size_list<float64>[m]   D[a][i, :] or K[a][:, j]
//
// Rows are all D blocks in block order, then all K blocks, states
// ascending: (NumD + NumK)·n rows; a model with a smoothing rule
// (emsf.smooth) has, after them, the rule's streams, rows of factor "Q"
// and "C" (docs/formats.md). The schema metadata holds
// emsf.format_version ("1"), emsf.kind ("model"), emsf.n, emsf.m, emsf.u,
// emsf.tie (factor.Tie.String), emsf.iteration, emsf.loglik, emsf.wkl
// (shortest round-trip decimals; "NaN" when not computed), emsf.seed,
// emsf.fingerprint and emsf.param.<key> for each parameter. In Parquet the
// same metadata is in the file's key-value metadata, beside the stored
// Arrow schema. Writes are atomic (temporary file, fsync, rename); reads
// check the metadata, the shape, the tie mode, that each (factor, block,
// state) row is present exactly once, and Model.Validate. Floats
// round-trip bitwise. The record batches are cut by modelBatcher (4 MiB
// of values each, never across blocks), whoever writes the file; a whole
// batch's values column refers to the model's own rows instead of a copy
// (the same bytes: TestModelDirectBatches), so a fit's last step does not
// touch a second model's worth of memory (the medium job's one-pass fit:
// peak RSS 727 → 604 MB).
//
// # Model datasets
//
// A model dataset is the same table in parts, so that no process needs
// the whole model: files in the model schema that each hold rows [lo, hi)
// of one block (kind "model_part", with emsf.part.factor, .block, .lo and
// .hi), and manifest.json, which holds the model's metadata (the schema
// metadata keys of a model file) and one line per part (ModelPart: file,
// factor, block, lo, hi, rows, bytes, SHA-256), in the row order of a
// model file. A smoothing rule's streams are blocks too (factor "Q" or
// "C", block = action, rows = the stream's rows; ModelShape.SmoothNNZ and
// ModelShape.blocks say which there are), so the rule travels in parts
// like D and K. Storage is a PartSink/PartSource: DirParts (a directory) or
// worker/wire.ObjectParts (nats-obj://BUCKET/PREFIX).
//
// Writing, in a cluster: each owner writes its rows with
// NewModelPartWriter (Append in pieces, Close returns the manifest line)
// or WriteModelPart; the coordinator collects the lines and commits with
// CommitModelDataset, which checks that they cover the rows of every
// block once and writes the manifest last and atomically: the manifest is the
// commit, and files it does not list are not part of the dataset.
// Reading: ReadModelDataset (ReadModelAny takes a file, a directory or a
// manifest.json) checks every part's size, SHA-256, schema metadata and
// rows against its line. AssembleModel streams the parts into one file,
// byte for byte what WriteModel writes for the model; SplitModel streams
// a model file into a dataset.
package arrowio
