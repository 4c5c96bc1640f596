package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
)

// ObjectScheme begins the location of a model dataset in the JetStream
// Object Store: nats-obj://BUCKET/PREFIX (the prefix may be empty or hold
// slashes).
const ObjectScheme = "nats-obj://"

// ParseObjectURL splits nats-obj://BUCKET/PREFIX.
func ParseObjectURL(url string) (bucket, prefix string, err error) {
	rest, ok := strings.CutPrefix(url, ObjectScheme)
	if !ok {
		return "", "", fmt.Errorf("wire: %q is not a %sBUCKET/PREFIX location", url, ObjectScheme)
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	if err := CheckBucket(bucket); err != nil {
		return "", "", fmt.Errorf("wire: %s: %w", url, err)
	}
	prefix = strings.Trim(prefix, "/")
	for _, seg := range strings.Split(prefix, "/") {
		if prefix != "" && (seg == "" || seg == "." || seg == "..") {
			return "", "", fmt.Errorf("wire: %s: prefix %q has an empty, . or .. segment", url, prefix)
		}
	}
	return bucket, prefix, nil
}

// ObjectParts is a model dataset under a prefix of an Object Store bucket:
// an arrowio.PartSink and PartSource. Part <name> is object
// <prefix>/<name>; the manifest, object <prefix>/manifest.json, is put
// last (an object is visible only once all its chunks are stored, so the
// manifest's put is the commit).
type ObjectParts struct {
	obs        jetstream.ObjectStore
	url        string
	prefix     string
	maxPayload int64
}

// NewObjectParts returns the dataset under prefix of obs (bucket names
// it in messages); parts are put in chunks below maxPayload (the
// server's max payload, nats.Conn.MaxPayload).
func NewObjectParts(obs jetstream.ObjectStore, bucket, prefix string, maxPayload int64) *ObjectParts {
	url := ObjectScheme + bucket
	if prefix != "" {
		url += "/" + prefix
	}
	return &ObjectParts{obs: obs, url: url, prefix: prefix, maxPayload: maxPayload}
}

// OpenObjectParts opens the dataset at url (nats-obj://BUCKET/PREFIX);
// with create, a missing bucket is created (file storage, one replica).
func OpenObjectParts(ctx context.Context, js jetstream.JetStream, url string, create bool, maxPayload int64) (*ObjectParts, error) {
	bucket, prefix, err := ParseObjectURL(url)
	if err != nil {
		return nil, err
	}
	obs, err := js.ObjectStore(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) && create {
		obs, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: bucket, Storage: jetstream.FileStorage})
	}
	if err != nil {
		return nil, fmt.Errorf("wire: %s: bucket %s: %w", url, bucket, err)
	}
	return NewObjectParts(obs, bucket, prefix, maxPayload), nil
}

func (o *ObjectParts) String() string { return o.url }

func (o *ObjectParts) object(name string) string {
	if o.prefix == "" {
		return name
	}
	return o.prefix + "/" + name
}

// Create implements arrowio.PartSink: the object is put from what is
// written, as it is written (through a pipe), in chunks below the max
// payload. Abort (or a failed Commit) leaves no object: the Object Store
// purges the chunks of a put whose reader failed.
func (o *ObjectParts) Create(ctx context.Context, name string) (arrowio.PartFile, error) {
	pr, pw := io.Pipe()
	f := &objectFile{pw: pw, done: make(chan error, 1)}
	meta := jetstream.ObjectMeta{Name: o.object(name)}
	go func() {
		_, err := PutObjectReader(ctx, o.obs, o.maxPayload, meta, pr)
		pr.CloseWithError(cmpErr(err, io.ErrClosedPipe)) // a writer still writing gets the put's error
		f.done <- err
	}()
	return f, nil
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

var errAborted = errors.New("wire: object aborted")

// objectFile is an object being put; its goroutine ends in Commit or Abort.
type objectFile struct {
	pw   *io.PipeWriter
	done chan error
}

func (f *objectFile) Write(p []byte) (int, error) { return f.pw.Write(p) }

func (f *objectFile) Commit() error {
	f.pw.Close()
	return <-f.done
}

func (f *objectFile) Abort() {
	f.pw.CloseWithError(errAborted)
	<-f.done
}

// Remove implements arrowio.PartSink.
func (o *ObjectParts) Remove(ctx context.Context, name string) error {
	err := o.obs.Delete(ctx, o.object(name))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil
	}
	return err
}

// Open implements arrowio.PartSource. It reads only the object's info
// (its size); the first ReadAt copies the object into an unlinked
// temporary file (the Object Store client checks the object's own SHA-256
// as it reads), which Close releases.
func (o *ObjectParts) Open(ctx context.Context, name string) (arrowio.PartReader, error) {
	info, err := o.obs.GetInfo(ctx, o.object(name))
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", o.url, name, err)
	}
	return &objectPart{ctx: ctx, o: o, name: name, size: int64(info.Size)}, nil
}

type objectPart struct {
	ctx  context.Context
	o    *ObjectParts
	name string
	size int64
	once sync.Once
	f    *os.File
	err  error
}

func (p *objectPart) Size() int64 { return p.size }

func (p *objectPart) ReadAt(b []byte, off int64) (int, error) {
	p.once.Do(p.spool)
	if p.err != nil {
		return 0, p.err
	}
	return p.f.ReadAt(b, off)
}

func (p *objectPart) spool() {
	f, err := os.CreateTemp("", "emsf-part-*")
	if err != nil {
		p.err = fmt.Errorf("%s/%s: %w", p.o.url, p.name, err)
		return
	}
	os.Remove(f.Name()) // unlinked: gone with the process, whatever happens
	p.f = f
	r, err := p.o.obs.Get(p.ctx, p.o.object(p.name))
	if err != nil {
		p.err = fmt.Errorf("%s/%s: %w", p.o.url, p.name, err)
		return
	}
	defer r.Close()
	n, err := io.Copy(f, r)
	switch {
	case err != nil:
		p.err = fmt.Errorf("%s/%s: %w", p.o.url, p.name, err)
	case n != p.size:
		p.err = fmt.Errorf("%s/%s: %d bytes, its info said %d (replaced while read?)", p.o.url, p.name, n, p.size)
	}
}

func (p *objectPart) Close() error {
	if p.f != nil {
		return p.f.Close()
	}
	return nil
}
