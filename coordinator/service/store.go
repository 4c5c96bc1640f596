package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/worker/wire"
)

// Version describes one model version: the JSON of NAME.latest, of every
// announcement on P.NAME.model and of a retrain reply.
type Version struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	// Object is the Object Store object holding the model file, Digest
	// its SHA-256 (hex) and Size its length.
	Object string `json:"object"`
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	Mode   Mode   `json:"mode"`
	// Reason is what started the retrain: request, every or interval.
	Reason string `json:"reason"`
	// LogLik and WKL are of all counts under this version.
	LogLik float64 `json:"loglik"`
	WKL    float64 `json:"wkl"`
	// Transitions is the number of rows ingested that this version has
	// seen, Count their total count, StreamSeq the last stream sequence
	// they include.
	Transitions int64   `json:"transitions"`
	Count       float64 `json:"count"`
	StreamSeq   uint64  `json:"stream_seq"`
	N           int     `json:"n"`
	M           int     `json:"m"`
	U           int     `json:"u"`
	// Iterations is the number of EM iterations (refit) or commits
	// (incremental) of this retrain; Seconds its wall time.
	Iterations int `json:"iterations"`
	// Status says how the refit ended (factor.Status: "converged",
	// "iteration limit", ...); empty in the other modes.
	Status string `json:"status,omitempty"`
	// Refits with a validation split (Config.Quality): BestIteration is
	// the pass of the iterate the held-out rule kept (0: the last),
	// HeldOut the validation log-likelihood per transition under the
	// version's rule (chosen on the split, also with SmoothNone), and
	// Rule that rule per action ("" with none stored).
	BestIteration int     `json:"best_iteration,omitempty"`
	HeldOut       float64 `json:"heldout,omitempty"`
	Rule          string  `json:"rule,omitempty"`
	// Units is, in online-em mode, the number of unit transitions the
	// online EM rule has taken up to this version: its step counter t,
	// from which the next retrain goes on (0 in the other modes).
	Units   int64     `json:"units,omitempty"`
	Seconds float64   `json:"seconds"`
	Created time.Time `json:"created"`
	// New is false in a retrain reply that made no version (no data since
	// the latest one, which the reply describes).
	New bool `json:"new"`
}

// Stores are the JetStream resources of one model name.
type Stores struct {
	JS     jetstream.JetStream
	KV     jetstream.KeyValue
	Models jetstream.ObjectStore
	// ModelBucket names Models in store errors.
	ModelBucket string
}

// StoreConfig names the buckets and the stream's limits.
type StoreConfig struct {
	Prefix, Name             string
	StateBucket, ModelBucket string
	Replicas                 int
	StreamMaxAge             time.Duration
	StreamMaxBytes           int64
}

// RequireJetStream says clearly when the server has no JetStream (every
// call would otherwise fail with "no responders").
func RequireJetStream(ctx context.Context, js jetstream.JetStream) error {
	_, err := js.AccountInfo(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount), errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("service: the NATS server has no JetStream for this account (start nats-server with -js, or emsf serve with --embedded): %w", err)
	}
	return fmt.Errorf("service: JetStream: %w", err)
}

// EnsureStream creates model name's transitions stream, or updates it when
// it exists (limits are only set at creation).
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StoreConfig) (jetstream.Stream, error) {
	name := StreamName(cfg.Prefix, cfg.Name)
	if s, err := js.Stream(ctx, name); err == nil {
		return s, nil
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("service: stream %s: %w", name, err)
	}
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        name,
		Description: "emsf transitions of model " + cfg.Name,
		Subjects:    []string{TransitionsSubject(cfg.Prefix, cfg.Name)},
		Storage:     jetstream.FileStorage,
		Replicas:    max(cfg.Replicas, 1),
		MaxAge:      cfg.StreamMaxAge,
		MaxBytes:    max(cfg.StreamMaxBytes, -1),
		Duplicates:  2 * time.Minute,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		s, err = js.Stream(ctx, name)
	}
	if err != nil {
		return nil, fmt.Errorf("service: create stream %s: %w", name, err)
	}
	return s, nil
}

// OpenStores opens (creating when missing) the KV and Object Store
// buckets.
func OpenStores(ctx context.Context, js jetstream.JetStream, cfg StoreConfig) (*Stores, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: cfg.StateBucket, Description: "emsf serve: latest model version per name", History: 16,
		Storage: jetstream.FileStorage, Replicas: max(cfg.Replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("service: key-value store %s: %w", cfg.StateBucket, err)
	}
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket: cfg.ModelBucket, Description: "emsf serve: model versions and count checkpoints",
		Storage: jetstream.FileStorage, Replicas: max(cfg.Replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("service: object store %s: %w", cfg.ModelBucket, err)
	}
	return &Stores{JS: js, KV: kv, Models: obs, ModelBucket: cfg.ModelBucket}, nil
}

// OpenStoresReadOnly opens existing buckets without creating them (the
// client side: emsf model get).
func OpenStoresReadOnly(ctx context.Context, js jetstream.JetStream, stateBucket, modelBucket string) (*Stores, error) {
	if err := RequireJetStream(ctx, js); err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, stateBucket)
	if err != nil {
		return nil, fmt.Errorf("service: key-value store %s: %w (has an emsf serve run on this server?)", stateBucket, err)
	}
	obs, err := js.ObjectStore(ctx, modelBucket)
	if err != nil {
		return nil, fmt.Errorf("service: object store %s: %w", modelBucket, err)
	}
	return &Stores{JS: js, KV: kv, Models: obs, ModelBucket: modelBucket}, nil
}

// put stores data as object name with metadata meta, in chunks below the
// server's max payload. A failure is a *wire.StoreError: it says whether
// the bucket is full (and how full), JetStream is off, or the write
// stalled.
func (st *Stores) put(ctx context.Context, maxPayload int64, name string, data []byte, meta map[string]string) error {
	if _, err := wire.PutObjectMeta(ctx, st.Models, maxPayload, jetstream.ObjectMeta{Name: name, Metadata: meta}, data); err != nil {
		return fmt.Errorf("service: %w", st.storeErr(ctx, name, err))
	}
	return nil
}

// storeErr classifies a failed write of object name (wire.StoreErr).
func (st *Stores) storeErr(ctx context.Context, name string, err error) error {
	return wire.StoreErr(ctx, st.JS, wire.OpStore, wire.KindObjects, st.ModelBucket, name, err)
}

// Latest returns model name's latest Version and its KV revision
// (jetstream.ErrKeyNotFound when there is none yet).
func (st *Stores) Latest(ctx context.Context, name string) (*Version, uint64, error) {
	e, err := st.KV.Get(ctx, LatestKey(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("service: model %s has no version yet (no retrain has finished): %w", name, err)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("service: latest version of %s: %w", name, err)
	}
	var v Version
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return nil, 0, fmt.Errorf("service: latest version of %s: %w", name, err)
	}
	return &v, e.Revision(), nil
}

// Fetched is one model version read back: the file's bytes, what is
// recorded of it, and the decoded file.
type Fetched struct {
	Data []byte
	Info *Version
	File *arrowio.ModelFile
}

// Get returns version v of model name (v <= 0: the latest), after
// checking its digest when it is known and decoding it.
func (st *Stores) Get(ctx context.Context, name string, v int) (*Fetched, error) {
	var info *Version
	if v <= 0 {
		latest, _, err := st.Latest(ctx, name)
		if err != nil {
			return nil, err
		}
		info, v = latest, latest.Version
	}
	obj := ModelObject(name, v)
	data, err := st.Models.GetBytes(ctx, obj)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("service: model %s has no version %d", name, v)
	}
	if err != nil {
		return nil, fmt.Errorf("service: fetch %s: %w", obj, err)
	}
	if info == nil {
		if oi, err := st.Models.GetInfo(ctx, obj); err == nil {
			info = versionFromMeta(name, v, oi)
		}
	}
	if info != nil && info.Digest != "" {
		if d := digest(data); d != info.Digest {
			return nil, fmt.Errorf("service: %s has SHA-256 %s, version %d says %s", obj, d, v, info.Digest)
		}
	}
	mf, err := arrowio.DecodeModel(data)
	if err != nil {
		return nil, fmt.Errorf("service: %s: %w", obj, err)
	}
	return &Fetched{Data: data, Info: info, File: mf}, nil
}

// List returns the stored versions of model name, oldest first.
func (st *Stores) List(ctx context.Context, name string) ([]*Version, error) {
	objs, err := st.Models.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("service: list %s: %w", name, err)
	}
	var out []*Version
	pre := name + "/models/"
	for _, oi := range objs {
		rest, ok := strings.CutPrefix(oi.Name, pre)
		if !ok {
			continue
		}
		v, err := strconv.Atoi(rest)
		if err != nil {
			continue
		}
		out = append(out, versionFromMeta(name, v, oi))
	}
	slices.SortFunc(out, func(a, b *Version) int { return a.Version - b.Version })
	return out, nil
}

// versionMeta is the object metadata of a model version: its Version as
// JSON (object metadata values are strings).
func versionMeta(v *Version) (map[string]string, error) {
	b, err := jsonVersion(v)
	if err != nil {
		return nil, err
	}
	return map[string]string{"emsf-version": string(b)}, nil
}

func versionFromMeta(name string, v int, oi *jetstream.ObjectInfo) *Version {
	out := &Version{Name: name, Version: v, Object: oi.Name, Size: int64(oi.Size), Created: oi.ModTime}
	if s, ok := oi.Metadata["emsf-version"]; ok {
		var meta Version
		if json.Unmarshal([]byte(s), &meta) == nil && meta.Version == v {
			out = &meta
		}
	}
	return out
}

func digest(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// jsonVersion is v's JSON.
func jsonVersion(v *Version) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("service: version %d: %w", v.Version, err)
	}
	return b, nil
}

// versionJSON is Version with its metrics as pointers: a metric that is
// not finite (a version that gives some counted transition probability
// 0 has loglik −Inf) is null in JSON, and null reads back as NaN.
type versionJSON struct {
	versionFields
	LogLik *float64 `json:"loglik"`
	WKL    *float64 `json:"wkl"`
}

type versionFields Version

// MarshalJSON writes non-finite metrics as null.
func (v Version) MarshalJSON() ([]byte, error) {
	out := versionJSON{versionFields: versionFields(v)}
	if !math.IsNaN(v.LogLik) && !math.IsInf(v.LogLik, 0) {
		out.LogLik = &v.LogLik
	}
	if !math.IsNaN(v.WKL) && !math.IsInf(v.WKL, 0) {
		out.WKL = &v.WKL
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads null metrics as NaN.
func (v *Version) UnmarshalJSON(b []byte) error {
	var in versionJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*v = Version(in.versionFields)
	v.LogLik, v.WKL = math.NaN(), math.NaN()
	if in.LogLik != nil {
		v.LogLik = *in.LogLik
	}
	if in.WKL != nil {
		v.WKL = *in.WKL
	}
	return nil
}
