package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/worker"
	"github.com/emsf/emsf/worker/wire"
)

// runData is emsf data: datasets of transitions in the Object Store,
// uploaded once and read by a fit's workers (or by a local fit) as
// --input nats-obj://BUCKET/NAME.
func runData(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(e.stdout, `Usage: emsf data <put|list> [flags]

  put NAME FILE…   upload the files as dataset NAME (replacing its parts), read as
                   --input nats-obj://BUCKET/NAME; each file is one part, read whole
  list [NAME]      list the parts of dataset NAME (default: every dataset)

Run 'emsf data put -h' for the flags.
`)
		if len(args) == 0 {
			return usagef("name a subcommand: put or list")
		}
		return flag.ErrHelp
	}
	sub, rest := args[0], args[1:]
	var synopsis string
	switch sub {
	case "put":
		synopsis = "data put NAME FILE… [flags]"
	case "list":
		synopsis = "data list [NAME] [flags]"
	default:
		return usagef("unknown subcommand %q: want put or list", sub)
	}
	fs := newFlagSet(e, "data "+sub, synopsis)
	var (
		nf     natsFlags
		bucket string
	)
	nf.register(fs)
	fs.StringVar(&bucket, "bucket", wire.DefaultObjectBucket, "Object Store bucket of the dataset")
	pos, err := parseArgs(fs, rest)
	if err != nil {
		return err
	}
	if err := nf.validate(); err != nil {
		return err
	}
	if nf.url == "" {
		return usagef("--nats is required (or set NATS_URL)")
	}
	if err := wire.CheckBucket(bucket); err != nil {
		return usagef("--bucket %q: want letters, digits, '-' and '_'", bucket)
	}
	switch {
	case sub == "put" && len(pos) < 2:
		return usagef("give a dataset NAME and the FILEs to upload")
	case sub == "list" && len(pos) > 1:
		return usagef("unexpected argument %q (one NAME)", pos[1])
	}
	nc, err := nf.conn("emsf-data").Connect()
	if err != nil {
		return fmt.Errorf("--nats %s: %w", nf.url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if sub == "put" {
		name := pos[0]
		for _, p := range pos[1:] {
			if _, err := arrowio.ListDataset(p, ""); err != nil {
				return err
			}
		}
		infos, err := worker.PutDataset(ctx, js, nc.MaxPayload(), bucket, name, pos[1:])
		if err != nil {
			return err
		}
		total := uint64(0)
		for _, info := range infos {
			total += info.Size
		}
		fmt.Fprintf(e.stdout, "dataset %s: %d parts, %d bytes\ninput: %s%s/%s\n", name, len(infos), total, worker.ObjectScheme, bucket, name)
		return nil
	}
	name := ""
	if len(pos) == 1 {
		name = pos[0]
	}
	sets, err := worker.ListDatasets(ctx, js, bucket, name)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DATASET\tPARTS\tBYTES\tINPUT")
	for _, d := range sets {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s%s/%s\n", d.Name, d.Parts, d.Bytes, worker.ObjectScheme, bucket, d.Name)
		if name != "" {
			for _, p := range d.Files {
				fmt.Fprintf(tw, "  %s\t\t%d\t%s\n", p.Name[len(worker.ObjectScheme)+len(bucket)+1:], p.Size, p.Format)
			}
		}
	}
	return tw.Flush()
}
