package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/worker/wire"
)

// modelPathUsage is the help of every flag that names a model to read.
const modelPathUsage = "a model file (Arrow or Parquet), a model dataset (its directory or manifest.json), or nats-obj://BUCKET/PREFIX (a dataset in the Object Store of --nats)"

// readModel reads a model in any form: one file, a dataset on the file
// system, or a dataset in the Object Store (nats-obj://, through nf's
// connection: --nats, $NATS_URL, or else the default local server).
func readModel(ctx context.Context, nf *natsFlags, path string) (*arrowio.ModelFile, error) {
	if !strings.HasPrefix(path, wire.ObjectScheme) {
		return arrowio.ReadModelAny(ctx, path)
	}
	parts, done, err := openObjectParts(ctx, nf, path, false)
	if err != nil {
		return nil, err
	}
	defer done()
	return arrowio.ReadModelDataset(ctx, parts)
}

// dial connects to --nats, NATS_URL, or else the default local server.
func (n *natsFlags) dial(client string) (*nats.Conn, error) {
	cc := n.conn(client)
	if cc.URL == "" {
		cc.URL = nats.DefaultURL
	}
	return cc.Connect()
}

// openObjectParts opens the dataset at url (nats-obj://BUCKET/PREFIX);
// done closes the connection.
func openObjectParts(ctx context.Context, nf *natsFlags, url string, create bool) (_ *wire.ObjectParts, done func(), err error) {
	nc, err := nf.dial("emsf-model")
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", url, err)
	}
	defer func() {
		if err != nil {
			err = connErr(nc, err)
			nc.Close()
		}
	}()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: jetstream: %w", url, err)
	}
	parts, err := wire.OpenObjectParts(ctx, js, url, create, nc.MaxPayload())
	if err != nil {
		return nil, nil, err
	}
	return parts, nc.Close, nil
}

// runModelParts is emsf model assemble|split.
func runModelParts(ctx context.Context, e *env, sub string, args []string) error {
	var (
		nf       natsFlags
		out      string
		format   string
		partRows int
	)
	synopsis := map[string]string{
		"assemble": "model assemble DATASET --out FILE [--format arrow|parquet]",
		"split":    "model split FILE --out DIR|nats-obj://BUCKET/PREFIX [--format arrow|parquet] [--part-rows N]",
	}[sub]
	fs := newFlagSet(e, "model "+sub, synopsis)
	nf.register(fs)
	if sub == "assemble" {
		fs.StringVar(&out, "out", "", "model file to write (required)")
		fs.StringVar(&format, "format", "", "model file format: arrow or parquet (default: parquet for an --out ending in .parquet or .pq, else arrow)")
	} else {
		fs.StringVar(&out, "out", "", "where to write the dataset: a new (or empty) directory, or nats-obj://BUCKET/PREFIX (required)")
		fs.StringVar(&format, "format", arrowio.ModelArrow, "format of the parts: arrow or parquet")
		fs.IntVar(&partRows, "part-rows", 0, "rows of a block per part (0: one part per block)")
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	what := map[string]string{"assemble": "DATASET (a directory, its manifest.json, or nats-obj://BUCKET/PREFIX)", "split": "FILE (a model file)"}[sub]
	switch {
	case len(pos) == 0:
		return usagef("name the %s to read", what)
	case len(pos) > 1:
		return usagef("unexpected argument %q (one %s)", pos[1], what)
	case out == "":
		return usagef("--out is required")
	case partRows < 0:
		return usagef("--part-rows %d: must be >= 0", partRows)
	}
	if err := nf.validate(); err != nil {
		return err
	}
	in := pos[0]
	if sub == "assemble" {
		if err := modelFormat(&format, out); err != nil {
			return err
		}
		return assembleCmd(ctx, e, &nf, in, out, format)
	}
	if format != arrowio.ModelArrow && format != arrowio.ModelParquet {
		return usagef("--format %q: want arrow or parquet", format)
	}
	return splitCmd(ctx, e, &nf, in, out, format, partRows)
}

// partStore is where a dataset is: a directory or an Object Store prefix.
type partStore interface {
	arrowio.PartSink
	arrowio.PartSource
}

// openStore opens a dataset location (with create, a missing Object Store
// bucket is created); done releases it.
func openStore(ctx context.Context, nf *natsFlags, loc string, create bool) (_ partStore, done func(), err error) {
	if !strings.HasPrefix(loc, wire.ObjectScheme) {
		return arrowio.DirParts{Dir: loc}, func() {}, nil
	}
	parts, done, err := openObjectParts(ctx, nf, loc, create)
	if err != nil {
		return nil, nil, err
	}
	return parts, done, nil
}

func assembleCmd(ctx context.Context, e *env, nf *natsFlags, in, out, format string) error {
	if err := arrowio.CheckWritable(out); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if !strings.HasPrefix(in, wire.ObjectScheme) {
		dir, ok := arrowio.DatasetDir(in)
		if !ok {
			return usagef("%s is not a model dataset (a directory, its manifest.json, or nats-obj://BUCKET/PREFIX)", in)
		}
		in = dir
	}
	src, done, err := openStore(ctx, nf, in, false)
	if err != nil {
		return err
	}
	defer done()
	if err := arrowio.AssembleModel(ctx, src, out, format); err != nil {
		return err
	}
	man, err := arrowio.ReadModelManifest(ctx, src)
	if err != nil {
		return err
	}
	st, err := os.Stat(out)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s (%s, %d bytes): the %d parts of %s, n=%s m=%s u=%s tie=%s\n", out, format, st.Size(),
		len(man.Parts), src, man.Metadata["emsf.n"], man.Metadata["emsf.m"], man.Metadata["emsf.u"], man.Metadata["emsf.tie"])
	return nil
}

// datasetOut says whether --out names a model dataset rather than one
// model file: nats-obj://BUCKET/PREFIX, or a directory (one that exists,
// or a path that ends in a slash).
func datasetOut(out string) bool {
	if strings.HasPrefix(out, wire.ObjectScheme) || strings.HasSuffix(out, "/") || strings.HasSuffix(out, string(os.PathSeparator)) {
		return true
	}
	st, err := os.Stat(out)
	return err == nil && st.IsDir()
}

// openDatasetOut opens the dataset destination out (a missing bucket is
// created), which must be new: a directory that does not exist or is
// empty, an Object Store prefix that holds no dataset.
func openDatasetOut(ctx context.Context, nf *natsFlags, out string) (partStore, func(), error) {
	if err := checkDatasetDir(out); err != nil {
		return nil, nil, err
	}
	sink, done, err := openStore(ctx, nf, out, true)
	if err != nil {
		return nil, nil, err
	}
	if err := checkNoDataset(ctx, sink, out); err != nil {
		done()
		return nil, nil, err
	}
	return sink, done, nil
}

// checkDatasetDir refuses a directory out (not nats-obj://) that exists
// and is not empty.
func checkDatasetDir(out string) error {
	if strings.HasPrefix(out, wire.ObjectScheme) {
		return nil
	}
	ents, err := os.ReadDir(out)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("--out: %w", err)
	case len(ents) > 0:
		return fmt.Errorf("--out %s is not empty: write a model dataset into a new directory", out)
	}
	return nil
}

// checkNoDataset refuses a destination src that holds a model dataset.
func checkNoDataset(ctx context.Context, src arrowio.PartSource, out string) error {
	if f, err := src.Open(ctx, arrowio.ManifestName); err == nil {
		f.Close()
		return fmt.Errorf("--out %s holds a model dataset already: choose another prefix", out)
	}
	return nil
}

// writeModelOut writes mf to out in format: one model file, or (when
// datasetOut) a model dataset of one part per block, split from a
// temporary file written beside it (or in $TMPDIR for the Object Store).
func writeModelOut(ctx context.Context, nf *natsFlags, out string, mf *arrowio.ModelFile, format string) error {
	if !datasetOut(out) {
		return arrowio.WriteModel(out, mf, format)
	}
	sink, done, err := openDatasetOut(ctx, nf, out)
	if err != nil {
		return err
	}
	defer done()
	parent := ""
	if !strings.HasPrefix(out, wire.ObjectScheme) {
		parent = filepath.Dir(filepath.Clean(out))
	}
	tmp, err := os.MkdirTemp(parent, ".emsf-model-")
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	defer os.RemoveAll(tmp)
	file := filepath.Join(tmp, "model."+format)
	if err := arrowio.WriteModel(file, mf, format); err != nil {
		return err
	}
	_, err = arrowio.SplitModel(ctx, file, sink, format, 0)
	return err
}

func splitCmd(ctx context.Context, e *env, nf *natsFlags, in, out, format string, partRows int) error {
	sink, done, err := openDatasetOut(ctx, nf, out)
	if err != nil {
		return err
	}
	defer done()
	man, err := arrowio.SplitModel(ctx, in, sink, format, partRows)
	if err != nil {
		return err
	}
	var bytes int64
	for _, p := range man.Parts {
		bytes += p.Bytes
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d parts (%s, %d bytes) and %s, n=%s m=%s u=%s tie=%s\n", sink, len(man.Parts), format, bytes,
		arrowio.ManifestName, man.Metadata["emsf.n"], man.Metadata["emsf.m"], man.Metadata["emsf.u"], man.Metadata["emsf.tie"])
	return nil
}
