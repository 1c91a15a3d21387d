package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// The reference server delivers every published frame to every subscriber
// once and in order, whether the publisher writes it itself or hands the
// connection to its writer; a client that did not opt into batches gets
// one event per frame.
func TestReferenceDeliversEveryFrameOnceInOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ref, err := StartReference(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Stop()
	const topics, perTopic = 2, 10
	var gaps, dups atomic.Int64
	got := make([]atomic.Int64, topics*perTopic)
	var clients []*refClient
	for i := range topics * perTopic {
		c, err := dialRef(ctx, ref.Addr, fmt.Sprintf("t%d", i/perTopic), &gaps, &dups, func(string, time.Time) { got[i].Add(1) })
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	single, _, err := websocket.Dial(ctx, "ws://"+ref.Addr+"/ws?topic=t0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer single.CloseNow()
	if _, hello, err := single.Read(ctx); err != nil || !json.Valid(hello) {
		t.Fatalf("hello %q, %v", hello, err)
	}

	if err := startPublishers(ctx, ref.Addr, "t", topics, 3, time.Millisecond, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var singleSeq int64
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		_, data, err := single.Read(rctx)
		rcancel()
		if err != nil {
			break // quiet for 2 s: the publishers are done
		}
		var ev refEvent
		if err := json.Unmarshal(data, &ev); err != nil || ev.Seq != singleSeq+1 {
			t.Fatalf("unbatched client: frame %q after seq %d (%v)", data, singleSeq, err)
		}
		singleSeq = ev.Seq
	}
	if singleSeq < 100 {
		t.Fatalf("only %d frames published on t0", singleSeq)
	}
	for _, c := range clients {
		c.ws.CloseNow()
		<-c.done
	}
	for i, c := range clients {
		want := singleSeq
		if i >= perTopic {
			want = clients[perTopic].seq
		}
		if n := got[i].Load(); n != want || c.seq != want || want < 100 {
			t.Errorf("client %d: %d frames up to seq %d, want %d", i, n, c.seq, want)
		}
	}
	if gaps.Load() != 0 || dups.Load() != 0 {
		t.Fatalf("%d gaps, %d duplicates", gaps.Load(), dups.Load())
	}
}
