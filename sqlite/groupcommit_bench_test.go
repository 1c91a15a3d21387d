package sqlite

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// BenchmarkUpdateConcurrent: 8 goroutines (the fan-out test's 8 streaming
// sessions) each commit small write transactions, the case group commit is
// for. Uses only Update, so it runs unchanged on a store without grouping.
//
//	go test ./sqlite -run '^$' -bench UpdateConcurrent -count 3
func BenchmarkUpdateConcurrent(b *testing.B) {
	st := openTemp(b)
	now := time.UnixMilli(1_750_000_000_000).UTC()
	var n atomic.Int64
	b.SetParallelism(max(1, 8/maxProcs()))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			id := fmt.Sprintf("s%d", n.Add(1))
			if err := st.Update(ctx, func(tx host.Tx) error {
				return tx.InsertSession(ctx, host.Session{WorkspaceID: "w", ID: id, RootID: id, CreatedAt: now, UpdatedAt: now})
			}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func maxProcs() int { return runtime.GOMAXPROCS(0) }
