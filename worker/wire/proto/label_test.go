package proto

import (
	"strings"
	"testing"
)

func TestLabel(t *testing.T) {
	l := Label{Job: "fit-1", Iteration: 3, Shard: 7, ShardChecksum: "ab12", ModelDigest: "raw-00ff-NONCE", Nonce: "n1"}
	got, err := ParseLabel(l.String())
	if err != nil || got != l {
		t.Fatalf("ParseLabel(%q) = %+v, %v", l.String(), got, err)
	}
	if err := got.Check(l); err != nil {
		t.Fatal(err)
	}
	for field, other := range map[string]Label{
		"job":            {Job: "fit-2", Iteration: 3, Shard: 7, ShardChecksum: "ab12", ModelDigest: "raw-00ff-NONCE", Nonce: "n1"},
		"iteration":      {Job: "fit-1", Iteration: 2, Shard: 7, ShardChecksum: "ab12", ModelDigest: "raw-00ff-NONCE", Nonce: "n1"},
		"shard":          {Job: "fit-1", Iteration: 3, Shard: 6, ShardChecksum: "ab12", ModelDigest: "raw-00ff-NONCE", Nonce: "n1"},
		"shard checksum": {Job: "fit-1", Iteration: 3, Shard: 7, ShardChecksum: "ab13", ModelDigest: "raw-00ff-NONCE", Nonce: "n1"},
		"model digest":   {Job: "fit-1", Iteration: 3, Shard: 7, ShardChecksum: "ab12", ModelDigest: "raw-00fe-NONCE", Nonce: "n1"},
		"nonce":          {Job: "fit-1", Iteration: 3, Shard: 7, ShardChecksum: "ab12", ModelDigest: "raw-00ff-NONCE", Nonce: "n0"},
	} {
		if err := other.Check(l); err == nil || !strings.Contains(err.Error(), "partial of "+field+" ") {
			t.Errorf("%s differs: Check = %v", field, err)
		}
	}
	for _, bad := range []string{"", "a/1/2/c", "a/x/2/c/d/n", "a/1/y/c/d/n", "a/1/2/c/d", "a/1/2/c/d/e/f"} {
		if _, err := ParseLabel(bad); err == nil {
			t.Errorf("ParseLabel(%q) succeeded", bad)
		}
	}
	if a, b := NewNonce(), NewNonce(); a == b || len(a) != 32 {
		t.Errorf("two nonces %q and %q", a, b)
	}
}
