package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
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

func splitCmd(ctx context.Context, e *env, nf *natsFlags, in, out, format string, partRows int) error {
	if !strings.HasPrefix(out, wire.ObjectScheme) {
		ents, err := os.ReadDir(out)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return fmt.Errorf("--out: %w", err)
		case len(ents) > 0:
			return fmt.Errorf("--out %s is not empty: split into a new directory", out)
		}
	}
	sink, done, err := openStore(ctx, nf, out, true)
	if err != nil {
		return err
	}
	defer done()
	if f, err := sink.Open(ctx, arrowio.ManifestName); err == nil {
		f.Close()
		return fmt.Errorf("--out %s holds a model dataset already: choose another prefix", out)
	}
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
