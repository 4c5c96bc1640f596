package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/wire"
)

// Datasets in the Object Store: `emsf data put NAME FILES…` uploads each
// file once as the object datasets/NAME/part-NNNNN.EXT of a bucket, in
// the order given, and nats-obj://BUCKET/NAME names the dataset as an
// input (of a local fit, or of a cluster's workers). The parts are read
// whole, in name order, from their start (they are never cut into
// splits): a part is a split of its own, so upload a large input as
// several files.

// ObjectScheme starts an input that names a dataset of the Object Store.
const ObjectScheme = "nats-obj://"

// ParseObjectInput splits an input nats-obj://BUCKET/NAME into its bucket
// and dataset name; ok is false for any other input.
func ParseObjectInput(input string) (bucket, name string, ok bool, err error) {
	rest, found := strings.CutPrefix(input, ObjectScheme)
	if !found {
		return "", "", false, nil
	}
	bucket, name, _ = strings.Cut(rest, "/")
	if err := wire.CheckBucket(bucket); err != nil || !datasetName.MatchString(name) {
		return "", "", true, fmt.Errorf("worker: input %q: want %sBUCKET/NAME, NAME of letters, digits, '-', '_' and '.'", input, ObjectScheme)
	}
	return bucket, name, true, nil
}

// DatasetPrefix is the prefix of the objects of dataset name.
func DatasetPrefix(name string) string { return "datasets/" + name + "/" }

// DatasetPart is the object name of part k of dataset name, for a file
// whose name ends in ext (".csv", ".parquet", …).
func DatasetPart(name string, k int, ext string) string {
	return fmt.Sprintf("%spart-%05d%s", DatasetPrefix(name), k, ext)
}

// ListObjectDataset lists the parts of dataset name in bucket of js, in
// name order, as a dataset's files (DataFile.Stream): the name is the
// part's nats-obj:// URL, the digest the object's; format ("" to detect
// each part's by its name, else by its first bytes) is every part's.
func ListObjectDataset(ctx context.Context, js jetstream.JetStream, bucket, name, format string) ([]arrowio.DataFile, error) {
	format, err := arrowio.NormalizeFormat(format)
	if err != nil {
		return nil, err
	}
	input := ObjectScheme + bucket + "/" + name
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, &arrowio.InputError{File: input, Reason: "cannot open the Object Store bucket", Err: err}
	}
	infos, err := obs.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, &arrowio.InputError{File: input, Reason: "cannot list the Object Store bucket", Err: err}
	}
	var files []arrowio.DataFile
	for _, info := range infos {
		if info.Deleted || !strings.HasPrefix(info.Name, DatasetPrefix(name)) {
			continue
		}
		f := arrowio.DataFile{Name: ObjectScheme + bucket + "/" + info.Name, Size: int64(info.Size), ModTime: info.ModTime.UnixNano(),
			Digest: info.Digest, Format: format, Stream: true}
		if f.Format == "" {
			if f.Format, err = objectFormat(ctx, obs, info.Name); err != nil {
				return nil, err
			}
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, &arrowio.InputError{File: input, Reason: "no such dataset (emsf data put uploads one)"}
	}
	slices.SortFunc(files, func(a, b arrowio.DataFile) int { return strings.Compare(a.Name, b.Name) })
	return files, nil
}

// objectFormat detects a part's format as arrowio.DetectFormat detects a
// file's: by its first bytes and its name.
func objectFormat(ctx context.Context, obs jetstream.ObjectStore, name string) (string, error) {
	r, err := obs.Get(ctx, name)
	if err != nil {
		return "", &arrowio.InputError{File: name, Reason: "cannot read", Err: err}
	}
	defer r.Close()
	head := make([]byte, 64)
	n, _ := io.ReadFull(r, head)
	format, _ := arrowio.DetectFormatBytes(name, head[:n])
	return format, nil
}

// objectOf returns the bucket and object name of a part's URL.
func objectOf(f arrowio.DataFile) (bucket, object string, err error) {
	rest, ok := strings.CutPrefix(f.Name, ObjectScheme)
	if bucket, object, _ = strings.Cut(rest, "/"); !ok || bucket == "" || object == "" {
		return "", "", fmt.Errorf("worker: %q is not an Object Store part", f.Name)
	}
	return bucket, object, nil
}

// ScanDataFile reads all of a dataset's file, as arrowio.ScanTransitions
// reads a file: an Object Store part (whose digest must still be f's:
// else the error names it, shard.ErrInputChanged) through js, anything
// else from the file system.
func ScanDataFile(ctx context.Context, js jetstream.JetStream, f arrowio.DataFile, opts arrowio.ReadOptions, fn func(*arrowio.TransitionBatch) error) error {
	opts.Format = f.Format
	if !strings.HasPrefix(f.Name, ObjectScheme) {
		return arrowio.ScanTransitions(ctx, f.Name, opts, fn)
	}
	if js == nil {
		return &arrowio.InputError{File: f.Name, Reason: "an Object Store input needs a NATS connection (--nats)"}
	}
	bucket, object, err := objectOf(f)
	if err != nil {
		return err
	}
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return &arrowio.InputError{File: f.Name, Reason: "cannot open the Object Store bucket", Err: err}
	}
	r, err := obs.Get(ctx, object)
	if err != nil {
		return &arrowio.InputError{File: f.Name, Reason: "cannot read", Err: err}
	}
	defer r.Close()
	info, err := r.Info()
	if err != nil {
		return &arrowio.InputError{File: f.Name, Reason: "cannot read", Err: err}
	}
	if f.Digest != "" && info.Digest != f.Digest {
		return &arrowio.InputError{File: f.Name, Reason: fmt.Sprintf("changed while the dataset was read: digest %s, listed with %s", info.Digest, f.Digest), Err: shard.ErrInputChanged}
	}
	return arrowio.ScanTransitionsReader(ctx, r, f.Name, f.Format, opts, fn)
}

// PutDataset uploads files as dataset name in bucket of js (created when
// missing), replacing the dataset's parts that were there, and returns
// the parts' infos. maxPayload sizes the chunks (wire.PutObject).
func PutDataset(ctx context.Context, js jetstream.JetStream, maxPayload int64, bucket, name string, files []string) ([]*jetstream.ObjectInfo, error) {
	if !datasetName.MatchString(name) {
		return nil, fmt.Errorf("worker: dataset name %q: use letters, digits, '-', '_' and '.'", name)
	}
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: bucket, Storage: jetstream.FileStorage,
		Description: "emsf shards, models, job manifests and datasets"})
	if err != nil {
		return nil, fmt.Errorf("worker: object store %s: %w", bucket, err)
	}
	old, err := obs.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, fmt.Errorf("worker: list %s: %w", bucket, err)
	}
	var out []*jetstream.ObjectInfo
	for k, file := range files {
		fh, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
		ext := path.Ext(file)
		info, err := obs.Put(ctx, jetstream.ObjectMeta{Name: DatasetPart(name, k, ext),
			Opts: &jetstream.ObjectMetaOptions{ChunkSize: uint32(min(wire.MaxChunk, maxPayload-8<<10))}}, fh)
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("worker: upload %s: %w", file, wire.StoreErr(ctx, js, wire.OpStore, wire.KindObjects, bucket, DatasetPart(name, k, ext), err))
		}
		out = append(out, info)
	}
	kept := map[string]bool{}
	for _, info := range out {
		kept[info.Name] = true
	}
	for _, info := range old {
		if strings.HasPrefix(info.Name, DatasetPrefix(name)) && !kept[info.Name] && !info.Deleted {
			if err := obs.Delete(ctx, info.Name); err != nil {
				return nil, fmt.Errorf("worker: delete the old part %s: %w", info.Name, err)
			}
		}
	}
	return out, nil
}

var datasetName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// DatasetSummary is a dataset of a bucket: its name, parts and bytes,
// and (ListDatasets of one name) the parts.
type DatasetSummary struct {
	Name  string
	Parts int
	Bytes int64
	Files []arrowio.DataFile
}

// ListDatasets lists the datasets of bucket (or only dataset name, with
// its parts), by name.
func ListDatasets(ctx context.Context, js jetstream.JetStream, bucket, name string) ([]DatasetSummary, error) {
	if name != "" {
		files, err := ListObjectDataset(ctx, js, bucket, name, "")
		if err != nil {
			return nil, err
		}
		d := DatasetSummary{Name: name, Parts: len(files), Files: files}
		for _, f := range files {
			d.Bytes += f.Size
		}
		return []DatasetSummary{d}, nil
	}
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("worker: object store %s: %w", bucket, err)
	}
	infos, err := obs.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, fmt.Errorf("worker: list %s: %w", bucket, err)
	}
	byName := map[string]*DatasetSummary{}
	var names []string
	for _, info := range infos {
		rest, ok := strings.CutPrefix(info.Name, "datasets/")
		set, _, found := strings.Cut(rest, "/")
		if !ok || !found || info.Deleted {
			continue
		}
		d := byName[set]
		if d == nil {
			d = &DatasetSummary{Name: set}
			byName[set] = d
			names = append(names, set)
		}
		d.Parts++
		d.Bytes += int64(info.Size)
	}
	slices.Sort(names)
	out := make([]DatasetSummary, len(names))
	for k, n := range names {
		out[k] = *byName[n]
	}
	return out, nil
}
