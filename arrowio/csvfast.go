package arrowio

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/emsf/emsf/shard"
)

// The fast CSV reader. The input is cut into chunks of whole lines that
// goroutines parse in parallel into columns; the chunks are delivered in
// order. A row whose fields are plain digits (a count: digits, or digits
// "." digits) is converted here; any other row is converted by csvRow,
// the reader's reference code, which accepts what it accepts ("3.0",
// spaces) and gives the same error otherwise. What encoding/csv would read
// differently from a plain split at commas (a quote, a carriage return
// other than in a CRLF line end) makes the fast reader hand the rest of
// the input, from that line on, to encoding/csv (csvRecords), so every
// input reads, and fails, exactly as it does through encoding/csv alone.

// csvChunkBytes is the default size of the chunks parsed in parallel.
const csvChunkBytes = 1 << 20

// csvChunk is a run of whole lines of CSV data and what parsing it found.
type csvChunk struct {
	data []byte
	done chan struct{}

	// Results, valid after done is closed: the rows parsed, the lines
	// they took (empty lines included), and where parsing stopped: at
	// err (a bad row; its Row counts from the chunk's first row) or at
	// byte stop of data, the first line the fast reader leaves to
	// encoding/csv (stop < 0: at the end).
	state, action, next []int32
	count               []float64 // nil when the input has no count column: every count is 1
	// idOff, in a scan that reads ids, holds for each row and index
	// column k the bounds of its id in data (idOff[6r+2k], idOff[6r+2k+1];
	// zeros for a column of integers), checked and left for the delivery
	// to intern in row order.
	idOff []int32
	lines int
	err   error // an *InputError or *StringIDsError
	stop  int
	// tail, when set, is a read error that ended the input after data:
	// all of data then goes to encoding/csv, which reports it.
	tail io.Reader
}

// csv reads CSV with a header row (see csvSlow for what it accepts).
func (s *scan) csv(ctx context.Context, r io.Reader) error {
	br := bufio.NewReaderSize(r, 1<<16)
	p, head, err := s.csvHead(br)
	line := bytes.TrimSuffix(bytes.TrimSuffix(head, []byte("\n")), []byte("\r"))
	if errors.Is(err, errSlowHeader) {
		// Not a plain first line: all of it goes through encoding/csv.
		return withDelimiterHint(s.csvSlow(ctx, io.MultiReader(bytes.NewReader(bytes.Clone(head)), br)), line)
	}
	if err != nil {
		return withDelimiterHint(err, line)
	}
	s.reset(1)
	return p.run(ctx, br)
}

// errSlowHeader: the first line is not a plain header line (it holds a
// quote or a carriage return, or no line end within the buffer): the
// input goes through encoding/csv.
var errSlowHeader = errors.New("arrowio: CSV header for encoding/csv")

// csvHead reads the header line from br and returns the fast reader of
// the lines after it, and the header line's bytes (line end included).
func (s *scan) csvHead(br *bufio.Reader) (*csvParser, []byte, error) {
	head, err := br.ReadSlice('\n')
	line := bytes.TrimSuffix(bytes.TrimSuffix(head, []byte("\n")), []byte("\r"))
	if (err != nil && !errors.Is(err, io.EOF)) || len(line) == 0 || bytes.ContainsAny(line, "\"\r") {
		return nil, head, errSlowHeader
	}
	header, err := newCSVReader(bytes.NewReader(line)).Read()
	if err != nil {
		return nil, head, &InputError{File: s.file, Reason: "malformed CSV header", Err: err}
	}
	idx, err := s.csvHeader(header)
	if err != nil {
		return nil, head, err
	}
	p := &csvParser{s: s, fields: len(header), idx: idx, role: make([]int, len(header))}
	for f := range p.role {
		p.role[f] = -1
	}
	for k, f := range idx {
		if f >= 0 && p.role[f] >= 0 {
			p.role = nil // one field read as two columns: every row by csvRow
			break
		}
		if f >= 0 {
			p.role[f] = k
		}
	}
	return p, head, nil
}

// csvParser is the fast reader of the data rows of one CSV input.
type csvParser struct {
	s      *scan
	fields int
	idx    [numCols]int
	role   []int // role[f]: the column slot of field f, or -1; nil: no fast rows
	// split: the lines are a split of a file (csvSplit): a line the fast
	// reader leaves to encoding/csv, or a read error, is ErrReadWhole,
	// and no rows is no error.
	split bool
}

// run reads the data rows that follow the header line.
func (p *csvParser) run(ctx context.Context, br *bufio.Reader) error {
	s := p.s
	ids := s.anyIDs()
	workers := runtime.GOMAXPROCS(0)
	var queue []*csvChunk
	defer func() {
		for _, c := range queue { // stop: wait for the parsers still running
			<-c.done
		}
	}()
	row, line := 0, 1 // data rows delivered, lines consumed (the header)
	var carry []byte
	// spare holds delivered chunks whose buffers the next chunks reuse
	// (fresh memory is slow to touch, and garbage costs collections).
	var spare []*csvChunk
	eof := false
	for !eof || len(queue) > 0 {
		if !eof && len(queue) < 2*workers {
			c := &csvChunk{}
			if k := len(spare); k > 0 {
				c, spare = spare[k-1], spare[:k-1]
				*c = csvChunk{data: c.data, state: c.state, action: c.action, next: c.next, count: c.count, idOff: c.idOff}
			}
			c.done = make(chan struct{})
			var err error
			c.data, carry, eof, err = readLines(br, carry, s.chunkBytes, c.data)
			if err != nil {
				c.tail = errReader{err}
				close(c.done)
				queue = append(queue, c)
				continue
			}
			if len(c.data) > 0 {
				queue = append(queue, c)
				go p.parse(c)
			}
			continue
		}
		c := queue[0]
		<-c.done
		queue = queue[1:]
		if c.tail != nil {
			if p.split {
				return fmt.Errorf("%w: %s: %w", ErrReadWhole, s.file, c.tail.(errReader).err)
			}
			return s.csvRecords(ctx, newCSVReader(io.MultiReader(bytes.NewReader(c.data), c.tail)), p.idx, p.fields, row, line)
		}
		base := row
		var err error
		if ids {
			row, err = p.deliverIDs(ctx, c, row)
		} else {
			row, err = s.appendRows(ctx, c.state, c.action, c.next, c.count, row)
		}
		if err != nil {
			return err
		}
		line += c.lines
		if c.err == nil && c.stop < 0 {
			spare = append(spare, c)
		}
		if c.err != nil {
			return addRows(c.err, base)
		}
		if c.stop >= 0 && p.split {
			return fmt.Errorf("%w: %s: a quote or a lone carriage return (encoding/csv reads the file)", ErrReadWhole, s.file)
		}
		if c.stop >= 0 {
			// The rest, from c.stop on, is read by encoding/csv.
			rest := []io.Reader{bytes.NewReader(c.data[c.stop:])}
			for _, q := range queue {
				<-q.done
				rest = append(rest, bytes.NewReader(q.data))
			}
			queue = nil
			rest = append(rest, bytes.NewReader(carry), br)
			return s.csvRecords(ctx, newCSVReader(io.MultiReader(rest...)), p.idx, p.fields, row, line)
		}
	}
	if err := s.flush(ctx); err != nil {
		return err
	}
	if row == 0 && !p.split {
		return s.noRows()
	}
	return nil
}

// deliverIDs adds the rows of c, parsed in a scan that reads ids, after
// data row row: it interns their ids in row order, as it adds them to the
// batch. It returns the number of the last row added.
func (p *csvParser) deliverIDs(ctx context.Context, c *csvChunk, row int) (int, error) {
	s := p.s
	for k := range c.state {
		row++
		st, ac, nx := c.state[k], c.action[k], c.next[k]
		v := [colNext + 1]*int32{&st, &ac, &nx}
		for col, vs := range s.ids {
			if vs != nil {
				o := c.idOff[6*k+2*col:]
				var err error
				if *v[col], err = s.internChecked(row, col, c.data[o[0]:o[1]]); err != nil {
					return row, err
				}
			}
		}
		cnt := 1.0
		if c.count != nil {
			cnt = c.count[k]
		}
		if err := s.appendRow(ctx, st, ac, nx, cnt, row); err != nil {
			return row, err
		}
	}
	return row, nil
}

// readLines reads the next chunk of whole lines from br, after carry (the
// start of a line read before), into buf when it is large enough; it
// returns the chunk, the start of the line that did not fit, and whether
// the input is at its end (then the chunk holds all of it, the last line
// perhaps without a newline). A read error comes back with the bytes read
// before it.
func readLines(br *bufio.Reader, carry []byte, chunk int, buf []byte) (data, rest []byte, eof bool, err error) {
	size := max(chunk, 2*len(carry))
	for {
		if cap(buf) >= size {
			buf = buf[:size]
		} else {
			buf = make([]byte, size)
		}
		n := copy(buf, carry)
		m, err := io.ReadFull(br, buf[n:])
		buf = buf[:n+m]
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return buf, nil, true, nil
		}
		if err != nil {
			return buf, nil, true, err
		}
		if cut := bytes.LastIndexByte(buf, '\n') + 1; cut > 0 {
			return buf[:cut], bytes.Clone(buf[cut:]), false, nil
		}
		carry, size, buf = buf, 2*size, nil // a line longer than the chunk
	}
}

// parse parses the lines of c.
func (p *csvParser) parse(c *csvChunk) {
	defer close(c.done)
	data := c.data
	c.stop = -1
	quote := bytes.IndexByte(data, '"')
	cr := bytes.IndexByte(data, '\r') >= 0
	// The columns are sized by the lines, counted at memory speed, so
	// that they never grow (each growth copies them and leaves garbage,
	// which at ingest's GOGC costs collections): a small input is a few
	// chunks parsed once, whose allocations are most of its reading time.
	// A reused chunk's columns are kept unless too short, with room for
	// a few more lines than this chunk's (the next chunk's count varies).
	// Without a count column every count is 1: no column is kept.
	rows := bytes.Count(data, []byte{'\n'}) + 1
	ids := p.s.anyIDs()
	counted := p.idx[colCount] >= 0
	if cap(c.state) < rows {
		est := rows + rows/16
		c.state, c.action, c.next = make([]int32, 0, est), make([]int32, 0, est), make([]int32, 0, est)
		c.count = nil
		if counted {
			c.count = make([]float64, 0, est)
		}
		if ids {
			c.idOff = make([]int32, 0, 6*est)
		}
	}
	c.state, c.action, c.next, c.count = c.state[:0], c.action[:0], c.next[:0], c.count[:0]
	if ids {
		c.idOff = c.idOff[:0]
	}
	var rec []string
	var bounds []int
	for pos := 0; pos < len(data); {
		end := bytes.IndexByte(data[pos:], '\n')
		next := pos + end + 1
		if end < 0 {
			end, next = len(data)-pos, len(data)
		}
		end += pos
		if quote >= 0 && quote < next {
			c.stop = pos
			return
		}
		line, at := data[pos:end], pos
		if cr {
			// encoding/csv drops the \r of a CRLF line end (and of a last
			// line without \n) and keeps any other.
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			if bytes.IndexByte(line, '\r') >= 0 {
				c.stop = pos
				return
			}
		}
		c.lines++
		pos = next
		if len(line) == 0 {
			continue // encoding/csv skips empty lines
		}
		if ids {
			if bounds, c.err = p.idRow(c, line, at, bounds); c.err != nil {
				return
			}
			continue
		}
		st, ac, nx, cnt, ok := p.fastRow(line)
		if !ok {
			rec = splitFields(rec[:0], line)
			var err error
			if st, ac, nx, cnt, err = p.s.csvRow(len(c.state)+1, rec, p.idx, p.fields); err != nil {
				c.err = err
				return
			}
		}
		c.state = append(c.state, st)
		c.action = append(c.action, ac)
		c.next = append(c.next, nx)
		if counted {
			c.count = append(c.count, cnt)
		}
	}
}

// idRow parses a line without quotes in a scan that reads ids: row
// len(c.state)+1 of the chunk, at byte at of c.data. It checks the ids
// here, on the parsing goroutine, and keeps their bounds in c.idOff for
// the delivery, which interns them in row order; integer columns and the
// count are converted as csvRow converts them. bounds is scratch space,
// returned for reuse.
func (p *csvParser) idRow(c *csvChunk, line []byte, at int, bounds []int) ([]int, error) {
	s, row := p.s, len(c.state)+1
	bounds = append(bounds[:0], 0)
	for i, ch := range line {
		if ch == ',' {
			bounds = append(bounds, i+1)
		}
	}
	if len(bounds) != p.fields {
		return bounds, &InputError{File: s.file, Row: row, Reason: fmt.Sprintf(
			"has %d fields but the header has %d (ragged or truncated row)", len(bounds), p.fields)}
	}
	bounds = append(bounds, len(line)+1)
	field := func(f int) (int, int) { return bounds[f], bounds[f+1] - 1 }
	var v [colNext + 1]int32
	var off [2 * (colNext + 1)]int32
	for k := range colNext + 1 {
		a, b := field(p.idx[k])
		if s.ids[k] == nil {
			var err error
			if v[k], err = s.parseIndex(row, k, string(line[a:b])); err != nil {
				return bounds, err
			}
			continue
		}
		for a < b && asciiSpace(line[a]) {
			a++
		}
		for b > a && asciiSpace(line[b-1]) {
			b--
		}
		if r := shard.CheckID(line[a:b]); r != "" {
			return bounds, s.bad(row, k, shown(string(line[a:b])), r)
		}
		off[2*k], off[2*k+1] = int32(at+a), int32(at+b)
	}
	cnt := 1.0
	if f := p.idx[colCount]; f >= 0 {
		a, b := field(f)
		var ok bool
		if cnt, _, ok = parseCount(line[:b], a); !ok {
			var err error
			if cnt, err = s.parseCount(row, string(line[a:b])); err != nil {
				return bounds, err
			}
		}
	}
	c.state = append(c.state, v[colState])
	c.action = append(c.action, v[colAction])
	c.next = append(c.next, v[colNext])
	if p.idx[colCount] >= 0 {
		c.count = append(c.count, cnt)
	}
	c.idOff = append(c.idOff, off[:]...)
	return bounds, nil
}

// asciiSpace reports whether ch is a byte strings.TrimSpace trims.
func asciiSpace(ch byte) bool {
	return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\v' || ch == '\f' || ch == '\r'
}

// addRows adds base to the row of a chunk's error (its rows count from
// the chunk's first).
func addRows(err error, base int) error {
	switch e := err.(type) {
	case *InputError:
		e.Row += base
	case *StringIDsError:
		e.Input.Row += base
	}
	return err
}

// splitFields splits a line without quotes at its commas, as encoding/csv
// does.
func splitFields(rec []string, line []byte) []string {
	str := string(line)
	for {
		i := strings.IndexByte(str, ',')
		if i < 0 {
			return append(rec, str)
		}
		rec = append(rec, str[:i])
		str = str[i+1:]
	}
}

// fastRow converts a line whose fields are plain: indices of 1 to 9
// digits within their bounds, a count of up to 15 digits with at most one
// "." between digits and a value > 0. Otherwise it returns false.
func (p *csvParser) fastRow(line []byte) (st, ac, nx int32, cnt float64, ok bool) {
	if p.role == nil {
		return 0, 0, 0, 0, false
	}
	var v [colNext + 1]int32
	cnt = 1
	pos := 0
	for f, role := range p.role {
		if f > 0 {
			if pos >= len(line) || line[pos] != ',' {
				return 0, 0, 0, 0, false
			}
			pos++
		}
		switch role {
		case -1:
			for pos < len(line) && line[pos] != ',' {
				pos++
			}
		case colCount:
			var c float64
			if c, pos, ok = parseCount(line, pos); !ok {
				return 0, 0, 0, 0, false
			}
			cnt = c
		default:
			x, start := int64(0), pos
			for pos < len(line) && line[pos]-'0' < 10 && pos-start < 9 {
				x = x*10 + int64(line[pos]-'0')
				pos++
			}
			if pos == start || x >= p.s.limit[role] {
				return 0, 0, 0, 0, false
			}
			v[role] = int32(x)
		}
	}
	if pos != len(line) {
		return 0, 0, 0, 0, false
	}
	return v[colState], v[colAction], v[colNext], cnt, true
}

// pow10 holds the powers of ten that a float64 holds exactly.
var pow10 = [...]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// parseCount parses a count field of digits, or digits "." digits, of at
// most 15 digits, and > 0, at line[pos:]; it returns the value and the
// end of the field. The value is bitwise strconv.ParseFloat's: the digits
// make an integer below 2^53 and the power of ten is exact, so the one
// division rounds correctly.
func parseCount(line []byte, pos int) (float64, int, bool) {
	mant, digits, frac, dot := int64(0), 0, 0, false
	for ; pos < len(line) && line[pos] != ','; pos++ {
		ch := line[pos]
		switch {
		case ch-'0' < 10:
			mant = mant*10 + int64(ch-'0')
			digits++
			if dot {
				frac++
			}
		case ch == '.' && !dot && digits > 0:
			dot = true
		default:
			return 0, pos, false
		}
	}
	if digits == 0 || digits > 15 || mant == 0 || (dot && frac == 0) {
		return 0, pos, false
	}
	return float64(mant) / pow10[frac], pos, true
}

// errReader is a reader that fails with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
