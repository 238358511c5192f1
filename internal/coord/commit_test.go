package coord

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/rcache"
)

// fakeCommitter answers CommitMany with ws and err, and counts its calls.
type fakeCommitter struct {
	ws    []rcache.Written
	err   error
	calls int
}

func (f *fakeCommitter) CommitMany(_ context.Context, writes []rcache.Write[string]) ([]rcache.Written, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return f.ws, nil
}

func TestCommitBatch_fates(t *testing.T) {
	down := errors.New("connection refused") // the service failing
	bad := fmt.Errorf("encode: %w", cache.ErrCodec)
	expired := fmt.Errorf("set: %w", cache.ErrExpiredEntry)
	lost := fmt.Errorf("commit: %w", backend.ErrLockLost)
	co := &fakeCommitter{ws: []rcache.Written{
		{Stored: true},
		{},
		{Err: lost},
		{Err: expired},
		{Err: bad},
		{Err: down},
	}}
	writes := make([]rcache.Write[string], len(co.ws))
	got, whole := CommitBatch(context.Background(), nil, co, writes)
	if whole != nil {
		t.Fatalf("whole = %v; want nil: the service answered all but one write", whole)
	}
	want := []struct {
		fate Fate
		err  error
		held bool
	}{
		{Stored, nil, false},
		{Outdated, nil, false},
		{LeaseLost, lost, false},
		{Expired, expired, true},
		{Corrupt, bad, true},
		{Failed, down, true},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d answers; want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].Fate != w.fate || got[i].Err != w.err || got[i].Fate.Held() != w.held {
			t.Errorf("answer %d = %v, %v, held %v; want %v, %v, held %v",
				i, got[i].Fate, got[i].Err, got[i].Fate.Held(), w.fate, w.err, w.held)
		}
	}
}

func TestCommitBatch_wholeFailure(t *testing.T) {
	down := errors.New("connection refused")
	for _, tt := range []struct {
		name string
		co   *fakeCommitter
	}{
		{"call failed", &fakeCommitter{err: down}},
		{"every write failed", &fakeCommitter{ws: []rcache.Written{{Err: down}, {Err: errors.New("i/o timeout")}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, whole := CommitBatch(context.Background(), nil, tt.co, make([]rcache.Write[string], 2))
			if whole != down {
				t.Fatalf("whole = %v; want %v", whole, down)
			}
			for i, a := range got {
				if a.Fate != Failed || a.Err != down || !a.Fate.Held() {
					t.Errorf("answer %d = %v, %v; want Failed with the batch's failure, its lease held", i, a.Fate, a.Err)
				}
			}
		})
	}
}

func TestCommitBatch_dataIsNoBatchFailure(t *testing.T) {
	bad := fmt.Errorf("encode: %w", cache.ErrCodec)
	co := &fakeCommitter{ws: []rcache.Written{{Err: bad}, {Err: bad}}}
	got, whole := CommitBatch(context.Background(), nil, co, make([]rcache.Write[string], 2))
	if whole != nil {
		t.Fatalf("whole = %v; want nil: a key's data problem is no failure of the service", whole)
	}
	for i, a := range got {
		if a.Fate != Corrupt {
			t.Errorf("answer %d = %v; want Corrupt", i, a.Fate)
		}
	}
}
